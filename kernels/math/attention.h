// kernels/math/attention.h: causal attention row math (scaled softmax, online softmax, backward), CPU and CUDA.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/types.h>  // __host__ and __device__, which MPT_HD names under emulation
#endif
#include "kernels/math/common.h"
#include "kernels/math/exp.h"

namespace mpt::kernels::math {

// Score rows are laid out [B*H, T, T]: row r belongs to query i = r % T, which attends keys 0..i only.
MPT_HD MPT_INLINE int64_t causal_keys(int64_t row, int64_t t) { return row % t + 1; }

// Key padding: sample b of a batch has lengths[b] real positions (1 <= lengths[b] <= T) followed by padding, and no
// query attends a padding key. `heads` maps a head row block to its sample (b = (B*H index) / heads). A raw pointer:
// host memory for the CPU kernels, device memory for the CUDA ones. lengths == nullptr: no padding.
struct KeyPadding {
  const int32_t* lengths = nullptr;
  int64_t heads = 1;
};

// Row r's keys under key padding: query i attends keys j <= i with j < lengths[b], min(i + 1, lengths[b]) of them
// (never none: a padding query still attends its sample's real keys).
MPT_HD MPT_INLINE int64_t causal_keys(int64_t row, int64_t t, KeyPadding pad) {
  const int64_t n = row % t + 1;
  if (pad.lengths == nullptr) return n;
  const int64_t len = pad.lengths[row / t / pad.heads];
  return n < len ? n : len;
}

template <class F>
MPT_HD MPT_INLINE F attention_exp(F x) {
  return exp_op(x);
}
MPT_HD MPT_INLINE float attention_max(float a, float b) { return fmaxf(a, b); }
MPT_HD MPT_INLINE double attention_max(double a, double b) { return fmax(a, b); }

// One causal score row after its max m (of the scaled scores) and sum of exp(scale * x - m) are known:
// p_j = exp(scale * x_j - m) / sum for j <= i, 0 beyond, and the row's logsumexp m + log(sum), which is
// what the backward pass recomputes probabilities from (p_j = exp(scale * x_j - lse)).
template <class F>
struct CausalSoftmaxRow {
  F scale;
  F row_max;
  F inv_sum;
  F lse;

  MPT_HD MPT_INLINE static CausalSoftmaxRow make(F scale, F row_max, F sum) {
    return {scale, row_max, F(1) / sum, row_max + log_op(sum)};
  }
  MPT_HD MPT_INLINE F prob(F x) const { return attention_exp(x * scale - row_max) * inv_sum; }
};

// Softmax backward through the scale, one element: dx_j = scale * p_j * (dp_j - sum_k dp_k p_k), `dot`
// being that row sum (over the causal keys only).
template <class F>
MPT_HD MPT_INLINE F causal_softmax_backward(F p, F dp, F dot, F scale) {
  return scale * (p * (dp - dot));
}

// The running state of one query row in a blocked (flash-attention) forward pass: the max m of the
// scaled scores seen so far and the sum l of exp(score - m). Each new key block with max block_max
// moves m and returns the factor the row's accumulators (l is rescaled here; the output row by the
// caller) must be multiplied by; exp(-inf) = 0 covers the first block.
template <class F>
struct OnlineSoftmax {
  F m;
  F l;

  MPT_HD MPT_INLINE static OnlineSoftmax start() { return {-INFINITY, F(0)}; }
  MPT_HD MPT_INLINE F rescale(F block_max) {
    const F m_new = attention_max(m, block_max);
    const F alpha = attention_exp(m - m_new);
    m = m_new;
    l *= alpha;
    return alpha;
  }
  MPT_HD MPT_INLINE F lse() const { return m + log_op(l); }
};

}  // namespace mpt::kernels::math
