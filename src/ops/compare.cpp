// src/ops/compare.cpp: comparisons to u8 masks, where and masked_fill (forward beside backward), scalar operands.
#include "kernels/cpu/pointwise.h"
#include "mpt/ops/pointwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/pointwise.h"
#endif

namespace mpt::ops {

using detail::visit_float;
using kernels::math::BinaryShape;
using kernels::math::CompareKind;

namespace {

const char* compare_name(CompareKind k) {
  static const char* const names[] = {"eq", "ne", "lt", "le", "gt", "ge"};
  return names[static_cast<int>(k)];
}

Tensor compare_op(CompareKind kind, const Tensor& a_in, const Tensor& b_in) {
  const char* op = compare_name(kind);
  autograd::NoGradGuard no_grad;  // masks are not differentiable
  const Tensor wide = detail::expand_left(a_in, b_in, op);
  const Tensor& a = wide.defined() ? wide : a_in;
  const detail::BinaryPlan p = detail::plan_binary(a, b_in, op);
  const Device dev = a.device();
  Tensor y = Tensor::empty(a.shape(), DType::U8, dev);
  const BinaryShape shape{p.a.numel(), p.period, false};
  visit_float(a.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::compare(kind, p.a.data<T>(), p.b.data<T>(), y.data<uint8_t>(), shape);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::compare(kind, p.a.data<T>(), p.b.data<T>(), y.data<uint8_t>(), shape,
                                             static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  return y;
}

// out = cond ? a : b, all contiguous and of out's shape.
void where_into(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const Device dev = out.device();
  visit_float(out.dtype(), "where", [&](auto tag) {
    using T = decltype(tag);
    if (dev.is_cpu()) {
      kernels::cpu::where(cond.data<uint8_t>(), a.data<T>(), b.data<T>(), out.data<T>(), out.numel());
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::where(cond.data<uint8_t>(), a.data<T>(), b.data<T>(), out.data<T>(), out.numel(),
                                           static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
}

}  // namespace

Tensor scalar_like(const Tensor& like, double value) {
  MPT_CHECK(like.defined(), "[scalar_like] undefined tensor");
  return Tensor::full({}, value, like.dtype(), like.device());
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare_op(CompareKind::Ge, a, b); }
Tensor eq(const Tensor& a, double b) { return eq(a, scalar_like(a, b)); }
Tensor ne(const Tensor& a, double b) { return ne(a, scalar_like(a, b)); }
Tensor lt(const Tensor& a, double b) { return lt(a, scalar_like(a, b)); }
Tensor le(const Tensor& a, double b) { return le(a, scalar_like(a, b)); }
Tensor gt(const Tensor& a, double b) { return gt(a, scalar_like(a, b)); }
Tensor ge(const Tensor& a, double b) { return ge(a, scalar_like(a, b)); }

Tensor where(const Tensor& cond, const Tensor& a_in, const Tensor& b_in) {
  const char* op = "where";
  const Device dev = detail::check_same_device({&cond, &a_in, &b_in}, op);
  detail::check_same_dtype({&a_in, &b_in}, op);
  detail::check_f64_on_cpu(a_in, op);
  MPT_CHECK(cond.dtype() == DType::U8, "[where] the condition must be a u8 mask, got {} (values {} and {})",
            cond.meta_str(), a_in.meta_str(), b_in.meta_str());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a_in.shape(), op), b_in.shape(), op);
  // The value operands grow by recorded views, whose backward sums the gradient back to their shapes.
  const Tensor a = a_in.shape() == shape ? a_in : a_in.expand(shape);
  const Tensor b = b_in.shape() == shape ? b_in : b_in.expand(shape);
  const detail::GradRecorder grad({&a, &b});
  const Tensor c = cond.expand(shape).contiguous();
  Tensor y = Tensor::empty(shape, a.dtype(), dev);
  where_into(c, a.contiguous(), b.contiguous(), y);
  // Only the values that require grad get one (masked_fill's fill value never does).
  grad.record("WhereBackward", {&y}, [c, need_a = a.requires_grad(), need_b = b.requires_grad()](
                                         const std::vector<Tensor>& g) {
    if (!g[0].defined()) return std::vector<Tensor>{Tensor{}, Tensor{}};
    const Tensor dy = g[0].contiguous();
    const Tensor zero = Tensor::zeros(dy.shape(), dy.dtype(), dy.device());
    const auto routed = [&](bool where_true) {
      Tensor d = Tensor::empty(dy.shape(), dy.dtype(), dy.device());
      where_into(c, where_true ? dy : zero, where_true ? zero : dy, d);
      return d;
    };
    return std::vector<Tensor>{need_a ? routed(true) : Tensor{}, need_b ? routed(false) : Tensor{}};
  });
  return y;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  MPT_CHECK(x.defined() && mask.defined(), "[masked_fill] undefined tensor");
  MPT_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(),
            "[masked_fill] mask {} must broadcast to x's shape {}", mask.meta_str(), x.meta_str());
  return where(mask, scalar_like(x, value), x);
}

}  // namespace mpt::ops
