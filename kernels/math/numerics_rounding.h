// kernels/math/numerics_rounding.h: the bit-level round-to-nearest-even encoder and decoder behind numerics.h.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/math/common.h"

namespace mpt::numerics_detail {

// One narrow format: field widths, the code of its largest finite value, the code an overflow
// becomes when not saturating (Inf, or NaN for E4M3, which has no Inf) and its canonical NaN.
// `ieee_specials`: the all-ones exponent holds Inf and NaN (f16, bf16, E5M2); otherwise only the
// all-ones code S.1111.111 is NaN (OCP E4M3).
struct F16Format {
  static constexpr int kExpBits = 5, kManBits = 10;
  static constexpr uint32_t kMaxFinite = 0x7BFF, kOverflow = 0x7C00, kNaN = 0x7FFF;
  static constexpr bool kIeeeSpecials = true;
};
struct BF16Format {
  static constexpr int kExpBits = 8, kManBits = 7;
  static constexpr uint32_t kMaxFinite = 0x7F7F, kOverflow = 0x7F80, kNaN = 0x7FFF;
  static constexpr bool kIeeeSpecials = true;
};
struct E4M3Format {
  static constexpr int kExpBits = 4, kManBits = 3;
  static constexpr uint32_t kMaxFinite = 0x7E, kOverflow = 0x7F, kNaN = 0x7F;
  static constexpr bool kIeeeSpecials = false;
};
struct E5M2Format {
  static constexpr int kExpBits = 5, kManBits = 2;
  static constexpr uint32_t kMaxFinite = 0x7B, kOverflow = 0x7C, kNaN = 0x7F;
  static constexpr bool kIeeeSpecials = true;
};

// Source IEEE binary formats, described by their bit container and field widths.
struct FloatSource {
  using Bits = uint32_t;
  static constexpr int kExpBits = 8, kManBits = 23;
};
struct DoubleSource {
  using Bits = uint64_t;
  static constexpr int kExpBits = 11, kManBits = 52;
};

template <class To, class From>
MPT_HD MPT_INLINE To bit_cast(const From& from) {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

// Rounds the IEEE value with bits `x` (layout Src) to format Dst, round to nearest, ties to even.
// Finite values beyond Dst's range and infinities become Dst's largest finite value when
// `saturate`, else Dst::kOverflow (Inf, or NaN for E4M3); both keep the sign, as every result but
// NaN does (-0 too). A NaN input becomes the canonical NaN, without sign. This is bit for bit what
// NVIDIA's host __nv_cvt_float_to_fp8 does, including -overflow -> 0xFF in E4M3 without saturation.
template <class Dst, class Src>
MPT_HD MPT_INLINE uint32_t round_to_format(typename Src::Bits x, bool saturate) {
  using Bits = typename Src::Bits;
  constexpr int kTotalBits = Src::kExpBits + Src::kManBits;
  constexpr Bits kAbsMask = (Bits(1) << kTotalBits) - 1;
  constexpr Bits kInf = ((Bits(1) << Src::kExpBits) - 1) << Src::kManBits;
  constexpr int kSrcBias = (1 << (Src::kExpBits - 1)) - 1;
  constexpr int kDstBias = (1 << (Dst::kExpBits - 1)) - 1;
  constexpr int kDstMaxExp = static_cast<int>(Dst::kMaxFinite >> Dst::kManBits);
  constexpr uint32_t kDstSign = 1u << (Dst::kExpBits + Dst::kManBits);

  const Bits a = x & kAbsMask;
  if (a > kInf) return Dst::kNaN;
  const uint32_t sign = (x >> kTotalBits) != 0 ? kDstSign : 0u;
  bool overflow = a == kInf;
  uint32_t r = 0;
  if (!overflow) {
    // Source significand with its implicit bit; a subnormal source has exponent field 0 but the
    // scale of field 1.
    int e = static_cast<int>(a >> Src::kManBits);
    Bits sig = a & ((Bits(1) << Src::kManBits) - 1);
    if (e == 0) {
      e = 1;
    } else {
      sig |= Bits(1) << Src::kManBits;
    }
    const int dst_exp = e - kSrcBias + kDstBias;
    if (dst_exp > kDstMaxExp) {
      overflow = true;
    } else {
      // Normal target: keep kManBits below the implicit bit and add the exponent field minus one,
      // so that the implicit bit (and a rounding carry) lands in the exponent. Subnormal target:
      // shift further right; the exponent field is 0. Shifts beyond the significand round to 0.
      int shift = Src::kManBits - Dst::kManBits;
      Bits base = 0;
      if (dst_exp >= 1) {
        base = static_cast<Bits>(dst_exp - 1) << Dst::kManBits;
      } else {
        shift += 1 - dst_exp;
        if (shift > Src::kManBits + 2) shift = Src::kManBits + 2;
      }
      const Bits half = Bits(1) << (shift - 1);
      const Bits rest = sig & ((Bits(1) << shift) - 1);
      Bits q = sig >> shift;
      if (rest > half || (rest == half && (q & 1) != 0)) ++q;
      r = static_cast<uint32_t>(base + q);
      overflow = r > Dst::kMaxFinite;
    }
  }
  if (overflow) r = saturate ? Dst::kMaxFinite : Dst::kOverflow;
  return r | sign;
}

// The float value of code `b` of format Fmt (exact). NaN keeps its sign and payload, quiet bit set.
template <class Fmt>
MPT_HD MPT_INLINE float decode_format(uint32_t b) {
  constexpr int kBias = (1 << (Fmt::kExpBits - 1)) - 1;
  constexpr uint32_t kExpMax = (1u << Fmt::kExpBits) - 1;
  constexpr uint32_t kManMask = (1u << Fmt::kManBits) - 1;
  // Scale of one subnormal step, 2^(1 - bias - man_bits); a normal float for every format but bf16,
  // which decodes by a shift instead.
  constexpr float kSubnormalStep = 1.0f / static_cast<float>(1u << (kBias - 1 + Fmt::kManBits));
  const uint32_t sign = ((b >> (Fmt::kExpBits + Fmt::kManBits)) & 1u) << 31;
  const uint32_t e = (b >> Fmt::kManBits) & kExpMax;
  const uint32_t m = b & kManMask;
  uint32_t out;
  if (e == kExpMax && (Fmt::kIeeeSpecials || m == kManMask)) {
    out = (Fmt::kIeeeSpecials && m == 0) ? 0x7F800000u : (0x7FC00000u | (m << (23 - Fmt::kManBits)));
  } else if (e == 0) {
    out = bit_cast<uint32_t>(static_cast<float>(m) * kSubnormalStep);
  } else {
    out = ((e - kBias + 127) << 23) | (m << (23 - Fmt::kManBits));
  }
  return bit_cast<float>(out | sign);
}

// |v| as a double rounded to odd: exact when |v| < 2^53, else truncated to 53 bits with the last kept
// bit set when anything was cut off. Rounding that double to any format of at most 51 significant
// bits then gives the correctly rounded value of v (no double-rounding error).
MPT_HD MPT_INLINE double u64_to_double_round_odd(uint64_t u) {
  constexpr uint64_t kExactLimit = uint64_t(1) << 53;
  if (u < kExactLimit) return static_cast<double>(u);
  int cut = 0;
  for (uint64_t t = u >> 53; t != 0; t >>= 1) ++cut;
  const uint64_t dropped = u & ((uint64_t(1) << cut) - 1);
  uint64_t kept = u - dropped;
  if (dropped != 0) kept |= uint64_t(1) << cut;
  return static_cast<double>(kept);
}

MPT_HD MPT_INLINE double i64_to_double_round_odd(int64_t v) {
  const uint64_t mag = v < 0 ? uint64_t(0) - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  const double d = u64_to_double_round_odd(mag);
  return v < 0 ? -d : d;
}

}  // namespace mpt::numerics_detail
