// kernels/cuda/activation.h: GELU forward and backward on a CUDA stream (the CPU twin is kernels/cpu/activation.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpt::kernels::cuda {

// Device-pointer versions of kernels/cpu/activation.h, asynchronous on `stream`. T: float, mpt::f16,
// mpt::bf16. Returns cudaErrorInvalidValue for n < 0 or a null output, else the launch error.
template <class T>
cudaError_t gelu_forward(const T* x, T* y, int64_t n, cudaStream_t stream);

template <class T>
cudaError_t gelu_backward(const T* dy, const T* x, T* dx, int64_t n, bool accumulate, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
