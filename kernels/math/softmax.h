// kernels/math/softmax.h: row-softmax math shared by the CPU loop and the CUDA kernel; float compute, any storage type.
#pragma once

#include <cmath>

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/types.h>  // __host__ and __device__, which MPT_HD names under emulation
#endif
#include "kernels/math/common.h"
#include "kernels/math/exp.h"

namespace mpt::kernels::math {

// y_j = exp(x_j - m) / sum_k exp(x_k - m) with m = max_k x_k, all in float whatever the storage type
// (float, mpt::f16, mpt::bf16: anything with a conversion to float and an explicit one from float).
// A backend finds the row's max with softmax_max and the sum of softmax_exp in any order it likes;
// then each output is one SoftmaxRow call. The max is exact in any order; the sum's rounding depends
// on the order, so two backends agree to within the sum's rounding error, not bit for bit.
// A row holding a NaN or +Inf, or only -Inf, gives NaN everywhere (like PyTorch's softmax).
// double (the CPU's float64 reference path) is computed in double throughout.
template <class T>
MPT_HD MPT_INLINE float softmax_load(T x) {
  return static_cast<float>(x);
}
MPT_HD MPT_INLINE double softmax_load(double x) { return x; }

MPT_HD MPT_INLINE float softmax_max(float a, float b) { return fmaxf(a, b); }
MPT_HD MPT_INLINE double softmax_max(double a, double b) { return fmax(a, b); }

template <class F>
MPT_HD MPT_INLINE F softmax_exp(F x, F row_max) {
  return exp_op(x - row_max);
}

template <class F>
struct SoftmaxRowOf {
  F row_max;
  F inv_sum;

  MPT_HD MPT_INLINE static SoftmaxRowOf from_max_and_sum(F row_max, F sum) { return {row_max, F(1) / sum}; }

  // The output for input x (already in F), rounded once to the storage type T.
  template <class T>
  MPT_HD MPT_INLINE T output(F x) const {
    return static_cast<T>(softmax_exp(x, row_max) * inv_sum);
  }
};
using SoftmaxRow = SoftmaxRowOf<float>;

// Softmax backward, one element: dx_j = y_j * (dy_j - sum_k dy_k y_k), `dot` being that row sum.
template <class F>
MPT_HD MPT_INLINE F softmax_backward(F y, F dy, F dot) {
  return y * (dy - dot);
}

}  // namespace mpt::kernels::math
