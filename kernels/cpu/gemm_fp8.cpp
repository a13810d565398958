// kernels/cpu/gemm_fp8.cpp: FP8 GEMM on the CPU: exact FP8 -> bf16 conversion, bf16 GEMM with FP32 accumulation,
// per-tensor or block (1x128, 128x128) dequantization scales, and an epilogue that rounds or quantizes the output.
#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <exception>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "kernels/cpu/gemm_fp8_block.h"
#include "kernels/cpu/scratch.h"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kBlock = 128;   // the K (and tile) length of block scaling
constexpr int64_t kPanelRows = 64;  // rows of C per per-K-block GEMM call: the f32 partials stay cache-sized

template <class T>
inline constexpr bool is_fp8_v = std::is_same_v<T, f8e4m3> || std::is_same_v<T, f8e5m2>;

// Every FP8 code's value as float (exact, NaN and Inf included).
template <class T>
const std::array<float, 256>& fp8_table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t{};
    for (int i = 0; i < 256; ++i) t[static_cast<size_t>(i)] = static_cast<float>(T::from_bits(static_cast<uint8_t>(i)));
    return t;
  }();
  return table;
}

// The dequantization scale of (operand row, K block); a per-tensor scale is the same everywhere.
struct ScaleView {
  ScaleMode mode = ScaleMode::PerTensor;
  const float* s = nullptr;
  int64_t kb = 1;
  float at(int64_t row, int64_t kblock) const {
    switch (mode) {
      case ScaleMode::PerTensor: return s[0];
      case ScaleMode::Block1x128: return s[row * kb + kblock];
      case ScaleMode::Block128x128: return s[(row / kBlock) * kb + kblock];
    }
    return s[0];
  }
};

int64_t scale_rows(ScaleMode mode, int64_t rows) {
  return mode == ScaleMode::Block1x128 ? rows : (rows + kBlock - 1) / kBlock;
}

// The scales of batch entry bi (block scales of a batched operand are consecutive per entry).
ScaleView scale_view(const OperandScale& s, int64_t rows, int64_t kb, int64_t stride, int64_t bi) {
  ScaleView v{s.mode, s.scale_inv, kb};
  if (s.mode != ScaleMode::PerTensor && stride != 0) v.s += bi * scale_rows(s.mode, rows) * kb;
  return v;
}

// A power of two whose product with any finite FP8 value is a normal bf16 (so scaling a code is exact).
bool exact_pow2(float s) {
  const uint32_t bits = std::bit_cast<uint32_t>(s);
  const int exponent = static_cast<int>((bits >> 23) & 0xFF) - 127;
  return (bits & 0x7FFFFF) == 0 && exponent >= -64 && exponent <= 64;
}

bool all_exact_pow2(const OperandScale& s, int64_t rows, int64_t kb, int64_t batches) {
  if (s.mode == ScaleMode::PerTensor) return true;  // per-tensor scales go into alpha, never into the operand
  const int64_t count = batches * scale_rows(s.mode, rows) * kb;
  return std::all_of(s.scale_inv, s.scale_inv + count, exact_pow2);
}

// The stored matrix (rows x cols, leading dimension ld) of FP8 codes as contiguous bf16. With `fold`, each value
// is multiplied by its block scale first (exact for the scales all_exact_pow2 accepts). k_along_cols says
// whether K runs along the stored columns (A not transposed, B transposed) or along the stored rows.
template <class T>
void pack_bf16(const T* src, int64_t rows, int64_t cols, int64_t ld, bf16* dst, const ScaleView* fold,
               bool k_along_cols) {
  const float* table = fp8_table<T>().data();
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* in = src + r * ld;
    bf16* out = dst + r * cols;
    if (fold == nullptr) {
      convert<bf16, T>(in, out, static_cast<size_t>(cols));  // exact; vectorised (kernels/cpu/convert.h)
      continue;
    }
    for (int64_t c = 0; c < cols; ++c) {
      float v = table[in[c].bits];
      v *= k_along_cols ? fold->at(r, c / kBlock) : fold->at(c, r / kBlock);
      out[c] = bf16::from_bits(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));  // exact: truncation
    }
  }
}

// Rows [i0, i1) of C = round(alpha * D + bias + beta * C) (D: rows of n floats, C: leading dimension ldc, bias: n
// floats or null); FP8 C is quantized as saturate(value * q) and the largest |value| is returned (NaN ignored). Row
// by row with loops that vectorise and the vectorised conversions (same bits as scalar_cast); thread-local scratch
// slots 6 and 7.
template <class TC>
float store_rows(const float* d, int64_t i0, int64_t i1, int64_t n, TC* c, int64_t ldc, float alpha, float beta,
                 float q, const float* bias) {
  float local_max = 0.0f;
  float* row = scratch<float, 6>(static_cast<size_t>(n));
  float* scaled = is_fp8_v<TC> ? scratch<float, 7>(static_cast<size_t>(n)) : nullptr;
  for (int64_t i = i0; i < i1; ++i) {
    const float* v = d + (i - i0) * n;
    TC* ci = c + i * ldc;
    if (alpha != 1.0f || beta != 0.0f || bias != nullptr) {
      if (beta != 0.0f) convert<float, TC>(ci, row, static_cast<size_t>(n));
      for (int64_t j = 0; j < n; ++j) {
        float x = alpha == 1.0f ? v[j] : alpha * v[j];
        if (bias != nullptr) x += bias[j];  // after the product, before beta C's term
        row[j] = beta != 0.0f ? x + beta * row[j] : x;
      }
      v = row;
    }
    if constexpr (is_fp8_v<TC>) {
      for (int64_t j = 0; j < n; ++j) {
        const float a = std::fabs(v[j]);
        local_max = a > local_max ? a : local_max;
        scaled[j] = v[j] * q;
      }
      convert<TC, float>(scaled, ci, static_cast<size_t>(n), Fp8Saturation::Saturate);
    } else {
      convert<TC, float>(v, ci, static_cast<size_t>(n));
    }
  }
  return local_max;
}

template <class TC>
void store_output(const float* d, int64_t m, int64_t n, TC* c, int64_t ldc, float alpha, float beta,
                  const float* out_scale, float& amax, const float* bias) {
  const float q = out_scale != nullptr ? *out_scale : 1.0f;
  constexpr int64_t kRows = 16;
  float local_max = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : local_max) if (m * n > (1 << 16))
  for (int64_t i0 = 0; i0 < m; i0 += kRows)
    local_max =
        std::fmax(local_max, store_rows(d + i0 * n, i0, std::min(m, i0 + kRows), n, c, ldc, alpha, beta, q, bias));
  amax = std::fmax(amax, local_max);
}

// C = alpha * D + beta * C with D = sum_kb sA(i,kb) sB(j,kb) (A_kb B_kb) for one batch entry: a bf16 GEMM per
// 128-long K slice whose FP32 partial product is scaled by (sA * sB) and added in FP32, as a tensor core's
// block-scaled GEMM does. Threads take row panels (one parallel region; oneDNN runs single-threaded inside it) and
// finish each panel into C, so partial and accumulator stay in the core's cache.
template <class TC>
void per_k_block(const GemmParams& p, const bf16* a, int64_t lda, const bf16* b, int64_t ldb, const ScaleView& sa,
                 const ScaleView& sb, TC* c, const float* out_scale, float& amax) {
  const int64_t kb_count = (p.k + kBlock - 1) / kBlock;
  std::vector<float> sbt(static_cast<size_t>(kb_count * p.n));  // (KB, n): B's scale per K block and column
  for (int64_t kb = 0; kb < kb_count; ++kb)
    for (int64_t j = 0; j < p.n; ++j) sbt[static_cast<size_t>(kb * p.n + j)] = sb.at(j, kb);
  const int64_t panels = (p.m + kPanelRows - 1) / kPanelRows;
  const float q = out_scale != nullptr ? *out_scale : 1.0f;
  std::exception_ptr error;
  float max_all = 0.0f;
#pragma omp parallel reduction(max : max_all)
  {
    const size_t panel_size = static_cast<size_t>(std::min(kPanelRows, p.m) * p.n);
    std::unique_ptr<float[]> part(new float[panel_size]), acc(new float[panel_size]);
#pragma omp for schedule(dynamic, 1)
    for (int64_t pi = 0; pi < panels; ++pi) {
      try {
        const int64_t i0 = pi * kPanelRows, rows = std::min(kPanelRows, p.m - i0);
        for (int64_t kb = 0; kb < kb_count; ++kb) {
          const int64_t k0 = kb * kBlock;
          GemmParams g;
          g.m = rows, g.n = p.n, g.k = std::min(kBlock, p.k - k0);
          g.trans_a = p.trans_a, g.trans_b = p.trans_b;
          g.lda = lda, g.ldb = ldb, g.ldc = p.n;
          const bf16* ap = p.trans_a ? a + k0 * lda + i0 : a + i0 * lda + k0;
          const bf16* bp = p.trans_b ? b + k0 : b + k0 * ldb;
          gemm<bf16, float>(g, ap, bp, part.get());
          const float* sbk = sbt.data() + kb * p.n;
          for (int64_t r = 0; r < rows; ++r) {
            const float sar = sa.at(i0 + r, kb);
            const float* pr = part.get() + r * p.n;
            float* dr = acc.get() + r * p.n;
            if (kb == 0) {
              for (int64_t j = 0; j < p.n; ++j) dr[j] = (sar * sbk[j]) * pr[j];
            } else {
              for (int64_t j = 0; j < p.n; ++j) dr[j] += (sar * sbk[j]) * pr[j];
            }
          }
        }
        max_all =
            std::fmax(max_all, store_rows(acc.get(), i0, i0 + rows, p.n, c, p.ldc, p.alpha, p.beta, q, p.bias));
      } catch (...) {
#pragma omp critical(mpt_gemm_fp8_error)
        if (!error) error = std::current_exception();
      }
    }
  }
  if (error) std::rethrow_exception(error);
  amax = std::fmax(amax, max_all);
}

// The block-scaled product on the AVX512-BF16 kernel (kernels/cpu/gemm_fp8_block.h), batch entry by batch entry,
// its tiles finished into C by store_rows. Returns the output amax.
template <class TA, class TB, class TC>
float block_scaled(const GemmParams& p, const TA* a, const TB* b, TC* c, const Fp8GemmArgs& args, int64_t kb) {
  const float q = args.out_scale != nullptr ? *args.out_scale : 1.0f;
  std::vector<float> sa(static_cast<size_t>(p.m * kb)), sbt(static_cast<size_t>(kb * p.n));
  float amax = 0.0f;
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const ScaleView va = scale_view(args.a, p.m, kb, p.stride_a, bi), vb = scale_view(args.b, p.n, kb, p.stride_b, bi);
    for (int64_t i = 0; i < p.m; ++i)
      for (int64_t j = 0; j < kb; ++j) sa[static_cast<size_t>(i * kb + j)] = va.at(i, j);
    for (int64_t j = 0; j < kb; ++j)
      for (int64_t i = 0; i < p.n; ++i) sbt[static_cast<size_t>(j * p.n + i)] = vb.at(i, j);
    TC* cb = c + bi * p.stride_c;
    const BlockRowsSink sink = [&](int64_t i0, int64_t rows, int64_t j0, int64_t cols, const float* d) {
      return store_rows(d, i0, i0 + rows, cols, cb + j0, p.ldc, p.alpha, p.beta, q,
                        p.bias != nullptr ? p.bias + j0 : nullptr);
    };
    amax = std::fmax(amax, block_scaled_gemm(p.m, p.n, p.k, a + bi * p.stride_a, p.lda, p.trans_a,
                                             b + bi * p.stride_b, p.ldb, p.trans_b, sa.data(), sbt.data(), sink));
  }
  return amax;
}

void check_args(const GemmParams& p, const Fp8GemmArgs& args, bool fp8_out) {
  if (args.a.scale_inv == nullptr || args.b.scale_inv == nullptr)
    throw std::invalid_argument("gemm_fp8: both operands need scale_inv");
  if (fp8_out && args.out_scale == nullptr) throw std::invalid_argument("gemm_fp8: an FP8 output needs out_scale");
  if (fp8_out && p.beta != 0.0f) throw std::invalid_argument("gemm_fp8: beta must be 0 for an FP8 output");
  if (!fp8_out && (args.out_scale != nullptr || args.out_amax != nullptr))
    throw std::invalid_argument("gemm_fp8: out_scale and out_amax apply to FP8 outputs only");
}

}  // namespace

template <class TA, class TB, class TC>
void gemm_fp8(const GemmParams& p, const TA* a, const TB* b, TC* c, const Fp8GemmArgs& args) {
  constexpr bool kDirect = std::is_same_v<TC, float> || std::is_same_v<TC, bf16>;  // types oneDNN can write
  check_gemm_params(p);
  check_args(p, args, is_fp8_v<TC>);
  float amax = 0.0f;
  if (p.m > 0 && p.n > 0) {
    const int64_t kb = std::max<int64_t>(1, (p.k + kBlock - 1) / kBlock);
    const bool block = args.a.mode != ScaleMode::PerTensor || args.b.mode != ScaleMode::PerTensor;
    const bool kernel = block_scaled_gemm_available() && p.k > 0;
    const bool fold = block &&
                      (args.algo == BlockScaleAlgo::Fold || (args.algo == BlockScaleAlgo::Auto && !kernel)) &&
                      all_exact_pow2(args.a, p.m, kb, p.stride_a == 0 ? 1 : p.batch) &&
                      all_exact_pow2(args.b, p.n, kb, p.stride_b == 0 ? 1 : p.batch);
    // Scales that are not folded into the operands: per-tensor ones go into alpha, rounded once in f32.
    const float tensor_scale = (args.a.mode == ScaleMode::PerTensor ? args.a.scale_inv[0] : 1.0f) *
                               (args.b.mode == ScaleMode::PerTensor ? args.b.scale_inv[0] : 1.0f);
    // The AVX512-BF16 kernel also serves per-tensor scales (as uniform block scales): 84-92% of a plain oneDNN bf16
    // GEMM on the benchmark shapes, where one oneDNN GEMM plus the decode and epilogue passes gets 77-91%.
    if (!fold && kernel) {
      amax = block_scaled(p, a, b, c, args, kb);
      if (args.out_amax != nullptr) *args.out_amax = amax;
      return;
    }
    const int64_t a_rows = p.trans_a ? p.k : p.m, a_cols = p.trans_a ? p.m : p.k;
    const int64_t b_rows = p.trans_b ? p.n : p.k, b_cols = p.trans_b ? p.k : p.n;
    // Reused per-thread buffers (kernels/cpu/scratch.h; slots 0-2 belong to the f16 GEMM, which this never calls).
    bf16* a16 = scratch<bf16, 3>(static_cast<size_t>(a_rows * a_cols));
    bf16* b16 = scratch<bf16, 4>(static_cast<size_t>(b_rows * b_cols));
    // oneDNN 2.6 serves a run-time output scale with gemm:jit, ~17% slower here than the brgemm kernel it picks
    // without one; so scaled products run unscaled into an f32 D and the epilogue multiplies by the scale (the
    // same single rounding of acc * scale that an output scale, or a tensor core's epilogue, makes).
    const float scale = tensor_scale * p.alpha;
    const bool direct = kDirect && scale == 1.0f;  // oneDNN writes C itself
    const bool via_d = block && !fold ? p.k == 0 : !direct;  // an f32 D, then the epilogue
    float* d = via_d ? scratch<float, 5>(static_cast<size_t>(p.m * p.n)) : nullptr;
    for (int64_t bi = 0; bi < p.batch; ++bi) {
      const ScaleView sa = scale_view(args.a, p.m, kb, p.stride_a, bi);
      const ScaleView sb = scale_view(args.b, p.n, kb, p.stride_b, bi);
      const bool fold_a = fold && args.a.mode != ScaleMode::PerTensor;
      const bool fold_b = fold && args.b.mode != ScaleMode::PerTensor;
      if (bi == 0 || p.stride_a != 0)
        pack_bf16(a + bi * p.stride_a, a_rows, a_cols, p.lda, a16, fold_a ? &sa : nullptr, !p.trans_a);
      if (bi == 0 || p.stride_b != 0)
        pack_bf16(b + bi * p.stride_b, b_rows, b_cols, p.ldb, b16, fold_b ? &sb : nullptr, p.trans_b);
      TC* cb = c + bi * p.stride_c;
      GemmParams q;
      q.m = p.m, q.n = p.n, q.k = p.k;
      q.trans_a = p.trans_a, q.trans_b = p.trans_b;
      q.lda = a_cols, q.ldb = b_cols;
      if (block && !fold) {
        if (p.k == 0) {
          std::fill(d, d + p.m * p.n, 0.0f);
          store_output(d, p.m, p.n, cb, p.ldc, p.alpha, p.beta, args.out_scale, amax, p.bias);
        } else {
          q.alpha = p.alpha, q.beta = p.beta, q.ldc = p.ldc, q.bias = p.bias;
          per_k_block(q, a16, a_cols, b16, b_cols, sa, sb, cb, args.out_scale, amax);
        }
        continue;
      }
      q.alpha = 1.0f;
      if (direct) {
        if constexpr (kDirect) {
          q.ldc = p.ldc, q.beta = p.beta, q.bias = p.bias;
          gemm<bf16, TC>(q, a16, b16, cb);
        }
      } else {
        q.ldc = p.n;
        gemm<bf16, float>(q, a16, b16, d);
        store_output(d, p.m, p.n, cb, p.ldc, scale, p.beta, args.out_scale, amax, p.bias);
      }
    }
  }
  if (args.out_amax != nullptr) *args.out_amax = amax;
}

#define MPT_GEMM_FP8(TA, TB)                                                                                 \
  template void gemm_fp8<TA, TB, float>(const GemmParams&, const TA*, const TB*, float*, const Fp8GemmArgs&);   \
  template void gemm_fp8<TA, TB, bf16>(const GemmParams&, const TA*, const TB*, bf16*, const Fp8GemmArgs&);     \
  template void gemm_fp8<TA, TB, f16>(const GemmParams&, const TA*, const TB*, f16*, const Fp8GemmArgs&);       \
  template void gemm_fp8<TA, TB, f8e4m3>(const GemmParams&, const TA*, const TB*, f8e4m3*, const Fp8GemmArgs&); \
  template void gemm_fp8<TA, TB, f8e5m2>(const GemmParams&, const TA*, const TB*, f8e5m2*, const Fp8GemmArgs&);
MPT_GEMM_FP8(f8e4m3, f8e4m3)
MPT_GEMM_FP8(f8e4m3, f8e5m2)
MPT_GEMM_FP8(f8e5m2, f8e4m3)
MPT_GEMM_FP8(f8e5m2, f8e5m2)
#undef MPT_GEMM_FP8

}  // namespace mpt::kernels::cpu
