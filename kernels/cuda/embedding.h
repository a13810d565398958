// kernels/cuda/embedding.h: embedding lookup and its deterministic backward on a CUDA stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace mpt::kernels::cuda {

struct EmbeddingShape {
  int64_t n;         // positions (ids)
  int64_t vocab;     // table rows
  int64_t channels;  // table columns
};

// out[p, :] = table[ids[p], :]. An id outside [0, vocab) is not read: its output row is filled with NaN
// (nothing is synchronised to report it; see mpt/ops/embedding.h). T: float, mpt::f16, mpt::bf16;
// I: int32_t, int64_t. Asynchronous on `stream`; cudaErrorInvalidValue for bad sizes or null pointers.
template <class T, class I>
cudaError_t embedding_forward(const I* ids, const T* table, T* out, const EmbeddingShape& shape, cudaStream_t stream);

// Device copies of kernels/cpu/embedding.h's EmbeddingBuckets: the distinct tokens, num_tokens + 1 starts and
// the positions grouped by token in increasing order.
struct DeviceBuckets {
  const int64_t* tokens;
  const int64_t* starts;
  const int64_t* positions;
  int64_t num_tokens;
};

// dtable[tokens[k], c] = dtable[tokens[k], c] + (0 + dout[p0, c] + dout[p1, c] + ...) over the positions of
// token k in order, summed in float: one thread per (token, channel), no atomics, the same bits as
// kernels::cpu::embedding_backward.
template <class T>
cudaError_t embedding_backward(const DeviceBuckets& buckets, const T* dout, T* dtable, int64_t channels,
                               cudaStream_t stream);

}  // namespace mpt::kernels::cuda
