// src/ops/fp8_wire.cpp: the FP8 gradient all-reduce's amax fix-up, scales and per-parameter passes over a bucket: checks, CPU loops or CUDA kernels over one functor.
#include "mpt/ops/fp8_wire.h"

#include <cmath>
#include <string>
#include <vector>

#include "kernels/cpu/quantize.h"
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

namespace {

// flat: contiguous 1-d f32/bf16/f16; bounds: from 0 to flat.numel(), non-decreasing; the per-parameter vector
// (`what`): contiguous 1-d f32 [segments] on flat's device; codes (when given): contiguous 1-d E4M3 [numel] there.
void check_wire_pass(const char* op, const Tensor& flat, const std::vector<int64_t>& bounds, const Tensor& per_param,
                     const char* what, const Tensor* codes) {
  MPT_CHECK(flat.defined() && flat.dim() == 1 && flat.is_contiguous() &&
                (flat.dtype() == DType::F32 || flat.dtype() == DType::BF16 || flat.dtype() == DType::F16),
            "[{}] expected a contiguous 1-d f32, bf16 or f16 gradient buffer, got {}", op,
            flat.defined() ? flat.meta_str() : std::string("undefined"));
  MPT_CHECK(!bounds.empty() && bounds.front() == 0 && bounds.back() == flat.numel(),
            "[{}] the parameter bounds must run from 0 to the buffer's {} elements, got {} bounds from {} to {}", op,
            flat.numel(), bounds.size(), bounds.empty() ? 0 : bounds.front(), bounds.empty() ? 0 : bounds.back());
  for (size_t i = 1; i < bounds.size(); ++i)
    MPT_CHECK(bounds[i] >= bounds[i - 1], "[{}] parameter bound {} ({}) is below bound {} ({})", op, i, bounds[i],
              i - 1, bounds[i - 1]);
  const auto segments = static_cast<int64_t>(bounds.size() - 1);
  MPT_CHECK(per_param.defined() && per_param.dtype() == DType::F32 && per_param.dim() == 1 &&
                per_param.is_contiguous() && per_param.numel() == segments && per_param.device() == flat.device(),
            "[{}] expected {} as a contiguous f32 [{}] on {}, got {}", op, what, segments, flat.device(),
            per_param.defined() ? per_param.meta_str() : std::string("undefined"));
  if (codes != nullptr)
    MPT_CHECK(codes->defined() && codes->dtype() == DType::F8E4M3 && codes->dim() == 1 && codes->is_contiguous() &&
                  codes->numel() == flat.numel() && codes->device() == flat.device(),
              "[{}] expected the codes as a contiguous f8e4m3 [{}] on {}, got {}", op, flat.numel(), flat.device(),
              codes->defined() ? codes->meta_str() : std::string("undefined"));
}

// f(T{}) for flat's dtype (f32, bf16 or f16: check_wire_pass refused the others).
template <class F>
void visit_flat(DType t, F&& f) {
  if (t == DType::F32) f(float{});
  else if (t == DType::BF16) f(bf16{});
  else f(f16{});
}

}  // namespace

void fp8_wire_amaxes(const Tensor& flat, const std::vector<int64_t>& bounds, const Tensor& amax) {
  const char* op = "fp8_wire_amaxes";
  check_wire_pass(op, flat, bounds, amax, "the amaxes", nullptr);
  const auto segments = static_cast<int64_t>(bounds.size() - 1);
  visit_flat(flat.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = flat.data<T>();
    float* a = amax.data<float>();
    if (flat.device().is_cpu()) {
      for (int64_t i = 0; i < segments; ++i)
        a[i] = kernels::math::Fp8WireAmax{}(kernels::cpu::amax(x + bounds[i], bounds[i + 1] - bounds[i]));
    } else {
      MPT_CUDA_KERNEL(kernels::cuda::fp8_wire_amaxes(x, bounds.data(), segments, a,
                                                     static_cast<cudaStream_t>(detail::stream_of(flat.device()))));
    }
  });
}

void fp8_wire_quantize(const Tensor& flat, const std::vector<int64_t>& bounds, const Tensor& scale,
                       const Tensor& codes) {
  const char* op = "fp8_wire_quantize";
  check_wire_pass(op, flat, bounds, scale, "the scales", &codes);
  const auto segments = static_cast<int64_t>(bounds.size() - 1);
  visit_flat(flat.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = flat.data<T>();
    auto* q = codes.data<f8e4m3>();
    if (flat.device().is_cpu()) {
      const float* s = scale.data<float>();
      for (int64_t i = 0; i < segments; ++i)
        kernels::cpu::quantize(x + bounds[i], q + bounds[i], bounds[i + 1] - bounds[i], {.scale = s[i]});
    } else {
      MPT_CUDA_KERNEL(kernels::cuda::fp8_wire_quantize(x, bounds.data(), segments, scale.data<float>(), q,
                                                       static_cast<cudaStream_t>(detail::stream_of(flat.device()))));
    }
  });
}

void fp8_wire_dequantize(const Tensor& codes, const std::vector<int64_t>& bounds, const Tensor& inv,
                         const Tensor& flat) {
  const char* op = "fp8_wire_dequantize";
  check_wire_pass(op, flat, bounds, inv, "the inverse scales", &codes);
  const auto segments = static_cast<int64_t>(bounds.size() - 1);
  visit_flat(flat.dtype(), [&](auto tag) {
    using Out = decltype(tag);
    const auto* q = codes.data<f8e4m3>();
    Out* out = flat.data<Out>();
    if (flat.device().is_cpu()) {
      const float* si = inv.data<float>();
      for (int64_t i = 0; i < segments; ++i)
        kernels::cpu::dequantize(q + bounds[i], out + bounds[i], bounds[i + 1] - bounds[i], si[i]);
    } else {
      MPT_CUDA_KERNEL(kernels::cuda::fp8_wire_dequantize(q, bounds.data(), segments, inv.data<float>(), out,
                                                         static_cast<cudaStream_t>(detail::stream_of(flat.device()))));
    }
  });
}

}  // namespace mpt::ops
