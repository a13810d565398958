// kernels/cpu/gemm_fp8_block.cpp: block-scaled FP8 GEMM on AVX512-BF16: 12x32 register tiles, FP32 promotion per K
// block.
#include "kernels/cpu/gemm_fp8_block.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/fp8_simd.h"
#include "kernels/math/numerics.h"

namespace mpt::kernels::cpu {

namespace {

#define MPT_TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))
#define MPT_BF16_INLINE MPT_TARGET_BF16 inline __attribute__((always_inline))

// The 64-byte vectors never cross a non-inlined call, so the ABI note about passing them does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

constexpr int kMr = 12;              // rows of a register tile: 12 x 2 accumulators + 2 B vectors + 1 broadcast
constexpr int64_t kNr = 32;          // columns of a register tile (two vectors of 16 floats)
constexpr int64_t kMc = 4 * kMr;     // rows per work tile
constexpr int64_t kNc = 16 * kNr;    // columns per work tile
constexpr int64_t kBlockPairs = 64;  // a 128-long K block in bf16 pairs

// bf16 bits of every FP8 code (exact: FP8 values are bf16 values; NaN codes give some NaN, which is all a GEMM needs).
template <class T>
const std::array<uint16_t, 256>& bf16_bits_table() {
  static const std::array<uint16_t, 256> table = [] {
    std::array<uint16_t, 256> t{};
    for (int i = 0; i < 256; ++i) {
      const float v = static_cast<float>(T::from_bits(static_cast<uint8_t>(i)));
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      t[static_cast<size_t>(i)] = static_cast<uint16_t>(bits >> 16);
    }
    return t;
  }();
  return table;
}

using Decoder = fp8_simd::WordTable;

template <class T>
MPT_BF16_INLINE Decoder make_decoder() {
  return fp8_simd::load_word_table(bf16_bits_table<T>().data());
}

template <class T>
MPT_BF16_INLINE __m512i decode32(const Decoder& d, const T* src, __mmask32 lanes) {
  return fp8_simd::lookup_x32(d, src, lanes);
}

MPT_BF16_INLINE __mmask32 lanes32(int64_t count) { return fp8_simd::lanes_for32(count); }

// Interleaves the words of x (K row 2p) and y (K row 2p + 1) into pair words: lo holds columns 0..15, hi 16..31.
MPT_BF16_INLINE void interleave_pairs(__m512i x, __m512i y, __m512i& lo, __m512i& hi) {
  alignas(64) static constexpr uint16_t kLo[32] = {0, 32, 1, 33, 2,  34, 3,  35, 4,  36, 5,  37, 6,  38, 7,  39,
                                                   8, 40, 9, 41, 10, 42, 11, 43, 12, 44, 13, 45, 14, 46, 15, 47};
  alignas(64) static constexpr uint16_t kHi[32] = {16, 48, 17, 49, 18, 50, 19, 51, 20, 52, 21, 53, 22, 54, 23, 55,
                                                   24, 56, 25, 57, 26, 58, 27, 59, 28, 60, 29, 61, 30, 62, 31, 63};
  lo = _mm512_permutex2var_epi16(x, _mm512_load_si512(kLo), y);
  hi = _mm512_permutex2var_epi16(x, _mm512_load_si512(kHi), y);
}

// Stored rows 2p and 2p + 1 of a K-major operand (K along rows, the other index contiguous), 32 entries from
// column c0 (count valid), as 32 pair words at out[0, 32) (zero beyond count and beyond k).
template <class T>
MPT_BF16_INLINE void pair_row(const Decoder& d, const T* src, int64_t ld, int64_t p, int64_t k, int64_t c0,
                              int64_t count, uint32_t* out) {
  const __mmask32 lanes = lanes32(count);
  const __m512i x = decode32(d, src + 2 * p * ld + c0, lanes);
  const __m512i y = 2 * p + 1 < k ? decode32(d, src + (2 * p + 1) * ld + c0, lanes) : _mm512_setzero_si512();
  __m512i lo, hi;
  interleave_pairs(x, y, lo, hi);
  _mm512_storeu_si512(out, lo);
  _mm512_storeu_si512(out + 16, hi);
}

// B (k x n) as bf16 pairs, panel by panel: word (jp, p, jj) holds B(2p, 32 jp + jj) in its low half and
// B(2p + 1, 32 jp + jj) in its high half (VDPBF16PS's layout), zero beyond k and n.
template <class TB>
MPT_TARGET_BF16 void pack_b(const TB* b, int64_t ldb, bool trans_b, int64_t k, int64_t n, int64_t pairs,
                            uint32_t* out) {
  const int64_t panels = (n + kNr - 1) / kNr;
#pragma omp parallel for schedule(static) if (k * n > (1 << 15))
  for (int64_t jp = 0; jp < panels; ++jp) {
    const Decoder dec = make_decoder<TB>();
    uint32_t* panel = out + jp * pairs * kNr;
    const int64_t j0 = jp * kNr, cols = std::min(kNr, n - j0);
    if (!trans_b) {
      for (int64_t p = 0; p < pairs; ++p) pair_row(dec, b, ldb, p, k, j0, cols, panel + p * kNr);
      continue;
    }
    // Stored rows are columns of B: each row's consecutive codes are pairs; written down the panel's column jj.
    for (int64_t jj = 0; jj < kNr; ++jj) {
      const __m512i stride = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                                _mm512_set1_epi32(kNr));
      for (int64_t k0 = 0; k0 < 2 * pairs; k0 += 32) {
        const __m512i w = jj < cols ? decode32(dec, b + (j0 + jj) * ldb + k0, lanes32(k - k0)) : _mm512_setzero_si512();
        const int64_t p0 = k0 / 2, np = std::min<int64_t>(16, pairs - p0);
        _mm512_mask_i32scatter_epi32(panel + p0 * kNr + jj, static_cast<__mmask16>((1u << np) - 1), stride, w, 4);
      }
    }
  }
}

// Rows [i0, i0 + rows) of A as 32-bit bf16 pair words, word (r, p) at out[r * rs + p * ps]. Row-major (rs = kp / 2,
// ps = 1) when A's rows are stored contiguously (K consecutive); pair-major (rs = 1, ps = kMc) when A is stored
// transposed (K along stored rows), so both layouts are filled with contiguous vector stores. Zero beyond k.
struct PackedA {
  int64_t rs, ps;
};

template <class TA>
MPT_TARGET_BF16 PackedA pack_a(const TA* a, int64_t lda, bool trans_a, int64_t i0, int64_t rows, int64_t k, int64_t kp,
                               uint32_t* out) {
  const Decoder dec = make_decoder<TA>();
  const int64_t pairs = (k + 1) / 2;
  if (trans_a) {
    for (int64_t p = 0; p < pairs; ++p)
      for (int64_t r0 = 0; r0 < kMc; r0 += 32) pair_row(dec, a, lda, p, k, i0 + r0, rows - r0, out + p * kMc + r0);
    return {1, kMc};
  }
  auto* words = reinterpret_cast<uint16_t*>(out);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k0 = 0; k0 < k; k0 += 32)  // kp >= k + 32: whole vectors fit, the lanes past k are zero
      _mm512_storeu_si512(words + r * kp + k0, decode32(dec, a + (i0 + r) * lda + k0, lanes32(k - k0)));
  return {kp / 2, 1};
}

// acc[r][c] = sum over `pairs` bf16 pairs of A row r (pair word p at a[r * rs + p * ps]) times B columns
// 16c..16c+15 of the panel, in FP32.
template <int MR>
MPT_BF16_INLINE void dot_tile(const uint32_t* a, int64_t rs, int64_t ps, const uint32_t* bp, int64_t pairs,
                              __m512 (&acc)[MR][2]) {
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const __m512i b0 = _mm512_loadu_si512(bp + p * kNr), b1 = _mm512_loadu_si512(bp + p * kNr + 16);
#pragma GCC unroll 12
    for (int r = 0; r < MR; ++r) {
      const __m512i av = _mm512_set1_epi32(static_cast<int32_t>(a[r * rs + p * ps]));
      acc[r][0] = _mm512_dpbf16_ps(acc[r][0], (__m512bh)av, (__m512bh)b0);
      acc[r][1] = _mm512_dpbf16_ps(acc[r][1], (__m512bh)av, (__m512bh)b1);
    }
  }
}

// d[r][0, cols) (= or +=) (sa[r] * sb) * acc[r]: the promotion of one K block's partial sums, in FP32 (a multiply,
// then an add, as the oneDNN-per-K-slice path computes it).
template <int MR>
MPT_BF16_INLINE void promote(const __m512 (&acc)[MR][2], const float* sa, int64_t sa_stride, const float* sb,
                             int64_t cols, bool first, float* d, int64_t ldd) {
  const __mmask16 m0 = cols >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
  const __mmask16 m1 = cols >= 32 ? __mmask16(0xFFFF) : cols <= 16 ? __mmask16(0) : __mmask16((1u << (cols - 16)) - 1);
  const __m512 sb0 = _mm512_maskz_loadu_ps(m0, sb), sb1 = _mm512_maskz_loadu_ps(m1, sb + 16);
#pragma GCC unroll 12
  for (int r = 0; r < MR; ++r) {
    const __m512 s = _mm512_set1_ps(sa[r * sa_stride]);
    __m512 v0 = _mm512_mul_ps(_mm512_mul_ps(s, sb0), acc[r][0]);
    __m512 v1 = _mm512_mul_ps(_mm512_mul_ps(s, sb1), acc[r][1]);
    float* dr = d + r * ldd;
    if (!first) {
      v0 = _mm512_add_ps(_mm512_maskz_loadu_ps(m0, dr), v0);
      v1 = _mm512_add_ps(_mm512_maskz_loadu_ps(m1, dr + 16), v1);
    }
    _mm512_mask_storeu_ps(dr, m0, v0);
    _mm512_mask_storeu_ps(dr + 16, m1, v1);
  }
}

struct TileArgs {
  const uint32_t* a;  // the tile's packed A
  PackedA layout;     // its strides
  int64_t pairs;      // k / 2 rounded up
  const uint32_t* b;  // packed B
  const float* sa;    // (m, KB) row-major, at the tile's first row
  int64_t kb_count;
  const float* sbt;  // (KB, n) row-major
  int64_t n;
};

// Rows [r0, r0 + MR) of a tile times K block kb of panel jp (cols valid columns), promoted into d (row stride ldd).
template <int MR>
MPT_TARGET_BF16 void block_rows(const TileArgs& t, int64_t r0, int64_t jp, int64_t kb, int64_t cols, float* d,
                                int64_t ldd) {
  __m512 acc[MR][2];
  const int64_t p0 = kb * kBlockPairs, np = std::min(kBlockPairs, t.pairs - p0);
  const uint32_t* panel = t.b + (jp * t.pairs + p0) * kNr;
  dot_tile<MR>(t.a + r0 * t.layout.rs + p0 * t.layout.ps, t.layout.rs, t.layout.ps, panel, np, acc);
  promote<MR>(acc, t.sa + r0 * t.kb_count + kb, t.kb_count, t.sbt + kb * t.n + jp * kNr, cols, kb == 0, d, ldd);
}

using BlockFn = void (*)(const TileArgs&, int64_t, int64_t, int64_t, int64_t, float*, int64_t);

template <int... R>
constexpr std::array<BlockFn, sizeof...(R)> block_fns(std::integer_sequence<int, R...>) {
  return {&block_rows<R + 1>...};
}
constexpr auto kBlockFns = block_fns(std::make_integer_sequence<int, kMr>{});

}  // namespace

bool block_scaled_gemm_available() { return convert_isa().avx512_bf16 && vector_conversions_enabled(); }

template <class TA, class TB>
float block_scaled_gemm(int64_t m, int64_t n, int64_t k, const TA* a, int64_t lda, bool trans_a, const TB* b,
                        int64_t ldb, bool trans_b, const float* sa, const float* sbt, const BlockRowsSink& sink) {
  if (m <= 0 || n <= 0 || k <= 0) return 0.0f;
  // Row-major packed A rows are kp = k + 32 or more bf16 apart: room for whole 32-lane stores, and never a
  // multiple of 4 KiB between the 12 rows a tile reads (that would map them all to one L1 set) for k a multiple of 32.
  const int64_t pairs = (k + 1) / 2, kp = 2 * pairs + 32, kb_count = std::max<int64_t>(1, (k + 127) / 128);
  const int64_t panels = (n + kNr - 1) / kNr;
  std::unique_ptr<uint32_t[]> bpack(new uint32_t[static_cast<size_t>(std::max<int64_t>(1, panels * pairs * kNr))]);
  pack_b(b, ldb, trans_b, k, n, pairs, bpack.get());
  const int64_t row_tiles = (m + kMc - 1) / kMc;
  float amax = 0.0f;
#pragma omp parallel reduction(max : amax)
  {
    // Row-major needs kMc * kp / 2 words, pair-major pairs * kMc (plus a vector of slack): the larger.
    std::vector<uint32_t> apack(static_cast<size_t>(kMc * kp / 2 + pairs * kMc + 32));
    std::vector<float> d(static_cast<size_t>(kMc * kNc));
    // A row tile is packed once and multiplied by every column chunk of B (B stays in the shared L3).
#pragma omp for schedule(dynamic, 1)
    for (int64_t it = 0; it < row_tiles; ++it) {
      const int64_t i0 = it * kMc, rows = std::min(kMc, m - i0);
      const PackedA layout = pack_a(a, lda, trans_a, i0, rows, k, kp, apack.data());
      const TileArgs t{apack.data(), layout, pairs, bpack.get(), sa + i0 * kb_count, kb_count, sbt, n};
      for (int64_t j0 = 0; j0 < n; j0 += kNc) {
        const int64_t cols = std::min(kNc, n - j0);
        // K block outer, register tiles inner: the panel's 8 KiB block of B stays in L1 for the tile's rows.
        for (int64_t jp = j0 / kNr; jp * kNr < j0 + cols; ++jp)
          for (int64_t kb = 0; kb < kb_count; ++kb)
            for (int64_t r0 = 0; r0 < rows; r0 += kMr) {
              const int64_t mr = std::min<int64_t>(kMr, rows - r0);
              float* out = d.data() + r0 * cols + (jp * kNr - j0);
              kBlockFns[static_cast<size_t>(mr - 1)](t, r0, jp, kb, std::min(kNr, n - jp * kNr), out, cols);
            }
        amax = std::fmax(amax, sink(i0, rows, j0, cols, d.data()));
      }
    }
  }
  return amax;
}

#define MPT_BLOCK_GEMM(TA, TB)                                                                                      \
  template float block_scaled_gemm<TA, TB>(int64_t, int64_t, int64_t, const TA*, int64_t, bool, const TB*, int64_t, \
                                           bool, const float*, const float*, const BlockRowsSink&);
MPT_BLOCK_GEMM(f8e4m3, f8e4m3)
MPT_BLOCK_GEMM(f8e4m3, f8e5m2)
MPT_BLOCK_GEMM(f8e5m2, f8e4m3)
MPT_BLOCK_GEMM(f8e5m2, f8e5m2)
#undef MPT_BLOCK_GEMM

}  // namespace mpt::kernels::cpu
