// kernels/cpu/quantize.cpp: FP8 amax, quantize, cast + transpose, block quantize and dequantize on the CPU (OpenMP, AVX-512 encoder of fp8_simd.h).
#include "kernels/cpu/quantize.h"

#include <emmintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/fp8_simd.h"

namespace mpt::kernels::cpu {
namespace {

constexpr int64_t kChunk = int64_t(1) << 14;        // elements per OpenMP work item
constexpr int64_t kParallelMin = int64_t(1) << 16;  // below this, one thread
constexpr int64_t kTile = 64;                       // cast + transpose tile (64 x 64 codes: 4 KiB, L1-resident)
constexpr int64_t kStripCols = 8192;                // cast + transpose work item: kTile rows x up to 8192 columns
constexpr int64_t kRun = 2048;                      // dequantize staging buffer, floats (8 KiB)

bool use_avx512() { return vector_conversions_enabled() && convert_isa().avx512; }

// ---- runs of contiguous elements: the raw max |x| bits (NaN not yet canonical), optionally quantizing

template <class T>
uint32_t amax_bits_scalar(const T* x, int64_t n) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, math::abs_bits(x[i]));
  return m;
}

template <class T>
MPT_TARGET_AVX512 uint32_t amax_bits_avx512(const T* x, int64_t n) {
  fp8_simd::U32x16 m0{}, m1{};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    m0 = fp8_simd::max_abs_x16(m0, fp8_simd::load_x16(x + i));
    m1 = fp8_simd::max_abs_x16(m1, fp8_simd::load_x16(x + i + 16));
  }
  for (; i < n; i += 16) m0 = fp8_simd::max_abs_x16(m0, fp8_simd::load_x16(x + i, fp8_simd::lanes_for(n - i)));
  return std::max(fp8_simd::reduce_max(m0), fp8_simd::reduce_max(m1));
}

template <class Q, class T>
uint32_t encode_scalar(const T* x, Q* q, int64_t n, float scale, Fp8Saturation sat) {
  uint32_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    m = std::max(m, math::abs_bits(x[i]));
    q[i] = math::quantize_value<Q>(x[i], scale, sat);
  }
  return m;
}

// The same multiply (one IEEE float product) and the same rounding as quantize_value, 16 lanes at a time;
// the running max |x| bits stay in a vector register (m).
template <class Q, class T>
MPT_TARGET_AVX512 inline void encode_avx512_acc(const T* x, Q* q, int64_t n, float scale, Fp8Saturation sat,
                                                fp8_simd::U32x16& m) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const fp8_simd::U32x16 v = fp8_simd::load_x16(x + i);
    m = fp8_simd::max_abs_x16(m, v);
    fp8_simd::store_x16(q + i, fp8_simd::encode_x16<Q>(fp8_simd::scale_x16(v, scale), sat));
  }
  if (i < n) {
    const __mmask16 lanes = fp8_simd::lanes_for(n - i);
    const fp8_simd::U32x16 v = fp8_simd::load_x16(x + i, lanes);
    m = fp8_simd::max_abs_x16(m, v);
    fp8_simd::store_x16(q + i, fp8_simd::encode_x16<Q>(fp8_simd::scale_x16(v, scale), sat), lanes);
  }
}

template <class Q, class T>
MPT_TARGET_AVX512 uint32_t encode_avx512(const T* x, Q* q, int64_t n, float scale, Fp8Saturation sat) {
  fp8_simd::U32x16 m{};
  encode_avx512_acc(x, q, n, scale, sat, m);
  return fp8_simd::reduce_max(m);
}

template <class T>
uint32_t amax_bits(const T* x, int64_t n, bool simd) {
  return simd ? amax_bits_avx512(x, n) : amax_bits_scalar(x, n);
}

template <class Q, class T>
uint32_t encode(const T* x, Q* q, int64_t n, float scale, Fp8Saturation sat, bool simd) {
  return simd ? encode_avx512(x, q, n, scale, sat) : encode_scalar(x, q, n, scale, sat);
}

// Rows [0, h) x columns [0, w): q = fp8(x * scale), x and q with row strides ldx and ldq; returns the max |x| bits.
template <class Q, class T>
MPT_TARGET_AVX512 uint32_t encode_rows_avx512(const T* x, int64_t ldx, Q* q, int64_t ldq, int64_t h, int64_t w,
                                              float scale, Fp8Saturation sat) {
  fp8_simd::U32x16 m{};
  for (int64_t r = 0; r < h; ++r) encode_avx512_acc(x + r * ldx, q + r * ldq, w, scale, sat, m);
  return fp8_simd::reduce_max(m);
}

template <class Q, class T>
uint32_t encode_rows(const T* x, int64_t ldx, Q* q, int64_t ldq, int64_t h, int64_t w, float scale, Fp8Saturation sat,
                     bool simd) {
  if (simd) return encode_rows_avx512(x, ldx, q, ldq, h, w, scale, sat);
  uint32_t m = 0;
  for (int64_t r = 0; r < h; ++r) m = std::max(m, encode_scalar(x + r * ldx, q + r * ldq, w, scale, sat));
  return m;
}

// One unpack round of the 16 x 16 byte transpose at element width 2^K bytes. Before it, register j holds 2^K
// consecutive rows of 16 / 2^K consecutive columns, column by column, with j = column group * (16 >> K) + row
// group; pairing neighbouring row groups doubles the rows and halves the columns per register.
template <int K>
inline void unpack_round(const __m128i* in, __m128i* out) {
  constexpr int kRowGroups = 16 >> K, kColGroups = 1 << K;
#pragma GCC unroll 16
  for (int j = 0; j < 8; ++j) {
    const int cg = j / (kRowGroups / 2), p = j % (kRowGroups / 2);
    const __m128i a = in[cg * kRowGroups + 2 * p], b = in[cg * kRowGroups + 2 * p + 1];
    __m128i lo, hi;
    if constexpr (K == 0) lo = _mm_unpacklo_epi8(a, b), hi = _mm_unpackhi_epi8(a, b);
    if constexpr (K == 1) lo = _mm_unpacklo_epi16(a, b), hi = _mm_unpackhi_epi16(a, b);
    if constexpr (K == 2) lo = _mm_unpacklo_epi32(a, b), hi = _mm_unpackhi_epi32(a, b);
    if constexpr (K == 3) lo = _mm_unpacklo_epi64(a, b), hi = _mm_unpackhi_epi64(a, b);
    out[(2 * cg) * (kRowGroups / 2) + p] = lo;
    out[(2 * cg + 1) * (kRowGroups / 2) + p] = hi;
  }
  static_assert(kColGroups * kRowGroups == 16);
}

// dst[c * ldd + r] = src[r * lds + c] for a 16 x 16 byte block.
inline void transpose16x16(const uint8_t* src, int64_t lds, uint8_t* dst, int64_t ldd) {
  __m128i a[16], b[16];
#pragma GCC unroll 16
  for (int i = 0; i < 16; ++i) a[i] = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * lds));
  unpack_round<0>(a, b);
  unpack_round<1>(b, a);
  unpack_round<2>(a, b);
  unpack_round<3>(b, a);
#pragma GCC unroll 16
  for (int c = 0; c < 16; ++c) _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + c * ldd), a[c]);
}

// qt[c, r] = q[r, c] for the tile of rows [r0, r0 + h) and columns [c0, c0 + w) (h, w <= kTile), through two
// contiguous L1 buffers: the tile's rows of q are gathered, transposed in 16 x 16 blocks and scattered to qt one
// row (a cache line at most) at a time. Bytes beyond h x w are transposed but never copied out.
void transpose_tile(const uint8_t* q, uint8_t* qt, int64_t rows, int64_t cols, int64_t r0, int64_t c0, int64_t h,
                    int64_t w) {
  alignas(64) uint8_t tile[kTile * kTile], transposed[kTile * kTile];
  for (int64_t r = 0; r < h; ++r) std::memcpy(tile + r * kTile, q + (r0 + r) * cols + c0, static_cast<size_t>(w));
  for (int64_t cb = 0; cb < w; cb += 16) {
    for (int64_t rb = 0; rb < h; rb += 16) transpose16x16(tile + rb * kTile + cb, kTile, transposed + cb * kTile + rb, kTile);
  }
  for (int64_t c = 0; c < w; ++c) std::memcpy(qt + (c0 + c) * rows + r0, transposed + c * kTile, static_cast<size_t>(h));
}

// out[0, n) = Out(float(q) * scale_inv) for n <= kRun: decode table (convert), one float multiply, convert.
template <class Out, class Q>
void dequantize_run(const Q* q, Out* out, int64_t n, float scale_inv) {
  if constexpr (std::is_same_v<Out, float>) {
    convert(q, out, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[i] *= scale_inv;
  } else {
    float buf[kRun];
    convert(q, buf, static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) buf[i] *= scale_inv;
    convert(buf, out, static_cast<size_t>(n));
  }
}

}  // namespace

template <class T>
float amax(const T* x, int64_t n) {
  const bool simd = use_avx512();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    m = std::max(m, amax_bits(x + begin, std::min(kChunk, n - begin), simd));
  }
  return math::amax_from_bits(m);
}

template <class Q, class T>
void quantize(const T* x, Q* q, int64_t n, const QuantizeArgs& args) {
  const bool simd = use_avx512();
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (n > kParallelMin)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk;
    m = std::max(m, encode(x + begin, q + begin, std::min(kChunk, n - begin), args.scale, args.sat, simd));
  }
  if (args.amax != nullptr) *args.amax = math::amax_from_bits(m);
}

template <class Q, class T>
void quantize_transpose(const T* x, Q* q, Q* qt, math::Dims2 dims, const QuantizeArgs& args) {
  const bool simd = use_avx512();
  const int64_t rows = dims.rows, cols = dims.cols;
  // Work items are strips of kTile rows by kStripCols columns. A strip is quantized row by row (sequential
  // reads of x that the hardware prefetcher follows, sequential writes of q), then transposed tile by tile from
  // q while it is still in L2. Reading x tile by tile instead would touch kTile streams at once.
  const int64_t row_strips = (rows + kTile - 1) / kTile, col_strips = (cols + kStripCols - 1) / kStripCols;
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (rows * cols > kParallelMin)
  for (int64_t s = 0; s < row_strips * col_strips; ++s) {
    const int64_t r0 = (s / col_strips) * kTile, c0 = (s % col_strips) * kStripCols;
    const int64_t h = std::min(kTile, rows - r0), w = std::min(kStripCols, cols - c0);
    m = std::max(m, encode_rows(x + r0 * cols + c0, cols, q + r0 * cols + c0, cols, h, w, args.scale, args.sat, simd));
    for (int64_t c = c0; c < c0 + w; c += kTile) {
      transpose_tile(reinterpret_cast<const uint8_t*>(q), reinterpret_cast<uint8_t*>(qt), rows, cols, r0, c, h,
                     std::min(kTile, c0 + w - c));
    }
  }
  if (args.amax != nullptr) *args.amax = math::amax_from_bits(m);
}

// Sixteen columns of one tile summed top to bottom in registers (each column in row order: the fixed order).
template <class T>
inline void tile_column_sums16(const T* x, int64_t cols, int64_t rows_in_tile, float* part) {
  float acc[16] = {};
  for (int64_t r = 0; r < rows_in_tile; ++r) {
    const T* row = x + r * cols;
    for (int j = 0; j < 16; ++j) acc[j] += scalar_cast<float>(row[j]);
  }
  for (int j = 0; j < 16; ++j) part[j] = acc[j];
}

template <class T, class Out>
void column_sums_tiled(const T* x, math::Dims2 dims, Out* out) {
  const int64_t rows = dims.rows, cols = dims.cols;
  constexpr int64_t kCols = 1024;  // a work item: a run of columns, each summed in the fixed order
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t c0 = 0; c0 < cols; c0 += kCols) {
    const int64_t w = std::min(kCols, cols - c0);
    float total[kCols], group[kCols], part[kCols];
    std::fill(total, total + w, 0.0f);
    std::fill(group, group + w, 0.0f);
    const int64_t tiles = math::dbias_tiles(rows), group_size = math::partial_groups(tiles).size;
    for (int64_t t = 0, r0 = 0; t < tiles; ++t, r0 += math::kDbiasTileRows) {
      const int64_t h = std::min<int64_t>(rows - r0, math::kDbiasTileRows);
      const T* tile = x + r0 * cols + c0;
      int64_t c = 0;
      for (; c + 16 <= w; c += 16) tile_column_sums16(tile + c, cols, h, part + c);
      for (; c < w; ++c) {  // the last columns, one at a time
        float sum = 0.0f;
        for (int64_t r = 0; r < h; ++r) sum += scalar_cast<float>(tile[r * cols + c]);
        part[c] = sum;
      }
      for (c = 0; c < w; ++c) group[c] += part[c];
      if ((t + 1) % group_size == 0 || t + 1 == tiles) {  // a group complete: into the total (math::partial_groups)
        for (c = 0; c < w; ++c) total[c] += group[c], group[c] = 0.0f;
      }
    }
    convert(total, out + c0, static_cast<size_t>(w));  // one rounding (a copy for f32)
  }
}

template <class Q, class T>
void quantize_blockwise(const T* x, Q* q, float* scale_inv, const math::BlockScaleLayout& layout,
                        const math::ScaleFromAmax& scaling) {
  const bool simd = use_avx512();
  const int64_t rows = layout.rows, cols = layout.cols;
  const int64_t scale_cols = layout.scale_cols(), blocks = layout.scale_rows() * scale_cols;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t r0 = (b / scale_cols) * layout.block_rows, r1 = std::min(rows, r0 + layout.block_rows);
    const int64_t c0 = (b % scale_cols) * math::kBlockCols, w = std::min(math::kBlockCols, cols - c0);
    uint32_t m = 0;
    for (int64_t r = r0; r < r1; ++r) m = std::max(m, amax_bits(x + r * cols + c0, w, simd));
    const float s = scaling(math::amax_from_bits(m));
    scale_inv[b] = math::reciprocal(s);
    encode_rows(x + r0 * cols + c0, cols, q + r0 * cols + c0, cols, r1 - r0, w, s, Fp8Saturation::Saturate, simd);
  }
}

template <class Q, class T>
void quantize_blockwise_1x128_transposed(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv,
                                         const math::ScaleFromAmax& scaling) {
  constexpr int64_t kCols = 16;  // output rows (x's columns) per tile
  const bool simd = use_avx512();
  const int64_t row_blocks = (rows + math::kBlockCols - 1) / math::kBlockCols, col_tiles = (cols + kCols - 1) / kCols;
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t t = 0; t < row_blocks * col_tiles; ++t) {
    const int64_t rb = t / col_tiles, c0 = t % col_tiles * kCols;
    const int64_t r0 = rb * math::kBlockCols, h = std::min(math::kBlockCols, rows - r0), w = std::min(kCols, cols - c0);
    T buf[kCols * math::kBlockCols];  // buf[j * 128 + i] = x[r0 + i, c0 + j]
    for (int64_t i = 0; i < h; ++i)
      for (int64_t j = 0; j < w; ++j) buf[j * math::kBlockCols + i] = x[(r0 + i) * cols + c0 + j];
    for (int64_t j = 0; j < w; ++j) {
      const T* row = buf + j * math::kBlockCols;
      const float s = scaling(math::amax_from_bits(amax_bits(row, h, simd)));
      scale_inv[(c0 + j) * row_blocks + rb] = math::reciprocal(s);
      encode_rows(row, h, q + (c0 + j) * rows + r0, rows, 1, h, s, Fp8Saturation::Saturate, simd);
    }
  }
}

template <class Out, class Q>
void dequantize(const Q* q, Out* out, int64_t n, float scale_inv) {
  const int64_t runs = (n + kRun - 1) / kRun;
#pragma omp parallel for schedule(static) if (n > kParallelMin)
  for (int64_t i = 0; i < runs; ++i) {
    const int64_t begin = i * kRun;
    dequantize_run(q + begin, out + begin, std::min(kRun, n - begin), scale_inv);
  }
}

template <class Out, class Q>
void dequantize_blockwise(const Q* q, Out* out, const float* scale_inv, const math::BlockScaleLayout& layout) {
  const int64_t rows = layout.rows, cols = layout.cols, groups = layout.scale_cols();
#pragma omp parallel for schedule(static) if (rows * cols > kParallelMin)
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t g = 0; g < groups; ++g) {
      const int64_t c0 = g * math::kBlockCols, offset = r * cols + c0;
      dequantize_run(q + offset, out + offset, std::min(math::kBlockCols, cols - c0),
                     scale_inv[layout.scale_index(r, c0)]);
    }
  }
}

#define MPT_INSTANTIATE_QT(Q, T)                                                                                \
  template void quantize<Q, T>(const T*, Q*, int64_t, const QuantizeArgs&);                                    \
  template void quantize_transpose<Q, T>(const T*, Q*, Q*, math::Dims2, const QuantizeArgs&);                        \
  template void quantize_blockwise<Q, T>(const T*, Q*, float*, const math::BlockScaleLayout&,                   \
                                         const math::ScaleFromAmax&);                                           \
  template void quantize_blockwise_1x128_transposed<Q, T>(const T*, int64_t, int64_t, Q*, float*,              \
                                                          const math::ScaleFromAmax&);                          \
  template void dequantize<T, Q>(const Q*, T*, int64_t, float);                                                 \
  template void dequantize_blockwise<T, Q>(const Q*, T*, const float*, const math::BlockScaleLayout&);
#define MPT_INSTANTIATE_T(T)     \
  template float amax<T>(const T*, int64_t); \
  template void column_sums_tiled<T, float>(const T*, math::Dims2, float*); \
  template void column_sums_tiled<T, f16>(const T*, math::Dims2, f16*); \
  template void column_sums_tiled<T, bf16>(const T*, math::Dims2, bf16*); \
  MPT_INSTANTIATE_QT(f8e4m3, T)  \
  MPT_INSTANTIATE_QT(f8e5m2, T)
MPT_INSTANTIATE_T(float)
MPT_INSTANTIATE_T(f16)
MPT_INSTANTIATE_T(bf16)
#undef MPT_INSTANTIATE_T
#undef MPT_INSTANTIATE_QT

}  // namespace mpt::kernels::cpu
