// kernels/cuda/fp8_wire.cu: the FP8 gradient all-reduce's amax fix-up and per-parameter scales (a thread per parameter), and its amax, quantize and dequantize passes over a bucket's parameters (a block per chunk of one parameter).
#include <algorithm>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/fp8_wire.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/pack.cuh"
#include "kernels/math/quantize.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) fp8_wire_amax_kernel(float* amax, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) amax[i] = math::Fp8WireAmax{}(amax[i]);
}

__global__ void __launch_bounds__(kThreads) fp8_wire_scales_kernel(const float* amax, float* scale, float* inv,
                                                                   int64_t n, math::Fp8WireScale f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(amax[i], scale + i, inv + i);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

// ---- a bucket's parameters in one launch

// Elements per block: 256 threads, 8-element packs, 4 packs per thread. A multiple of 8, so a parameter whose start
// is pack-aligned has every chunk pack-aligned.
constexpr int64_t kChunk = static_cast<int64_t>(kPackThreads) * 8 * 4;

// Up to kWireSegmentsPerLaunch parameters as kernel arguments (under 2 KiB): parameter i of the table is elements
// [bound[i], bound[i + 1]) of the buffer and blocks [first_block[i], first_block[i + 1]) of the grid; its amax, scale
// or inverse is element base + i of the caller's vector.
struct SegmentTable {
  int64_t bound[kWireSegmentsPerLaunch + 1];
  uint32_t first_block[kWireSegmentsPerLaunch + 1];
  int32_t count;
  int64_t base;
};

struct Chunk {
  int64_t segment;  // the caller's index
  int64_t begin, end;
};

// The parameter and elements of block `block`: the last parameter whose first block is at most `block` (an empty
// parameter shares its first block with the next one, so it is never chosen).
MPT_DEVICE MPT_INLINE Chunk chunk_of(const SegmentTable& t, uint32_t block) {
  int lo = 0, hi = t.count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (t.first_block[mid] <= block) lo = mid; else hi = mid - 1;
  }
  const int64_t begin = t.bound[lo] + static_cast<int64_t>(block - t.first_block[lo]) * kChunk;
  const int64_t end = t.bound[lo + 1] < begin + kChunk ? t.bound[lo + 1] : begin + kChunk;
  return {t.base + lo, begin, end};
}

template <class T>
MPT_DEVICE MPT_INLINE bool pack_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack8<T>) == 0;
}

// pack(i) for whole packs of 8 from c.begin when `vec`, then one(i) for the rest: consecutive threads take
// consecutive packs (or elements).
template <class Pack, class One>
MPT_DEVICE MPT_INLINE void for_chunk(const Chunk& c, bool vec, Pack pack, One one) {
  const int64_t t = threadIdx.x, threads = blockDim.x;
  int64_t rest = c.begin;
  if (vec) {
    const int64_t packs = (c.end - c.begin) / 8;
    for (int64_t p = t; p < packs; p += threads) pack(c.begin + p * 8);
    rest = c.begin + packs * 8;
  }
  for (int64_t i = rest + t; i < c.end; i += threads) one(i);
}

__global__ void __launch_bounds__(kThreads) zero_kernel(float* x, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 0.0f;
}

template <class T>
__global__ void __launch_bounds__(kPackThreads) wire_amax_kernel(const T* x, const SegmentTable t, unsigned* amax) {
  const Chunk c = chunk_of(t, blockIdx.x);
  unsigned m = 0;
  for_chunk(
      c, pack_aligned(x + c.begin),
      [&](int64_t i) {
        const Pack8<T> a = load8(x + i);
#pragma unroll
        for (int k = 0; k < 8; ++k) m = math::AmaxBitsMax{}(m, math::amax_bits(a.v[k], false));
      },
      [&](int64_t i) { m = math::AmaxBitsMax{}(m, math::amax_bits(x[i], false)); });
  // Every NaN's bits lie above +inf's: capping them there is Fp8WireAmax of the canonical NaN ops::amax gives.
  block_amax_to(m > math::kInfBits ? math::kInfBits : m, amax + c.segment);
}

// y = f(x, factor[parameter]) elementwise: the codes' quantization (factor: the scales) or their dequantization
// (factor: the inverses).
struct QuantizeE4M3 {
  template <class T>
  MPT_DEVICE MPT_INLINE f8e4m3 operator()(T x, float scale) const {
    return math::quantize_value<f8e4m3>(x, scale, Fp8Saturation::Saturate);
  }
};
template <class Out>
struct DequantizeE4M3 {
  MPT_DEVICE MPT_INLINE Out operator()(f8e4m3 q, float inv) const { return math::dequantize_value<Out>(q, inv); }
};

template <class In, class Out, class F>
__global__ void __launch_bounds__(kPackThreads)
    wire_map_kernel(const In* x, const SegmentTable t, const float* factor, Out* y, F f) {
  const Chunk c = chunk_of(t, blockIdx.x);
  const float s = factor[c.segment];
  for_chunk(
      c, pack_aligned(x + c.begin) && pack_aligned(y + c.begin),
      [&](int64_t i) {
        const Pack8<In> a = load8(x + i);
        Pack8<Out> b;
#pragma unroll
        for (int k = 0; k < 8; ++k) b.v[k] = f(a.v[k], s);
        store8(y + i, b);
      },
      [&](int64_t i) { y[i] = f(x[i], s); });
}

bool valid_bounds(const int64_t* bounds, int64_t segments) {
  if (segments < 0 || bounds == nullptr || bounds[0] != 0) return false;
  for (int64_t i = 0; i < segments; ++i)
    if (bounds[i + 1] < bounds[i]) return false;
  return true;
}

// Launches `launch_table(table, elements)` once per kWireSegmentsPerLaunch parameters (those with elements: a launch
// has at least one block), stopping at the first error.
template <class F>
cudaError_t for_tables(const int64_t* bounds, int64_t segments, F launch_table) {
  for (int64_t first = 0; first < segments; first += kWireSegmentsPerLaunch) {
    SegmentTable t{};
    t.count = static_cast<int32_t>(std::min<int64_t>(kWireSegmentsPerLaunch, segments - first));
    t.base = first;
    uint64_t blocks = 0;
    for (int32_t i = 0; i <= t.count; ++i) {
      t.bound[i] = bounds[first + i];
      t.first_block[i] = static_cast<uint32_t>(blocks);
      if (i < t.count)
        blocks += static_cast<uint64_t>((bounds[first + i + 1] - bounds[first + i] + kChunk - 1) / kChunk);
    }
    if (blocks > 0x7FFFFFFFull) return cudaErrorInvalidValue;
    if (blocks == 0) continue;
    const cudaError_t e = launch_table(t, static_cast<unsigned>(blocks), bounds[first + t.count] - bounds[first]);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

}  // namespace

cudaError_t fp8_wire_amax(float* amax, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && amax == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  return launch(fp8_wire_amax_kernel, LaunchConfig{dim3(blocks_for(n)), dim3(kThreads), 0, stream, bytes, bytes},
                amax, n);
}

cudaError_t fp8_wire_scales(const float* amax, float* scale, float* inv, int64_t n, const math::Fp8WireScale& f,
                            cudaStream_t stream) {
  if (n < 0 || (n > 0 && (amax == nullptr || scale == nullptr || inv == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  return launch(fp8_wire_scales_kernel,
                LaunchConfig{dim3(blocks_for(n)), dim3(kThreads), 0, stream, bytes, 2 * bytes}, amax, scale, inv, n,
                f);
}

template <class T>
cudaError_t fp8_wire_amaxes(const T* x, const int64_t* bounds, int64_t segments, float* amax, cudaStream_t stream) {
  if (!valid_bounds(bounds, segments) || (segments > 0 && amax == nullptr) || (bounds[segments] > 0 && x == nullptr))
    return cudaErrorInvalidValue;
  if (segments == 0) return cudaSuccess;
  const uint64_t amax_bytes = static_cast<uint64_t>(segments) * sizeof(float);
  const cudaError_t e = launch(zero_kernel, LaunchConfig{dim3(blocks_for(segments)), dim3(kThreads), 0, stream, 0,
                                                         amax_bytes}, amax, segments);
  if (e != cudaSuccess) return e;
  unsigned* bits = reinterpret_cast<unsigned*>(amax);
  return for_tables(bounds, segments, [&](const SegmentTable& t, unsigned blocks, int64_t elements) {
    const LaunchConfig config{dim3(blocks), dim3(kPackThreads), 0, stream,
                              static_cast<uint64_t>(elements) * sizeof(T), static_cast<uint64_t>(t.count) * 4};
    return launch(wire_amax_kernel<T>, config, x, t, bits);
  });
}

template <class T>
cudaError_t fp8_wire_quantize(const T* x, const int64_t* bounds, int64_t segments, const float* scale, f8e4m3* codes,
                              cudaStream_t stream) {
  if (!valid_bounds(bounds, segments) || (segments > 0 && bounds[segments] > 0 &&
                                          (x == nullptr || scale == nullptr || codes == nullptr)))
    return cudaErrorInvalidValue;
  return for_tables(bounds, segments, [&](const SegmentTable& t, unsigned blocks, int64_t elements) {
    const LaunchConfig config{dim3(blocks), dim3(kPackThreads), 0, stream,
                              static_cast<uint64_t>(elements) * sizeof(T) + static_cast<uint64_t>(t.count) * 4,
                              static_cast<uint64_t>(elements)};
    return launch(wire_map_kernel<T, f8e4m3, QuantizeE4M3>, config, x, t, scale, codes, QuantizeE4M3{});
  });
}

template <class Out>
cudaError_t fp8_wire_dequantize(const f8e4m3* codes, const int64_t* bounds, int64_t segments, const float* inv,
                                Out* out, cudaStream_t stream) {
  if (!valid_bounds(bounds, segments) || (segments > 0 && bounds[segments] > 0 &&
                                          (codes == nullptr || inv == nullptr || out == nullptr)))
    return cudaErrorInvalidValue;
  return for_tables(bounds, segments, [&](const SegmentTable& t, unsigned blocks, int64_t elements) {
    const LaunchConfig config{dim3(blocks), dim3(kPackThreads), 0, stream,
                              static_cast<uint64_t>(elements) + static_cast<uint64_t>(t.count) * 4,
                              static_cast<uint64_t>(elements) * sizeof(Out)};
    return launch(wire_map_kernel<f8e4m3, Out, DequantizeE4M3<Out>>, config, codes, t, inv, out,
                  DequantizeE4M3<Out>{});
  });
}

#define MPT_INSTANTIATE(T)                                                                                          \
  template cudaError_t fp8_wire_amaxes<T>(const T*, const int64_t*, int64_t, float*, cudaStream_t);                 \
  template cudaError_t fp8_wire_quantize<T>(const T*, const int64_t*, int64_t, const float*, f8e4m3*, cudaStream_t); \
  template cudaError_t fp8_wire_dequantize<T>(const f8e4m3*, const int64_t*, int64_t, const float*, T*, cudaStream_t);
MPT_INSTANTIATE(float)
MPT_INSTANTIATE(f16)
MPT_INSTANTIATE(bf16)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
