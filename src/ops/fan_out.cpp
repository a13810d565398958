// src/ops/fan_out.cpp: aliases of one tensor for several readers; backward sums their gradients in f32 in one pass.
#include "mpt/ops/fan_out.h"

#include "kernels/cpu/elementwise.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/elementwise.h"
#endif

namespace mpt::ops {

namespace {

// The dtype of the readers' gradients: x's, or f32 for FP8 codes (the f32 dx an FP8 layer returns for its codes).
DType gradient_dtype(DType x) { return x == DType::F8E4M3 ? DType::F32 : x; }

// The defined gradients, last reader's first, summed in f32 (x f16/bf16/f32 or FP8 codes) in one pass, or in f64.
Tensor sum_gradients(const std::vector<Tensor>& g, DType x_dtype, const Shape& shape) {
  std::vector<Tensor> in;
  for (auto it = g.rbegin(); it != g.rend(); ++it)
    if (it->defined()) in.push_back(it->contiguous());
  if (in.empty()) return {};
  const DType gd = gradient_dtype(x_dtype);
  if (gd == DType::F64) {
    Tensor sum = in[0];
    for (size_t i = 1; i < in.size(); ++i) sum = add(sum, in[i]);
    return sum;
  }
  if (in.size() == 1) return gd == DType::F32 ? in[0] : in[0].to(DType::F32);
  const char* op = "fan_out_backward";
  const Device dev = in.size() == 3 ? detail::check_same_device({&in[0], &in[1], &in[2]}, op)
                                    : detail::check_same_device({&in[0], &in[1]}, op);
  Tensor out = Tensor::empty(shape, DType::F32, dev);
  detail::visit_float(gd, op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, f16> || std::is_same_v<T, bf16> || std::is_same_v<T, float>) {
      // widen_sum computes (c + b) + a: a the first reader's gradient, c the last's.
      const T* c = in.size() == 3 ? in[0].data<T>() : nullptr;
      const T* b = in[in.size() - 2].data<T>();
      const T* a = in[in.size() - 1].data<T>();
      if (dev.is_cpu()) {
        kernels::cpu::widen_sum(a, b, c, out.data<float>(), out.numel());
      } else {
        MPT_CUDA_KERNEL(kernels::cuda::widen_sum(a, b, c, out.data<float>(), out.numel(),
                                                 static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    }
  });
  return out;
}

}  // namespace

std::vector<Tensor> fan_out(const Tensor& x, int64_t n) {
  MPT_CHECK(x.defined(), "[fan_out] undefined input");
  MPT_CHECK(n == 2 || n == 3, "[fan_out] expected 2 or 3 readers, got {}", n);
  const detail::GradRecorder grad({&x});
  std::vector<Tensor> out;
  for (int64_t i = 0; i < n; ++i) out.push_back(x.detach());  // aliases: the node makes them its outputs
  std::vector<Tensor*> outputs;
  for (Tensor& t : out) outputs.push_back(&t);
  grad.record("FanOutBackward", outputs, [dtype = x.dtype(), shape = x.shape()](const std::vector<Tensor>& g) {
    for (const Tensor& t : g) {
      MPT_CHECK(!t.defined() || (t.shape() == shape && t.dtype() == gradient_dtype(dtype)),
                "[fan_out_backward] each reader's gradient must be {} {}, got {}", gradient_dtype(dtype),
                shape_str(shape), t.meta_str());
    }
    return std::vector<Tensor>{sum_gradients(g, dtype, shape)};
  });
  return out;
}

}  // namespace mpt::ops
