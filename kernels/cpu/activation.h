// kernels/cpu/activation.h: GELU forward and backward over contiguous arrays on the CPU.
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu {

// y = gelu(x). T: float, double, mpt::f16, mpt::bf16 (computed in float; double in double).
template <class T>
void gelu_forward(const T* x, T* y, int64_t n);

// dx = dy * gelu'(x), or dx += ... when accumulate (backward accumulates into gradients).
template <class T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, bool accumulate);

}  // namespace mpt::kernels::cpu
