// kernels/math/softmax.h: row-softmax math shared by the CPU loop and the CUDA kernel; float compute, any storage type.
#pragma once

#include <cmath>

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/types.h>  // __host__ and __device__, which MPT_HD names under emulation
#endif
#include "kernels/math/common.h"

namespace mpt::kernels::math {

// y_j = exp(x_j - m) / sum_k exp(x_k - m) with m = max_k x_k, all in float whatever the storage type
// (float, mpt::f16, mpt::bf16: anything with a conversion to float and an explicit one from float).
// A backend finds the row's max with softmax_max and the sum of softmax_exp in any order it likes;
// then each output is one SoftmaxRow call. The max is exact in any order; the sum's rounding depends
// on the order, so two backends agree to within the sum's rounding error, not bit for bit.
// A row holding a NaN or +Inf, or only -Inf, gives NaN everywhere (like PyTorch's softmax).
template <class T>
MPT_HD MPT_INLINE float softmax_load(T x) {
  return static_cast<float>(x);
}

MPT_HD MPT_INLINE float softmax_max(float a, float b) { return fmaxf(a, b); }

MPT_HD MPT_INLINE float softmax_exp(float x, float row_max) { return expf(x - row_max); }

struct SoftmaxRow {
  float row_max;
  float inv_sum;

  MPT_HD MPT_INLINE static SoftmaxRow from_max_and_sum(float row_max, float sum) { return {row_max, 1.0f / sum}; }

  // The output for input x (already in float), rounded once to the storage type T.
  template <class T>
  MPT_HD MPT_INLINE T output(float x) const {
    return static_cast<T>(softmax_exp(x, row_max) * inv_sum);
  }
};

}  // namespace mpt::kernels::math
