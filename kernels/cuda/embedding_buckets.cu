// kernels/cuda/embedding_buckets.cu: the embedding backward's buckets built on the device by a stable counting sort.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/embedding.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;       // count, column and scatter kernels
constexpr int kScanThreads = 1024;  // the single-block scan over the vocabulary
constexpr int64_t kMaxBlocks = 65535 * 8;

unsigned grid_for(int64_t units) {
  return static_cast<unsigned>(units < 1 ? 1 : units > kMaxBlocks ? kMaxBlocks : units);
}

template <class I>
MPT_DEVICE MPT_INLINE bool in_range(I id, int64_t vocab) {
  return static_cast<int64_t>(id) >= 0 && static_cast<int64_t>(id) < vocab;
}

__global__ void __launch_bounds__(kThreads) zero_kernel(int32_t* counters, int64_t count) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) counters[i] = 0;
}

// histogram[k, v] = occurrences of v in chunk k; a bad id is reported and not counted.
template <class I>
__global__ void __launch_bounds__(kThreads) count_kernel(BucketArgs<I> a) {
  const BucketPlan& s = a.plan;
  for (int64_t k = blockIdx.x; k < s.chunks; k += gridDim.x) {
    const int64_t end = k * s.chunk + s.chunk < s.n ? k * s.chunk + s.chunk : s.n;
    for (int64_t p = k * s.chunk + threadIdx.x; p < end; p += blockDim.x) {
      const I id = a.ids[p];
      if (in_range(id, s.vocab)) {
        atomicAdd(&a.histogram[k * s.vocab + static_cast<int64_t>(id)], 1);
      } else {
        a.errors.report(p, static_cast<int64_t>(id), s.vocab);
      }
    }
  }
}

// Per token v: histogram[k, v] becomes the occurrences of v in chunks before k; starts[v] its total.
template <class I>
__global__ void __launch_bounds__(kThreads) column_kernel(BucketArgs<I> a) {
  const BucketPlan& s = a.plan;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t v = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; v < s.vocab; v += stride) {
    int64_t before = 0;
    for (int64_t k = 0; k < s.chunks; ++k) {
      int32_t& counter = a.histogram[k * s.vocab + v];
      const int32_t count = counter;
      counter = static_cast<int32_t>(before);
      before += count;
    }
    a.starts[v] = before;
  }
}

// starts[0, vocab) in place from totals to their exclusive prefix sums; starts[vocab] = the sum. One block: each
// thread sums a contiguous segment, a Hillis-Steele scan combines the segments.
template <class I>
__global__ void __launch_bounds__(kScanThreads) scan_kernel(BucketArgs<I> a) {
  __shared__ int64_t sums[kScanThreads];
  const int64_t vocab = a.plan.vocab;
  const int t = static_cast<int>(threadIdx.x);
  const int64_t segment = (vocab + kScanThreads - 1) / kScanThreads;
  const int64_t lo = t * segment < vocab ? t * segment : vocab;
  const int64_t hi = lo + segment < vocab ? lo + segment : vocab;
  int64_t own = 0;
  for (int64_t v = lo; v < hi; ++v) own += a.starts[v];
  sums[t] = own;
  __syncthreads();
  for (int offset = 1; offset < kScanThreads; offset *= 2) {
    const int64_t left = t >= offset ? sums[t - offset] : 0;
    __syncthreads();
    sums[t] += left;
    __syncthreads();
  }
  int64_t run = sums[t] - own;
  for (int64_t v = lo; v < hi; ++v) {
    const int64_t count = a.starts[v];
    a.starts[v] = run;
    run += count;
  }
  if (t == kScanThreads - 1) a.starts[vocab] = sums[t];
}

// One block per chunk walks it in tiles of blockDim positions, in order: a position's slot is its token's start,
// plus the token's occurrences in earlier chunks and tiles (histogram[k, v], advanced after each tile), plus those
// before it in its tile. So each token's positions land in increasing order.
template <class I>
__global__ void __launch_bounds__(kThreads) scatter_kernel(BucketArgs<I> a) {
  __shared__ int64_t tile[kThreads];
  const BucketPlan& s = a.plan;
  const int t = static_cast<int>(threadIdx.x);
  const int width = static_cast<int>(blockDim.x);
  for (int64_t k = blockIdx.x; k < s.chunks; k += gridDim.x) {
    const int64_t end = k * s.chunk + s.chunk < s.n ? k * s.chunk + s.chunk : s.n;
    int32_t* before = a.histogram + k * s.vocab;
    for (int64_t base = k * s.chunk; base < end; base += width) {
      const int64_t p = base + t;
      int64_t id = -1;  // past the chunk, or a bad id (reported by count_kernel)
      if (p < end && in_range(a.ids[p], s.vocab)) id = static_cast<int64_t>(a.ids[p]);
      tile[t] = id;
      __syncthreads();
      int32_t next = 0;
      bool last = true;
      if (id >= 0) {
        int32_t rank = 0;
        for (int j = 0; j < t; ++j) rank += tile[j] == id ? 1 : 0;
        for (int j = t + 1; j < width && last; ++j) last = tile[j] != id;
        const int32_t slot = before[id] + rank;
        a.positions[a.starts[id] + slot] = p;
        next = slot + 1;
      }
      __syncthreads();  // every thread has read tile[] and before[]
      if (id >= 0 && last) before[id] = next;  // read after the next tile's first barrier
    }
  }
}

}  // namespace

template <class I>
cudaError_t embedding_buckets(const BucketArgs<I>& a, cudaStream_t stream) {
  const BucketPlan& s = a.plan;
  if (s.n < 0 || s.vocab < 0 || s.chunk <= 0 || s.chunk > INT32_MAX || s.chunks != (s.n + s.chunk - 1) / s.chunk) {
    return cudaErrorInvalidValue;
  }
  if (a.starts == nullptr || (s.n > 0 && (a.ids == nullptr || a.positions == nullptr)) ||
      (s.chunks * s.vocab > 0 && a.histogram == nullptr)) {
    return cudaErrorInvalidValue;
  }
  const int64_t counters = s.chunks * s.vocab;
  const uint64_t n = static_cast<uint64_t>(s.n), vocab = static_cast<uint64_t>(s.vocab);
  const uint64_t histogram_bytes = static_cast<uint64_t>(counters) * sizeof(int32_t);
  const uint64_t ids_bytes = n * sizeof(I);
  // The counters and starts a chunk's ids touch depend on the ids (device memory): at most one per position, so
  // min(n, counters) counters and min(n, vocab) starts are counted (a bound; bad ids touch none).
  const uint64_t touched_counters = (n < static_cast<uint64_t>(counters) ? n : static_cast<uint64_t>(counters)) *
                                    sizeof(int32_t);
  const uint64_t touched_starts = (n < vocab ? n : vocab) * sizeof(int64_t);
  if (counters > 0) {
    const LaunchConfig config{dim3(grid_for((counters + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream, 0,
                              histogram_bytes};
    if (const cudaError_t e = launch(zero_kernel, config, a.histogram, counters); e != cudaSuccess) return e;
  }
  if (s.n > 0) {
    // The ids; each touched counter's atomic add reads and writes it.
    const LaunchConfig per_chunk{dim3(grid_for(s.chunks)), dim3(kThreads), 0, stream, ids_bytes + touched_counters,
                                 touched_counters};
    if (const cudaError_t e = launch(count_kernel<I>, per_chunk, a); e != cudaSuccess) return e;
  }
  if (s.vocab > 0) {
    const LaunchConfig config{dim3(grid_for((s.vocab + kThreads - 1) / kThreads)), dim3(kThreads), 0, stream,
                              histogram_bytes, histogram_bytes + vocab * sizeof(int64_t)};
    if (const cudaError_t e = launch(column_kernel<I>, config, a); e != cudaSuccess) return e;
  }
  if (const cudaError_t e = launch(scan_kernel<I>,
                                   LaunchConfig{dim3(1), dim3(kScanThreads), 0, stream, vocab * sizeof(int64_t),
                                                (vocab + 1) * sizeof(int64_t)},
                                   a);
      e != cudaSuccess) {
    return e;
  }
  if (s.n > 0 && s.vocab > 0) {
    // The ids, the touched starts and counters (read, and the counters advanced), one position per id written.
    const LaunchConfig per_chunk{dim3(grid_for(s.chunks)), dim3(kThreads), 0, stream,
                                 ids_bytes + touched_starts + touched_counters, n * sizeof(int64_t) + touched_counters};
    return launch(scatter_kernel<I>, per_chunk, a);
  }
  return cudaSuccess;
}

template cudaError_t embedding_buckets<int32_t>(const BucketArgs<int32_t>&, cudaStream_t);
template cudaError_t embedding_buckets<int64_t>(const BucketArgs<int64_t>&, cudaStream_t);

}  // namespace mpt::kernels::cuda
