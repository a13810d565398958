// kernels/cuda/reduction.cu: two-pass reductions in the canonical order of kernels/math/reduce_ops.h
// (warp-per-chunk rows, thread-per-column columns), the L2-norm finish and the finite check.
#include "kernels/cuda/reduction.h"

#include "kernels/cuda/launch.cuh"
#include "kernels/math/opmath.h"
#include "kernels/math/optim.h"
#include "kernels/math/random.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

using math::kReduceChunk;
using math::kReduceLanes;

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int64_t kMaxBlocks = 65535 * 8;

unsigned blocks_for(int64_t units, int64_t per_block) {
  const int64_t blocks = (units + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

// Where a result goes: a float (chunk partial or sum of squares) or the output element.
struct FloatStore {
  float* dst;
  MPT_DEVICE MPT_INLINE void operator()(int64_t index, float v) const { dst[index] = v; }
};

template <class T>
struct OutputStore {
  T* out;
  float divisor;
  bool accumulate;
  MPT_DEVICE MPT_INLINE void operator()(int64_t index, float v) const {
    v = v / divisor;
    if (accumulate) v = math::add_rn(math::load(out[index]), v);
    out[index] = math::store<T>(v);
  }
};

// Global-memory bytes one stored result reads (an accumulated output) and writes.
struct StoreBytes {
  uint64_t read, written;
};
inline StoreBytes store_bytes(const FloatStore&) { return {0, sizeof(float)}; }
template <class T>
StoreBytes store_bytes(const OutputStore<T>& s) {
  return {s.accumulate ? sizeof(T) : 0, sizeof(T)};
}

// A reduction pass: the middle axis of [outer, len, inner] split into `chunks` segments of chunk_len; each
// (o, chunk, i) gives one reduce32 result, stored at index (o * chunks + chunk) * inner + i.
template <class Src, class Op, class Store>
struct PassParams {
  const Src* x;
  ReduceShape shape;
  int64_t chunk_len;
  int64_t chunks;
  Op f;
  Store store;
};

// Rows (inner == 1): warp w of the grid reduces item (row, chunk); lane j adds elements j, j + 32, ...
// and the butterfly of math::warp_allreduce combines the lanes in the canonical order.
template <class Src, class Op, class Store>
__global__ void __launch_bounds__(kThreads) rows_kernel(PassParams<Src, Op, Store> p) {
  const int lane = static_cast<int>(threadIdx.x) % 32;
  const int64_t items = p.shape.outer * p.chunks;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kWarps;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32; item < items; item += stride) {
    const int64_t row = item / p.chunks, begin = item % p.chunks * p.chunk_len;
    const int64_t m = p.shape.len - begin < p.chunk_len ? p.shape.len - begin : p.chunk_len;
    const Src* seg = p.x + row * p.shape.len + begin;
    float acc = 0.0f;
    for (int64_t k = lane; k < m; k += 32) acc = math::add_rn(acc, p.f(math::load(seg[k])));
    acc = math::warp_allreduce(acc, math::SumOp{});
    if (lane == 0) p.store(item, acc);
  }
}

// Columns: thread t reduces item ((o * chunks + chunk) * inner + i), keeping the 32 lanes in registers;
// adjacent threads read adjacent columns (coalesced).
template <class Src, class Op, class Store>
__global__ void __launch_bounds__(kThreads) columns_kernel(PassParams<Src, Op, Store> p) {
  const int64_t items = p.shape.outer * p.chunks * p.shape.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t item = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; item < items; item += stride) {
    const int64_t i = item % p.shape.inner, oc = item / p.shape.inner;
    const int64_t o = oc / p.chunks, begin = oc % p.chunks * p.chunk_len;
    const int64_t m = p.shape.len - begin < p.chunk_len ? p.shape.len - begin : p.chunk_len;
    const Src* col = p.x + (o * p.shape.len + begin) * p.shape.inner + i;
    float lane[kReduceLanes];
#pragma unroll
    for (int j = 0; j < kReduceLanes; ++j) lane[j] = 0.0f;
    for (int64_t l0 = 0; l0 < m; l0 += kReduceLanes) {
#pragma unroll
      for (int j = 0; j < kReduceLanes; ++j) {
        if (l0 + j < m) lane[j] = math::add_rn(lane[j], p.f(math::load(col[(l0 + j) * p.shape.inner])));
      }
    }
    p.store(item, math::combine_lanes(lane));
  }
}

template <class Src, class Op, class Store>
cudaError_t run_pass(const PassParams<Src, Op, Store>& p, cudaStream_t stream) {
  // The whole [outer, len, inner] input once; one stored result per (outer, chunk, inner).
  const uint64_t inputs = static_cast<uint64_t>(p.shape.outer) * static_cast<uint64_t>(p.shape.len) *
                          static_cast<uint64_t>(p.shape.inner);
  const uint64_t results = static_cast<uint64_t>(p.shape.outer) * static_cast<uint64_t>(p.chunks) *
                           static_cast<uint64_t>(p.shape.inner);
  const StoreBytes sb = store_bytes(p.store);
  const uint64_t read_bytes = inputs * sizeof(Src) + results * sb.read, written_bytes = results * sb.written;
  if (p.shape.inner == 1) {
    const LaunchConfig config{dim3(blocks_for(p.shape.outer * p.chunks, kWarps)), dim3(kThreads), 0, stream,
                              read_bytes, written_bytes};
    return launch(rows_kernel<Src, Op, Store>, config, p);
  }
  const LaunchConfig config{dim3(blocks_for(p.shape.outer * p.chunks * p.shape.inner, kThreads)), dim3(kThreads), 0,
                            stream, read_bytes, written_bytes};
  return launch(columns_kernel<Src, Op, Store>, config, p);
}

// One pass when the axis fits a chunk; else chunk partials into the workspace, then one reduce32 over
// each output's partials (the second pass reads them as a [outer, chunks, inner] array).
template <class T, class Op, class Store>
cudaError_t reduce(const T* x, const ReduceShape& s, Op f, Store store, float* workspace, cudaStream_t stream) {
  const int64_t chunks = math::reduce_chunks(s.len);
  if (chunks == 1) return run_pass(PassParams<T, Op, Store>{x, s, s.len, 1, f, store}, stream);
  if (workspace == nullptr) return cudaErrorInvalidValue;
  const cudaError_t e =
      run_pass(PassParams<T, Op, FloatStore>{x, s, kReduceChunk, chunks, f, FloatStore{workspace}}, stream);
  if (e != cudaSuccess) return e;
  const ReduceShape partials{s.outer, chunks, s.inner};
  return run_pass(PassParams<float, math::IdentityOp, Store>{workspace, partials, chunks, 1, math::IdentityOp{}, store},
                  stream);
}

// The result of an empty axis (a sum of 0) for every output index, through the same store as non-empty ones.
template <class Store>
__global__ void __launch_bounds__(kThreads) empty_axis_kernel(Store store, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) store(i, 0.0f);
}

// One block: thread j sums partials j, j + 256, ... in order, then the block's tree (deterministic; the partials of
// a multi-tensor norm number one per 2048 gradient elements, too many for one thread).
constexpr int kSqrtOfSumThreads = 256;
__global__ void __launch_bounds__(kSqrtOfSumThreads) sqrt_of_sum_kernel(const float* partials, int64_t count,
                                                                        float* out) {
  __shared__ float scratch[math::kBlockReduceScratch];
  float total = 0.0f;
  for (int64_t k = threadIdx.x; k < count; k += kSqrtOfSumThreads) total = math::add_rn(total, partials[k]);
  total = math::block_allreduce(total, math::SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) *out = math::sqrt_rn(total);
}

__global__ void clip_coefficient_kernel(const float* total, float max_norm, float* coef) {
  *coef = math::clip_coefficient(*total, max_norm);
}

template <class T>
__global__ void __launch_bounds__(kThreads) check_finite_kernel(const T* x, int64_t n, uint8_t* flag) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  bool finite = true;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    finite = finite && math::is_finite_bits(x[i]);
  }
  if (!finite) *flag = 0;  // every writer stores the same value: no race on the result
}

}  // namespace

template <class T>
cudaError_t sum_axis(const T* x, T* out, const ReduceShape& s, float divisor, bool accumulate, float* workspace,
                     cudaStream_t stream) {
  if (s.outer < 0 || s.len < 0 || s.inner < 0) return cudaErrorInvalidValue;
  if (s.outer == 0 || s.inner == 0) return cudaSuccess;
  if (out == nullptr || (s.len > 0 && x == nullptr)) return cudaErrorInvalidValue;
  const OutputStore<T> store{out, divisor, accumulate};
  if (s.len == 0) {
    const int64_t n = s.outer * s.inner;
    const StoreBytes sb = store_bytes(store);
    return launch(empty_axis_kernel<OutputStore<T>>, LaunchConfig{dim3(blocks_for(n, kThreads)), dim3(kThreads), 0,
                  stream, static_cast<uint64_t>(n) * sb.read, static_cast<uint64_t>(n) * sb.written}, store, n);
  }
  return reduce(x, s, math::IdentityOp{}, store, workspace, stream);
}

template <class T>
cudaError_t sum_squares(const T* x, int64_t n, float* result, float* workspace, cudaStream_t stream) {
  if (n < 0 || result == nullptr || (n > 0 && x == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) {
    return launch(empty_axis_kernel<FloatStore>, LaunchConfig{dim3(1), dim3(32), 0, stream, 0, sizeof(float)},
                  FloatStore{result}, int64_t{1});
  }
  return reduce(x, ReduceShape{1, n, 1}, math::SquareOp{}, FloatStore{result}, workspace, stream);
}

cudaError_t sqrt_of_sum(const float* partials, int64_t count, float* out, cudaStream_t stream) {
  if (count < 0 || out == nullptr || (count > 0 && partials == nullptr)) return cudaErrorInvalidValue;
  return launch(sqrt_of_sum_kernel,
                LaunchConfig{dim3(1), dim3(kSqrtOfSumThreads), 0, stream, static_cast<uint64_t>(count) * sizeof(float), sizeof(float)},
                partials, count, out);
}

cudaError_t clip_coefficient(const float* total, float max_norm, float* coef, cudaStream_t stream) {
  if (total == nullptr || coef == nullptr) return cudaErrorInvalidValue;
  return launch(clip_coefficient_kernel, LaunchConfig{dim3(1), dim3(1), 0, stream, sizeof(float), sizeof(float)}, total,
                max_norm, coef);
}

template <class T>
cudaError_t check_finite(const T* x, int64_t n, uint8_t* flag, cudaStream_t stream) {
  if (n < 0 || flag == nullptr || (n > 0 && x == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  // x read; the flag is written only when an element is not finite (not counted).
  return launch(check_finite_kernel<T>,
                LaunchConfig{dim3(blocks_for(n, kThreads)), dim3(kThreads), 0, stream,
                             static_cast<uint64_t>(n) * sizeof(T), 0},
                x, n, flag);
}

#define MPT_INSTANTIATE(T)                                                                                   \
  template cudaError_t sum_axis<T>(const T*, T*, const ReduceShape&, float, bool, float*, cudaStream_t);    \
  template cudaError_t sum_squares<T>(const T*, int64_t, float*, float*, cudaStream_t);                     \
  template cudaError_t check_finite<T>(const T*, int64_t, uint8_t*, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
