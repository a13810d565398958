// kernels/cuda/layernorm.h: LayerNorm forward (optionally fused with a residual add) and backward on a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/layernorm.h"

namespace mpt::kernels::cuda {

// Device-pointer version of kernels/cpu/layernorm.h: one warp per row (blocks of kLayerNormWarps), float statistics
// (two passes: mean, then mean of squared deviations, each a warp reduction), 16-byte vector loads when every row
// array is aligned and cols is a whole number of vectors. Asynchronous on `stream`; cudaErrorInvalidValue
// for rows < 0, cols < 1, rows > 2^31 - 1 or a missing pointer. T: float, mpt::f16, mpt::bf16 with P = T,
// and f16/bf16 with P = float; the output Y is T, or f16/bf16 beside float T and P (the norm written in the dtype of
// the GEMM that reads it: the cast that would follow is folded into the store); x's type X is T, or f16/bf16 beside
// float T (a sublayer's low-precision output added to an f32 residual). Y = f8e4m3 beside float T
// (MPT_LAYER_NORM_FP8_TYPES): the codes of the norm times *y_scale, the block's max |norm| folded into *y_amax with one
// atomicMax (cudaErrorInvalidValue without y_scale and y_amax).
template <class T, class P, class Y, class X>
cudaError_t layer_norm_forward(const math::LayerNormForwardParams<T, P, Y, X>& p, cudaStream_t stream);

// The kernels' blocks: kLayerNormWarps warps, a row each; the backward kernel's at most kLayerNormGradBlocks of them
// (the partial-sum slices).
inline constexpr int64_t kLayerNormWarps = 8;
inline constexpr int64_t kLayerNormGradBlocks = 512;

// The float scratch layer_norm_backward needs: (blocks, 2, cols) partial sums of dweight and dbias. Inline: the
// emulation tests link this file's kernels compiled as host C++ beside the library's CUDA ones, and a non-template
// function defined in both would be defined twice.
constexpr int64_t layer_norm_backward_scratch_floats(int64_t rows, int64_t cols) {
  const int64_t groups = (rows + kLayerNormWarps - 1) / kLayerNormWarps;
  return (groups < kLayerNormGradBlocks ? groups : kLayerNormGradBlocks) * 2 * cols;
}

// Backward in two kernels. The first takes a row per warp (llm.c's layout): the row's two means are warp reductions,
// then the warp writes dx and the block adds its warps' dy * xhat and dy, in warp order, into its own slice of
// `scratch` (through shared memory when 2 * cols floats fit beside the warps' staging in 48 KiB); up to 512 blocks
// of 8 warps, each taking every 512th group of 8 rows. The second adds the slices per column in
// math::partial_groups' order. No atomics: the result is the same on every run. `scratch` holds
// layer_norm_backward_scratch_floats(rows, cols) floats. dy's type G pairs with T as the forward's Y does; dx_add and
// dx_half (X) as math::LayerNormBackwardParams says (cudaErrorInvalidValue for dx_add with accumulate_dx).
template <class T, class P, class G, class X, class D = P>
cudaError_t layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X, D>& p, float* scratch,
                                cudaStream_t stream);

}  // namespace mpt::kernels::cuda
