// kernels/cpu/elementwise.h: add, mul, scale (with a broadcast second operand) and dropout on the CPU.
#pragma once

#include <cstdint>

#include "kernels/math/elementwise.h"

namespace mpt::kernels::cpu {

using math::BinaryShape;  // n, b_period (b[i % b_period] pairs with a[i]), accumulate
using math::DropoutArgs;  // seed, offset, p, accumulate

// out = a + alpha * b (the product rounded before the sum). out may be a (in-place residual add).
// T: float, double, mpt::f16, mpt::bf16; computed in float (double for double), rounded once to T.
template <class T>
void add(const T* a, const T* b, T* out, const BinaryShape& shape, double alpha);

// out = a * b, or out += a * b when shape.accumulate.
template <class T>
void mul(const T* a, const T* b, T* out, const BinaryShape& shape);

// out = alpha * x, or out += alpha * x when accumulate.
template <class T>
void scale(const T* x, T* out, int64_t n, double alpha, bool accumulate);

// out = f32 sum of a, b and c (c may be null) in the order (c + b) + a (math::WidenSum3 / WidenSum2).
// T: mpt::f16, mpt::bf16, float.
template <class T>
void widen_sum(const T* a, const T* b, const T* c, float* out, int64_t n);

// out[i] = keep(i) ? in[i] / (1 - p) : 0 (or out[i] += that when accumulate), keep(i) from
// math::dropout_keep4(seed, offset, i / 4, p): forward and backward are the same kernel. 0 <= p < 1.
// The result does not depend on the number of threads.
template <class T>
void dropout(const T* in, T* out, int64_t n, const DropoutArgs& args);

}  // namespace mpt::kernels::cpu
