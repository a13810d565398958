// src/ops/activation.cpp: GELU forward and backward: checks, one dtype dispatch, CPU or CUDA kernel.
#include "mpt/ops/activation.h"

#include "kernels/cpu/activation.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/activation.h"
#endif

namespace mpt::ops {

using detail::visit_float;

namespace detail {

void gelu_into(const Tensor& x, const Tensor& y) {
  const Device dev = x.device();
  visit_float(x.dtype(), "gelu", [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::gelu_forward(x.data<T>(), y.data<T>(), x.numel());
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::gelu_forward(x.data<T>(), y.data<T>(), x.numel(),
                                                  static_cast<cudaStream_t>(stream_of(dev))));
    }
  });
}

void gelu_backward_into(const Tensor& dy, const Tensor& x, const Tensor& dx, bool accumulate) {
  const Device dev = x.device();
  visit_float(x.dtype(), "gelu_backward", [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::gelu_backward(dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(), accumulate);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::gelu_backward(dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(), accumulate,
                                                   static_cast<cudaStream_t>(stream_of(dev))));
    }
  });
}

}  // namespace detail

Tensor gelu(const Tensor& x_in) {
  const detail::GradRecorder grad({&x_in});
  const Device dev = detail::check_same_device({&x_in}, "gelu");
  detail::check_f64_on_cpu(x_in, "gelu");
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  detail::gelu_into(x, y);
  grad.record("GeluBackward", {&y}, [x = x.detach()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{gelu_backward(g[0], x)};
  });
  return y;
}

Tensor gelu_backward(const Tensor& dy_in, const Tensor& x_in, Tensor dx) {
  const bool accumulate = dx.defined();
  const Device dev = accumulate ? detail::check_same_device({&dy_in, &x_in, &dx}, "gelu_backward")
                                : detail::check_same_device({&dy_in, &x_in}, "gelu_backward");
  detail::check_same_dtype({&x_in, &dy_in}, "gelu_backward");
  detail::check_shape(dy_in, x_in.shape(), "dy", "gelu_backward");
  detail::check_f64_on_cpu(x_in, "gelu_backward");
  if (accumulate) {
    detail::check_same_dtype({&x_in, &dx}, "gelu_backward");
    detail::check_shape(dx, x_in.shape(), "dx", "gelu_backward");
    MPT_CHECK(dx.is_contiguous(), "[gelu_backward] the gradient to accumulate into must be contiguous, got strides {}",
              shape_str(dx.strides()));
  } else {
    dx = Tensor::empty(x_in.shape(), x_in.dtype(), dev);
  }
  detail::gelu_backward_into(dy_in.contiguous(), x_in.contiguous(), dx, accumulate);
  return dx;
}

}  // namespace mpt::ops
