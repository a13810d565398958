// kernels/cpu/convert.cpp: array conversions between storage types; scalar loop plus F16C / AVX512-BF16 / AVX2 paths picked at run time.
#include "kernels/cpu/convert.h"

#include <cpuid.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cpu {
namespace {

// Below this many elements one thread converts the whole array; above it, chunks go to OpenMP threads.
constexpr size_t kParallelThreshold = size_t(1) << 16;
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
  }
  return &convert_scalar<Dst, Src>;
}

}  // namespace

void set_vector_conversions(bool enabled) { g_vector_conversions.store(enabled, std::memory_order_relaxed); }
bool vector_conversions_enabled() { return g_vector_conversions.load(std::memory_order_relaxed); }
ConvertIsa convert_isa() { return cpu_isa(); }

template <class Dst, class Src>
void convert(const Src* src, Dst* dst, size_t n, Fp8Saturation sat) {
  if (n == 0) return;
  if constexpr (std::is_same_v<Dst, Src>) {
    std::memcpy(dst, src, n * sizeof(Src));
  } else {
    const RangeFn<Dst, Src> fn = pick_kernel<Dst, Src>();
    if (n < kParallelThreshold) {
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
  X(D, uint8_t) X(D, uint16_t)
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

#undef MPT_CONVERT_INSTANTIATE_DST
#undef MPT_CONVERT_INSTANTIATE
#undef MPT_CONVERT_SOURCES

}  // namespace mpt::kernels::cpu
