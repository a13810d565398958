// kernels/cpu/reduction.h: sum/mean over an axis, sum of squares and the finite check on the CPU.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/math/reduce_ops.h"

namespace mpt::kernels::cpu {

// x is viewed as [outer, len, inner] (row-major); the reduction runs over the middle axis and writes
// out[o * inner + i]. Summation follows the canonical order of kernels/math/reduce_ops.h (32 lanes, a
// butterfly, chunks of 2048 for long axes) in float (double for double), so the result does not depend
// on the number of threads and equals the CUDA kernels bit for bit.
using math::ReduceShape;

// out = sum / divisor (divisor 1: sum, len: mean), or out += that when accumulate; rounded once to T.
// len == 0 gives 0 / divisor. T: float, double, mpt::f16, mpt::bf16.
template <class T>
void sum_axis(const T* x, T* out, const ReduceShape& shape, double divisor, bool accumulate);
// sum_axis in the same order with an f32 result, never rounded to T (f32, f16, bf16 input): the FP32 bias gradient
// of a low-precision Linear.
template <class T>
void sum_axis_f32(const T* x, float* out, const ReduceShape& shape, bool accumulate);

// Sum of x[i]^2 over [0, n) in the canonical order, in float (double for double): the per-tensor
// partial of the global L2 norm.
template <class T>
std::conditional_t<std::is_same_v<T, double>, double, float> sum_squares(const T* x, int64_t n);

// False when any of x[0, n) is Inf or NaN.
template <class T>
bool all_finite(const T* x, int64_t n);

}  // namespace mpt::kernels::cpu
