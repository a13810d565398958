// kernels/cuda/reduction.h: sum/mean over an axis, sum of squares, L2-norm finish and the finite check on a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/math/reduce_ops.h"

namespace mpt::kernels::cuda {

using math::ReduceShape;  // x viewed as [outer, len, inner], reduced over len

// Floats of workspace sum_axis needs for `shape` (the first-pass chunk partials; 0 for axes of at most
// math::kReduceChunk elements). Inline: host arithmetic only, and a strong symbol here would clash with the
// emulation build's copy of reduction.cu (its types do not mangle apart) when both end up in one program.
inline size_t sum_axis_workspace(const ReduceShape& s) {
  const int64_t chunks = math::reduce_chunks(s.len);
  return chunks == 1 ? 0 : static_cast<size_t>(s.outer * chunks * s.inner);
}

// out[o * inner + i] = sum / divisor (or += when accumulate), in the canonical order of
// kernels/math/reduce_ops.h: bit-identical to kernels/cpu/reduction.h, deterministic (two passes, no
// atomics). Rows (inner == 1): a warp per (row, chunk); columns: a thread per (chunk, column) holding its
// 32 lanes in registers. T: float, mpt::f16, mpt::bf16. Asynchronous on `stream`; cudaErrorInvalidValue
// for negative sizes or null pointers.
template <class T>
cudaError_t sum_axis(const T* x, T* out, const ReduceShape& shape, float divisor, bool accumulate, float* workspace,
                     cudaStream_t stream);

// *result = sum of x[i]^2 in float (canonical order), for the global L2 norm; workspace as for
// sum_axis of ReduceShape{1, n, 1}.
template <class T>
cudaError_t sum_squares(const T* x, int64_t n, float* result, float* workspace, cudaStream_t stream);

// *out = sqrt(partials[0] + partials[1] + ...), added in index order from 0 by one thread.
cudaError_t sqrt_of_sum(const float* partials, int64_t count, float* out, cudaStream_t stream);

// *coef = math::clip_coefficient(*total, max_norm) (one thread).
cudaError_t clip_coefficient(const float* total, float max_norm, float* coef, cudaStream_t stream);

// *flag = 0 when any of x[0, n) is Inf or NaN (flag is left alone otherwise: set it to 1 first).
template <class T>
cudaError_t check_finite(const T* x, int64_t n, uint8_t* flag, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
