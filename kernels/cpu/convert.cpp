// kernels/cpu/convert.cpp: array conversions between storage types; scalar loop plus F16C / AVX512-BF16 / AVX2 / AVX-512 FP8 paths and FP8 decode tables picked at run time.
#include "kernels/cpu/convert.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/fp8_simd.h"
#include "kernels/cpu/map.h"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cpu {
namespace {

// Below this many elements one thread converts the whole array; above it, chunks go to OpenMP threads.
constexpr size_t kConvertParallelThreshold = size_t(1) << 16;
constexpr size_t kChunk = size_t(1) << 14;

bool vector_default_from_env() {
  const char* v = std::getenv("MPT_SCALAR_CONVERSIONS");
  return v == nullptr || *v == '\0' || std::strcmp(v, "0") == 0;
}

std::atomic<bool> g_vector_conversions{vector_default_from_env()};

ConvertIsa detect_isa() {
  __builtin_cpu_init();
  ConvertIsa isa;
  // F16C from CPUID leaf 1 (ECX bit 29; clang's __builtin_cpu_supports does not know "f16c"). Its
  // instructions are VEX-encoded, so they also need the OS to enable AVX state, which "avx" checks.
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  const bool cpuid_f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && (ecx & bit_F16C) != 0;
  isa.f16c = __builtin_cpu_supports("avx") && cpuid_f16c;
  isa.avx512_bf16 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                    __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
  isa.avx2 = __builtin_cpu_supports("avx2");
  isa.avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl");
  return isa;
}

const ConvertIsa& cpu_isa() {
  static const ConvertIsa kIsa = detect_isa();
  return kIsa;
}

template <class Dst, class Src>
using RangeFn = void (*)(const Src*, Dst*, size_t, Fp8Saturation);

template <class Dst, class Src>
void convert_scalar(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  for (size_t i = 0; i < n; ++i) dst[i] = scalar_cast<Dst>(src[i], sat);
}

// F16C rounds to nearest even exactly like the scalar path, subnormals included; only its NaN
// differs (it keeps sign and payload), so NaN lanes are replaced by the canonical 0x7FFF.
__attribute__((target("avx,f16c"))) void float_to_f16_f16c(const float* src, f16* dst, size_t n, Fp8Saturation sat) {
  const __m128i canonical_nan = _mm_set1_epi16(static_cast<short>(kF16CanonicalNaN));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    const __m128i h = _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
    const __m128i nan16 = _mm_packs_epi32(_mm_castps_si128(_mm256_castps256_ps128(nan)),
                                          _mm_castps_si128(_mm256_extractf128_ps(nan, 1)));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm_blendv_epi8(h, canonical_nan, nan16));
  }
  convert_scalar(src + i, dst + i, n - i, sat);
}

__attribute__((target("avx,f16c"))) void f16_to_float_f16c(const f16* src, float* dst, size_t n, Fp8Saturation sat) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(h));
  }
  convert_scalar(src + i, dst + i, n - i, sat);
}

using U32x16 = uint32_t __attribute__((vector_size(64)));

// vcvtneps2bf16 rounds to nearest even but treats subnormal inputs as zero and keeps NaN payloads:
// subnormal lanes are recomputed with the integer RNE formula, NaN lanes become 0x7FFF.
__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline)) inline __m256i float_to_bf16_x16(__m512 x) {
  const __m512i xi = _mm512_castps_si512(x);
  __m256i r = reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
  const __mmask16 subnormal = _mm512_testn_epi32_mask(xi, _mm512_set1_epi32(0x7F800000)) &
                              _mm512_test_epi32_mask(xi, _mm512_set1_epi32(0x007FFFFF));
  if (subnormal != 0) {
    const U32x16 u = reinterpret_cast<U32x16>(xi);
    const U32x16 rounded = (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;
    r = _mm512_mask_cvtepi32_epi16(r, subnormal, reinterpret_cast<__m512i>(rounded));
  }
  const __m256i canonical_nan = _mm256_set1_epi16(static_cast<short>(kBF16CanonicalNaN));
  return _mm256_mask_blend_epi16(_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q), r, canonical_nan);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void float_to_bf16_avx512(const float* src, bf16* dst,
                                                                                          size_t n, Fp8Saturation) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), float_to_bf16_x16(_mm512_loadu_ps(src + i)));
  }
  if (i < n) {  // the tail, with masked loads and stores
    const auto lanes = static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm256_mask_storeu_epi16(dst + i, lanes, float_to_bf16_x16(_mm512_maskz_loadu_ps(lanes, src + i)));
  }
}

__attribute__((target("avx2"))) void bf16_to_float_avx2(const bf16* src, float* dst, size_t n, Fp8Saturation sat) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  convert_scalar(src + i, dst + i, n - i, sat);
}

template <class T>
inline constexpr bool is_fp8_v = std::is_same_v<T, f8e4m3> || std::is_same_v<T, f8e5m2>;

// float, bf16 or f16 -> e4m3 or e5m2, 16 lanes at a time (the tail with masked loads and stores).
template <class Dst, class Src>
MPT_TARGET_AVX512 void to_fp8_avx512(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  const auto count = static_cast<int64_t>(n);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 lanes = fp8_simd::lanes_for(count - i);
    fp8_simd::store_x16(dst + i, fp8_simd::encode_x16<Dst>(fp8_simd::load_x16(src + i, lanes), sat), lanes);
  }
}

// An FP8 source has 256 codes: every conversion from it is a lookup in a table that the scalar path fills
// (one table per saturation mode, which matters only for FP8 destinations), built on first use.
template <class Dst, class Src>
struct DecodeTable {
  Dst values[2][256];
};

template <class Dst, class Src>
const Dst* decode_table(Fp8Saturation sat) {
  static const DecodeTable<Dst, Src> kTable = [] {
    DecodeTable<Dst, Src> t;
    for (int s = 0; s < 2; ++s) {
      const Fp8Saturation mode = s == 0 ? Fp8Saturation::Saturate : Fp8Saturation::NoSaturate;
      for (int b = 0; b < 256; ++b) t.values[s][b] = scalar_cast<Dst>(Src::from_bits(static_cast<uint8_t>(b)), mode);
    }
    return t;
  }();
  return kTable.values[sat == Fp8Saturation::Saturate ? 0 : 1];
}

template <class Dst, class Src>
void from_fp8_table(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  const Dst* table = decode_table<Dst, Src>(sat);
  for (size_t i = 0; i < n; ++i) dst[i] = table[src[i].bits];
}

// fp8 -> float, 16 lanes at a time: the float table of the 128 unsigned codes sits in eight registers, four
// two-register permutes look up the low five index bits and two blends pick by bits 5 and 6; the sign bit is
// then OR-ed in (decode(b) == decode(b & 0x7F) | sign for every code, NaNs included).
template <class Src>
MPT_TARGET_AVX512 void fp8_to_float_avx512(const Src* src, float* dst, size_t n, Fp8Saturation sat) {
  const float* table = decode_table<float, Src>(sat);
  __m512i t[8];
  for (int k = 0; k < 8; ++k) t[k] = _mm512_castps_si512(_mm512_loadu_ps(table + 16 * k));
  const auto count = static_cast<int64_t>(n);
  for (int64_t i = 0; i < count; i += 16) {
    const __mmask16 lanes = fp8_simd::lanes_for(count - i);
    const __m128i bytes = lanes == 0xFFFF ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))
                                          : _mm_maskz_loadu_epi8(lanes, src + i);
    const __m512i c = _mm512_maskz_cvtepu8_epi32(0xFFFF, bytes);
    const __m512i r01 = _mm512_permutex2var_epi32(t[0], c, t[1]), r23 = _mm512_permutex2var_epi32(t[2], c, t[3]);
    const __m512i r45 = _mm512_permutex2var_epi32(t[4], c, t[5]), r67 = _mm512_permutex2var_epi32(t[6], c, t[7]);
    const __mmask16 bit5 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(32));
    const __mmask16 bit6 = _mm512_test_epi32_mask(c, _mm512_set1_epi32(64));
    const __m512i low = _mm512_mask_blend_epi32(bit5, r01, r23), high = _mm512_mask_blend_epi32(bit5, r45, r67);
    const fp8_simd::U32x16 value = reinterpret_cast<fp8_simd::U32x16>(_mm512_mask_blend_epi32(bit6, low, high));
    const fp8_simd::U32x16 sign = (reinterpret_cast<fp8_simd::U32x16>(c) & 0x80u) << 24;
    const __m512 out = reinterpret_cast<__m512>(value | sign);
    if (lanes == 0xFFFF) {
      _mm512_storeu_ps(dst + i, out);
    } else {
      _mm512_mask_storeu_ps(dst + i, lanes, out);
    }
  }
}

// fp8 -> f16 or bf16, 32 lanes at a time through the 256-entry table of the scalar path (fp8_simd::lookup_x32).
template <class Dst, class Src>
MPT_TARGET_AVX512 void fp8_to_half_avx512(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  static_assert(sizeof(Dst) == 2);
  const auto* bits = reinterpret_cast<const uint16_t*>(decode_table<Dst, Src>(sat));  // Dst is its 16 bits
  const fp8_simd::WordTable table = fp8_simd::load_word_table(bits);
  const auto count = static_cast<int64_t>(n);
  for (int64_t i = 0; i < count; i += 32) {
    const __mmask32 lanes = fp8_simd::lanes_for32(count - i);
    _mm512_mask_storeu_epi16(dst + i, lanes, fp8_simd::lookup_x32(table, src + i, lanes));
  }
}

template <class Dst, class Src>
RangeFn<Dst, Src> pick_kernel() {
  if (g_vector_conversions.load(std::memory_order_relaxed)) {
    const ConvertIsa& isa = cpu_isa();
    if constexpr (std::is_same_v<Dst, f16> && std::is_same_v<Src, float>) {
      if (isa.f16c) return &float_to_f16_f16c;
    } else if constexpr (std::is_same_v<Dst, float> && std::is_same_v<Src, f16>) {
      if (isa.f16c) return &f16_to_float_f16c;
    } else if constexpr (std::is_same_v<Dst, bf16> && std::is_same_v<Src, float>) {
      if (isa.avx512_bf16) return &float_to_bf16_avx512;
    } else if constexpr (std::is_same_v<Dst, float> && std::is_same_v<Src, bf16>) {
      if (isa.avx2) return &bf16_to_float_avx2;
    }
    if constexpr (is_fp8_v<Dst> && (std::is_same_v<Src, float> || std::is_same_v<Src, bf16> ||
                                    std::is_same_v<Src, f16>)) {
      if (isa.avx512) return &to_fp8_avx512<Dst, Src>;
    }
    if constexpr (is_fp8_v<Src> && std::is_same_v<Dst, float>) {
      if (isa.avx512) return &fp8_to_float_avx512<Src>;
    }
    if constexpr (is_fp8_v<Src> && (std::is_same_v<Dst, bf16> || std::is_same_v<Dst, f16>)) {
      if (isa.avx512) return &fp8_to_half_avx512<Dst, Src>;
    }
    if constexpr (is_fp8_v<Src>) return &from_fp8_table<Dst, Src>;
  }
  return &convert_scalar<Dst, Src>;
}

}  // namespace

void set_vector_conversions(bool enabled) { g_vector_conversions.store(enabled, std::memory_order_relaxed); }
bool vector_conversions_enabled() { return g_vector_conversions.load(std::memory_order_relaxed); }
ConvertIsa convert_isa() { return cpu_isa(); }
MapIsa map_isa() {
  if (!vector_conversions_enabled()) return MapIsa::Baseline;
  static const MapIsa kIsa = cpu_isa().avx512 ? MapIsa::Avx512
                             : cpu_isa().avx2 && __builtin_cpu_supports("fma") ? MapIsa::Avx2Fma
                                                                               : MapIsa::Baseline;
  return kIsa;
}

template <class Dst, class Src>
void convert(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  if (n == 0) return;
  if constexpr (std::is_same_v<Dst, Src>) {
    std::memcpy(dst, src, n * sizeof(Src));
  } else {
    const RangeFn<Dst, Src> fn = pick_kernel<Dst, Src>();
    if (n < kConvertParallelThreshold) {
      fn(src, dst, n, sat);
      return;
    }
    const auto chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
#pragma omp parallel for schedule(static)
    for (int64_t c = 0; c < chunks; ++c) {
      const size_t begin = static_cast<size_t>(c) * kChunk;
      fn(src + begin, dst + begin, std::min(kChunk, n - begin), sat);
    }
  }
}

#define MPT_CONVERT_SOURCES(X, D)                                                                      \
  X(D, float) X(D, double) X(D, f16) X(D, bf16) X(D, f8e4m3) X(D, f8e5m2) X(D, int32_t) X(D, int64_t) \
  X(D, uint8_t) X(D, uint16_t) X(D, int8_t)
#define MPT_CONVERT_INSTANTIATE(D, S) template void convert<D, S>(const S*, D*, size_t, Fp8Saturation);
#define MPT_CONVERT_INSTANTIATE_DST(D) MPT_CONVERT_SOURCES(MPT_CONVERT_INSTANTIATE, D)

MPT_CONVERT_INSTANTIATE_DST(float)
MPT_CONVERT_INSTANTIATE_DST(double)
MPT_CONVERT_INSTANTIATE_DST(f16)
MPT_CONVERT_INSTANTIATE_DST(bf16)
MPT_CONVERT_INSTANTIATE_DST(f8e4m3)
MPT_CONVERT_INSTANTIATE_DST(f8e5m2)
MPT_CONVERT_INSTANTIATE_DST(int32_t)
MPT_CONVERT_INSTANTIATE_DST(int64_t)
MPT_CONVERT_INSTANTIATE_DST(uint8_t)
MPT_CONVERT_INSTANTIATE_DST(uint16_t)
MPT_CONVERT_INSTANTIATE_DST(int8_t)

#undef MPT_CONVERT_INSTANTIATE_DST
#undef MPT_CONVERT_INSTANTIATE
#undef MPT_CONVERT_SOURCES

}  // namespace mpt::kernels::cpu
