// kernels/cuda/rope.h: rotary position embedding on a CUDA stream (the CPU twin is kernels/cpu/rope.h).
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/math/rope.h"

namespace mpt::kernels::cuda {

using math::RopeShape;

// kernels/cpu/rope.h's rope with device pointers, one thread per pair, asynchronous on `stream`. T: float, mpt::f16,
// mpt::bf16 with f32 tables. cudaErrorInvalidValue for bad sizes or null pointers.
template <class T>
cudaError_t rope(const T* x, T* y, const float* cos, const float* sin, const RopeShape& shape, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
