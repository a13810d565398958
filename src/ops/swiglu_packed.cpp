// src/ops/swiglu_packed.cpp: SwiGLU on a packed (gate | up) tensor, forward beside backward.
#include "kernels/cpu/pointwise.h"
#include "mpt/ops/pointwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/pointwise.h"
#endif

namespace mpt::ops {

namespace {

constexpr const char* kOp = "swiglu_packed";

void run_forward(const Tensor& gu, const Tensor& y, int64_t rows, int64_t f) {
  const Device dev = gu.device();
  detail::visit_float(gu.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::swiglu_packed(gu.data<T>(), y.data<T>(), rows, f);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::swiglu_packed(gu.data<T>(), y.data<T>(), rows, f,
                                                   static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

void run_backward(const Tensor& dy, const Tensor& gu, const Tensor& dgu, int64_t rows, int64_t f) {
  const Device dev = gu.device();
  detail::visit_float(gu.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::swiglu_packed_backward(dy.data<T>(), gu.data<T>(), dgu.data<T>(), rows, f);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::swiglu_packed_backward(dy.data<T>(), gu.data<T>(), dgu.data<T>(), rows, f,
                                                            static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

}  // namespace

Tensor swiglu_packed(const Tensor& gu_in) {
  MPT_CHECK(gu_in.defined() && gu_in.dim() >= 1 && gu_in.size(-1) % 2 == 0 && is_floating(gu_in.dtype()) &&
                !is_fp8(gu_in.dtype()),
            "[{}] expected gu [..., 2F] (gate then up) of f32, f16, bf16 or f64, got {}", kOp,
            gu_in.defined() ? gu_in.meta_str() : "undefined");
  detail::check_f64_on_cpu(gu_in, kOp);
  const detail::GradRecorder grad({&gu_in});
  const Tensor gu = gu_in.contiguous();
  const int64_t f = gu.size(-1) / 2, rows = f == 0 ? 0 : gu.numel() / (2 * f);
  Shape shape = gu.shape();
  shape.back() = f;
  Tensor y = Tensor::empty(shape, gu.dtype(), gu.device());
  run_forward(gu, y, rows, f);
  grad.record("SwigluPackedBackward", {&y}, [gu = gu.detach(), rows, f](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
    const Tensor dy = (g[0].dtype() == gu.dtype() ? g[0] : g[0].to(gu.dtype())).contiguous();
    Tensor dgu = Tensor::empty(gu.shape(), gu.dtype(), gu.device());
    run_backward(dy, gu, dgu, rows, f);
    return std::vector<Tensor>{dgu};
  });
  return y;
}

}  // namespace mpt::ops
