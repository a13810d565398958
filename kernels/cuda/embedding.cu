// kernels/cuda/embedding.cu: row gathers (16-byte vectors when aligned) and per-token ordered sums for the gradient
// (the buckets are built by embedding_buckets.cu).
#include "kernels/cuda/embedding.h"

#include "kernels/cuda/launch.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int64_t kMaxBlocks = 65535 * 8;

template <class T, class I>
struct ForwardParams {
  const I* ids;
  const T* table;
  T* out;
  EmbeddingShape shape;
  DeviceErrorSink errors;
};

// Block-stride over positions; the block's threads cover one row in units of kWidth elements.
template <bool kVec, class T, class I>
__global__ void __launch_bounds__(kThreads) forward_kernel(ForwardParams<T, I> p) {
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const int64_t units = p.shape.channels / kWidth;
  for (int64_t pos = blockIdx.x; pos < p.shape.n; pos += gridDim.x) {
    const int64_t id = static_cast<int64_t>(p.ids[pos]);
    const bool valid = id >= 0 && id < p.shape.vocab;
    if (!valid && threadIdx.x == 0) p.errors.report(pos, id, p.shape.vocab);
    const T* src = p.table + (valid ? id : 0) * p.shape.channels;
    T* dst = p.out + pos * p.shape.channels;
    for (int64_t u = threadIdx.x; u < units; u += blockDim.x) {
      if constexpr (kVec) {
        Vec16<T> v;
        if (valid) {
          v = load16(src + u * kWidth);
        } else {
#pragma unroll
          for (int k = 0; k < kWidth; ++k) v.v[k] = math::store<T>(NAN);
        }
        store16(dst + u * kWidth, v);
      } else {
        dst[u] = valid ? src[u] : math::store<T>(NAN);
      }
    }
  }
}

template <class T, class O>
struct BackwardParams {
  DeviceBuckets buckets;
  const T* dout;
  O* dtable;
  int64_t channels;
};

// grid.x strides over the rows, grid.y * blockDim.x covers the channels.
template <class T, class O>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardParams<T, O> p) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (c >= p.channels) return;
  for (int64_t v = blockIdx.x; v < p.buckets.rows; v += gridDim.x) {
    const int64_t begin = p.buckets.starts[v], end = p.buckets.starts[v + 1];
    if (begin == end) continue;  // untouched, as on the CPU (adding 0 would turn a -0 into +0)
    float acc = 0.0f;
    for (int64_t q = begin; q < end; ++q) acc += math::load(p.dout[p.buckets.positions[q] * p.channels + c]);
    O* dst = p.dtable + v * p.channels + c;
    *dst = math::store<O>(math::load(*dst) + acc);
  }
}

unsigned grid_x(int64_t units) { return static_cast<unsigned>(units < 1 ? 1 : units > kMaxBlocks ? kMaxBlocks : units); }

}  // namespace

template <class T, class I>
cudaError_t embedding_forward(const I* ids, const T* table, T* out, const EmbeddingShape& s,
                              const DeviceErrorSink& errors, cudaStream_t stream) {
  if (s.n < 0 || s.vocab < 0 || s.channels < 0) return cudaErrorInvalidValue;
  if (s.n == 0 || s.channels == 0) return cudaSuccess;
  if (ids == nullptr || out == nullptr || (s.vocab > 0 && table == nullptr)) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = s.channels % kWidth == 0 && is_aligned16(table) && is_aligned16(out);
  const int64_t units = vec ? s.channels / kWidth : s.channels;
  const int threads = units >= kThreads ? kThreads : static_cast<int>((units + 31) / 32 * 32);
  // The ids, the n gathered rows (an out-of-range id's row is not read, but ids live on the device: every row is
  // counted) and the n output rows.
  const uint64_t row_bytes = static_cast<uint64_t>(s.n) * static_cast<uint64_t>(s.channels) * sizeof(T);
  const LaunchConfig config{dim3(grid_x(s.n)), dim3(static_cast<unsigned>(threads)), 0, stream,
                            static_cast<uint64_t>(s.n) * sizeof(I) + row_bytes, row_bytes};
  const ForwardParams<T, I> p{ids, table, out, s, errors};
  return vec ? launch(forward_kernel<true, T, I>, config, p) : launch(forward_kernel<false, T, I>, config, p);
}

template <class T, class O>
cudaError_t embedding_backward(const DeviceBuckets& b, const T* dout, O* dtable, int64_t channels, cudaStream_t stream) {
  if (b.rows < 0 || channels < 0) return cudaErrorInvalidValue;
  if (b.rows == 0 || channels == 0) return cudaSuccess;
  if (b.starts == nullptr || dtable == nullptr) return cudaErrorInvalidValue;
  const int64_t blocks_y = (channels + kThreads - 1) / kThreads;
  if (blocks_y > 65535) return cudaErrorInvalidValue;
  // starts (rows + 1), each position and its dout row, and the table rows of the tokens present, read and written:
  // which those are lives on the device, so min(count, rows) of them is counted (a bound; every row when the caller
  // did not give the count, and then no position or dout row).
  const uint64_t row_bytes = static_cast<uint64_t>(channels) * sizeof(T);
  const uint64_t count = b.count >= 0 ? static_cast<uint64_t>(b.count) : 0;
  const uint64_t rows = static_cast<uint64_t>(b.rows);
  const uint64_t table_bytes = (b.count >= 0 && count < rows ? count : rows) * static_cast<uint64_t>(channels) * sizeof(O);
  const LaunchConfig config{dim3(grid_x(b.rows), static_cast<unsigned>(blocks_y)), dim3(kThreads), 0, stream,
                            (rows + 1) * sizeof(int64_t) + count * (sizeof(int64_t) + row_bytes) + table_bytes,
                            table_bytes};
  return launch(backward_kernel<T, O>, config, BackwardParams<T, O>{b, dout, dtable, channels});
}

#define MPT_INSTANTIATE(T)                                                                                      \
  template cudaError_t embedding_forward<T, int32_t>(const int32_t*, const T*, T*, const EmbeddingShape&,        \
                                                     const DeviceErrorSink&, cudaStream_t);                      \
  template cudaError_t embedding_forward<T, int64_t>(const int64_t*, const T*, T*, const EmbeddingShape&,        \
                                                     const DeviceErrorSink&, cudaStream_t);                      \
  template cudaError_t embedding_backward<T>(const DeviceBuckets&, const T*, T*, int64_t, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
template cudaError_t embedding_backward<float, bf16>(const DeviceBuckets&, const float*, bf16*, int64_t, cudaStream_t);
template cudaError_t embedding_backward<float, f16>(const DeviceBuckets&, const float*, f16*, int64_t, cudaStream_t);

}  // namespace mpt::kernels::cuda
