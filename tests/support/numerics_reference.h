// tests/support/numerics_reference.h: an arithmetic reference for f16/bf16/fp8 rounding and decoding, and sample sets that stress it.
#pragma once

#include <cstdint>
#include <vector>

namespace mpt::test {

// The reference works on values, not bits: it finds the two neighbouring representable values
// with frexp/ldexp/floor in long double (exact for every float, double and 64-bit integer on
// x86-64) and picks one by comparing the remainder with one half, then encodes the chosen value
// field by field. It shares no code with kernels/math/numerics*.h.
enum class RefFormat { F16, BF16, E4M3, E5M2 };

struct RefFormatInfo {
  int exp_bits;
  int man_bits;
  bool has_inf;             // false: OCP E4M3 (S.1111.111 is NaN, everything else finite)
  long double max_finite;   // 65504, 0x1.FEp127, 448, 57344
  long double min_subnormal;
  const char* name;
};
RefFormatInfo ref_info(RefFormat f);

// The encoding of x rounded to nearest, ties to even. Overflow (|rounded| > max_finite) and +-Inf
// give +-max_finite when `saturate`, else +-Inf, or the signed NaN S.1111.111 for a format without
// Inf. A NaN input gives the canonical unsigned NaN (0x7FFF for 16-bit formats, 0x7F for FP8).
uint32_t ref_encode(RefFormat f, long double x, bool saturate);

// The exact value of an encoding (a quiet NaN for NaN codes).
long double ref_decode(RefFormat f, uint32_t bits);
bool ref_is_nan(RefFormat f, uint32_t bits);

// Number of codes of the format (65536 or 256).
uint32_t ref_code_count(RefFormat f);

// Floats that stress rounding into format f: every representable value, the midpoints between
// neighbours (exact ties) and their float neighbours (+-1, +-2 ulp), +-1 ulp around each value,
// min subnormal / 2, overflow thresholds, both signs, zeros, infinities and NaNs with several
// payloads.
std::vector<float> ref_float_samples(RefFormat f);

// Doubles for the same purpose, plus values a hair above and below each midpoint (by 1 double ulp
// and by amounts that vanish when first rounded to float: the double-rounding traps).
std::vector<double> ref_double_samples(RefFormat f);

// +-1..3 ulp around every power of two of float's range, float's extremes, zeros, infinities, NaNs.
std::vector<float> float_boundary_samples();

}  // namespace mpt::test
