// kernels/cpu/pointwise.h: the general unary, binary, comparison and select kernels, and max/min with indices, on the
// CPU.
#pragma once

#include <cstdint>

#include "kernels/math/elementwise.h"
#include "kernels/math/pointwise.h"
#include "kernels/math/reduce_ops.h"

namespace mpt::kernels::cpu {

using math::BinaryKind;
using math::BinaryShape;  // n, b_period (b[i % b_period] pairs with a[i]), accumulate
using math::CompareKind;
using math::ReduceShape;  // [outer, len, inner], reduced over len
using math::UnaryKind;
using math::UnaryParams;

// T: float, double, mpt::f16, mpt::bf16; computed in float (double for double), rounded once to T.

// y = f(x) over n elements.
template <class T>
void unary(UnaryKind kind, const UnaryParams& params, const T* x, T* y, int64_t n);
// dx = dy * f'(x), or dx += that when accumulate.
template <class T>
void unary_backward(UnaryKind kind, const UnaryParams& params, const T* dy, const T* x, T* dx, int64_t n,
                    bool accumulate);

// out = f(a, b) with b[i % b_period] (or out += ... when shape.accumulate).
template <class T>
void binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryShape& shape);
// The gradient of binary `kind` with respect to a (wrt_b false) or b, all arrays n elements (b already expanded):
// out = dy * d f(a, b) / d(a or b), or out += that when accumulate.
template <class T>
void binary_backward(BinaryKind kind, bool wrt_b, const T* dy, const T* a, const T* b, T* out, int64_t n,
                     bool accumulate);

// SwiGLU over packed rows: gu [rows, 2f] holds gate then up in each row; y [rows, f] = silu(gate) * up. Backward:
// dgu [rows, 2f] = (dy up silu'(gate) | dy silu(gate)). The bits of binary(SiluMul) / binary_backward on split tensors.
template <class T>
void swiglu_packed(const T* gu, T* y, int64_t rows, int64_t f);
template <class T>
void swiglu_packed_backward(const T* dy, const T* gu, T* dgu, int64_t rows, int64_t f);

// out = (a cmp b[i % b_period]) ? 1 : 0.
template <class T>
void compare(CompareKind kind, const T* a, const T* b, uint8_t* out, const BinaryShape& shape);

// out[i] = cond[i] ? a[i] : b[i] (the element copied as it is).
template <class T>
void where(const uint8_t* cond, const T* a, const T* b, T* out, int64_t n);

// values[o * inner + i] and indices[...] = the largest (is_max) or smallest x[o, :, i] and its first index; NaN counts
// as the extreme (its first index). len >= 1.
template <class T>
void arg_reduce(bool is_max, const T* x, T* values, int64_t* indices, const ReduceShape& shape);

}  // namespace mpt::kernels::cpu
