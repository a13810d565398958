// tests/numerics/test_roundtrip.cpp: every f16/bf16/e4m3/e5m2 encoding decodes to the reference value and encodes back to itself.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "kernels/math/numerics.h"
#include "numerics_reference.h"

namespace mpt {
namespace {

using test::RefFormat;

// The library's decode and encode (float and double sources) for one format, by code.
float lib_decode(RefFormat f, uint32_t c) {
  switch (f) {
    case RefFormat::F16: return f16_bits_to_float(static_cast<uint16_t>(c));
    case RefFormat::BF16: return bf16_bits_to_float(static_cast<uint16_t>(c));
    case RefFormat::E4M3: return e4m3_bits_to_float(static_cast<uint8_t>(c));
    case RefFormat::E5M2: return e5m2_bits_to_float(static_cast<uint8_t>(c));
  }
  return 0;
}

template <class X>
uint32_t lib_encode(RefFormat f, X x, Fp8Saturation sat) {
  constexpr bool kFloat = std::is_same_v<X, float>;
  switch (f) {
    case RefFormat::F16: return kFloat ? float_to_f16_bits(x) : double_to_f16_bits(x);
    case RefFormat::BF16: return kFloat ? float_to_bf16_bits(x) : double_to_bf16_bits(x);
    case RefFormat::E4M3: return kFloat ? float_to_e4m3_bits(x, sat) : double_to_e4m3_bits(x, sat);
    case RefFormat::E5M2: return kFloat ? float_to_e5m2_bits(x, sat) : double_to_e5m2_bits(x, sat);
  }
  return 0;
}

// The storage type's own constructor and conversion operator.
uint32_t struct_roundtrip(RefFormat f, uint32_t c) {
  switch (f) {
    case RefFormat::F16: return f16(static_cast<float>(f16::from_bits(static_cast<uint16_t>(c)))).bits;
    case RefFormat::BF16: return bf16(static_cast<float>(bf16::from_bits(static_cast<uint16_t>(c)))).bits;
    case RefFormat::E4M3: return f8e4m3(static_cast<float>(f8e4m3::from_bits(static_cast<uint8_t>(c)))).bits;
    case RefFormat::E5M2: return f8e5m2(static_cast<float>(f8e5m2::from_bits(static_cast<uint8_t>(c)))).bits;
  }
  return 0;
}

class RoundTrip : public ::testing::TestWithParam<RefFormat> {};

TEST_P(RoundTrip, EveryEncodingDecodesExactlyAndEncodesBack) {
  const RefFormat f = GetParam();
  const test::RefFormatInfo info = test::ref_info(f);
  const uint32_t canonical_nan = (test::ref_code_count(f) >> 1) - 1;
  const uint32_t max_code = test::ref_encode(f, info.max_finite, false);
  int failures = 0, nans = 0, infs = 0, subnormals = 0;
  for (uint32_t c = 0; c < test::ref_code_count(f) && failures < 20; ++c) {
    const float v = lib_decode(f, c);
    const long double expected = test::ref_decode(f, c);
    const bool is_nan = test::ref_is_nan(f, c);
    const bool is_inf = std::isinf(expected);
    nans += is_nan;
    infs += is_inf;
    subnormals += !is_nan && expected != 0 && std::fabs(expected) < info.min_subnormal * (1 << info.man_bits);
    std::string why;
    if (is_nan) {
      if (!std::isnan(v)) why = "decodes to a number";
    } else if (static_cast<long double>(v) != expected || std::signbit(v) != std::signbit(expected)) {
      why = "decodes to the wrong value";
    }
    // Encoding back: NaN -> canonical NaN; +-Inf needs NoSaturate (Saturate maps it to +-max).
    const uint32_t expect_back = is_nan ? canonical_nan : c;
    const uint32_t sat_back = is_nan ? canonical_nan : is_inf ? (max_code | (c & ~canonical_nan)) : c;
    if (lib_encode(f, v, Fp8Saturation::NoSaturate) != expect_back) why += " float->code(NoSaturate) differs";
    if (lib_encode(f, static_cast<double>(v), Fp8Saturation::NoSaturate) != expect_back) {
      why += " double->code(NoSaturate) differs";
    }
    const bool ieee16 = f == RefFormat::F16 || f == RefFormat::BF16;
    const uint32_t sat_expect = ieee16 ? expect_back : sat_back;
    if (lib_encode(f, v, Fp8Saturation::Saturate) != sat_expect) why += " float->code(Saturate) differs";
    if (struct_roundtrip(f, c) != sat_expect) why += " struct round trip differs";
    if (!why.empty()) {
      ++failures;
      ADD_FAILURE() << info.name << " code 0x" << std::hex << c << ": " << why << " (decoded " << v << ")";
    }
  }
  EXPECT_EQ(failures, 0);
  // The loop covered the special classes the format has.
  EXPECT_GT(nans, 0);
  EXPECT_EQ(infs, info.has_inf ? 2 : 0);
  EXPECT_EQ(subnormals, 2 * ((1 << info.man_bits) - 1));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, RoundTrip,
                         ::testing::Values(RefFormat::F16, RefFormat::BF16, RefFormat::E4M3, RefFormat::E5M2),
                         [](const auto& p) { return std::string(test::ref_info(p.param).name); });

// Every FP8 value is exactly representable in f16 and bf16, as the CPU GEMM path relies on.
TEST(Fp8Embedding, ValuesAreExactInF16AndBF16) {
  for (uint32_t c = 0; c < 256; ++c) {
    for (RefFormat f : {RefFormat::E4M3, RefFormat::E5M2}) {
      if (test::ref_is_nan(f, c)) continue;
      const float v = lib_decode(f, c);
      EXPECT_EQ(f16_bits_to_float(float_to_f16_bits(v)), v) << test::ref_info(f).name << " code " << c;
      EXPECT_EQ(bf16_bits_to_float(float_to_bf16_bits(v)), v) << test::ref_info(f).name << " code " << c;
    }
  }
}

}  // namespace
}  // namespace mpt
