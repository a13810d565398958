// src/ops/unary.cpp: the general unary ops (neg ... softplus, pow by a scalar, clamp), forward beside backward.
#include <cmath>
#include <limits>

#include "kernels/cpu/pointwise.h"
#include "mpt/ops/pointwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/pointwise.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::UnaryKind;
using kernels::math::UnaryParams;

namespace {

const char* unary_name(UnaryKind k) {
  static const char* const names[] = {"neg",  "abs", "relu", "silu",  "tanh", "sigmoid", "exp",
                                      "log",  "sqrt", "rsqrt", "pow", "clamp", "softplus"};
  return names[static_cast<int>(k)];
}

// dx (+)= dy * f'(x): contiguous tensors of one shape, dtype and device.
void unary_backward_into(UnaryKind kind, const UnaryParams& params, const Tensor& dy, const Tensor& x, const Tensor& dx,
                         bool accumulate) {
  const Device dev = x.device();
  visit_float(x.dtype(), unary_name(kind), [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::unary_backward(kind, params, dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(), accumulate);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::unary_backward(kind, params, dy.data<T>(), x.data<T>(), dx.data<T>(), x.numel(),
                                                    accumulate, static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

Tensor unary_op(UnaryKind kind, const Tensor& x_in, UnaryParams params = {}) {
  const char* op = unary_name(kind);
  const detail::GradRecorder grad({&x_in});
  const Device dev = detail::check_same_device({&x_in}, op);
  detail::check_f64_on_cpu(x_in, op);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), dev);
  visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::unary(kind, params, x.data<T>(), y.data<T>(), x.numel());
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::unary(kind, params, x.data<T>(), y.data<T>(), x.numel(),
                                           static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  const std::string node = std::string(op) + "Backward";
  grad.record(node, {&y}, [kind, params, x = x.detach()](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}};
    Tensor dx = Tensor::empty(x.shape(), x.dtype(), x.device());
    unary_backward_into(kind, params, g[0].to(x.dtype()).contiguous(), x, dx, false);
    return std::vector<Tensor>{dx};
  });
  return y;
}

}  // namespace

Tensor neg(const Tensor& x) { return unary_op(UnaryKind::Neg, x); }
Tensor abs(const Tensor& x) { return unary_op(UnaryKind::Abs, x); }
Tensor relu(const Tensor& x) { return unary_op(UnaryKind::Relu, x); }
Tensor silu(const Tensor& x) { return unary_op(UnaryKind::Silu, x); }
Tensor tanh(const Tensor& x) { return unary_op(UnaryKind::Tanh, x); }
Tensor sigmoid(const Tensor& x) { return unary_op(UnaryKind::Sigmoid, x); }
Tensor exp(const Tensor& x) { return unary_op(UnaryKind::Exp, x); }
Tensor log(const Tensor& x) { return unary_op(UnaryKind::Log, x); }
Tensor sqrt(const Tensor& x) { return unary_op(UnaryKind::Sqrt, x); }
Tensor rsqrt(const Tensor& x) { return unary_op(UnaryKind::Rsqrt, x); }
Tensor softplus(const Tensor& x) { return unary_op(UnaryKind::Softplus, x); }

Tensor pow(const Tensor& x, double exponent) {
  MPT_CHECK(std::isfinite(exponent), "[pow] the exponent must be finite, got {} for {}", exponent,
            x.defined() ? x.meta_str() : "an undefined tensor");
  return unary_op(UnaryKind::Pow, x, {exponent, 0});
}

Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi) {
  const double inf = std::numeric_limits<double>::infinity();
  const double a = lo.value_or(-inf), b = hi.value_or(inf);
  MPT_CHECK(!std::isnan(a) && !std::isnan(b) && a <= b, "[clamp] needs lo <= hi, got lo {} and hi {} for {}", a, b,
            x.defined() ? x.meta_str() : "an undefined tensor");
  return unary_op(UnaryKind::Clamp, x, {a, b});
}

}  // namespace mpt::ops
