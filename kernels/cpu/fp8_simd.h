// kernels/cpu/fp8_simd.h: AVX-512 FP8 (E4M3, E5M2) encoding of 16 floats and table decoding of 32 codes, bit-identical to kernels/math/numerics.h.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <type_traits>

#include "kernels/math/numerics.h"

// The target of every AVX-512 function; call them only when convert_isa().avx512 (kernels/cpu/convert.h) is set.
#define MPT_TARGET_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

namespace mpt::kernels::cpu::fp8_simd {

// Field constants of E4M3 and E5M2 relative to float: rounding keeps the top kManBits of float's mantissa,
// so the code of a normal result is (|x| bits rounded at bit kShift) >> kShift minus the exponent rebias.
template <class Q>
struct Fp8Fields;
template <>
struct Fp8Fields<f8e4m3> {
  static constexpr int kShift = 20;                      // 23 - 3 mantissa bits
  static constexpr int kRebias = (127 - 7) << 3;         // float bias - E4M3 bias, in code units
  static constexpr uint32_t kMinNormal = 121u << 23;     // 2^-6: below it the result is subnormal
  static constexpr int kSubnormalShiftBase = 141;        // shift of the significand = 141 - exponent field
  static constexpr uint32_t kMaxFinite = 0x7E, kOverflow = 0x7F;
};
template <>
struct Fp8Fields<f8e5m2> {
  static constexpr int kShift = 21;
  static constexpr int kRebias = (127 - 15) << 2;
  static constexpr uint32_t kMinNormal = 113u << 23;     // 2^-14
  static constexpr int kSubnormalShiftBase = 134;
  static constexpr uint32_t kMaxFinite = 0x7B, kOverflow = 0x7C;
};

// 16 lanes as GCC vector types (arithmetic in plain operators, which GCC 12 compiles without the false
// -Wmaybe-uninitialized warnings some of its AVX-512 intrinsics trigger); comparisons give 0 / -1 lanes.
using U32x16 = uint32_t __attribute__((vector_size(64)));
using F32x16 = float __attribute__((vector_size(64)));
using U16x16 = uint16_t __attribute__((vector_size(32)));
using U8x16 = uint8_t __attribute__((vector_size(16)));

MPT_TARGET_AVX512 inline U32x16 splat(uint32_t v) { return U32x16{} + v; }

// round_to_format<Q, FloatSource> (kernels/math/numerics_rounding.h) on 16 lanes of float bits, integer
// arithmetic only (independent of MXCSR's rounding, FTZ and DAZ modes): round to nearest even with the
// "add half minus one plus the kept LSB, then shift" identity, at a fixed bit for normal results and at a
// per-lane bit for subnormal ones; overflow and Inf give the saturated or overflow code with the sign, NaN
// gives 0x7F. Returns the 16 codes in the low byte of each 32-bit lane.
template <class Q>
MPT_TARGET_AVX512 inline U32x16 encode_x16(U32x16 u, Fp8Saturation sat) {
  using F = Fp8Fields<Q>;
  const U32x16 a = u & 0x7FFFFFFFu;
  const U32x16 normal = ((a + ((1u << (F::kShift - 1)) - 1u) + ((a >> F::kShift) & 1u)) >> F::kShift) - F::kRebias;

  // Subnormal result: the significand (implicit bit for normal floats) shifted right by 141 - e (E4M3),
  // capped at 25 like the scalar code (everything below rounds to 0 there).
  const U32x16 exp_field = a >> 23;
  const U32x16 sig = (a & 0x007FFFFFu) | (exp_field != 0 ? splat(0x00800000u) : splat(0));
  const U32x16 unclamped = splat(F::kSubnormalShiftBase) - (exp_field != 0 ? exp_field : splat(1));
  const U32x16 shift = unclamped > 25u ? splat(25) : unclamped;
  const U32x16 subnormal = (sig + ((splat(1) << (shift - 1u)) - 1u) + ((sig >> shift) & 1u)) >> shift;

  U32x16 code = a < F::kMinNormal ? subnormal : normal;
  const uint32_t overflow_code = sat == Fp8Saturation::Saturate ? F::kMaxFinite : F::kOverflow;
  code = code > F::kMaxFinite ? splat(overflow_code) : code;
  code |= (u >> 24) & 0x80u;
  return a > 0x7F800000u ? splat(kFp8CanonicalNaN) : code;
}

// 16 elements of T as float bits, widened exactly; the masked form reads only the lanes in `lanes` (others 0).
template <class T>
MPT_TARGET_AVX512 inline U32x16 load_x16(const T* p, __mmask16 lanes = 0xFFFF) {
  // Full vectors use plain loads: masked ones defeat the hardware prefetcher on some cores.
  if constexpr (std::is_same_v<T, float>) {
    return reinterpret_cast<U32x16>(lanes == 0xFFFF ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(lanes, p));
  } else {
    static_assert(std::is_same_v<T, bf16> || std::is_same_v<T, f16>);
    const __m256i h = lanes == 0xFFFF ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                      : _mm256_maskz_loadu_epi16(lanes, p);
    if constexpr (std::is_same_v<T, bf16>) {
      return __builtin_convertvector(reinterpret_cast<U16x16>(h), U32x16) << 16;
    } else {
      return reinterpret_cast<U32x16>(_mm512_maskz_cvtph_ps(0xFFFF, h));
    }
  }
}

// x * scale as one IEEE float multiply per lane, returned as bits.
MPT_TARGET_AVX512 inline U32x16 scale_x16(U32x16 bits, float scale) {
  return reinterpret_cast<U32x16>(reinterpret_cast<F32x16>(bits) * scale);
}

// Stores the low bytes of the 16 lanes (masked: only `lanes`). The narrowing stays in registers: a
// memory-destination vpmovdb is far slower on some cores.
MPT_TARGET_AVX512 inline void store_x16(void* p, U32x16 codes, __mmask16 lanes = 0xFFFF) {
  const __m128i bytes = reinterpret_cast<__m128i>(__builtin_convertvector(codes, U8x16));
  if (lanes == 0xFFFF) {
    _mm_storeu_si128(static_cast<__m128i*>(p), bytes);
  } else {
    _mm_mask_storeu_epi8(p, lanes, bytes);
  }
}

// |x| bits (non-negative floats order like their bits; NaN sorts above Inf) and their running maximum.
MPT_TARGET_AVX512 inline U32x16 max_abs_x16(U32x16 m, U32x16 bits) {
  const U32x16 a = bits & 0x7FFFFFFFu;
  return a > m ? a : m;
}

MPT_TARGET_AVX512 inline uint32_t reduce_max(U32x16 m) {
  uint32_t r = 0;
  for (int i = 0; i < 16; ++i) r = m[i] > r ? m[i] : r;
  return r;
}

// FP8 code -> 16-bit value (f16 or bf16 bits) through a 256-entry table held in eight registers: four
// two-register word permutes look up the low six code bits, two blends pick by bit 6 and one by bit 7. Exact for
// any table (no assumption about signs or NaNs).
struct WordTable {
  __m512i t[8];
};

MPT_TARGET_AVX512 inline WordTable load_word_table(const uint16_t* table256) {
  WordTable w;
  for (int i = 0; i < 8; ++i) w.t[i] = _mm512_loadu_si512(table256 + 32 * i);
  return w;
}

// 32 codes of src (the `lanes`; the others read as code 0) as 32 words.
MPT_TARGET_AVX512 inline __m512i lookup_x32(const WordTable& w, const void* src, __mmask32 lanes) {
  const __m512i c = _mm512_cvtepu8_epi16(_mm256_maskz_loadu_epi8(lanes, src));
  const __mmask32 bit6 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(64));
  const __mmask32 bit7 = _mm512_test_epi16_mask(c, _mm512_set1_epi16(128));
  const __m512i low = _mm512_mask_blend_epi16(bit6, _mm512_permutex2var_epi16(w.t[0], c, w.t[1]),
                                              _mm512_permutex2var_epi16(w.t[2], c, w.t[3]));
  const __m512i high = _mm512_mask_blend_epi16(bit6, _mm512_permutex2var_epi16(w.t[4], c, w.t[5]),
                                               _mm512_permutex2var_epi16(w.t[6], c, w.t[7]));
  return _mm512_mask_blend_epi16(bit7, low, high);
}

inline __mmask32 lanes_for32(int64_t remaining) {
  return remaining >= 32 ? ~__mmask32(0) : remaining <= 0 ? __mmask32(0) : static_cast<__mmask32>((1u << remaining) - 1);
}

inline __mmask16 lanes_for(int64_t remaining) {
  return remaining >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << remaining) - 1);
}

}  // namespace mpt::kernels::cpu::fp8_simd
