// kernels/cuda/elementwise.h: add, mul, scale and dropout on a CUDA stream (the CPU twin is kernels/cpu/elementwise.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/elementwise.h"

namespace mpt::kernels::cuda {

using math::BinaryShape;  // n, b_period (b[i % b_period] pairs with a[i]), accumulate
using math::DropoutArgs;  // seed, offset, p, accumulate

// Device-pointer versions of kernels/cpu/elementwise.h with the same arithmetic (products never contracted
// into FMAs), so results equal the CPU bit for bit. Asynchronous on `stream`. T: float, mpt::f16,
// mpt::bf16. Returns cudaErrorInvalidValue for a negative size, a b_period that does not divide n, a p
// outside [0, 1) or a null pointer, else the launch error.
template <class T>
cudaError_t add(const T* a, const T* b, T* out, const BinaryShape& shape, double alpha, cudaStream_t stream);

template <class T>
cudaError_t mul(const T* a, const T* b, T* out, const BinaryShape& shape, cudaStream_t stream);

template <class T>
cudaError_t scale(const T* x, T* out, int64_t n, double alpha, bool accumulate, cudaStream_t stream);

// The CPU's widen_sum (f16, bf16, f32 in; f32 out; c may be null), the same bits.
template <class T>
cudaError_t widen_sum(const T* a, const T* b, const T* c, float* out, int64_t n, cudaStream_t stream);

// One thread per Philox group of 4 elements (the mask of math::dropout_keep4).
template <class T>
cudaError_t dropout(const T* in, T* out, int64_t n, const DropoutArgs& args, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
