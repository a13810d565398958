// kernels/cpu/layernorm.h: LayerNorm forward (optionally fused with a residual add) and backward on the CPU.
#pragma once

#include "kernels/math/layernorm.h"

namespace mpt::kernels::cpu {

// See math::LayerNormForwardParams. Rows are split across OpenMP threads; the row statistics are two
// passes in opmath (mean, then the mean of squared deviations). T: float, double, mpt::f16, mpt::bf16 with
// P = T, and f16/bf16 with P = float; the output Y is T, or f16/bf16 beside float T and P; x's type X is T, or
// f16/bf16 beside float T. Y = f8e4m3 beside float T: codes and amax as math::LayerNormForwardParams says (the threads'
// maxima combined, then folded into *y_amax).
template <class T, class P, class Y, class X>
void layer_norm_forward(const math::LayerNormForwardParams<T, P, Y, X>& p);

// See math::LayerNormBackwardParams. dweight and dbias are reduced over rows deterministically: rows are
// cut into a fixed number of chunks (independent of the thread count), each chunk sums into its own
// opmath partial, and the partials are added in chunk order. dy's type G pairs with T as the forward's Y does, and
// dx_half's X as the forward's x. dx_add with accumulate_dx: dx's old value is added (the caller checks).
template <class T, class P, class G, class X, class D = P>
void layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X, D>& p);

}  // namespace mpt::kernels::cpu
