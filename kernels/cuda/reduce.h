// kernels/cuda/reduce.h: full-array sum on a CUDA stream (grid-stride block reductions).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpt::kernels::cuda {

// *out += sum of x[0, n), accumulated in float. Each block reduces a grid-stride slice (16-byte vector
// loads between a scalar head and tail, so any element-aligned x works) and atomically adds its
// partial sum to *out: the order of those additions, and so the last bits, may vary from run to run
// on a GPU. Asynchronous on `stream`; returns cudaErrorInvalidValue for n < 0, a null pointer or an x
// not aligned to its element, else the launch error. T: float, mpt::bf16.
template <class T>
cudaError_t sum_accumulate(const T* x, int64_t n, float* out, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
