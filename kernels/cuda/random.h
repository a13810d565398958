// kernels/cuda/random.h: uniform and normal fills on a CUDA stream (bit-identical to kernels/cpu/random.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpt::kernels::cuda {

// Device-pointer versions of kernels/cpu/random.h: the same values for the same (seed, offset), the
// same offset consumption (math::philox_offset_increment(n)). Asynchronous on `stream`; returns the
// launch error. T: float, double, mpt::f16, mpt::bf16.
template <class T>
cudaError_t fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, float low, float high,
                         cudaStream_t stream);

template <class T>
cudaError_t fill_normal(T* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float std,
                        cudaStream_t stream);

}  // namespace mpt::kernels::cuda
