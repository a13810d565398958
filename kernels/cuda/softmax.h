// kernels/cuda/softmax.h: row softmax forward and backward on a CUDA stream (checked against kernels/cpu/softmax.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpt::kernels::cuda {

// Device-pointer version of kernels/cpu/softmax.h: y[r, :] = softmax(x[r, :]) for `rows` contiguous
// rows of `cols` elements, computed in float; y may be x. One block per row; 16-byte vector loads
// when both pointers are 16-byte aligned and a row is a whole number of vectors. Asynchronous on
// `stream`; returns cudaErrorInvalidValue for rows < 0, cols < 1, rows > 2^31 - 1 or a null pointer,
// else the launch error. T: float, mpt::f16, mpt::bf16.
template <class T>
cudaError_t softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream);

// Device-pointer version of kernels/cpu/softmax.h's softmax_backward_rows: dx = y * (dy - sum(dy * y)) per
// row (dx += ... when accumulate), one block per row, the row sum a float block reduction; 16-byte vectors
// when all three pointers are aligned and a row is a whole number of vectors. Same errors and types as
// softmax_rows.
template <class T>
cudaError_t softmax_backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool accumulate,
                                  cudaStream_t stream);

}  // namespace mpt::kernels::cuda
