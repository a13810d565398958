// kernels/cuda/quantize.cu: FP8 amax, scales, per-tensor quantize, cast + transpose (+ dbias), column sums and dequantize kernels (math from kernels/math/quantize.h; block scaling in quantize_block.cu).
#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/byte_tile.cuh"
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/partial_sums.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/math/quantize.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kTile = 32;        // cast + transpose: 32 x 32 tiles, 32 x 8 threads, 4 rows per thread
constexpr int kTileRowsPerPass = 8;

using UMaxOp = math::AmaxBitsMax;

__global__ void zero_kernel(unsigned* bits) { *bits = 0; }

// Output amax buffers are float; the kernels accumulate their bits (non-negative floats order like ints).
inline unsigned* amax_bits_ptr(float* amax) { return reinterpret_cast<unsigned*>(amax); }

cudaError_t zero_amax(float* amax, cudaStream_t stream) {
  return launch(zero_kernel, LaunchConfig{dim3(1), dim3(1), 0, stream, 0, sizeof(float)}, amax_bits_ptr(amax));
}

template <class T, bool kVec, bool kGelu>
__global__ void __launch_bounds__(kPackThreads) amax_kernel(const T* x, int64_t n, unsigned* out, bool ignore_nan) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned m = 0;
  if constexpr (kVec) {
    const int64_t packs = n / 8;
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack8<T> a = load8(x + i * 8);
#pragma unroll
      for (int k = 0; k < 8; ++k) m = UMaxOp{}(m, math::amax_bits(math::quantize_input<kGelu>(a.v[k]), ignore_nan));
    }
    const int64_t tail = packs * 8 + tid;
    if (tail < n) m = UMaxOp{}(m, math::amax_bits(math::quantize_input<kGelu>(x[tail]), ignore_nan));
  } else {
    for (int64_t i = tid; i < n; i += stride) {
      m = UMaxOp{}(m, math::amax_bits(math::quantize_input<kGelu>(x[i]), ignore_nan));
    }
  }
  block_amax_to(m, out);
}

// One thread per column of one 32-row tile (consecutive threads read consecutive columns of a row): its sum top to
// bottom, as quantize_transpose_kernel's fused dbias makes it.
template <class T>
__global__ void __launch_bounds__(kPackThreads) column_partials_kernel(const T* x, int64_t rows, int64_t cols,
                                                                       int64_t col_blocks, float* partial) {
  const int64_t tile = blockIdx.x / col_blocks;
  const int64_t c = (blockIdx.x % col_blocks) * kPackThreads + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = tile * kTile;
  float sum = 0.0f;
  for (int64_t r = r0; r < rows && r < r0 + kTile; ++r) sum += scalar_cast<float>(x[r * cols + c]);
  partial[tile * cols + c] = sum;
}

// out[c] = the column's tile partials summed in math::partial_groups' two levels, one rounding (math::kDbiasTileRows).
template <class Out>
__global__ void __launch_bounds__(kPartialThreads)
    dbias_finish_kernel(const float* partial, int64_t tiles, int64_t cols, Out* out) {
  __shared__ float groups[math::kPartialGroups][kPartialCols];
  const float sum = finish_partial_sum(partial, tiles, cols, cols, groups);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kPartialCols + threadIdx.x;
  if (threadIdx.y == 0 && c < cols) out[c] = scalar_cast<Out>(sum);
}

struct DelayedTable {
  static constexpr int kMax = 3072 / sizeof(DelayedUpdateEntry);  // keeps the arguments under 4 KiB
  DelayedUpdateEntry entries[kMax];
  int32_t count;
};

// One thread per tensor: its history rolls in place (sequential over the history, as the CPU loop).
__global__ void delayed_update_kernel(const DelayedTable table) {
  const int k = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (k >= table.count) return;
  const DelayedUpdateEntry e = table.entries[k];
  math::delayed_scaling_update(e.update, e.history, *e.amax, e.scale, e.scale_inv);
}

// *into = max(*into, *amax) for non-negative, non-NaN amaxes (their bits order like integers).
__global__ void fold_amax_kernel(const float* amax, float* into) { *into = fmaxf(*into, *amax); }

__global__ void scale_kernel(const float* amax, float* scale, float* scale_inv, math::ScaleFromAmax f) {
  const float s = f(*amax);
  *scale = s;
  if (scale_inv != nullptr) *scale_inv = math::reciprocal(s);
}

template <class Q, class T>
struct QuantizeParams {
  const T* x;
  Q* q;
  int64_t n;
  const float* scale;
  float* scale_inv;  // optional
  unsigned* amax;    // optional, zeroed before the launch
  Fp8Saturation sat;
  bool ignore_nan;   // the amax skips NaN elements
};

template <class Q, class T, bool kVec, bool kGelu>
__global__ void __launch_bounds__(kPackThreads) quantize_kernel(QuantizeParams<Q, T> p) {
  const float s = *p.scale;
  if (p.scale_inv != nullptr && blockIdx.x == 0 && threadIdx.x == 0) *p.scale_inv = math::reciprocal(s);
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned m = 0;
  if constexpr (kVec) {
    const int64_t packs = p.n / 8;
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack8<T> a = load8(p.x + i * 8);
      Pack8<Q> b;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const T v = math::quantize_input<kGelu>(a.v[k]);
        m = UMaxOp{}(m, math::amax_bits(v, p.ignore_nan));
        b.v[k] = math::quantize_value<Q>(v, s, p.sat);
      }
      store8(p.q + i * 8, b);
    }
    const int64_t tail = packs * 8 + tid;
    if (tail < p.n) {
      const T v = math::quantize_input<kGelu>(p.x[tail]);
      m = UMaxOp{}(m, math::amax_bits(v, p.ignore_nan));
      p.q[tail] = math::quantize_value<Q>(v, s, p.sat);
    }
  } else {
    for (int64_t i = tid; i < p.n; i += stride) {
      const T v = math::quantize_input<kGelu>(p.x[i]);
      m = UMaxOp{}(m, math::amax_bits(v, p.ignore_nan));
      p.q[i] = math::quantize_value<Q>(v, s, p.sat);
    }
  }
  if (p.amax != nullptr) block_amax_to(m, p.amax);
}

template <class Q, class T>
struct TransposeParams {
  const T* x;
  Q* q;
  Q* qt;
  int64_t rows, cols, col_tiles;
  const float* scale;
  float* scale_inv;  // optional
  unsigned* amax;    // optional, zeroed before the launch (or folded into)
  Fp8Saturation sat;
  bool ignore_nan;
  float* dbias_partial;  // optional [row tiles, cols]: each tile's column sums
};
static_assert(kTile == math::kDbiasTileRows, "the fused dbias sums the cast + transpose tiles");

// One 32 x 32 tile per block: coalesced reads of x and writes of q along rows, the codes staged in shared
// memory (33-byte pitch: the column reads hit 32 different banks), then coalesced writes of qt along its rows.
template <class Q, class T, bool kGelu>
__global__ void __launch_bounds__(kTile * kTileRowsPerPass) quantize_transpose_kernel(TransposeParams<Q, T> p) {
  __shared__ uint8_t tile[kTile][kTile + 1];
  __shared__ float values[kTile][kTile + 1];  // the tile's inputs, for the fused dbias
  const float s = *p.scale;
  if (p.scale_inv != nullptr && blockIdx.x == 0 && threadIdx.x == 0 && threadIdx.y == 0) {
    *p.scale_inv = math::reciprocal(s);
  }
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.col_tiles) * kTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % p.col_tiles) * kTile;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  unsigned m = 0;
  for (int k = ty; k < kTile; k += kTileRowsPerPass) {
    const int64_t r = r0 + k, c = c0 + tx;
    if (r < p.rows && c < p.cols) {
      const T v = math::quantize_input<kGelu>(p.x[r * p.cols + c]);
      m = UMaxOp{}(m, math::amax_bits(v, p.ignore_nan));
      const Q code = math::quantize_value<Q>(v, s, p.sat);
      p.q[r * p.cols + c] = code;
      tile[k][tx] = code.bits;
      if (p.dbias_partial != nullptr) values[k][tx] = scalar_cast<float>(v);
    }
  }
  __syncthreads();
  if (p.dbias_partial != nullptr && ty == 0 && c0 + tx < p.cols) {  // the tile's column sums, top to bottom
    float sum = 0.0f;
    for (int k = 0; k < kTile && r0 + k < p.rows; ++k) sum += values[k][tx];
    p.dbias_partial[(r0 / kTile) * p.cols + c0 + tx] = sum;
  }
  for (int k = ty; k < kTile; k += kTileRowsPerPass) {
    const int64_t c = c0 + k, r = r0 + tx;  // qt row c, column r
    if (c < p.cols && r < p.rows) p.qt[c * p.rows + r] = Q::from_bits(tile[tx][k]);
  }
  if (p.amax != nullptr) block_amax_to(m, p.amax);
}

// The vectorised cast + transpose (byte_tile.cuh): x read and q written eight elements at a time (16-byte loads of
// f16/bf16, two of float; 8-byte code stores), the codes staged, qt written 16 codes per thread. Four times the bytes
// in flight per thread of the scalar kernel above, a quarter of its blocks (and of their amax atomics). Needs
// cols % 8 == 0, rows % 16 == 0 and aligned pointers (quantize_transpose checks). The fused dbias keeps
// math::kDbiasTileRows-row partials summed top to bottom, as the scalar kernel and the CPU.
template <class Q, class T, bool kDbias, bool kGelu>
__global__ void __launch_bounds__(kByteTileThreads) quantize_transpose_vec_kernel(TransposeParams<Q, T> p) {
  static_assert(!(kDbias && kGelu), "the fused dbias sums a gradient, which no GELU precedes");
  static_assert(sizeof(Pack8<Q>) == sizeof(uint64_t));
  __shared__ __align__(16) ByteTile tile;
  __shared__ float values[kDbias ? kByteTile : 1][kDbias ? kByteTile + 1 : 1];  // the tile's inputs, for the dbias
  const float s = *p.scale;
  const int tid = static_cast<int>(threadIdx.x);
  if (p.scale_inv != nullptr && blockIdx.x == 0 && tid == 0) *p.scale_inv = math::reciprocal(s);
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.col_tiles) * kByteTile;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % p.col_tiles) * kByteTile;
  const int tc = (tid % kByteTileLanesPerRow) * 8;
  unsigned m = 0;
  for (int tr = tid / kByteTileLanesPerRow; tr < kByteTile; tr += kByteTileRowsPerPass) {
    const int64_t r = r0 + tr, c = c0 + tc;
    if (r < p.rows && c < p.cols) {  // cols % 8 == 0: the eight are all inside
      const Pack8<T> a = load8(p.x + r * p.cols + c);
      Pack8<Q> b;
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        const T v = math::quantize_input<kGelu>(a.v[k]);
        m = UMaxOp{}(m, math::amax_bits(v, p.ignore_nan));
        b.v[k] = math::quantize_value<Q>(v, s, p.sat);
        if constexpr (kDbias) values[tr][tc + k] = scalar_cast<float>(v);
      }
      store8(p.q + r * p.cols + c, b);
      stage8(tile, tr, tc, *reinterpret_cast<const uint64_t*>(&b));
    }
  }
  __syncthreads();
  if constexpr (kDbias) {
    // 64 threads, one column each: the tile's two 32-row partials, top to bottom.
    if (tid < kByteTile && c0 + tid < p.cols) {
      for (int h = 0; h < kByteTile / kTile && r0 + h * kTile < p.rows; ++h) {
        float sum = 0.0f;
        for (int k = h * kTile; k < (h + 1) * kTile && r0 + k < p.rows; ++k) sum += values[k][tid];
        p.dbias_partial[(r0 / kTile + h) * p.cols + c0 + tid] = sum;
      }
    }
  }
  store_transposed16(tile, reinterpret_cast<uint8_t*>(p.qt), p.rows, p.cols, p.rows, r0, c0);
  if (p.amax != nullptr) block_amax_to(m, p.amax);
}

template <class Out, class Q, bool kVec>
__global__ void __launch_bounds__(kPackThreads) dequantize_kernel(const Q* q, Out* out, int64_t n, const float* scale_inv) {
  const float si = *scale_inv;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const int64_t packs = n / 8;
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack8<Q> a = load8(q + i * 8);
      Pack8<Out> b;
#pragma unroll
      for (int k = 0; k < 8; ++k) b.v[k] = math::dequantize_value<Out>(a.v[k], si);
      store8(out + i * 8, b);
    }
    const int64_t tail = packs * 8 + tid;
    if (tail < n) out[tail] = math::dequantize_value<Out>(q[tail], si);
  } else {
    for (int64_t i = tid; i < n; i += stride) out[i] = math::dequantize_value<Out>(q[i], si);
  }
}

}  // namespace

template <class T>
cudaError_t amax(const T* x, int64_t n, float* amax, cudaStream_t stream, bool ignore_nan, bool gelu) {
  if (n < 0 || amax == nullptr || (n > 0 && x == nullptr)) return cudaErrorInvalidValue;
  cudaError_t e = zero_amax(amax, stream);
  if (e != cudaSuccess || n == 0) return e;
  const bool vec = pack8_aligned(x);
  // x; the amax's atomicMax reads and writes it.
  const LaunchConfig config{dim3(grid_stride_blocks(vec ? n / 8 : n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(T) + sizeof(float), sizeof(float)};
  if (gelu) {
    return vec ? launch(amax_kernel<T, true, true>, config, x, n, amax_bits_ptr(amax), ignore_nan)
               : launch(amax_kernel<T, false, true>, config, x, n, amax_bits_ptr(amax), ignore_nan);
  }
  return vec ? launch(amax_kernel<T, true, false>, config, x, n, amax_bits_ptr(amax), ignore_nan)
             : launch(amax_kernel<T, false, false>, config, x, n, amax_bits_ptr(amax), ignore_nan);
}

cudaError_t delayed_scaling_update(const DelayedUpdateEntry* entries, int64_t count, cudaStream_t stream) {
  if (count < 0 || (count > 0 && entries == nullptr)) return cudaErrorInvalidValue;
  DelayedTable table;
  for (int64_t k0 = 0; k0 < count; k0 += DelayedTable::kMax) {
    table.count = static_cast<int32_t>(count - k0 < DelayedTable::kMax ? count - k0 : DelayedTable::kMax);
    for (int32_t k = 0; k < table.count; ++k) table.entries[k] = entries[k0 + k];
    const unsigned blocks = static_cast<unsigned>((table.count + 63) / 64);
    // Per entry: the amax (unless it is history[0]) and the history read; the history rolled, scale and scale_inv
    // written (an amax of 0 leaves them alone: counted anyway).
    uint64_t read_bytes = 0, written_bytes = 0;
    for (int32_t k = 0; k < table.count; ++k) {
      const DelayedUpdateEntry& d = table.entries[k];
      const uint64_t history = static_cast<uint64_t>(d.update.len) * sizeof(float);
      read_bytes += history + (d.amax != d.history ? sizeof(float) : 0);
      written_bytes += history + 2 * sizeof(float);
    }
    const cudaError_t e = launch(delayed_update_kernel,
                                 LaunchConfig{dim3(blocks), dim3(64), 0, stream, read_bytes, written_bytes}, table);
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t fold_amax(const float* amax, float* into, cudaStream_t stream) {
  if (amax == nullptr || into == nullptr) return cudaErrorInvalidValue;
  return launch(fold_amax_kernel, LaunchConfig{dim3(1), dim3(1), 0, stream, 2 * sizeof(float), sizeof(float)}, amax,
                into);
}

cudaError_t scale_from_amax(const float* amax, float* scale, float* scale_inv, const math::ScaleFromAmax& f,
                            cudaStream_t stream) {
  if (amax == nullptr || scale == nullptr) return cudaErrorInvalidValue;
  return launch(scale_kernel,
                LaunchConfig{dim3(1), dim3(1), 0, stream, sizeof(float),
                             sizeof(float) + (scale_inv != nullptr ? sizeof(float) : 0)},
                amax, scale, scale_inv, f);
}

template <class Q, class T>
cudaError_t quantize(const T* x, Q* q, int64_t n, const QuantizeArgs& args, cudaStream_t stream) {
  if (n < 0 || args.scale == nullptr || (n > 0 && (x == nullptr || q == nullptr))) return cudaErrorInvalidValue;
  if (args.amax != nullptr && !args.amax_accumulate) {
    const cudaError_t e = zero_amax(args.amax, stream);
    if (e != cudaSuccess) return e;
  }
  const bool vec = pack8_aligned(x) && pack8_aligned(q);
  const QuantizeParams<Q, T> p{x, q, n, args.scale, args.scale_inv, args.amax ? amax_bits_ptr(args.amax) : nullptr,
                               args.sat, args.amax_ignore_nan};
  // x and the scale read, q written, scale_inv when given; the amax's atomicMax reads and writes it.
  const uint64_t amax_bytes = args.amax != nullptr ? sizeof(float) : 0;
  const LaunchConfig config{dim3(grid_stride_blocks(vec ? n / 8 : n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(T) + sizeof(float) + amax_bytes,
                            static_cast<uint64_t>(n) * sizeof(Q) + (args.scale_inv != nullptr ? sizeof(float) : 0) +
                                amax_bytes};
  if (args.gelu) {
    return vec ? launch(quantize_kernel<Q, T, true, true>, config, p)
               : launch(quantize_kernel<Q, T, false, true>, config, p);
  }
  return vec ? launch(quantize_kernel<Q, T, true, false>, config, p)
             : launch(quantize_kernel<Q, T, false, false>, config, p);
}

template <class Q, class T>
cudaError_t quantize_transpose(const T* x, Q* q, Q* qt, math::Dims2 dims, const QuantizeArgs& args,
                               cudaStream_t stream) {
  if (dims.rows < 0 || dims.cols < 0 || args.scale == nullptr || (args.gelu && args.dbias_partial != nullptr))
    return cudaErrorInvalidValue;
  const int64_t n = dims.rows * dims.cols;
  if (n > 0 && (x == nullptr || q == nullptr || qt == nullptr)) return cudaErrorInvalidValue;
  if (args.amax != nullptr && !args.amax_accumulate) {
    const cudaError_t e = zero_amax(args.amax, stream);
    if (e != cudaSuccess) return e;
  }
  // The vectorised kernel where rows and pointers allow it (activations and gradients: tokens x features).
  const bool vec = dims.cols % 8 == 0 && dims.rows % 16 == 0 && pack8_aligned(x) && pack8_aligned(q) &&
                   reinterpret_cast<uintptr_t>(qt) % 16 == 0;
  const int64_t tile = vec ? kByteTile : kTile;
  const int64_t row_tiles = (dims.rows + tile - 1) / tile, col_tiles = (dims.cols + tile - 1) / tile;
  const int64_t tiles = row_tiles * col_tiles;
  if (tiles > 2147483647) return cudaErrorInvalidValue;
  const TransposeParams<Q, T> p{x,          q,         qt,
                                dims.rows,  dims.cols, col_tiles,
                                args.scale, args.scale_inv, args.amax ? amax_bits_ptr(args.amax) : nullptr,
                                args.sat,   args.amax_ignore_nan, args.dbias_partial};
  // An empty matrix still runs one (idle) block, so scale_inv is written.
  // x and the scale read, q and qt written, scale_inv when given; the amax's atomicMax reads and writes it.
  const uint64_t amax_bytes = args.amax != nullptr ? sizeof(float) : 0;
  const uint64_t partial_bytes =
      args.dbias_partial != nullptr ? static_cast<uint64_t>(math::dbias_tiles(dims.rows) * dims.cols) * sizeof(float) : 0;
  const uint64_t read_bytes = static_cast<uint64_t>(n) * sizeof(T) + sizeof(float) + amax_bytes;
  const uint64_t written_bytes = 2 * static_cast<uint64_t>(n) * sizeof(Q) +
                                 (args.scale_inv != nullptr ? sizeof(float) : 0) + amax_bytes + partial_bytes;
  const dim3 grid(static_cast<unsigned>(tiles > 0 ? tiles : 1));
  if (vec) {
    const LaunchConfig config{grid, dim3(kByteTileThreads), 0, stream, read_bytes, written_bytes};
    if (args.dbias_partial != nullptr) return launch(quantize_transpose_vec_kernel<Q, T, true, false>, config, p);
    return args.gelu ? launch(quantize_transpose_vec_kernel<Q, T, false, true>, config, p)
                     : launch(quantize_transpose_vec_kernel<Q, T, false, false>, config, p);
  }
  const LaunchConfig config{grid, dim3(kTile, kTileRowsPerPass), 0, stream, read_bytes, written_bytes};
  return args.gelu ? launch(quantize_transpose_kernel<Q, T, true>, config, p)
                   : launch(quantize_transpose_kernel<Q, T, false>, config, p);
}

template <class T>
cudaError_t column_partials(const T* x, math::Dims2 dims, float* partial, cudaStream_t stream) {
  if (dims.rows < 0 || dims.cols < 0 || (dims.rows > 0 && dims.cols > 0 && (x == nullptr || partial == nullptr))) {
    return cudaErrorInvalidValue;
  }
  const int64_t tiles = math::dbias_tiles(dims.rows), col_blocks = (dims.cols + kPackThreads - 1) / kPackThreads;
  if (tiles == 0 || dims.cols == 0) return cudaSuccess;
  if (tiles * col_blocks > 2147483647) return cudaErrorInvalidValue;
  const LaunchConfig config{dim3(static_cast<unsigned>(tiles * col_blocks)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(dims.rows * dims.cols) * sizeof(T),
                            static_cast<uint64_t>(tiles * dims.cols) * sizeof(float)};
  return launch(column_partials_kernel<T>, config, x, dims.rows, dims.cols, col_blocks, partial);
}

template <class Out>
cudaError_t dbias_finish(const float* partial, math::Dims2 dims, Out* out, cudaStream_t stream) {
  if (dims.rows < 0 || dims.cols < 0 || (dims.cols > 0 && out == nullptr) ||
      (dims.rows > 0 && dims.cols > 0 && partial == nullptr)) {
    return cudaErrorInvalidValue;
  }
  if (dims.cols == 0) return cudaSuccess;
  const int64_t tiles = math::dbias_tiles(dims.rows), blocks = partial_sums_blocks(dims.cols);
  if (blocks > 2147483647) return cudaErrorInvalidValue;
  // A thread per column and group of tiles (partial_sums.cuh).
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), partial_sums_block(), 0, stream,
                            static_cast<uint64_t>(tiles * dims.cols) * sizeof(float),
                            static_cast<uint64_t>(dims.cols) * sizeof(Out)};
  return launch(dbias_finish_kernel<Out>, config, partial, tiles, dims.cols, out);
}

template <class Out, class Q>
cudaError_t dequantize(const Q* q, Out* out, int64_t n, const float* scale_inv, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (q == nullptr || out == nullptr || scale_inv == nullptr) return cudaErrorInvalidValue;
  const bool vec = pack8_aligned(q) && pack8_aligned(out);
  const LaunchConfig config{dim3(grid_stride_blocks(vec ? n / 8 : n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(Q) + sizeof(float),
                            static_cast<uint64_t>(n) * sizeof(Out)};
  return vec ? launch(dequantize_kernel<Out, Q, true>, config, q, out, n, scale_inv)
             : launch(dequantize_kernel<Out, Q, false>, config, q, out, n, scale_inv);
}

#define MPT_INSTANTIATE_QT(Q, T)                                                                                   \
  template cudaError_t quantize<Q, T>(const T*, Q*, int64_t, const QuantizeArgs&, cudaStream_t);                 \
  template cudaError_t quantize_transpose<Q, T>(const T*, Q*, Q*, math::Dims2, const QuantizeArgs&, cudaStream_t); \
  template cudaError_t dequantize<T, Q>(const Q*, T*, int64_t, const float*, cudaStream_t);
#define MPT_INSTANTIATE_T(T)                                               \
  template cudaError_t amax<T>(const T*, int64_t, float*, cudaStream_t, bool, bool); \
  MPT_INSTANTIATE_QT(f8e4m3, T)                                            \
  MPT_INSTANTIATE_QT(f8e5m2, T)
MPT_INSTANTIATE_T(float)
MPT_INSTANTIATE_T(f16)
MPT_INSTANTIATE_T(bf16)
template cudaError_t column_partials<float>(const float*, math::Dims2, float*, cudaStream_t);
template cudaError_t column_partials<f16>(const f16*, math::Dims2, float*, cudaStream_t);
template cudaError_t column_partials<bf16>(const bf16*, math::Dims2, float*, cudaStream_t);
template cudaError_t dbias_finish<float>(const float*, math::Dims2, float*, cudaStream_t);
template cudaError_t dbias_finish<f16>(const float*, math::Dims2, f16*, cudaStream_t);
template cudaError_t dbias_finish<bf16>(const float*, math::Dims2, bf16*, cudaStream_t);
#undef MPT_INSTANTIATE_T
#undef MPT_INSTANTIATE_QT

}  // namespace mpt::kernels::cuda
