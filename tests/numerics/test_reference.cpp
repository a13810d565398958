// tests/numerics/test_reference.cpp: float -> and double -> f16/bf16/e4m3/e5m2 against the arithmetic reference on boundary, tie and random samples.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/math/numerics.h"
#include "numerics_reference.h"

namespace mpt {
namespace {

using test::RefFormat;

template <class X>
uint32_t lib_encode(RefFormat f, X x, Fp8Saturation sat) {
  if constexpr (std::is_same_v<X, float>) {
    switch (f) {
      case RefFormat::F16: return float_to_f16_bits(x);
      case RefFormat::BF16: return float_to_bf16_bits(x);
      case RefFormat::E4M3: return float_to_e4m3_bits(x, sat);
      case RefFormat::E5M2: return float_to_e5m2_bits(x, sat);
    }
  } else {
    switch (f) {
      case RefFormat::F16: return double_to_f16_bits(x);
      case RefFormat::BF16: return double_to_bf16_bits(x);
      case RefFormat::E4M3: return double_to_e4m3_bits(x, sat);
      case RefFormat::E5M2: return double_to_e5m2_bits(x, sat);
    }
  }
  return 0;
}

struct Case {
  RefFormat format;
  Fp8Saturation sat;
};

std::string case_name(const Case& c) {
  std::string name = test::ref_info(c.format).name;
  const bool fp8 = c.format == RefFormat::E4M3 || c.format == RefFormat::E5M2;
  if (fp8) name += c.sat == Fp8Saturation::Saturate ? "_saturate" : "_nosaturate";
  return name;
}

void PrintTo(const Case& c, std::ostream* os) { *os << case_name(c); }

// Compares the library with the reference on every sample; reports the first few mismatches.
template <class X>
void expect_matches_reference(const Case& c, const std::vector<X>& samples, const char* what) {
  const bool saturate = c.sat == Fp8Saturation::Saturate;
  size_t mismatches = 0;
  for (X x : samples) {
    const uint32_t got = lib_encode(c.format, x, c.sat);
    const uint32_t want = test::ref_encode(c.format, static_cast<long double>(x), saturate);
    if (got != want && ++mismatches <= 10) {
      using Bits = std::conditional_t<sizeof(X) == 4, uint32_t, uint64_t>;
      ADD_FAILURE() << case_name(c) << " " << what << ": x = " << std::hexfloat << x << " (bits 0x" << std::hex
                    << std::bit_cast<Bits>(x) << "): got 0x" << got << ", reference 0x" << want;
    }
  }
  EXPECT_EQ(mismatches, 0u) << case_name(c) << " " << what << " over " << samples.size() << " samples";
}

std::vector<float> random_floats(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<float> out(n);
  // Half uniformly random bit patterns, half with exponents near the narrow formats' ranges
  // (2^-30 .. 2^20), where rounding is most varied.
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = static_cast<uint32_t>(rng());
    if (i % 2 == 1) bits = (bits & 0x807FFFFFu) | ((97u + static_cast<uint32_t>(rng() % 51)) << 23);
    out[i] = std::bit_cast<float>(bits);
  }
  return out;
}

std::vector<double> random_doubles(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    uint64_t bits = rng();
    if (i % 4 != 0) bits = (bits & 0x800FFFFFFFFFFFFFull) | ((1023ull - 140 + rng() % 270) << 52);
    out[i] = std::bit_cast<double>(bits);
  }
  return out;
}

class Reference : public ::testing::TestWithParam<Case> {};

TEST_P(Reference, FloatBoundariesTiesAndSpecials) {
  const Case c = GetParam();
  const std::vector<float> format = test::ref_float_samples(c.format);
  const std::vector<float> boundaries = test::float_boundary_samples();
  ASSERT_GT(format.size(), 1000u);
  expect_matches_reference(c, format, "format samples");
  expect_matches_reference(c, boundaries, "float boundaries");
}

TEST_P(Reference, RandomFloats) {
  const Case c = GetParam();
  expect_matches_reference(c, random_floats(1 << 20, 0x5EED + static_cast<uint64_t>(c.format)), "random floats");
}

TEST_P(Reference, DoubleBoundariesTiesAndTraps) {
  const Case c = GetParam();
  const std::vector<double> samples = test::ref_double_samples(c.format);
  expect_matches_reference(c, samples, "double samples");
  // Every float sample again, as a double (the double path must agree with the float path there).
  const std::vector<float> boundaries = test::float_boundary_samples();
  expect_matches_reference(c, std::vector<double>(boundaries.begin(), boundaries.end()), "float boundaries as double");
  // The trap samples are meaningful: for some of them float-first rounding gives another answer.
  size_t double_rounding_differs = 0;
  for (double x : samples) {
    if (std::isnan(x)) continue;
    double_rounding_differs += lib_encode(c.format, static_cast<float>(x), c.sat) != lib_encode(c.format, x, c.sat);
  }
  EXPECT_GT(double_rounding_differs, 100u);
}

TEST_P(Reference, RandomDoubles) {
  const Case c = GetParam();
  expect_matches_reference(c, random_doubles(1 << 19, 0xD0B1E + static_cast<uint64_t>(c.format)), "random doubles");
}

INSTANTIATE_TEST_SUITE_P(AllFormats, Reference,
                         ::testing::Values(Case{RefFormat::F16, Fp8Saturation::NoSaturate},
                                           Case{RefFormat::BF16, Fp8Saturation::NoSaturate},
                                           Case{RefFormat::E4M3, Fp8Saturation::Saturate},
                                           Case{RefFormat::E4M3, Fp8Saturation::NoSaturate},
                                           Case{RefFormat::E5M2, Fp8Saturation::Saturate},
                                           Case{RefFormat::E5M2, Fp8Saturation::NoSaturate}),
                         [](const auto& p) { return case_name(p.param); });

// The reference itself on values worked out by hand, so that a reference bug cannot hide a library bug.
TEST(ReferenceSelfCheck, HandWorkedValues) {
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, 464.0L, false), 0x7Eu);
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, 465.0L, false), 0x7Fu);
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, -465.0L, false), 0xFFu);
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, -std::numeric_limits<long double>::quiet_NaN(), false), 0x7Fu);
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, -465.0L, true), 0xFEu);
  EXPECT_EQ(test::ref_encode(RefFormat::E5M2, 61440.0L, false), 0x7Cu);
  EXPECT_EQ(test::ref_encode(RefFormat::E5M2, 61440.0L, true), 0x7Bu);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 65520.0L, false), 0x7C00u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 1.0L, false), 0x3C00u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, -2.0L, false), 0xC000u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 0x1p-24L, false), 0x0001u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 0x1p-25L, false), 0x0000u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 0x1.8p-24L, false), 0x0002u);
  EXPECT_EQ(test::ref_encode(RefFormat::F16, 0x1.FFCp-15L, false), 0x0400u);  // rounds up into the normals
  EXPECT_EQ(test::ref_encode(RefFormat::BF16, 0x1p-133L, false), 0x0001u);
  EXPECT_EQ(test::ref_encode(RefFormat::BF16, 3.0L, false), 0x4040u);
  EXPECT_EQ(test::ref_encode(RefFormat::E4M3, 0.01L, true), 0x05u);
  EXPECT_EQ(test::ref_decode(RefFormat::E4M3, 0x7E), 448.0L);
  EXPECT_EQ(test::ref_decode(RefFormat::E5M2, 0x7B), 57344.0L);
  EXPECT_EQ(test::ref_decode(RefFormat::BF16, 0x7F7F), 0x1.FEp127L);
  EXPECT_TRUE(test::ref_is_nan(RefFormat::E4M3, 0xFF));
  EXPECT_FALSE(test::ref_is_nan(RefFormat::E4M3, 0x7E));
  EXPECT_TRUE(test::ref_is_nan(RefFormat::E5M2, 0x7D));
  EXPECT_FALSE(test::ref_is_nan(RefFormat::E5M2, 0x7C));
}

}  // namespace
}  // namespace mpt
