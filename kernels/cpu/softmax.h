// kernels/cpu/softmax.h: row softmax forward and backward on the CPU (the reference for the CUDA kernels).
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu {

// y[r, :] = softmax(x[r, :]) for each of `rows` contiguous rows of `cols` elements, computed in float
// with kernels/math/softmax.h (the row's exp sum accumulates left to right). y may be x (in place).
// T: float, mpt::f16, mpt::bf16, and double (computed in double, for float64 reference checks). Rows are
// split across OpenMP threads. Nothing happens if rows or cols is not positive.
template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols);

// dx[r, :] = y * (dy - sum(dy * y)) per row, from the forward's output y; dx += ... when accumulate
// (backward accumulates into gradients). dx may be dy when not accumulating. Same types as softmax_rows.
template <class T>
void softmax_backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool accumulate);

}  // namespace mpt::kernels::cpu
