// kernels/math/numerics.h: f16, bf16 and OCP FP8 (E4M3, E5M2) scalar types with round-to-nearest-even conversions, host and device.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/math/common.h"
#include "kernels/math/numerics_rounding.h"

#if defined(__CUDACC__)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#endif

// Semantics (host and device give the same bits; see tests/numerics):
// - float or double -> format rounds to nearest, ties to even, directly from the source bits
//   (double is not first rounded to float, which would round twice).
// - f16 and bf16 are IEEE: overflow gives +-Inf.
// - FP8 follows OCP FP8 and NVIDIA's __nv_cvt_float_to_fp8: E4M3 has no Inf (max 448, NaN is
//   S.1111.111); E5M2 has Inf (max 57344). Fp8Saturation::Saturate maps finite overflow and +-Inf
//   to +-max; NoSaturate maps them to NaN (E4M3) or +-Inf (E5M2).
// - A NaN input gives the canonical, unsigned NaN: 0x7FFF (f16, bf16), 0x7F (FP8). A non-saturating
//   E4M3 overflow gives NaN with the input's sign (0x7F or 0xFF), as NVIDIA's conversion does.
//   Negative zero stays negative. Subnormal inputs and outputs are honoured (no
//   flush to zero). float -> every format is bit-identical to cuda_fp16.h / cuda_bf16.h /
//   cuda_fp8.h host code on all 2^32 inputs.
// - format -> float is exact; a NaN keeps its sign and payload with the quiet bit set on the host
//   (CUDA's device conversion returns its own canonical NaN: compare NaNs by NaN-ness).
namespace mpt {

enum class Fp8Saturation : uint8_t { Saturate, NoSaturate };

inline constexpr float kF16Max = 65504.0f;
inline constexpr float kF16MinNormal = 0x1p-14f;
inline constexpr float kF16MinSubnormal = 0x1p-24f;
inline constexpr float kBF16Max = 0x1.FEp127f;
inline constexpr float kBF16MinNormal = 0x1p-126f;
inline constexpr float kBF16MinSubnormal = 0x1p-133f;
inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE4M3MinNormal = 0x1p-6f;
inline constexpr float kE4M3MinSubnormal = 0x1p-9f;
inline constexpr float kE5M2Max = 57344.0f;
inline constexpr float kE5M2MinNormal = 0x1p-14f;
inline constexpr float kE5M2MinSubnormal = 0x1p-16f;

inline constexpr uint16_t kF16CanonicalNaN = 0x7FFF;
inline constexpr uint16_t kBF16CanonicalNaN = 0x7FFF;
inline constexpr uint8_t kFp8CanonicalNaN = 0x7F;

namespace numerics_detail {
MPT_HD MPT_INLINE uint32_t float_bits(float x) { return bit_cast<uint32_t>(x); }
MPT_HD MPT_INLINE uint64_t double_bits(double x) { return bit_cast<uint64_t>(x); }
}  // namespace numerics_detail

// ---- f16 (IEEE binary16) ----
MPT_HD MPT_INLINE uint16_t float_to_f16_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __half_as_ushort(__float2half_rn(x));
#else
  using namespace numerics_detail;
  return static_cast<uint16_t>(round_to_format<F16Format, FloatSource>(float_bits(x), false));
#endif
}
MPT_HD MPT_INLINE uint16_t double_to_f16_bits(double x) {
  using namespace numerics_detail;
  return static_cast<uint16_t>(round_to_format<F16Format, DoubleSource>(double_bits(x), false));
}
MPT_HD MPT_INLINE float f16_bits_to_float(uint16_t b) {
#if defined(__CUDA_ARCH__)
  return __half2float(__ushort_as_half(b));
#else
  return numerics_detail::decode_format<numerics_detail::F16Format>(b);
#endif
}

// ---- bf16 (bfloat16: float's exponent, 8 significant bits) ----
MPT_HD MPT_INLINE uint16_t float_to_bf16_bits(float x) {
#if defined(__CUDA_ARCH__)
  return __bfloat16_as_ushort(__float2bfloat16_rn(x));
#else
  using namespace numerics_detail;
  return static_cast<uint16_t>(round_to_format<BF16Format, FloatSource>(float_bits(x), false));
#endif
}
MPT_HD MPT_INLINE uint16_t double_to_bf16_bits(double x) {
  using namespace numerics_detail;
  return static_cast<uint16_t>(round_to_format<BF16Format, DoubleSource>(double_bits(x), false));
}
MPT_HD MPT_INLINE float bf16_bits_to_float(uint16_t b) {
  return numerics_detail::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// ---- FP8 E4M3 and E5M2 (OCP) ----
MPT_HD MPT_INLINE uint8_t float_to_e4m3_bits(float x, Fp8Saturation sat) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (sat == Fp8Saturation::Saturate) return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3);
#endif
  using namespace numerics_detail;
  return static_cast<uint8_t>(
      round_to_format<E4M3Format, FloatSource>(float_bits(x), sat == Fp8Saturation::Saturate));
}
MPT_HD MPT_INLINE uint8_t double_to_e4m3_bits(double x, Fp8Saturation sat) {
  using namespace numerics_detail;
  return static_cast<uint8_t>(
      round_to_format<E4M3Format, DoubleSource>(double_bits(x), sat == Fp8Saturation::Saturate));
}
MPT_HD MPT_INLINE float e4m3_bits_to_float(uint8_t b) {
  return numerics_detail::decode_format<numerics_detail::E4M3Format>(b);
}

MPT_HD MPT_INLINE uint8_t float_to_e5m2_bits(float x, Fp8Saturation sat) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  if (sat == Fp8Saturation::Saturate) return __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E5M2);
#endif
  using namespace numerics_detail;
  return static_cast<uint8_t>(
      round_to_format<E5M2Format, FloatSource>(float_bits(x), sat == Fp8Saturation::Saturate));
}
MPT_HD MPT_INLINE uint8_t double_to_e5m2_bits(double x, Fp8Saturation sat) {
  using namespace numerics_detail;
  return static_cast<uint8_t>(
      round_to_format<E5M2Format, DoubleSource>(double_bits(x), sat == Fp8Saturation::Saturate));
}
MPT_HD MPT_INLINE float e5m2_bits_to_float(uint8_t b) {
  return numerics_detail::decode_format<numerics_detail::E5M2Format>(b);
}

namespace numerics_detail {
// An integer as a double that rounds correctly once more (see u64_to_double_round_odd).
template <class I>
MPT_HD MPT_INLINE double integer_to_double(I v) {
  if constexpr (std::is_signed_v<I>) {
    return i64_to_double_round_odd(static_cast<int64_t>(v));
  } else {
    return u64_to_double_round_odd(static_cast<uint64_t>(v));
  }
}
}  // namespace numerics_detail

// The storage types. Trivially copyable and trivially default-constructible (an uninitialised
// value, like __half); `bits` is the encoding. Construction from float/double/integers rounds to
// nearest even (integers are converted exactly, then rounded once); FP8 constructors saturate like
// CUDA's __nv_fp8_e4m3 / __nv_fp8_e5m2 (use the *_bits functions for NoSaturate).
struct f16 {
  uint16_t bits;
  f16() = default;
  MPT_HD explicit f16(float x) : bits(float_to_f16_bits(x)) {}
  MPT_HD explicit f16(double x) : bits(double_to_f16_bits(x)) {}
  template <class I>
    requires std::is_integral_v<I>
  MPT_HD explicit f16(I x) : bits(double_to_f16_bits(numerics_detail::integer_to_double(x))) {}
  MPT_HD operator float() const { return f16_bits_to_float(bits); }
  static MPT_HD f16 from_bits(uint16_t b) {
    f16 r;
    r.bits = b;
    return r;
  }
};

struct bf16 {
  uint16_t bits;
  bf16() = default;
  MPT_HD explicit bf16(float x) : bits(float_to_bf16_bits(x)) {}
  MPT_HD explicit bf16(double x) : bits(double_to_bf16_bits(x)) {}
  template <class I>
    requires std::is_integral_v<I>
  MPT_HD explicit bf16(I x) : bits(double_to_bf16_bits(numerics_detail::integer_to_double(x))) {}
  MPT_HD operator float() const { return bf16_bits_to_float(bits); }
  static MPT_HD bf16 from_bits(uint16_t b) {
    bf16 r;
    r.bits = b;
    return r;
  }
};

struct f8e4m3 {
  uint8_t bits;
  f8e4m3() = default;
  MPT_HD explicit f8e4m3(float x) : bits(float_to_e4m3_bits(x, Fp8Saturation::Saturate)) {}
  MPT_HD explicit f8e4m3(double x) : bits(double_to_e4m3_bits(x, Fp8Saturation::Saturate)) {}
  template <class I>
    requires std::is_integral_v<I>
  MPT_HD explicit f8e4m3(I x)
      : bits(double_to_e4m3_bits(numerics_detail::integer_to_double(x), Fp8Saturation::Saturate)) {}
  MPT_HD operator float() const { return e4m3_bits_to_float(bits); }
  static MPT_HD f8e4m3 from_bits(uint8_t b) {
    f8e4m3 r;
    r.bits = b;
    return r;
  }
};

struct f8e5m2 {
  uint8_t bits;
  f8e5m2() = default;
  MPT_HD explicit f8e5m2(float x) : bits(float_to_e5m2_bits(x, Fp8Saturation::Saturate)) {}
  MPT_HD explicit f8e5m2(double x) : bits(double_to_e5m2_bits(x, Fp8Saturation::Saturate)) {}
  template <class I>
    requires std::is_integral_v<I>
  MPT_HD explicit f8e5m2(I x)
      : bits(double_to_e5m2_bits(numerics_detail::integer_to_double(x), Fp8Saturation::Saturate)) {}
  MPT_HD operator float() const { return e5m2_bits_to_float(bits); }
  static MPT_HD f8e5m2 from_bits(uint8_t b) {
    f8e5m2 r;
    r.bits = b;
    return r;
  }
};

static_assert(sizeof(f16) == 2 && sizeof(bf16) == 2 && sizeof(f8e4m3) == 1 && sizeof(f8e5m2) == 1);
static_assert(std::is_trivially_copyable_v<f16> && std::is_trivially_copyable_v<bf16> &&
              std::is_trivially_copyable_v<f8e4m3> && std::is_trivially_copyable_v<f8e5m2>);
static_assert(std::is_trivially_default_constructible_v<f16> && std::is_trivially_default_constructible_v<f8e4m3>);

// The narrow floating types of this header.
template <class T>
inline constexpr bool is_narrow_float_v = std::is_same_v<T, f16> || std::is_same_v<T, bf16> ||
                                          std::is_same_v<T, f8e4m3> || std::is_same_v<T, f8e5m2>;

}  // namespace mpt
