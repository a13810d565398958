// src/ops/attention_qkv.cpp: causal attention on a fused QKV projection's (B, T, 3C) output, writing (B, T, C):
// forward beside backward, the head layout carried to the CPU kernel and cuDNN as strides.
#include "mpt/ops/attention.h"

#include "ops/attention_internal.h"
#include "ops/dispatch.h"

namespace mpt::ops {
namespace {

constexpr const char* kOp = "causal_attention_qkv";
constexpr const char* kBackwardOp = "causal_attention_qkv_backward";

// q (B, H, T, D), k and v (B, H_kv, T, D): views of qkv (B, T, H + 2 H_kv, D), the token rows' q | k | v heads.
struct Views {
  Tensor q, k, v;
  int64_t B = 0, T = 0, C = 0, H = 0, Hkv = 0, D = 0;
  int64_t width() const { return (H + 2 * Hkv) * D; }  // qkv's row
};

Views views_of(const Tensor& qkv, int64_t n_head, int64_t n_kv_head, const char* op) {
  const int64_t heads = n_head + 2 * n_kv_head;
  const bool grouped = n_kv_head != n_head;
  MPT_CHECK(!grouped || (n_head > 0 && n_kv_head > 0 && n_head % n_kv_head == 0),
            "[{}] n_kv_head {} must divide n_head {} (both positive)", op, n_kv_head, n_head);
  if (grouped) {
    MPT_CHECK(qkv.defined() && qkv.dim() == 3 && qkv.size(2) % heads == 0 && qkv.size(2) > 0,
              "[{}] expected qkv [B, T, (n_head + 2 n_kv_head) * D] with D >= 1 for n_head {} and n_kv_head {} (a "
              "multiple of {}), got {}", op, n_head, n_kv_head, heads, qkv.defined() ? qkv.meta_str() : "undefined");
  }
  MPT_CHECK(n_head > 0 && qkv.defined() && qkv.dim() == 3 && qkv.size(2) % heads == 0 && qkv.size(2) > 0,
            "[{}] expected qkv [B, T, 3 * C] with C a non-zero multiple of n_head {}, got {}", op, n_head,
            qkv.defined() ? qkv.meta_str() : "undefined");
  MPT_CHECK(qkv.is_contiguous(), "[{}] qkv must be contiguous (a projection's output), got {} with strides {}", op,
            qkv.meta_str(), shape_str(qkv.strides()));
  Views w;
  w.B = qkv.size(0), w.T = qkv.size(1), w.H = n_head, w.Hkv = n_kv_head, w.D = qkv.size(2) / heads;
  w.C = w.H * w.D;
  const Tensor all = qkv.detach().view({w.B, w.T, heads, w.D});
  w.q = all.slice(2, 0, w.H).transpose(1, 2);
  w.k = all.slice(2, w.H, w.H + w.Hkv).transpose(1, 2);
  w.v = all.slice(2, w.H + w.Hkv, heads).transpose(1, 2);
  return w;
}

Tensor heads_view(const Tensor& bthd) { return bthd.transpose(1, 2); }  // (B, T, H, D) as (B, H, T, D)

// For the CUDA GEMM path, which reads head-major operands: qkv (H_kv = H) copied to (3, B, H, T, D) in one pass.
Tensor head_major(const Views& w, const Tensor& qkv) {
  return qkv.detach().view({w.B, w.T, 3, w.H, w.D}).permute({2, 0, 3, 1, 4}).contiguous();
}

// The kernels' shape with the packed strides: q, k, v at {T * W, D, W} (W = (H + 2 H_kv) D), out and dout at
// {T * C, D, C}.
kernels::cpu::AttentionShape packed_shape(const Views& w, const AttentionOptions& options, const char* op) {
  kernels::cpu::AttentionShape s = detail::attention_shape(w.q, w.k, w.v, options, op);
  s.qkv = {w.T * w.width(), w.D, w.width()};
  if (w.Hkv != w.H) s.kv = s.qkv;  // fewer kv heads: placed by `kv` (with as many, `qkv` places them)
  s.out = {w.T * w.C, w.D, w.C};
  return s;
}

// The GEMM path's backward from the head-major copy `all` (3, B, H, T, D) of q, k, v: dout copied to head-major, the
// three gradients written into `dqkv` (B, T, 3C; made here when undefined) by one strided copy.
Tensor gemm_backward(const Tensor& all, const Tensor& dout_heads, const AttentionOptions& options, const char* op,
                     Tensor dqkv = {}) {
  const Tensor q = all.select(0, 0), k = all.select(0, 1), v = all.select(0, 2);
  kernels::cpu::AttentionShape plain = detail::attention_shape(q, k, v, options, op);
  const Tensor lengths = detail::attention_key_lengths(q, options, plain, op);
  const Tensor grads = Tensor::empty(all.shape(), all.dtype(), all.device());
  AttentionGrads g{grads.select(0, 0), grads.select(0, 1), grads.select(0, 2)};
  detail::gemm_attention_backward(q, k, v, dout_heads.contiguous(), plain, g, false, op);
  const int64_t B = all.size(1), H = all.size(2), T = all.size(3), D = all.size(4);
  if (!dqkv.defined()) dqkv = Tensor::empty({B, T, 3 * H * D}, all.dtype(), all.device());
  dqkv.view({B, T, 3, H, D}).copy_(grads.permute({1, 3, 0, 2, 4}));
  return dqkv;
}

}  // namespace

AttentionResult causal_attention_qkv(const Tensor& qkv, int64_t n_head, const AttentionOptions& options) {
  return causal_attention_qkv(qkv, n_head, n_head, options);
}

AttentionResult causal_attention_qkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                                     const AttentionOptions& options) {
  const Views w = views_of(qkv, n_head, n_kv_head, kOp);
  const detail::GradRecorder grad({&qkv});
  kernels::cpu::AttentionShape shape = packed_shape(w, options, kOp);
  const Tensor lengths = detail::attention_key_lengths(w.q, options, shape, kOp);
  const Device dev = qkv.device();
  AttentionResult r{Tensor::empty({w.B, w.T, w.C}, qkv.dtype(), dev),
                    Tensor::empty({w.B, w.H, w.T}, detail::attention_lse_dtype(qkv.dtype()), dev)};
  Tensor heads_copy;  // the GEMM path's head-major q, k, v, which its backward reads in qkv's place
  [&] {
    if (qkv.numel() == 0) return;
    const Tensor out = heads_view(r.out.view({w.B, w.T, w.H, w.D}));
    if (!dev.is_cpu()) {
      AttentionResult heads{out, r.lse};
      if (detail::cudnn_attention_forward(w.q, w.k, w.v, shape, heads, detail::AttentionLayout::Packed, kOp)) return;
      if (w.Hkv != w.H) {  // fewer kv heads: the head-major op's GEMM path (copies, the kv heads repeated)
        detail::gemm_attention_forward_any_layout(w.q, w.k, w.v, shape, heads, kOp);
        return;
      }
      // The GEMM path: q, k, v copied to head-major in one pass, the output copied back in another.
      kernels::cpu::AttentionShape plain = shape;
      plain.qkv = plain.out = {};
      heads_copy = head_major(w, qkv);
      AttentionResult tmp{Tensor::empty(w.q.shape(), qkv.dtype(), dev), r.lse};
      detail::gemm_attention_forward(heads_copy.select(0, 0), heads_copy.select(0, 1), heads_copy.select(0, 2), plain,
                                     tmp, kOp);
      Tensor(out).copy_(tmp.out);
      return;
    }
    detail::visit_float(qkv.dtype(), kOp, [&](auto tag) {
      using T = decltype(tag);
      using F = kernels::math::opmath_t<T>;
      kernels::cpu::attention_forward(shape, w.q.data<T>(), w.k.data<T>(), w.v.data<T>(), out.data<T>(),
                                      r.lse.data<F>());
    });
  }();
  if (heads_copy.defined()) {  // saved instead of qkv (the same bytes), so backward does not copy q, k, v again
    grad.record("CausalAttentionQkvBackward", {&r.out}, [all = heads_copy, options](const std::vector<Tensor>& g) {
      const Shape bthd{all.size(1), all.size(3), all.size(2), all.size(4)};
      const Tensor dout_heads = heads_view(g[0].contiguous().view(bthd));
      return std::vector<Tensor>{gemm_backward(all, dout_heads, options, kBackwardOp)};
    });
  } else {
    grad.record("CausalAttentionQkvBackward", {&r.out},
                [qkv = qkv.detach(), out = r.out.detach(), lse = r.lse, n_head, n_kv_head, options](
                    const std::vector<Tensor>& g) {
                  return std::vector<Tensor>{
                      causal_attention_qkv_backward(g[0], qkv, out, lse, n_head, n_kv_head, options)};
                });
  }
  return r;
}

Tensor causal_attention_qkv_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     int64_t n_head, const AttentionOptions& options) {
  return causal_attention_qkv_backward(dout, qkv, out, lse, n_head, n_head, options);
}

Tensor causal_attention_qkv_backward(const Tensor& dout_in, const Tensor& qkv, const Tensor& out_in,
                                     const Tensor& lse_in, int64_t n_head, int64_t n_kv_head,
                                     const AttentionOptions& options) {
  const Views w = views_of(qkv, n_head, n_kv_head, kBackwardOp);
  kernels::cpu::AttentionShape shape = packed_shape(w, options, kBackwardOp);
  detail::check_same_device({&qkv, &dout_in, &out_in, &lse_in}, kBackwardOp);
  detail::check_same_dtype({&qkv, &dout_in, &out_in}, kBackwardOp);
  detail::check_shape(dout_in, {w.B, w.T, w.C}, "dout", kBackwardOp);
  detail::check_shape(out_in, {w.B, w.T, w.C}, "out", kBackwardOp);
  detail::check_shape(lse_in, {w.B, w.H, w.T}, "lse", kBackwardOp);
  const DType lse_dt = detail::attention_lse_dtype(qkv.dtype());
  MPT_CHECK(lse_in.dtype() == lse_dt, "[{}] lse must be {} for {} inputs, got {}", kBackwardOp, lse_dt, qkv.dtype(),
            lse_in.meta_str());
  const Tensor lengths = detail::attention_key_lengths(w.q, options, shape, kBackwardOp);
  const Device dev = qkv.device();
  Tensor dqkv = Tensor::empty(qkv.shape(), qkv.dtype(), dev);
  if (qkv.numel() == 0) return dqkv;
  const Tensor dout = dout_in.contiguous(), out = out_in.contiguous(), lse = lse_in.contiguous();
  const Views d = views_of(dqkv, n_head, n_kv_head, kBackwardOp);
  const Tensor out_h = heads_view(out.view({w.B, w.T, w.H, w.D}));
  const Tensor dout_heads = heads_view(dout.view({w.B, w.T, w.H, w.D}));
  AttentionGrads g{d.q, d.k, d.v};
  if (!dev.is_cpu()) {
    if (detail::cudnn_attention_backward(w.q, w.k, w.v, out_h, dout_heads, lse, shape, g, false,
                                         detail::AttentionLayout::Packed, kBackwardOp))
      return dqkv;
    if (w.Hkv != w.H) {
      detail::gemm_attention_backward_any_layout(w.q, w.k, w.v, dout_heads, shape, g, false, kBackwardOp);
      return dqkv;
    }
    return gemm_backward(head_major(w, qkv), dout_heads, options, kBackwardOp, dqkv);
  }
  detail::visit_float(qkv.dtype(), kBackwardOp, [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    const kernels::cpu::AttentionBackwardArgs<T> args{
        w.q.data<T>(),        w.k.data<T>(), w.v.data<T>(), out_h.data<T>(), lse.data<F>(),
        dout_heads.data<T>(), g.dq.data<T>(), g.dk.data<T>(), g.dv.data<T>(), false};
    kernels::cpu::attention_backward(shape, args);
  });
  return dqkv;
}

}  // namespace mpt::ops
