// kernels/cuda/quantize_block.cu: FP8 block scaling's kernels: 1x128 and 128x128 quantization, x^T's 1x128 codes (+ dbias) from x in one pass, x's and x^T's together, block dequantization (math from kernels/math/quantize.h).
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/math/quantize.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

using UMaxOp = math::AmaxBitsMax;

template <class Q, class T>
struct TransposedBlockParams {
  const T* x;
  Q* q;               // [cols, rows]
  float* scale_inv;   // [cols, ceil(rows / 128)]
  int64_t rows, cols, col_tiles;
  math::ScaleFromAmax scaling;
  float* dbias_partial;  // optional [row tiles of 32, cols]: each 32-row tile's column sums
};

constexpr int kTransposedTileCols = 32;  // a 128 x 32 tile of x: 32 blocks of x^T's 1x128 layout
static_assert(math::kBlockCols % math::kDbiasTileRows == 0, "a 1x128 tile holds whole dbias tiles");

// One 128 x 32 tile of x per block (32 x 8 threads): coalesced reads of x rows into shared memory (33-float pitch),
// then warp w quantizes columns w, w + 8, ...: each lane 4 of the column's 128 rows, one warp amax, coalesced
// writes along q's row (x^T's row = x's column).
template <class Q, class T, bool kGelu>
__global__ void __launch_bounds__(kPackThreads) quantize_1x128_transposed_kernel(TransposedBlockParams<Q, T> p) {
  __shared__ float values[math::kBlockCols][kTransposedTileCols + 1];
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.col_tiles) * math::kBlockCols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % p.col_tiles) * kTransposedTileCols;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  for (int k = ty; k < math::kBlockCols; k += kPackThreads / 32) {
    const int64_t r = r0 + k, c = c0 + tx;
    if (r < p.rows && c < p.cols) values[k][tx] = scalar_cast<float>(math::quantize_input<kGelu>(p.x[r * p.cols + c]));
  }
  __syncthreads();
  constexpr int kDbiasTiles = math::kBlockCols / math::kDbiasTileRows;
  if (p.dbias_partial != nullptr && ty < kDbiasTiles && c0 + tx < p.cols &&
      r0 + ty * math::kDbiasTileRows < p.rows) {  // 32-row tile ty's column sum, top to bottom
    float sum = 0.0f;
    for (int k = ty * math::kDbiasTileRows; k < (ty + 1) * math::kDbiasTileRows && r0 + k < p.rows; ++k) {
      sum += values[k][tx];
    }
    p.dbias_partial[(r0 / math::kDbiasTileRows + ty) * p.cols + c0 + tx] = sum;
  }
  const int64_t groups = (p.rows + math::kBlockCols - 1) / math::kBlockCols;
  for (int j = ty; j < kTransposedTileCols && c0 + j < p.cols; j += kPackThreads / 32) {  // uniform per warp
    const int64_t c = c0 + j;
    unsigned m = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if (r0 + tx + 32 * k < p.rows) m = UMaxOp{}(m, math::abs_bits(values[tx + 32 * k][j]));
    }
    m = math::warp_allreduce(m, UMaxOp{});
    const float s = p.scaling(math::amax_from_bits(m));
    if (tx == 0) p.scale_inv[c * groups + r0 / math::kBlockCols] = math::reciprocal(s);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const int64_t r = r0 + tx + 32 * k;
      if (r < p.rows) p.q[c * p.rows + r] = math::quantize_value<Q>(values[tx + 32 * k][j], s, Fp8Saturation::Saturate);
    }
  }
}

template <class Q, class T>
struct BothBlockParams {
  const T* x;
  Q* q;                  // [rows, cols]
  float* scale_inv;      // [rows, ceil(cols / 128)]
  Q* qt;                 // [cols, rows]
  float* scale_inv_t;    // [cols, ceil(rows / 128)]
  int64_t rows, cols, col_tiles;
  math::ScaleFromAmax scaling;
  float* dbias_partial;  // optional [row tiles of 32, cols]: each 32-row tile's column sums
  const T* dgelu_aux;    // kDgelu: the pre-activation [rows, cols]; x * gelu'(it) is quantized
};

// What the both-ways kernel quantizes: x, gelu(x) (the FP8 MLP's hidden codes from its pre-activation) or
// x * gelu'(aux) (its dpre from dh and the pre-activation).
enum class Prologue { kNone, kGelu, kDgelu };

// The tile's pitch in elements: 4 bytes past a multiple of 128, so that a warp reading down a column (rows r, r + 1,
// ... at one column) meets 32 different banks.
template <class T>
inline constexpr int kBothPitch = math::kBlockCols + 4 / static_cast<int>(sizeof(T));

template <class T>
constexpr size_t both_tile_bytes() {
  return static_cast<size_t>(math::kBlockCols) * kBothPitch<T> * sizeof(T);
}

// x's 1x128 codes and x^T's from one read of x (and of the aux under kDgelu): one 128 x 128 tile per 256-thread block
// (32 x 8), staged in dynamic shared memory (33 KB for 2-byte x, 66 KB for f32). Warp w then quantizes rows w, w + 8,
// ... along the tile's 128 columns (quantize_1x128_kernel's blocks: one warp amax per row) and columns w, w + 8, ...
// down its 128 rows (quantize_1x128_transposed_kernel's), each code written coalesced; the dbias partials are the
// transposed kernel's.
template <class Q, class T, Prologue kPrologue>
__global__ void __launch_bounds__(kPackThreads) quantize_1x128_both_kernel(BothBlockParams<Q, T> p) {
  MPT_DYNAMIC_SHARED(T, tile);
  constexpr int kPitch = kBothPitch<T>, kWarps = kPackThreads / 32;
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / p.col_tiles) * math::kBlockCols;
  const int64_t c0 = static_cast<int64_t>(blockIdx.x % p.col_tiles) * math::kBlockCols;
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t tile_rows = p.rows - r0 < math::kBlockCols ? p.rows - r0 : math::kBlockCols;
  const int64_t tile_cols = p.cols - c0 < math::kBlockCols ? p.cols - c0 : math::kBlockCols;
  for (int k = ty; k < tile_rows; k += kWarps) {
    for (int j = tx; j < tile_cols; j += 32) {
      const int64_t i = (r0 + k) * p.cols + c0 + j;
      if constexpr (kPrologue == Prologue::kDgelu) {
        tile[k * kPitch + j] = math::dgelu_input(p.x[i], p.dgelu_aux[i]);
      } else {
        tile[k * kPitch + j] = math::quantize_input<kPrologue == Prologue::kGelu>(p.x[i]);
      }
    }
  }
  __syncthreads();
  // Rowwise: row r0 + k's block of columns c0 .. c0 + 127.
  const int64_t row_groups = (p.cols + math::kBlockCols - 1) / math::kBlockCols;
  for (int k = ty; k < tile_rows; k += kWarps) {  // uniform per warp
    unsigned m = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (tx + 32 * i < tile_cols) m = UMaxOp{}(m, math::abs_bits(tile[k * kPitch + tx + 32 * i]));
    }
    m = math::warp_allreduce(m, UMaxOp{});
    const float s = p.scaling(math::amax_from_bits(m));
    if (tx == 0) p.scale_inv[(r0 + k) * row_groups + c0 / math::kBlockCols] = math::reciprocal(s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int j = tx + 32 * i;
      if (j < tile_cols) {
        p.q[(r0 + k) * p.cols + c0 + j] = math::quantize_value<Q>(tile[k * kPitch + j], s, Fp8Saturation::Saturate);
      }
    }
  }
  // Columnwise: column c0 + j's block of rows r0 .. r0 + 127, a row of x^T.
  const int64_t col_groups = (p.rows + math::kBlockCols - 1) / math::kBlockCols;
  for (int j = ty; j < tile_cols; j += kWarps) {  // uniform per warp
    unsigned m = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      if (tx + 32 * i < tile_rows) m = UMaxOp{}(m, math::abs_bits(tile[(tx + 32 * i) * kPitch + j]));
    }
    m = math::warp_allreduce(m, UMaxOp{});
    const float s = p.scaling(math::amax_from_bits(m));
    const int64_t c = c0 + j;
    if (tx == 0) p.scale_inv_t[c * col_groups + r0 / math::kBlockCols] = math::reciprocal(s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int k = tx + 32 * i;
      if (k < tile_rows) {
        p.qt[c * p.rows + r0 + k] = math::quantize_value<Q>(tile[k * kPitch + j], s, Fp8Saturation::Saturate);
      }
    }
  }
  // The bias gradient's partials: each 32-row tile's column sums, top to bottom (the transposed kernel's order).
  if (p.dbias_partial != nullptr) {
    constexpr int kDbiasTiles = math::kBlockCols / math::kDbiasTileRows;
    for (int u = ty * 32 + tx; u < kDbiasTiles * math::kBlockCols; u += kPackThreads) {
      const int t = u / math::kBlockCols, j = u % math::kBlockCols;
      if (j >= tile_cols || t * math::kDbiasTileRows >= tile_rows) continue;
      float sum = 0.0f;
      for (int k = t * math::kDbiasTileRows; k < (t + 1) * math::kDbiasTileRows && k < tile_rows; ++k) {
        sum += scalar_cast<float>(tile[k * kPitch + j]);
      }
      p.dbias_partial[(r0 / math::kDbiasTileRows + t) * p.cols + c0 + j] = sum;
    }
  }
}

template <class Q, class T>
struct BlockParams {
  const T* x;
  Q* q;
  float* scale_inv;
  math::BlockScaleLayout layout;
  math::ScaleFromAmax scaling;
};

// 1x128: one warp per block of 128 columns of one row, 4 elements per lane (coalesced), held in registers.
template <class Q, class T, bool kGelu>
__global__ void __launch_bounds__(kPackThreads) quantize_1x128_kernel(BlockParams<Q, T> p) {
  const int64_t block = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t groups = p.layout.scale_cols();
  if (block >= p.layout.rows * groups) return;  // the whole warp leaves together
  const int64_t r = block / groups, c0 = (block % groups) * math::kBlockCols;
  const T* x = p.x + r * p.layout.cols;
  unsigned m = 0;
  T v[4] = {};  // the lanes past the row's end keep theirs unused
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t c = c0 + lane + 32 * k;
    if (c < p.layout.cols) {
      v[k] = math::quantize_input<kGelu>(x[c]);
      m = UMaxOp{}(m, math::abs_bits(v[k]));
    }
  }
  m = math::warp_allreduce(m, UMaxOp{});
  const float s = p.scaling(math::amax_from_bits(m));
  if (lane == 0) p.scale_inv[block] = math::reciprocal(s);
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    const int64_t c = c0 + lane + 32 * k;
    if (c < p.layout.cols) p.q[r * p.layout.cols + c] = math::quantize_value<Q>(v[k], s, Fp8Saturation::Saturate);
  }
}

// 128x128: one 256-thread block per tile (32 columns x 8 rows of threads, 64 elements each), two passes. With qt
// (kTranspose) the tile's codes also go to the transpose [cols, rows] (the dgrad operand W^T, which shares the tile's
// scale: scale_inv_t is scale_inv's transpose), through shared memory so that its rows are written coalesced.
template <class Q, class T, bool kTranspose>
__global__ void __launch_bounds__(kPackThreads)
    quantize_128x128_kernel(BlockParams<Q, T> p, Q* qt, float* scale_inv_t) {
  __shared__ unsigned scratch[math::kBlockReduceScratch];
  constexpr int kCodesPitch = math::kBlockCols + 4;  // a warp writing down a column of codes meets 32 banks
  __shared__ Q codes[kTranspose ? math::kBlockCols : 1][kTranspose ? kCodesPitch : 1];
  const int64_t groups = p.layout.scale_cols();
  const int64_t r0 = static_cast<int64_t>(blockIdx.x / groups) * 128, c0 = (blockIdx.x % groups) * math::kBlockCols;
  const int tx = static_cast<int>(threadIdx.x % 32), ty = static_cast<int>(threadIdx.x / 32);
  unsigned m = 0;
  for (int j = ty; j < 128; j += 8) {
    const int64_t r = r0 + j;
    for (int k = tx; k < 128; k += 32) {
      if (r < p.layout.rows && c0 + k < p.layout.cols) m = UMaxOp{}(m, math::abs_bits(p.x[r * p.layout.cols + c0 + k]));
    }
  }
  m = math::block_allreduce(m, UMaxOp{}, 0u, scratch);
  const float s = p.scaling(math::amax_from_bits(m));
  if (threadIdx.x == 0) p.scale_inv[blockIdx.x] = math::reciprocal(s);
  for (int j = ty; j < 128; j += 8) {
    const int64_t r = r0 + j;
    for (int k = tx; k < 128; k += 32) {
      const int64_t i = r * p.layout.cols + c0 + k;
      if (r < p.layout.rows && c0 + k < p.layout.cols) {
        p.q[i] = math::quantize_value<Q>(p.x[i], s, Fp8Saturation::Saturate);
        if constexpr (kTranspose) codes[k][j] = p.q[i];
      }
    }
  }
  if constexpr (kTranspose) {
    const int64_t row_tiles = p.layout.scale_rows();
    if (threadIdx.x == 0) scale_inv_t[(blockIdx.x % groups) * row_tiles + blockIdx.x / groups] = math::reciprocal(s);
    __syncthreads();
    for (int k = ty; k < 128 && c0 + k < p.layout.cols; k += 8) {  // row c0 + k of the transpose
      for (int j = tx; j < 128 && r0 + j < p.layout.rows; j += 32) qt[(c0 + k) * p.layout.rows + r0 + j] = codes[k][j];
    }
  }
}

template <class Out, class Q>
__global__ void __launch_bounds__(kPackThreads) dequantize_blockwise_kernel(const Q* q, Out* out, const float* scale_inv,
                                                                            math::BlockScaleLayout layout) {
  const int64_t n = layout.rows * layout.cols;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = math::dequantize_value<Out>(q[i], scale_inv[layout.scale_index(i / layout.cols, i % layout.cols)]);
  }
}

}  // namespace

template <class Q, class T>
cudaError_t quantize_blockwise(const T* x, Q* q, float* scale_inv, const math::BlockScaleLayout& layout,
                               const math::ScaleFromAmax& scaling, cudaStream_t stream, bool gelu) {
  if (layout.rows < 0 || layout.cols < 0 || (layout.block_rows != 1 && layout.block_rows != 128) ||
      (gelu && layout.block_rows != 1)) {
    return cudaErrorInvalidValue;
  }
  const int64_t blocks = layout.scale_rows() * layout.scale_cols();
  if (blocks == 0) return cudaSuccess;
  if (x == nullptr || q == nullptr || scale_inv == nullptr) return cudaErrorInvalidValue;
  const BlockParams<Q, T> p{x, q, scale_inv, layout, scaling};
  constexpr int64_t kWarpsPerBlock = kPackThreads / 32;
  const int64_t grid = layout.block_rows == 1 ? (blocks + kWarpsPerBlock - 1) / kWarpsPerBlock : blocks;
  if (grid > 2147483647) return cudaErrorInvalidValue;
  // x read (both passes: once), q and one scale_inv per block written.
  const uint64_t n = static_cast<uint64_t>(layout.rows) * static_cast<uint64_t>(layout.cols);
  const LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kPackThreads), 0, stream, n * sizeof(T),
                            n * sizeof(Q) + static_cast<uint64_t>(blocks) * sizeof(float)};
  if (layout.block_rows != 1) return launch(quantize_128x128_kernel<Q, T, false>, config, p, nullptr, nullptr);
  return gelu ? launch(quantize_1x128_kernel<Q, T, true>, config, p)
              : launch(quantize_1x128_kernel<Q, T, false>, config, p);
}

template <class Q, class T>
cudaError_t quantize_blockwise_128x128_both(const T* x, Q* q, float* scale_inv, Q* qt, float* scale_inv_t,
                                            const math::BlockScaleLayout& layout, const math::ScaleFromAmax& scaling,
                                            cudaStream_t stream) {
  if (layout.rows < 0 || layout.cols < 0 || layout.block_rows != 128) return cudaErrorInvalidValue;
  const int64_t blocks = layout.scale_rows() * layout.scale_cols();
  if (blocks == 0) return cudaSuccess;
  if (x == nullptr || q == nullptr || scale_inv == nullptr || qt == nullptr || scale_inv_t == nullptr) {
    return cudaErrorInvalidValue;
  }
  if (blocks > 2147483647) return cudaErrorInvalidValue;
  const BlockParams<Q, T> p{x, q, scale_inv, layout, scaling};
  // x read (both passes: once), both codes and one scale_inv per tile each way written.
  const uint64_t n = static_cast<uint64_t>(layout.rows) * static_cast<uint64_t>(layout.cols);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kPackThreads), 0, stream, n * sizeof(T),
                            2 * n * sizeof(Q) + 2 * static_cast<uint64_t>(blocks) * sizeof(float)};
  return launch(quantize_128x128_kernel<Q, T, true>, config, p, qt, scale_inv_t);
}

template <class Q, class T>
cudaError_t quantize_blockwise_1x128_transposed(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv,
                                                const math::ScaleFromAmax& scaling, cudaStream_t stream,
                                                float* dbias_partial, bool gelu) {
  if (rows < 0 || cols < 0 || (gelu && dbias_partial != nullptr)) return cudaErrorInvalidValue;
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (x == nullptr || q == nullptr || scale_inv == nullptr) return cudaErrorInvalidValue;
  const int64_t row_tiles = (rows + math::kBlockCols - 1) / math::kBlockCols;
  const int64_t col_tiles = (cols + kTransposedTileCols - 1) / kTransposedTileCols;
  if (row_tiles * col_tiles > 2147483647) return cudaErrorInvalidValue;
  const TransposedBlockParams<Q, T> p{x, q, scale_inv, rows, cols, col_tiles, scaling, dbias_partial};
  // x read once, q and one scale_inv per 1x128 block written (and the dbias partials when asked).
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  const uint64_t partials = dbias_partial != nullptr ? static_cast<uint64_t>(math::dbias_tiles(rows) * cols) : 0;
  const LaunchConfig config{dim3(static_cast<unsigned>(row_tiles * col_tiles)), dim3(32, kPackThreads / 32), 0, stream,
                            n * sizeof(T),
                            n * sizeof(Q) + (static_cast<uint64_t>(cols * row_tiles) + partials) * sizeof(float)};
  return gelu ? launch(quantize_1x128_transposed_kernel<Q, T, true>, config, p)
              : launch(quantize_1x128_transposed_kernel<Q, T, false>, config, p);
}

template <class Q, class T>
cudaError_t quantize_blockwise_1x128_both(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv, Q* qt,
                                          float* scale_inv_t, const math::ScaleFromAmax& scaling, cudaStream_t stream,
                                          float* dbias_partial, bool gelu, const T* dgelu_aux) {
  if (rows < 0 || cols < 0 || (gelu && (dbias_partial != nullptr || dgelu_aux != nullptr))) {
    return cudaErrorInvalidValue;
  }
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (x == nullptr || q == nullptr || scale_inv == nullptr || qt == nullptr || scale_inv_t == nullptr) {
    return cudaErrorInvalidValue;
  }
  const int64_t row_tiles = (rows + math::kBlockCols - 1) / math::kBlockCols;
  const int64_t col_tiles = (cols + math::kBlockCols - 1) / math::kBlockCols;
  if (row_tiles * col_tiles > 2147483647) return cudaErrorInvalidValue;
  const BothBlockParams<Q, T> p{x, q, scale_inv, qt, scale_inv_t, rows, cols, col_tiles, scaling, dbias_partial,
                                dgelu_aux};
  // x (and the aux) read once; both codes, one scale_inv per 1x128 block each way (and the dbias partials) written.
  const uint64_t n = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols);
  const uint64_t scales = static_cast<uint64_t>(rows * col_tiles + cols * row_tiles);
  const uint64_t partials = dbias_partial != nullptr ? static_cast<uint64_t>(math::dbias_tiles(rows) * cols) : 0;
  const LaunchConfig config{dim3(static_cast<unsigned>(row_tiles * col_tiles)), dim3(32, kPackThreads / 32),
                            both_tile_bytes<T>(), stream, n * sizeof(T) * (dgelu_aux != nullptr ? 2 : 1),
                            2 * n * sizeof(Q) + (scales + partials) * sizeof(float)};
  if (dgelu_aux != nullptr) return launch(quantize_1x128_both_kernel<Q, T, Prologue::kDgelu>, config, p);
  return gelu ? launch(quantize_1x128_both_kernel<Q, T, Prologue::kGelu>, config, p)
              : launch(quantize_1x128_both_kernel<Q, T, Prologue::kNone>, config, p);
}

template <class Out, class Q>
cudaError_t dequantize_blockwise(const Q* q, Out* out, const float* scale_inv, const math::BlockScaleLayout& layout,
                                 cudaStream_t stream) {
  if (layout.rows < 0 || layout.cols < 0 || (layout.block_rows != 1 && layout.block_rows != 128)) {
    return cudaErrorInvalidValue;
  }
  const int64_t n = layout.rows * layout.cols;
  if (n == 0) return cudaSuccess;
  if (q == nullptr || out == nullptr || scale_inv == nullptr) return cudaErrorInvalidValue;
  // q, and every block's scale_inv once.
  const uint64_t scales = static_cast<uint64_t>(layout.scale_rows()) * static_cast<uint64_t>(layout.scale_cols());
  const LaunchConfig config{dim3(grid_stride_blocks(n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(Q) + scales * sizeof(float),
                            static_cast<uint64_t>(n) * sizeof(Out)};
  return launch(dequantize_blockwise_kernel<Out, Q>, config, q, out, scale_inv, layout);
}

#define MPT_INSTANTIATE_QT(Q, T)                                                                                   \
  template cudaError_t quantize_blockwise<Q, T>(const T*, Q*, float*, const math::BlockScaleLayout&,              \
                                                const math::ScaleFromAmax&, cudaStream_t, bool);                  \
  template cudaError_t quantize_blockwise_1x128_transposed<Q, T>(const T*, int64_t, int64_t, Q*, float*,          \
                                                                 const math::ScaleFromAmax&, cudaStream_t, float*, \
                                                                 bool);                                           \
  template cudaError_t quantize_blockwise_128x128_both<Q, T>(const T*, Q*, float*, Q*, float*,                     \
                                                             const math::BlockScaleLayout&,                        \
                                                             const math::ScaleFromAmax&, cudaStream_t);            \
  template cudaError_t quantize_blockwise_1x128_both<Q, T>(const T*, int64_t, int64_t, Q*, float*, Q*, float*,      \
                                                           const math::ScaleFromAmax&, cudaStream_t, float*, bool,  \
                                                           const T*);                                               \
  template cudaError_t dequantize_blockwise<T, Q>(const Q*, T*, const float*, const math::BlockScaleLayout&,       \
                                                  cudaStream_t);
#define MPT_INSTANTIATE_T(T) \
  MPT_INSTANTIATE_QT(f8e4m3, T) \
  MPT_INSTANTIATE_QT(f8e5m2, T)
MPT_INSTANTIATE_T(float)
MPT_INSTANTIATE_T(f16)
MPT_INSTANTIATE_T(bf16)
#undef MPT_INSTANTIATE_T
#undef MPT_INSTANTIATE_QT

}  // namespace mpt::kernels::cuda
