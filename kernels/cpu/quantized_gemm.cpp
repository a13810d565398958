// kernels/cpu/quantized_gemm.cpp: quantized inference GEMMs on the CPU (oneDNN s8 matmul, a weight-only code GEMM with an AVX-512 clone, group dequantization).
#include "kernels/cpu/quantized_gemm.h"

#include <dnnl.hpp>

#include <algorithm>
#include <mutex>
#include <tuple>
#include <map>
#include <memory>
#include <vector>

#include "kernels/cpu/gemm.h"
#include "kernels/cpu/map.h"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int kLanes = 16;

// The value of a code: the integer, or (lut, FP8) its E4M3 value from a 256-entry table.
template <bool kLut>
MPT_INLINE float code_float(int8_t c, const float* lut) {
  if constexpr (kLut) return lut[static_cast<uint8_t>(c)];
  else return static_cast<float>(c);
}

// One row of x against one row of codes in 16 float lanes (lane l takes a group's elements l, l + 16, ...); at each
// group's end its lane sums are scaled and added to the row's lanes, which are added pairwise at the end.
#define MPT_WQ_DOT(ATTR, SUFFIX)                                                                              \
  template <bool kLut>                                                                                        \
  ATTR float wq_dot##SUFFIX(const float* x, const int8_t* c, const float* s, int64_t k, int64_t group,       \
                            const float* lut) {                                                               \
    float total[kLanes] = {};                                                                                 \
    for (int64_t g0 = 0; g0 < k; g0 += group) {                                                             \
      float lane[kLanes] = {};                                                                              \
      int64_t i = 0;                                                                                        \
      for (; i + kLanes <= group; i += kLanes) {                                                            \
        _Pragma("omp simd")                                                                                 \
        for (int l = 0; l < kLanes; ++l) lane[l] += x[g0 + i + l] * code_float<kLut>(c[g0 + i + l], lut);  \
      }                                                                                                     \
      for (int l = 0; i + l < group; ++l) lane[l] += x[g0 + i + l] * code_float<kLut>(c[g0 + i + l], lut); \
      const float scale = s[g0 / group];                                                                    \
      _Pragma("omp simd")                                                                                   \
      for (int l = 0; l < kLanes; ++l) total[l] += lane[l] * scale;                                         \
    }                                                                                                       \
    for (int w = kLanes / 2; w > 0; w /= 2)                                                                   \
      for (int l = 0; l < w; ++l) total[l] += total[l + w];                                                   \
    return total[0];                                                                                          \
  }
MPT_WQ_DOT(, _generic)
MPT_WQ_DOT(__attribute__((target("avx512f,avx512bw,avx512vl"))), _avx512)
#undef MPT_WQ_DOT

}  // namespace

template <class Out>
void dequantize_groups(const GroupWeights& w, Out* out) {
  // Group by group (the codes of group g are [g * group, (g + 1) * group): rows hold whole groups), the scale hoisted.
  const int64_t groups = w.group > 0 ? w.n * (w.k / w.group) : 0;
#pragma omp parallel for schedule(static) if (w.n * w.k > (1 << 16))
  for (int64_t g = 0; g < groups; ++g) {
    const float s = w.scales[g];
    const int8_t* c = w.codes + g * w.group;
    Out* o = out + g * w.group;
    for (int64_t l = 0; l < w.group; ++l) o[l] = scalar_cast<Out>(math::code_value(c[l], w.format) * s);
  }
}

void weight_only_gemm(const float* x, int64_t m, const GroupWeights& w, const float* bias, float* y) {
  const bool avx512 = map_isa() == MapIsa::Avx512;
  const int64_t groups = w.k / w.group;
  const bool fp8 = w.format == math::QuantFormat::E4M3;
  float lut[256];
  for (int b = 0; b < 256; ++b) lut[b] = math::code_value(static_cast<int8_t>(b), w.format);
  const auto dot = [&](const float* xr, const int8_t* c, const float* s) {
    if (fp8) return avx512 ? wq_dot_avx512<true>(xr, c, s, w.k, w.group, lut) : wq_dot_generic<true>(xr, c, s, w.k, w.group, lut);
    return avx512 ? wq_dot_avx512<false>(xr, c, s, w.k, w.group, lut) : wq_dot_generic<false>(xr, c, s, w.k, w.group, lut);
  };
#pragma omp parallel for schedule(static) if (w.n * w.k * m > (1 << 15))
  for (int64_t j = 0; j < w.n; ++j) {
    const int8_t* c = w.codes + j * w.k;
    const float* s = w.scales + j * groups;
    const float b = bias != nullptr ? bias[j] : 0.0f;
    for (int64_t i = 0; i < m; ++i) {
      y[i * w.n + j] = dot(x + i * w.k, c, s) + b;
    }
  }
}

namespace {

// Whether oneDNN's s8 matmul sums exactly here: with VNNI (AVX512-VNNI, AVX-VNNI; AMX-INT8 implies it) each byte
// product goes into an int32 lane; without it oneDNN 2.6 pairs products in saturating int16 (vpmaddubsw), so the
// sums of large codes are clipped (seen on an AVX2-only AMD EPYC: 3.8% off on a 64-wide layer).
bool exact_s8_matmul() {
  static const bool vnni = __builtin_cpu_supports("avx512vnni") || __builtin_cpu_supports("avxvnni");
  return vnni;
}

// The same integers without VNNI: the codes widened to f32 (exact) and summed by f32 GEMMs over K slices of at most
// 512, whose partial sums (|sum| <= 512 * 128^2 = 2^23) are exact integers in f32, added up in int32.
void gemm_s8s8s32_f32(int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b, int32_t* acc) {
  constexpr int64_t kSlice = 512;
  std::vector<float> a32(static_cast<size_t>(m * k)), b32(static_cast<size_t>(n * k)), part(static_cast<size_t>(m * n));
  for (size_t i = 0; i < a32.size(); ++i) a32[i] = static_cast<float>(a[i]);
  for (size_t i = 0; i < b32.size(); ++i) b32[i] = static_cast<float>(b[i]);
  std::fill(acc, acc + m * n, 0);
  for (int64_t k0 = 0; k0 < k; k0 += kSlice) {
    GemmParams p;
    p.m = m, p.n = n, p.k = std::min(kSlice, k - k0);
    p.trans_b = true;
    p.lda = k, p.ldb = k, p.ldc = n;
    gemm<float, float>(p, a32.data() + k0, b32.data() + k0, part.data());
    for (size_t i = 0; i < part.size(); ++i) acc[i] += static_cast<int32_t>(part[i]);
  }
}

}  // namespace

void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b, int32_t* acc) {
  if (!exact_s8_matmul()) return gemm_s8s8s32_f32(m, n, k, a, b, acc);
  using dt = dnnl::memory::data_type;
  static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  struct Prim {
    dnnl::matmul prim;
    dnnl::memory::desc a, b, c;
  };
  static std::mutex mutex;
  static std::map<std::tuple<int64_t, int64_t, int64_t>, std::shared_ptr<const Prim>> cache;
  std::shared_ptr<const Prim> p;
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = cache[{m, n, k}];
    if (slot == nullptr) {
      auto q = std::make_shared<Prim>();
      q->a = dnnl::memory::desc({m, k}, dt::s8, {k, 1});
      q->b = dnnl::memory::desc({k, n}, dt::s8, {1, k});  // b stored [n, k]: used transposed
      q->c = dnnl::memory::desc({m, n}, dt::s32, {n, 1});
      q->prim = dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(q->a, q->b, q->c), engine));
      slot = std::move(q);
    }
    p = slot;
  }
  thread_local dnnl::stream stream(engine);
  p->prim.execute(stream, {{DNNL_ARG_SRC, dnnl::memory(p->a, engine, const_cast<int8_t*>(a))},
                           {DNNL_ARG_WEIGHTS, dnnl::memory(p->b, engine, const_cast<int8_t*>(b))},
                           {DNNL_ARG_DST, dnnl::memory(p->c, engine, acc)}});
  stream.wait();
}

void int8_epilogue(const int32_t* acc, int64_t m, int64_t n, const float* sa, const float* sb, const float* bias,
                   float* y) {
#pragma omp parallel for schedule(static) if (m * n > (1 << 16))
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      y[i * n + j] = math::dequantize_accumulator(static_cast<float>(acc[i * n + j]), sa[i], sb[j], bias, j);
    }
  }
}

template void dequantize_groups<float>(const GroupWeights&, float*);
template void dequantize_groups<bf16>(const GroupWeights&, bf16*);
template void dequantize_groups<f16>(const GroupWeights&, f16*);

}  // namespace mpt::kernels::cpu
