// kernels/cpu/softmax.h: row softmax forward on the CPU (the reference the CUDA kernel is checked against).
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu {

// y[r, :] = softmax(x[r, :]) for each of `rows` contiguous rows of `cols` elements, computed in float
// with kernels/math/softmax.h (the row's exp sum accumulates left to right). y may be x (in place).
// T: float, mpt::f16, mpt::bf16. Rows are split across OpenMP threads. Nothing happens if rows or
// cols is not positive.
template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols);

}  // namespace mpt::kernels::cpu
