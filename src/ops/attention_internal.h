// src/ops/attention_internal.h: what the head-major (attention.cpp) and packed (attention_qkv.cpp) attention ops share.
#pragma once

#include "kernels/cpu/attention.h"
#include "mpt/ops/attention.h"

namespace mpt::ops::detail {

DType attention_lse_dtype(DType x);  // f64 for f64 inputs, else f32

// Checks q, k, v (same (B, H, T, D) shape, dtype, device; any strides) and the scale; returns the kernels' shape
// (contiguous layout, heads = H).
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

// cuDNN's fused flash attention when the selection (ops/attention_select.h) picks it and its plan builds: true when
// it ran. q, k, v, out, dout, dq, dk, dv are (B, H, T, D) tensors, contiguous or, `packed`, views at the strides of
// CudnnAttentionProblem::packed (q, k, v and dq, dk, dv column blocks of one (B, T, 3, H, D) buffer each, out and
// dout (B, T, H, D)). Backward writes fresh gradients; with `accumulate` it computes into temporaries (contiguous
// only) and adds them. Builds without CUDA return false.
bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s,
                             AttentionResult& r, bool packed, const char* op);
bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const kernels::cpu::AttentionShape& s,
                              AttentionGrads& g, bool accumulate, bool packed, const char* op);

}  // namespace mpt::ops::detail
