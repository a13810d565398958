// src/ops/fp8_wire.cpp: the FP8 gradient all-reduce's amax fix-up and scales: checks, CPU loops or CUDA kernels over one functor.
#include "mpt/ops/fp8_wire.h"

#include <cmath>

#include "kernels/math/fp8_wire.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/fp8_wire.h"
#endif

namespace mpt::ops {
namespace {

void check_amaxes(const Tensor& amax, const char* op) {
  MPT_CHECK(amax.defined() && amax.dtype() == DType::F32 && amax.dim() == 1 && amax.is_contiguous(),
            "[{}] expected a contiguous 1-d f32 vector of amaxes, got {}", op,
            amax.defined() ? amax.meta_str() : std::string("undefined"));
}

}  // namespace

void fp8_wire_amax_(const Tensor& amax) {
  check_amaxes(amax, "fp8_wire_amax_");
  const int64_t n = amax.numel();
  float* a = amax.data<float>();
  if (amax.device().is_cpu()) {
    for (int64_t i = 0; i < n; ++i) a[i] = kernels::math::Fp8WireAmax{}(a[i]);
    return;
  }
  MPT_CUDA_KERNEL(
      kernels::cuda::fp8_wire_amax(a, n, static_cast<cudaStream_t>(detail::stream_of(amax.device()))));
}

Fp8WireScales fp8_wire_scales(const Tensor& shared_amax, int world) {
  check_amaxes(shared_amax, "fp8_wire_scales");
  MPT_CHECK(world >= 1, "[fp8_wire_scales] world must be >= 1, got {}", world);
  const Device dev = shared_amax.device();
  const int64_t n = shared_amax.numel();
  Fp8WireScales out{Tensor::empty({n}, DType::F32, dev), Tensor::empty({n}, DType::F32, dev)};
  const kernels::math::Fp8WireScale f{kE4M3Max, 1.0 / std::sqrt(static_cast<double>(world)), world};
  const float* a = shared_amax.data<float>();
  float* s = out.scale.data<float>();
  float* inv = out.inv.data<float>();
  if (dev.is_cpu()) {
    for (int64_t i = 0; i < n; ++i) f(a[i], s + i, inv + i);
  } else {
    MPT_CUDA_KERNEL(kernels::cuda::fp8_wire_scales(a, s, inv, n, f, static_cast<cudaStream_t>(detail::stream_of(dev))));
  }
  return out;
}

}  // namespace mpt::ops
