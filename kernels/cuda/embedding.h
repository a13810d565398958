// kernels/cuda/embedding.h: embedding lookup and its deterministic backward (buckets built on the device), on a stream.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/device_errors.h"

namespace mpt::kernels::cuda {

struct EmbeddingShape {
  int64_t n;         // positions (ids)
  int64_t vocab;     // table rows
  int64_t channels;  // table columns
};

// out[p, :] = table[ids[p], :]. An id outside [0, vocab) is not read: its output row is filled with NaN and the
// position is reported to `errors` (DeviceErrorOp::Embedding). T: float, mpt::f16, mpt::bf16; I: int32_t, int64_t.
// Asynchronous on `stream`; cudaErrorInvalidValue for bad sizes or null pointers.
template <class T, class I>
cudaError_t embedding_forward(const I* ids, const T* table, T* out, const EmbeddingShape& shape,
                              const DeviceErrorSink& errors, cudaStream_t stream);

// How embedding_buckets splits the ids: `chunks` chunks of `chunk` consecutive positions (the last one shorter),
// each with its own histogram row of `vocab` counters.
struct BucketPlan {
  int64_t n;
  int64_t vocab;
  int64_t chunk;
  int64_t chunks;  // ceil(n / chunk), 0 when n == 0
};

// Chunks of at least 2048 positions, as many as keep chunks * vocab under 2^24 counters (64 MiB). Inline: the
// kernel harness links the emulated and the nvcc-built kernels into one program, and a function without CUDA types
// in its signature would be defined twice.
inline BucketPlan embedding_bucket_plan(int64_t n, int64_t vocab) {
  constexpr int64_t kMinChunk = 2048, kMaxCounters = int64_t{1} << 24;
  const int64_t max_chunks = vocab > 0 && kMaxCounters / vocab > 1 ? kMaxCounters / vocab : 1;
  const int64_t spread = (n + max_chunks - 1) / max_chunks;
  const int64_t chunk = spread > kMinChunk ? spread : kMinChunk;
  return {n, vocab, chunk, (n + chunk - 1) / chunk};
}

// Positions grouped by token, the backward's summation order (the same as kernels/cpu/embedding.h's
// EmbeddingBuckets, indexed by every row instead of the distinct tokens): the positions of token v are
// positions[starts[v] .. starts[v+1]) in increasing order.
template <class I>
struct BucketArgs {
  const I* ids;          // plan.n
  BucketPlan plan;
  int32_t* histogram;    // plan.chunks * plan.vocab counters of scratch (need not be initialised)
  int64_t* starts;       // plan.vocab + 1, written
  int64_t* positions;    // plan.n, written up to starts[vocab]
  DeviceErrorSink errors;  // ids outside [0, vocab): reported (DeviceErrorOp::EmbeddingBackward) and left out
};

// A stable counting sort on `stream`: per-chunk histograms (integer atomics: order-free), an exclusive scan of each
// token's counts over the chunks and of the totals over the vocabulary, then each chunk scatters its positions in
// order. No host synchronisation, the same result for any scheduling. I: int32_t, int64_t.
template <class I>
cudaError_t embedding_buckets(const BucketArgs<I>& args, cudaStream_t stream);

// The output of embedding_buckets.
struct DeviceBuckets {
  const int64_t* starts;     // rows + 1
  const int64_t* positions;  // starts[rows]
  int64_t rows;              // vocab
  int64_t count = -1;        // starts[rows] (the ids' count) when the caller knows it, else -1: for the traffic count
};

// dtable[v, c] = dtable[v, c] + (0 + dout[p0, c] + dout[p1, c] + ...) over the positions of token v in order, summed
// in float; rows without positions are not touched. One thread per (token, channel), no atomics: the same bits as
// kernels::cpu::embedding_backward. O: dtable's type, T's or (T float) bf16 / f16: the float sum rounded once to O.
template <class T, class O = T>
cudaError_t embedding_backward(const DeviceBuckets& buckets, const T* dout, O* dtable, int64_t channels,
                               cudaStream_t stream);

}  // namespace mpt::kernels::cuda
