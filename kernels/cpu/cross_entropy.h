// kernels/cpu/cross_entropy.h: fused softmax + cross-entropy forward, reduction and backward on the CPU.
#pragma once

#include "kernels/math/cross_entropy.h"

namespace mpt::kernels::cpu {

// See math::CrossEntropyForwardParams. Rows are split across OpenMP threads; each row is two passes: the
// max, then the sum of exp(x - max) (each exp in opmath, summed in double, SIMD-reordered).
// T: float, double, mpt::f16, mpt::bf16; I: int32_t, int64_t.
template <class T, class I>
void cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p);

// See math::CrossEntropyFusedParams: each row loaded once (into opmath), its lse and loss as cross_entropy_forward
// writes them and its gradient as cross_entropy_backward would (the same bits), in place when dlogits is the logits.
template <class T, class I>
void cross_entropy_forward_backward(const math::CrossEntropyFusedParams<T, I>& p);

// See math::CrossEntropyReduceParams: sums left to right in double, then rounds to opmath.
template <class T, class I>
void cross_entropy_reduce(const math::CrossEntropyReduceParams<T, I>& p);

// See math::CrossEntropyBackwardParams: the gradient is recomputed from the logits and the saved logsumexp
// and written straight into dlogits (no probabilities are stored). Rows across OpenMP threads.
template <class T, class I>
void cross_entropy_backward(const math::CrossEntropyBackwardParams<T, I>& p);

}  // namespace mpt::kernels::cpu
