// src/ops/attention_internal.h: what the head-major (attention.cpp) and packed (attention_qkv.cpp) attention ops share.
#pragma once

#include "kernels/cpu/attention.h"
#include "mpt/ops/attention.h"

namespace mpt::ops::detail {

DType attention_lse_dtype(DType x);  // f64 for f64 inputs, else f32

// Checks q (B, H, T, D), k and v (one (B, H_kv, T, D) shape, H_kv dividing H: grouped-query attention when H_kv < H),
// dtype, device (any strides) and the scale; returns the kernels' shape (contiguous layout, heads = H, kv_heads =
// H_kv).
kernels::cpu::AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v,
                                             const AttentionOptions& opt, const char* op);

// options.lengths checked against q ((B,) i32 on the CPU, each in [1, T]) and, when some sample is padded, where the
// kernels read them (a device copy for a CUDA q, on the current stream); undefined when none is. Sets s.padding.
Tensor attention_key_lengths(const Tensor& q, const AttentionOptions& opt, kernels::cpu::AttentionShape& s,
                             const char* op);

// The CUDA GEMM path on contiguous (B, H, T, D) q, k, v (the fallback when cuDNN cannot run a problem, or
// MPT_ATTENTION=gemm): writes out and lse / dq, dk, dv (+= when accumulate).
void gemm_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s,
                            AttentionResult& r, const char* op);
void gemm_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                             const kernels::cpu::AttentionShape& s, AttentionGrads& g, bool accumulate,
                             const char* op);

// The CUDA GEMM path on q, k, v, out (dout, dq, dk, dv) in any strides and with fewer kv heads: head-major contiguous
// copies with the kv heads repeated, results copied into `r` (or summed over each group into `g`; += when accumulate).
void gemm_attention_forward_any_layout(const Tensor& q, const Tensor& k, const Tensor& v,
                                       kernels::cpu::AttentionShape s, AttentionResult& r, const char* op);
void gemm_attention_backward_any_layout(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout,
                                        kernels::cpu::AttentionShape s, AttentionGrads& g, bool accumulate,
                                        const char* op);

// Where q, k, v, out (and dout, dq, dk, dv) live. HeadMajor: contiguous (B, H, T, D) each (k, v: H_kv heads).
// TokenMajor: each a transpose(1, 2) view of a contiguous (B, T, H, D) (what projections write and read). Packed: q,
// k, v (dq, dk, dv) the column blocks of one (B, T, H + 2 H_kv, D) buffer, out and dout (B, T, H, D).
enum class AttentionLayout { HeadMajor, TokenMajor, Packed };

// An uninitialised (B, H, T, D) tensor in `layout` (HeadMajor or TokenMajor).
Tensor attention_empty(const Shape& bhtd, DType dtype, Device device, AttentionLayout layout);

// cuDNN's fused flash attention when the selection (ops/attention_select.h) picks it and its plan builds: true when
// it ran. q, out, dout, dq are (B, H, T, D), k, v, dk, dv (B, H_kv, T, D), all in `layout`. Backward writes fresh
// gradients; with `accumulate` it computes into temporaries (in the layout) and adds them. Builds without CUDA
// return false.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s,
                             AttentionResult& r, AttentionLayout layout, const char* op);
bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const kernels::cpu::AttentionShape& s,
                              AttentionGrads& g, bool accumulate, AttentionLayout layout, const char* op);

}  // namespace mpt::ops::detail
