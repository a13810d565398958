// src/ops/binary.cpp: sub, div, maximum, minimum and pow of two tensors with NumPy broadcasting, forward beside
// backward.
#include "kernels/cpu/pointwise.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/reduction.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/pointwise.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::BinaryKind;
using kernels::math::BinaryShape;

namespace {

const char* binary_name(BinaryKind k) {
  static const char* const names[] = {"sub", "div", "maximum", "minimum", "pow", "swiglu"};
  return names[static_cast<int>(k)];
}

// The gradient for a (wrt_b false) or b at a's shape: dy * df/d(a or b), b already expanded to a's shape.
Tensor binary_grad(BinaryKind kind, bool wrt_b, const Tensor& dy, const Tensor& a, const Tensor& b) {
  const Device dev = a.device();
  Tensor out = Tensor::empty(a.shape(), a.dtype(), dev);
  visit_float(a.dtype(), binary_name(kind), [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::binary_backward(kind, wrt_b, dy.data<T>(), a.data<T>(), b.data<T>(), out.data<T>(), a.numel(),
                                    false);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::binary_backward(kind, wrt_b, dy.data<T>(), a.data<T>(), b.data<T>(),
                                                     out.data<T>(), a.numel(), false,
                                                     static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  return out;
}

// Both gradients on CUDA in one kernel (the bits of two binary_grad calls).
void both_grads(BinaryKind kind, const Tensor& dy, const Tensor& a, const Tensor& b, Tensor& da, Tensor& db) {
  da = Tensor::empty(a.shape(), a.dtype(), a.device());
  db = Tensor::empty(a.shape(), a.dtype(), a.device());
  visit_float(a.dtype(), binary_name(kind), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::binary_backward_both(kind, dy.data<T>(), a.data<T>(), b.data<T>(), da.data<T>(),
                                                          db.data<T>(), a.numel(),
                                                          static_cast<cudaStream_t>(detail::stream_of(a.device()))));
    }
  });
}

Tensor binary_op(BinaryKind kind, const Tensor& a, const Tensor& b) {
  const char* op = binary_name(kind);
  if (const Tensor wide = detail::expand_left(a, b, op); wide.defined()) return binary_op(kind, wide, b);
  const detail::GradRecorder grad({&a, &b});
  const detail::BinaryPlan p = detail::plan_binary(a, b, op);
  const Device dev = a.device();
  Tensor y = Tensor::empty(a.shape(), a.dtype(), dev);
  const BinaryShape shape{p.a.numel(), p.period, false};
  visit_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::binary(kind, p.a.data<T>(), p.b.data<T>(), y.data<T>(), shape);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::binary(kind, p.a.data<T>(), p.b.data<T>(), y.data<T>(), shape,
                                            static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  const std::string node = std::string(op) + "Backward";
  // Only the operands that require grad get one (x - 1.0 computes no gradient for the scalar).
  grad.record(node, {&y}, [kind, a = p.a.detach(), b = b.detach(), need_a = a.requires_grad(),
                           need_b = b.requires_grad()](const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}, Tensor{}};
    const Tensor dy = g[0].to(a.dtype()).contiguous();
    const Tensor wide_b = b.expand(a.shape()).contiguous();
    Tensor da, db;
    if (need_a && need_b && b.shape() == a.shape() && !a.device().is_cpu()) {
      both_grads(kind, dy, a, wide_b, da, db);  // one pass over dy, a, b (the CPU's two map passes are vectorised)
      return std::vector<Tensor>{da, db};
    }
    if (need_a) da = binary_grad(kind, false, dy, a, wide_b);
    if (need_b) {
      db = binary_grad(kind, true, dy, a, wide_b);
      if (b.shape() != a.shape()) db = sum_to_shape(db, b.shape());
    }
    return std::vector<Tensor>{da, db};
  });
  return y;
}

}  // namespace

Tensor sub(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Sub, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Div, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Minimum, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary_op(BinaryKind::Pow, a, b); }
Tensor swiglu(const Tensor& gate, const Tensor& up) { return binary_op(BinaryKind::SiluMul, gate, up); }

}  // namespace mpt::ops
