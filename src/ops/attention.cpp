// src/ops/attention.cpp: causal attention forward and backward: checks, one dtype dispatch, CPU flash kernel, or on
// CUDA cuDNN's fused flash attention (attention_cudnn.cpp) with the GEMM path as fallback (ops/attention_select.h
// chooses).
#include "mpt/ops/attention.h"

#include <cmath>
#include <string>

#include "kernels/cpu/attention.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"
#include "ops/attention_internal.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/attention.h"
#include "mpt/core/stream.h"
#endif

namespace mpt::ops {

namespace {

// prepare_key_lengths, with `context` (" (q ...)" from the ops, "" from a model) in its errors.
Tensor checked_key_lengths(const Tensor& lengths, int64_t batch, int64_t seq, Device device, const char* op,
                           const std::string& context) {
  if (!lengths.defined()) return {};
  MPT_CHECK(lengths.dtype() == DType::I32 && lengths.dim() == 1 && lengths.size(0) == batch &&
                lengths.device().is_cpu(),
            "[{}] lengths must be i32 [B] on the CPU (B = {}{}), got {}", op, batch, context, lengths.meta_str());
  const Tensor c = lengths.contiguous();
  const int32_t* v = c.data<int32_t>();
  bool padded = false;
  for (int64_t b = 0; b < batch; ++b) {
    MPT_CHECK(v[b] >= 1 && v[b] <= seq, "[{}] lengths[{}] = {} is outside [1, T = {}]{}", op, b, v[b], seq, context);
    padded = padded || v[b] < seq;
  }
  if (!padded) return {};  // plain causal attention (cuDNN included)
  return device.is_cpu() ? c : c.to(device);  // a few bytes, on the current stream
}

}  // namespace

namespace detail {

DType attention_lse_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

kernels::cpu::AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& opt, const char* op) {
  detail::check_same_device({&q, &k, &v}, op);
  detail::check_same_dtype({&q, &k, &v}, op);
  detail::check_f64_on_cpu(q, op);
  MPT_CHECK(q.dim() == 4, "[{}] q must be (B, H, T, D), got {}", op, q.meta_str());
  if (k.dim() == 4 && k.size(1) != q.size(1)) {  // grouped-query attention
    MPT_CHECK(k.size(1) >= 1 && q.size(1) % k.size(1) == 0 && k.size(0) == q.size(0) && k.size(2) == q.size(2) &&
                  k.size(3) == q.size(3) && v.shape() == k.shape(),
              "[{}] grouped-query attention needs k and v (B, H_kv, T, D) of one shape with H_kv dividing q's heads: "
              "q {}, k {}, v {}", op, q.meta_str(), k.meta_str(), v.meta_str());
  } else {
    detail::check_shape(k, q.shape(), "k", op);
    detail::check_shape(v, q.shape(), "v", op);
  }
  MPT_CHECK(std::isfinite(opt.scale) && opt.scale >= 0, "[{}] scale must be finite and >= 0 (0: 1/sqrt(D)), got {}", op,
            opt.scale);
  const int64_t d = q.size(3);
  MPT_CHECK(d >= 1, "[{}] the head dimension D must be at least 1, got q {}", op, q.meta_str());
  const double scale = opt.scale > 0 ? opt.scale : 1.0 / std::sqrt(static_cast<double>(d));
  kernels::cpu::AttentionShape s{q.size(0) * q.size(1), q.size(2), d, scale};
  s.heads = q.size(1);
  s.kv_heads = k.size(1);
  return s;
}

Tensor attention_key_lengths(const Tensor& q, const AttentionOptions& opt, kernels::cpu::AttentionShape& s,
                             const char* op) {
  const Tensor& len = opt.lengths;
  if (!len.defined()) return {};
  // Already where a CUDA q's kernels read them (prepare_key_lengths checked them): no copy, no host read.
  const bool on_device = !q.device().is_cpu() && len.device() == q.device();
  MPT_CHECK(len.dtype() == DType::I32 && len.dim() == 1 && len.size(0) == q.size(0) &&
                (len.device().is_cpu() || on_device),
            "[{}] lengths must be i32 [B] on the CPU (B = {} from q {}), or prepare_key_lengths' copy on q's "
            "device, got {}", op, q.size(0), q.meta_str(), len.meta_str());
  const Tensor where = on_device ? len.contiguous()
                                 : checked_key_lengths(len, q.size(0), q.size(2), q.device(), op,
                                                       " (q " + q.meta_str() + ")");
  if (where.defined()) s.padding = {where.data<int32_t>(), q.size(1)};
  return where;
}

namespace {

// CUDA, the GEMM path (the fallback when cuDNN cannot run a problem, or MPT_ATTENTION=gemm). Batched cuBLASLt GEMMs
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
      static_cast<float>(s.scale), static_cast<cudaStream_t>(detail::stream_of(p.device())), s.padding));
#else
  MPT_CUDA_KERNEL(0);
#endif
  return p;
}

}  // namespace

void gemm_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s,
                            AttentionResult& r, const char* op) {
  const Heads h = heads_of(q, k, v, s);
  const Tensor p = causal_probs_cuda(h, s, r.lse, op);
  matmul_out(p.to(h.v.dtype()), h.v, r.out.reshape(heads_shape(s)));
}

void gemm_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                             const kernels::cpu::AttentionShape& s, AttentionGrads& g, bool accumulate,
                             const char* op) {
  const Heads h = heads_of(q, k, v, s);
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
                                                         static_cast<cudaStream_t>(detail::stream_of(ds.device())),
                                                         s.padding));
#endif
  const Tensor ds_lo = ds.to(dt);
  matmul_out(ds_lo, h.k, g.dq.reshape(heads_shape(s)), beta);      // dq = dS k
  matmul_out(ds_lo, h.q, g.dk.reshape(heads_shape(s)), beta, ta);  // dk = dS^T q
}

}  // namespace detail

Tensor prepare_key_lengths(const Tensor& lengths, int64_t batch, int64_t seq, Device device, const char* op) {
  return checked_key_lengths(lengths, batch, seq, device, op, "");
}

namespace {

using detail::AttentionLayout;
using detail::visit_float;

// x (B, H, T, D) as a transpose(1, 2) view of a contiguous (B, T, H, D): what a projection's output viewed per head
// is, and what the output projection reads back without a copy.
bool is_token_major(const Tensor& x) {
  if (x.dim() != 4) return false;
  const int64_t H = x.size(1), T = x.size(2), D = x.size(3);
  return x.stride(3) == 1 && x.stride(1) == D && x.stride(2) == H * D && x.stride(0) == T * H * D;
}

bool in_layout(const Tensor& x, AttentionLayout layout) {
  return layout == AttentionLayout::TokenMajor ? is_token_major(x) : x.is_contiguous();
}

// x itself when it is in `layout`, else a copy that is.
Tensor to_layout(const Tensor& x, AttentionLayout layout) {
  if (in_layout(x, layout)) return x;
  if (layout == AttentionLayout::HeadMajor) return x.contiguous();
  return x.transpose(1, 2).contiguous().transpose(1, 2);
}

// The layout the kernels run in: q's when it is token-major (a model's projections on both sides then need no head
// copies), else head-major. k, v, dout are brought to it (a copy only when they are elsewhere).
AttentionLayout layout_of(const Tensor& q) {
  return is_token_major(q) && !q.is_contiguous() ? AttentionLayout::TokenMajor : AttentionLayout::HeadMajor;
}

kernels::cpu::RowStrides row_strides(const Tensor& x) { return {x.stride(0), x.stride(1), x.stride(2)}; }

void set_strides(kernels::cpu::AttentionShape& s, const Tensor& q, const Tensor& k, const Tensor& out) {
  s.qkv = row_strides(q);
  s.kv = row_strides(k);
  s.out = row_strides(out);
}

// kv (B, H_kv, T, D) with each head repeated G times: (B, H_kv * G, T, D) contiguous, head h = kv head h / G (Hugging
// Face's repeat_kv), for the CUDA GEMM path, which runs multi-head attention only.
Tensor repeat_kv(const Tensor& kv, int64_t groups) {
  if (groups == 1) return kv.contiguous();
  const int64_t B = kv.size(0), H = kv.size(1), T = kv.size(2), D = kv.size(3);
  return kv.unsqueeze(2).expand({B, H, groups, T, D}).reshape({B, H * groups, T, D});
}

int64_t groups_of(const Tensor& q, const Tensor& k) { return q.size(1) / k.size(1); }

void check_grad(const Tensor& g, const Tensor& like, const char* what, const char* op) {
  detail::check_same_dtype({&like, &g}, op);
  detail::check_shape(g, like.shape(), what, op);
}

}  // namespace

namespace detail {

void gemm_attention_forward_any_layout(const Tensor& q, const Tensor& k, const Tensor& v,
                                       kernels::cpu::AttentionShape s, AttentionResult& r, const char* op) {
  const int64_t groups = groups_of(q, k);
  s.kv_heads = s.heads;
  s.qkv = s.kv = s.out = {};
  const bool direct = r.out.is_contiguous();
  AttentionResult heads{direct ? r.out : Tensor::empty(q.shape(), q.dtype(), q.device()), r.lse};
  detail::gemm_attention_forward(q.contiguous(), repeat_kv(k, groups), repeat_kv(v, groups), s, heads, op);
  if (!direct) Tensor(r.out).copy_(heads.out);
}

void gemm_attention_backward_any_layout(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                         kernels::cpu::AttentionShape s, AttentionGrads& g, bool accumulate,
                                         const char* op) {
  const int64_t groups = groups_of(q, k);
  s.kv_heads = s.heads;
  s.qkv = s.kv = s.out = {};
  const Tensor kr = repeat_kv(k, groups), vr = repeat_kv(v, groups);
  if (groups == 1 && g.dq.is_contiguous() && g.dk.is_contiguous() && g.dv.is_contiguous()) {
    detail::gemm_attention_backward(q.contiguous(), kr, vr, dout.contiguous(), s, g, accumulate, op);
    return;
  }
  AttentionGrads full{Tensor::empty(q.shape(), q.dtype(), q.device()), Tensor::empty(kr.shape(), q.dtype(), q.device()),
                      Tensor::empty(kr.shape(), q.dtype(), q.device())};
  detail::gemm_attention_backward(q.contiguous(), kr, vr, dout.contiguous(), s, full, false, op);
  const Shape grouped{k.size(0), k.size(1), groups, k.size(2), k.size(3)};
  const Tensor dk = groups == 1 ? full.dk : sum(full.dk.view(grouped), 2);
  const Tensor dv = groups == 1 ? full.dv : sum(full.dv.view(grouped), 2);
  if (accumulate) {
    add_(g.dq, full.dq);
    add_(g.dk, dk);
    add_(g.dv, dv);
  } else {
    Tensor(g.dq).copy_(full.dq);
    Tensor(g.dk).copy_(dk);
    Tensor(g.dv).copy_(dv);
  }
}

Tensor attention_empty(const Shape& bhtd, DType dtype, Device device, AttentionLayout layout) {
  if (layout != AttentionLayout::TokenMajor) return Tensor::empty(bhtd, dtype, device);
  return Tensor::empty({bhtd[0], bhtd[2], bhtd[1], bhtd[3]}, dtype, device).transpose(1, 2);
}

}  // namespace detail

AttentionResult causal_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                                 const AttentionOptions& options) {
  const char* op = "causal_attention";
  const detail::GradRecorder grad({&q_in, &k_in, &v_in});
  auto shape = detail::attention_shape(q_in, k_in, v_in, options, op);
  const Device dev = q_in.device();
  const Tensor lengths = detail::attention_key_lengths(q_in, options, shape, op);
  const AttentionLayout layout = layout_of(q_in);
  const Tensor q = to_layout(q_in, layout), k = to_layout(k_in, layout), v = to_layout(v_in, layout);
  AttentionResult r{detail::attention_empty(q.shape(), q.dtype(), dev, layout),
                    Tensor::empty({q.size(0), q.size(1), q.size(2)}, detail::attention_lse_dtype(q.dtype()), dev)};
  set_strides(shape, q, k, r.out);
  [&] {
    if (q.numel() == 0) return;
    if (!dev.is_cpu()) {
      if (detail::cudnn_attention_forward(q, k, v, shape, r, layout, op)) return;
      detail::gemm_attention_forward_any_layout(q, k, v, shape, r, op);
      return;
    }
    visit_float(q.dtype(), op, [&](auto tag) {
      using T = decltype(tag);
      using F = kernels::math::opmath_t<T>;
      kernels::cpu::attention_forward(shape, q.data<T>(), k.data<T>(), v.data<T>(), r.out.data<T>(),
                                      r.lse.data<F>());
    });
  }();
  // lse is an auxiliary output (what backward recomputes from), not differentiable.
  grad.record("CausalAttentionBackward", {&r.out},
              [q = q.detach(), k = k.detach(), v = v.detach(), out = r.out.detach(), lse = r.lse, options](
                  const std::vector<Tensor>& g) {
                AttentionGrads d = causal_attention_backward(g[0], q, k, v, out, lse, options);
                return std::vector<Tensor>{d.dq, d.dk, d.dv};
              });
  return r;
}

AttentionGrads causal_attention_backward(const Tensor& dout_in, const Tensor& q_in, const Tensor& k_in,
                                         const Tensor& v_in, const Tensor& out_in, const Tensor& lse_in,
                                         const AttentionOptions& options, AttentionGrads grads) {
  const char* op = "causal_attention_backward";
  auto shape = detail::attention_shape(q_in, k_in, v_in, options, op);
  detail::check_same_device({&q_in, &dout_in, &out_in, &lse_in}, op);
  detail::check_same_dtype({&q_in, &dout_in, &out_in}, op);
  detail::check_shape(dout_in, q_in.shape(), "dout", op);
  detail::check_shape(out_in, q_in.shape(), "out", op);
  detail::check_shape(lse_in, {q_in.size(0), q_in.size(1), q_in.size(2)}, "lse", op);
  MPT_CHECK(lse_in.dtype() == detail::attention_lse_dtype(q_in.dtype()), "[{}] lse must be {} for {} inputs, got {}",
            op, detail::attention_lse_dtype(q_in.dtype()), q_in.dtype(), lse_in.meta_str());
  const int given = int(grads.dq.defined()) + int(grads.dk.defined()) + int(grads.dv.defined());
  MPT_CHECK(given == 0 || given == 3, "[{}] give all three of dq, dk, dv to accumulate into, or none; got {}", op,
            given);
  const Device dev = q_in.device();
  const Tensor lengths = detail::attention_key_lengths(q_in, options, shape, op);
  const bool accumulate = given == 3;
  if (accumulate) {
    detail::check_same_device({&q_in, &grads.dq, &grads.dk, &grads.dv}, op);
    check_grad(grads.dq, q_in, "dq", op);
    check_grad(grads.dk, k_in, "dk", op);
    check_grad(grads.dv, k_in, "dv", op);
  }
  const AttentionLayout layout = layout_of(q_in);
  const Tensor q = to_layout(q_in, layout), k = to_layout(k_in, layout), v = to_layout(v_in, layout);
  const Tensor out = to_layout(out_in, layout), dout = to_layout(dout_in, layout), lse = lse_in.contiguous();
  set_strides(shape, q, k, out);
  // The kernels write (or add into) gradients in the layout; given ones elsewhere get fresh ones added to them.
  const bool in_place = accumulate && in_layout(grads.dq, layout) && in_layout(grads.dk, layout) &&
                        in_layout(grads.dv, layout);
  AttentionGrads d = in_place ? grads
                              : AttentionGrads{detail::attention_empty(q.shape(), q.dtype(), dev, layout),
                                               detail::attention_empty(k.shape(), q.dtype(), dev, layout),
                                               detail::attention_empty(k.shape(), q.dtype(), dev, layout)};
  const auto finish = [&] {
    if (!accumulate || in_place) return d;
    add_(grads.dq, d.dq);
    add_(grads.dk, d.dk);
    add_(grads.dv, d.dv);
    return grads;
  };
  if (q.numel() == 0) return finish();
  if (!dev.is_cpu()) {
    if (!detail::cudnn_attention_backward(q, k, v, out, dout, lse, shape, d, in_place, layout, op))
      detail::gemm_attention_backward_any_layout(q, k, v, dout, shape, d, in_place, op);
    return finish();
  }
  visit_float(q.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    using F = kernels::math::opmath_t<T>;
    const kernels::cpu::AttentionBackwardArgs<T> args{
        q.data<T>(),    k.data<T>(),    v.data<T>(),    out.data<T>(), lse.data<F>(),
        dout.data<T>(), d.dq.data<T>(), d.dk.data<T>(), d.dv.data<T>(), in_place};
    kernels::cpu::attention_backward(shape, args);
  });
  return finish();
}

}  // namespace mpt::ops
