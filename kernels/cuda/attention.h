// kernels/cuda/attention.h: the causal scaled softmax of the CUDA attention fallback, forward and backward.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/attention.h"
#include "kernels/math/numerics.h"

namespace mpt::kernels::cuda {

// Device-pointer version of kernels/cpu/attention.h's causal_softmax_forward, for score rows [B*H, t, t]
// (rows = B*H*t; row r is query r % t): y_j = softmax_j(scale * x) over j <= r % t, y_j = 0 beyond, and,
// when lse is not null, lse[r] = the row's logsumexp of scale * x (float). One block per row, float math
// from kernels/math/attention.h, block reductions for the max and the sum; 16-byte vectors when x and y are
// 16-byte aligned and t is a whole number of vectors. y may be x. Asynchronous on `stream`; returns
// cudaErrorInvalidValue for rows < 0, t < 1, rows not a multiple of t or above 2^31 - 1, scale not finite
// and > 0, or a null x or y (rows > 0), else the launch error. T: float, mpt::f16, mpt::bf16. With `padding`
// (lengths in device memory, each in [1, t]: the op checks them), row r's keys are math::causal_keys(r, t, padding).
template <class T>
cudaError_t causal_softmax_forward(const T* x, T* y, float* lse, int64_t rows, int64_t t, float scale,
                                   cudaStream_t stream, math::KeyPadding padding = {});

// dx_j = scale * y_j * (dy_j - sum_{k <= i} dy_k y_k) for j <= i = r % t, 0 beyond: the gradient with respect
// to the unscaled scores, written (not accumulated: it feeds the dQ and dK GEMMs). dx may be dy. One block per
// row, the row sum a float block reduction; vectors when dy, y and dx are aligned. Same errors and types as
// causal_softmax_forward (dy, y, dx must not be null).
template <class T>
cudaError_t causal_softmax_backward(const T* dy, const T* y, T* dx, int64_t rows, int64_t t, float scale,
                                    cudaStream_t stream, math::KeyPadding padding = {});

}  // namespace mpt::kernels::cuda
