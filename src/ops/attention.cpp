// src/ops/attention.cpp: causal attention forward and backward: checks, one dtype dispatch, CPU kernel.
#include "mpt/ops/attention.h"

#include <cmath>

#include "kernels/cpu/attention.h"
#include "ops/dispatch.h"

namespace mpt::ops {

namespace {

using detail::visit_float;

DType lse_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// Checks q, k, v (same (B, H, T, D) shape, dtype, device) and the scale; returns the kernel's shape.
kernels::cpu::AttentionShape check_qkv(const Tensor& q, const Tensor& k, const Tensor& v, const AttentionOptions& opt,
                                       const char* op) {
  detail::check_same_device({&q, &k, &v}, op);
  detail::check_same_dtype({&q, &k, &v}, op);
  detail::check_f64_on_cpu(q, op);
  MPT_CHECK(q.dim() == 4, "[{}] q must be (B, H, T, D), got {}", op, q.meta_str());
  detail::check_shape(k, q.shape(), "k", op);
  detail::check_shape(v, q.shape(), "v", op);
  MPT_CHECK(std::isfinite(opt.scale) && opt.scale >= 0, "[{}] scale must be finite and >= 0 (0: 1/sqrt(D)), got {}",
            op, opt.scale);
  const int64_t d = q.size(3);
  MPT_CHECK(d >= 1, "[{}] the head dimension D must be at least 1, got q {}", op, q.meta_str());
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d));
  return {q.size(0) * q.size(1), q.size(2), d, scale};
}

void check_cpu(Device dev, const char* op) {
  MPT_CHECK(dev.is_cpu(), "[{}] CUDA attention needs the cuBLASLt GEMM path (not wired yet)", op);
}

void check_grad(const Tensor& g, const Tensor& q, const char* what, const char* op) {
  detail::check_same_dtype({&q, &g}, op);
  detail::check_shape(g, q.shape(), what, op);
  MPT_CHECK(g.is_contiguous(), "[{}] the gradient {} to accumulate into must be contiguous, got strides {}", op, what,
            shape_str(g.strides()));
}

}  // namespace

AttentionResult causal_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                 const AttentionOptions& options) {
  const char* op = "causal_attention";
  const auto shape = check_qkv(q_in, k_in, v_in, options, op);
  const Device dev = q_in.device();
  check_cpu(dev, op);
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  AttentionResult r{Tensor::empty(q.shape(), q.dtype(), dev),
                    Tensor::empty({q.size(0), q.size(1), q.size(2)}, lse_dtype(q.dtype()), dev)};
  visit_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    kernels::cpu::attention_forward(shape, q.data<T>(), k.data<T>(), v.data<T>(), r.out.data<T>(), r.lse.data<F>());
  });
  return r;
}

AttentionGrads causal_attention_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                                         const Tensor& v_in, const Tensor& out_in, const Tensor& lse_in,
                                         const AttentionOptions& options, AttentionGrads grads) {
  const char* op = "causal_attention_backward";
  const auto shape = check_qkv(q_in, k_in, v_in, options, op);
  detail::check_same_device({&q_in, &dout_in, &out_in, &lse_in}, op);
  detail::check_same_dtype({&q_in, &dout_in, &out_in}, op);
  detail::check_shape(dout_in, q_in.shape(), "dout", op);
  detail::check_shape(out_in, q_in.shape(), "out", op);
  detail::check_shape(lse_in, {q_in.size(0), q_in.size(1), q_in.size(2)}, "lse", op);
  MPT_CHECK(lse_in.dtype() == lse_dtype(q_in.dtype()), "[{}] lse must be {} for {} inputs, got {}", op,
            lse_dtype(q_in.dtype()), q_in.dtype(), lse_in.meta_str());
  const int given = int(grads.dq.defined()) + int(grads.dk.defined()) + int(grads.dv.defined());
  MPT_CHECK(given == 0 || given == 3, "[{}] give all three of dq, dk, dv to accumulate into, or none; got {}", op,
            given);
  const Device dev = q_in.device();
  const bool accumulate = given == 3;
  if (accumulate) {
    detail::check_same_device({&q_in, &grads.dq, &grads.dk, &grads.dv}, op);
    check_grad(grads.dq, q_in, "dq", op);
    check_grad(grads.dk, q_in, "dk", op);
    check_grad(grads.dv, q_in, "dv", op);
  }
  check_cpu(dev, op);
  if (!accumulate) {
    grads.dq = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
    grads.dk = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
    grads.dv = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
  }
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const Tensor out = out_in.contiguous(), dout = dout_in.contiguous(), lse = lse_in.contiguous();
  visit_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    const kernels::cpu::AttentionBackwardArgs<T> args{q.data<T>(),       k.data<T>(),       v.data<T>(),
                                                      out.data<T>(),     lse.data<F>(),     dout.data<T>(),
                                                      grads.dq.data<T>(), grads.dk.data<T>(), grads.dv.data<T>(),
                                                      accumulate};
    kernels::cpu::attention_backward(shape, args);
  });
  return grads;
}

}  // namespace mpt::ops
