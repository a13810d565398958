// kernels/math/numerics_cast.h: scalar_cast<Dst>(x), the one element conversion between every pair of storage types.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/math/common.h"
#include "kernels/math/numerics.h"

namespace mpt {

namespace numerics_detail {

// Floating -> integer with defined results everywhere: truncation toward zero like static_cast
// when the value fits, saturation to the integer's range when it does not, and NaN -> 0.
template <class I, class F>
MPT_HD MPT_INLINE I float_to_int_saturating(F x) {
  constexpr int kDigits = static_cast<int>(sizeof(I) * 8) - (std::is_signed_v<I> ? 1 : 0);
  constexpr F kLimit = static_cast<F>(uint64_t(1) << kDigits);  // max + 1, a power of two
  constexpr I kMax = static_cast<I>((uint64_t(1) << kDigits) - 1);
  constexpr I kMin = std::is_signed_v<I> ? static_cast<I>(-kMax - 1) : I(0);
  if (x != x) return I(0);
  if (x >= kLimit) return kMax;
  if (x <= static_cast<F>(kMin)) return kMin;
  return static_cast<I>(x);
}

// float or double -> a narrow float type, rounded once.
template <class Dst, class F>
MPT_HD MPT_INLINE Dst round_to_narrow(F x, Fp8Saturation sat) {
  static_assert(std::is_same_v<F, float> || std::is_same_v<F, double>);
  constexpr bool kFloat = std::is_same_v<F, float>;
  if constexpr (std::is_same_v<Dst, f16>) {
    if constexpr (kFloat) return f16::from_bits(float_to_f16_bits(x));
    else return f16::from_bits(double_to_f16_bits(x));
  } else if constexpr (std::is_same_v<Dst, bf16>) {
    if constexpr (kFloat) return bf16::from_bits(float_to_bf16_bits(x));
    else return bf16::from_bits(double_to_bf16_bits(x));
  } else if constexpr (std::is_same_v<Dst, f8e4m3>) {
    if constexpr (kFloat) return f8e4m3::from_bits(float_to_e4m3_bits(x, sat));
    else return f8e4m3::from_bits(double_to_e4m3_bits(x, sat));
  } else {
    static_assert(std::is_same_v<Dst, f8e5m2>);
    if constexpr (kFloat) return f8e5m2::from_bits(float_to_e5m2_bits(x, sat));
    else return f8e5m2::from_bits(double_to_e5m2_bits(x, sat));
  }
}

}  // namespace numerics_detail

// Converts one value. Rules:
// - narrow float (f16, bf16, fp8) sources widen exactly to float first;
// - to f16/bf16/fp8: one round to nearest even from the exact source value (double and integer
//   sources are not double-rounded); `sat` applies to fp8 destinations only;
// - to float/double: static_cast (integers round to nearest even);
// - floating -> integer: truncation toward zero, saturating at the integer's range, NaN -> 0;
// - integer -> integer: static_cast (two's-complement wrap, as in C++20).
template <class Dst, class Src>
MPT_HD MPT_INLINE Dst scalar_cast(Src x, Fp8Saturation sat = Fp8Saturation::Saturate) {
  using namespace numerics_detail;
  if constexpr (std::is_same_v<Dst, Src>) {
    return x;
  } else if constexpr (is_narrow_float_v<Src>) {
    return scalar_cast<Dst, float>(static_cast<float>(x), sat);
  } else if constexpr (std::is_integral_v<Src> && is_narrow_float_v<Dst>) {
    return scalar_cast<Dst, double>(integer_to_double(x), sat);
  } else if constexpr (is_narrow_float_v<Dst>) {
    return round_to_narrow<Dst>(x, sat);
  } else if constexpr (std::is_integral_v<Dst> && std::is_floating_point_v<Src>) {
    return float_to_int_saturating<Dst>(x);
  } else {
    return static_cast<Dst>(x);
  }
}

}  // namespace mpt
