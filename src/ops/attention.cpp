// src/ops/attention.cpp: causal attention forward and backward: checks, one dtype dispatch, CPU flash kernel or CUDA
// GEMMs.
#include "mpt/ops/attention.h"

#include <cmath>

#include "kernels/cpu/attention.h"
#include "mpt/ops/matmul.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/attention.h"
#endif

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
  MPT_CHECK(std::isfinite(opt.scale) && opt.scale >= 0, "[{}] scale must be finite and >= 0 (0: 1/sqrt(D)), got {}", op,
            opt.scale);
  const int64_t d = q.size(3);
  MPT_CHECK(d >= 1, "[{}] the head dimension D must be at least 1, got q {}", op, q.meta_str());
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d));
  return {q.size(0) * q.size(1), q.size(2), d, scale};
}

// CUDA: the fallback path (cuDNN's fused attention is not wired yet; docs/kernels.md). Batched cuBLASLt GEMMs
// around the causal softmax kernels: scores S = q k^T in f32 (B*H, T, T), P = causal softmax(scale * S) in place,
// and P rounded to the inputs' dtype for the P v GEMM, as flash attention does for its second GEMM.
struct Heads {
  Tensor q, k, v;  // (B*H, T, D) views of contiguous tensors
};

Shape heads_shape(const kernels::cpu::AttentionShape& s) { return {s.batch_heads, s.seq, s.head_dim}; }

Heads heads_of(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s) {
  return {q.reshape(heads_shape(s)), k.reshape(heads_shape(s)), v.reshape(heads_shape(s))};
}

// P (f32, (B*H, T, T)) from q and k; writes each row's logsumexp into lse when it is defined.
Tensor causal_probs_cuda(const Heads& h, const kernels::cpu::AttentionShape& s, Tensor lse, const char* op) {
  MatmulOptions qk;
  qk.trans_b = true;
  qk.out_dtype = DType::F32;
  Tensor p = matmul(h.q, h.k, qk);
  MPT_CHECK(s.batch_heads * s.seq <= 2147483647, "[{}] at most 2^31 - 1 score rows on CUDA, got {}", op,
            s.batch_heads * s.seq);
#if defined(MPT_WITH_CUDA)
  MPT_CUDA_KERNEL(kernels::cuda::causal_softmax_forward(
      p.data<float>(), p.data<float>(), lse.defined() ? lse.data<float>() : nullptr, s.batch_heads * s.seq, s.seq,
      static_cast<float>(s.scale), static_cast<cudaStream_t>(detail::stream_of(p.device()))));
#else
  MPT_CUDA_KERNEL(0);
#endif
  return p;
}

void attention_forward_cuda(const Heads& h, const kernels::cpu::AttentionShape& s, AttentionResult& r, const char* op) {
  const Tensor p = causal_probs_cuda(h, s, r.lse, op);
  matmul_out(p.to(h.v.dtype()), h.v, r.out.reshape(heads_shape(s)));
}

void attention_backward_cuda(const Heads& h, const Tensor& dout, const kernels::cpu::AttentionShape& s,
                             AttentionGrads& g, bool accumulate, const char* op) {
  const DType dt = h.q.dtype();
  const float beta = accumulate ? 1.0f : 0.0f;
  const Tensor p = causal_probs_cuda(h, s, Tensor{}, op);
  const Tensor dout_h = dout.reshape(heads_shape(s));
  MatmulOptions ta;
  ta.trans_a = true;
  matmul_out(p.to(dt), dout_h, g.dv.reshape(heads_shape(s)), beta, ta);  // dv = P^T dout
  MatmulOptions tb;
  tb.trans_b = true;
  tb.out_dtype = DType::F32;
  Tensor ds = matmul(dout_h, h.v, tb);  // dP = dout v^T, then dS = scale * P * (dP - rowsum(dP * P)) in place
#if defined(MPT_WITH_CUDA)
  MPT_CUDA_KERNEL(kernels::cuda::causal_softmax_backward(ds.data<float>(), p.data<float>(), ds.data<float>(),
                                                         s.batch_heads * s.seq, s.seq, static_cast<float>(s.scale),
                                                         static_cast<cudaStream_t>(detail::stream_of(ds.device()))));
#endif
  const Tensor ds_lo = ds.to(dt);
  matmul_out(ds_lo, h.k, g.dq.reshape(heads_shape(s)), beta);      // dq = dS k
  matmul_out(ds_lo, h.q, g.dk.reshape(heads_shape(s)), beta, ta);  // dk = dS^T q
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
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  AttentionResult r{Tensor::empty(q.shape(), q.dtype(), dev),
                    Tensor::empty({q.size(0), q.size(1), q.size(2)}, lse_dtype(q.dtype()), dev)};
  if (q.numel() == 0) return r;
  if (!dev.is_cpu()) {
    attention_forward_cuda(heads_of(q, k, v, shape), shape, r, op);
    return r;
  }
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
  if (!accumulate) {
    grads.dq = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
    grads.dk = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
    grads.dv = Tensor::empty(q_in.shape(), q_in.dtype(), dev);
  }
  const Tensor q = q_in.contiguous(), k = k_in.contiguous(), v = v_in.contiguous();
  const Tensor dout = dout_in.contiguous();
  if (q.numel() == 0) return grads;
  if (!dev.is_cpu()) {
    attention_backward_cuda(heads_of(q, k, v, shape), dout, shape, grads, accumulate, op);
    return grads;
  }
  const Tensor out = out_in.contiguous(), lse = lse_in.contiguous();
  visit_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    const kernels::cpu::AttentionBackwardArgs<T> args{
        q.data<T>(),    k.data<T>(),        v.data<T>(),        out.data<T>(),      lse.data<F>(),
        dout.data<T>(), grads.dq.data<T>(), grads.dk.data<T>(), grads.dv.data<T>(), accumulate};
    kernels::cpu::attention_backward(shape, args);
  });
  return grads;
}

}  // namespace mpt::ops
