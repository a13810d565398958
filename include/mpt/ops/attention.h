// mpt/ops/attention.h: causal scaled-dot-product multi-head attention, forward beside backward.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Layout: q, k, v and the output are (B, H, T, D): batch, head, position, head dimension. A model gets them
// from its fused QKV projection (B, T, 3 * H * D) by reshape to (B, T, 3, H, D), select, and transpose(1, 2)
// (any strides are accepted; non-contiguous inputs are copied), and feeds the output back through
// transpose(1, 2) and reshape to (B, T, H * D).
struct AttentionOptions {
  double scale = 0;  // multiplies q . k; 0 means 1 / sqrt(D). Must be finite and >= 0.
};

struct AttentionResult {
  Tensor out;  // (B, H, T, D), q's dtype
  Tensor lse;  // (B, H, T) f32 (f64 for f64 inputs): each row's logsumexp of the scaled scores, for backward
};

// out_i = sum_{j <= i} softmax_j(scale * q_i . k_j) v_j per batch and head (f32, f16, bf16; f64 on the CPU),
// computed in f32 (f64 for f64) with the output rounded once. The CPU runs a blocked flash-attention
// (online softmax, no T x T matrix). CUDA runs batched cuBLASLt GEMMs around a fused causal-softmax kernel: the
// f32 scores (B*H, T, T) are materialised, and the probabilities are rounded to the inputs' dtype for the second
// GEMM (f16/bf16 results differ from the CPU's within that rounding). cuDNN's fused attention is not wired yet.
AttentionResult causal_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionOptions& options = {});

struct AttentionGrads {
  Tensor dq, dk, dv;
};

// The gradients of causal_attention from the output gradient dout (the output's shape and dtype), the
// forward's inputs, its output and lse (the probabilities are recomputed blockwise, never stored). When
// `grads` holds dq, dk and dv (q's shape and dtype, contiguous; all three or none), the gradients are
// accumulated into them (+=) and they are returned; otherwise new tensors are returned.
AttentionGrads causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const AttentionOptions& options = {},
                                         AttentionGrads grads = {});

}  // namespace mpt::ops
