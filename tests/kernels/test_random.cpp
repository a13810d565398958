// tests/kernels/test_random.cpp: Philox4x32-10 known answers, the log/sin/cos approximations and the CPU fills.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numbers>
#include <vector>

#include "kernels/cpu/random.h"
#include "kernels/math/numerics.h"
#include "kernels/math/philox.h"
#include "kernels/math/random.h"

namespace {

using mpt::kernels::math::Philox4x32;
using mpt::kernels::math::philox;
using mpt::kernels::math::philox4x32_10;
namespace cpu = mpt::kernels::cpu;
namespace math = mpt::kernels::math;

struct Kat {
  uint32_t ctr[4];
  uint32_t key[2];
  uint32_t expected[4];
};

// Known answers. The first three are the "philox4x32 10" lines of Random123's tests/kat_vectors
// (github.com/DEShawResearch/random123; found through a verbatim copy of that file in a public
// repository's Philox test). The others are "philox4x32 10" lines of the Random123 manual's
// examples/kat_vectors (github.com/girving/random123-manual, commit 61e84792), which exercise single
// counter and key words. Columns: CTR (4 words), KEY (2 words), EXPECTED (4 words).
constexpr Kat kKats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000}, {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff}, {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}, {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
    {{0x00000001, 0x00000000, 0x00000000, 0x00000000}, {0x00000001, 0x00000000},
     {0xac08141b, 0xdfc5ccbe, 0x79c07a47, 0xa7f66093}},
    {{0x00000000, 0x00000000, 0x00000000, 0x00000001}, {0x00000000, 0xffffffff},
     {0x5c4ecd0c, 0x64c12cf9, 0x8f9fb4c8, 0x40c4a01f}},
    {{0x00000000, 0xffffffff, 0x00000000, 0x00000000}, {0x00000000, 0xffffffff},
     {0x5f9c47aa, 0x19861d86, 0xff2be81d, 0x4c7db17e}},
};

TEST(Philox, KnownAnswersFromRandom123) {
  for (const Kat& k : kKats) {
    const Philox4x32 c{{k.ctr[0], k.ctr[1], k.ctr[2], k.ctr[3]}};
    const Philox4x32 out = philox4x32_10(c, k.key[0], k.key[1]);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(out.v[j], k.expected[j]) << "ctr0 " << k.ctr[0] << " word " << j;
  }
}

TEST(Philox, SeedAndCounterMapOntoKeyAndLowCounterWords) {
  // philox(seed, counter): key = (seed lo, seed hi), counter = (counter lo, counter hi, 0, 0).
  const Philox4x32 a = philox(1u, 1u);
  const Kat& ka = kKats[3];
  for (int j = 0; j < 4; ++j) EXPECT_EQ(a.v[j], ka.expected[j]);
  const Philox4x32 b = philox(0xffffffff00000000ull, 0xffffffff00000000ull);
  const Kat& kb = kKats[5];
  for (int j = 0; j < 4; ++j) EXPECT_EQ(b.v[j], kb.expected[j]);
}

TEST(Philox, OffsetIncrementIsCeilOfQuarter) {
  EXPECT_EQ(math::philox_offset_increment(0), 0u);
  EXPECT_EQ(math::philox_offset_increment(-5), 0u);
  EXPECT_EQ(math::philox_offset_increment(1), 1u);
  EXPECT_EQ(math::philox_offset_increment(4), 1u);
  EXPECT_EQ(math::philox_offset_increment(5), 2u);
  EXPECT_EQ(math::philox_offset_increment(4000001), 1000001u);
}

// Float spacing at |x| (subnormal spacing below the normal range).
double float_ulp(double x) {
  const int e = x == 0.0 ? -126 : std::max(std::ilogb(x), -126);
  return std::ldexp(1.0, e - 23);
}

TEST(RandomMath, LogWithinOneUlpOverEveryRadiusInput) {
  // Box-Muller's radius input is (x + 1) * 2^-32 rounded to float: every float in [2^-32, 1] that is a
  // multiple of 2^-32. Enumerate them all (about 8.4e7), compare with double std::log.
  double max_ulp = 0.0;
  float worst = 0.0f;
#pragma omp parallel
  {
    double local_max = 0.0;
    float local_worst = 0.0f;
#pragma omp for schedule(static)
    for (int e = -32; e <= -1; ++e) {
      const double step = std::ldexp(1.0, std::max(e - 23, -32));
      const int64_t count = static_cast<int64_t>(std::ldexp(1.0, e) / step);
      for (int64_t m = 0; m < count; ++m) {
        const float u = static_cast<float>(std::ldexp(1.0, e) + static_cast<double>(m) * step);
        const double ref = std::log(static_cast<double>(u));
        const double err = std::abs(static_cast<double>(math::log_rn(u)) - ref) / float_ulp(ref);
        if (err > local_max) local_max = err, local_worst = u;
      }
    }
#pragma omp critical
    if (local_max > max_ulp) max_ulp = local_max, worst = local_worst;
  }
  EXPECT_EQ(math::log_rn(1.0f), 0.0f);
  std::printf("log_rn: max error %.3f ulp (at u = %a)\n", max_ulp, worst);
  EXPECT_LT(max_ulp, 1.0);  // measured 0.751
}

TEST(RandomMath, SinCosWithinOneAndAHalfUlpOverEveryAngle) {
  // Every 24-bit angle word k: reference sin/cos(2 pi k / 2^24) in double, reduced exactly by quarter
  // turns first so that the reference itself has no reduction error near the zeros.
  double max_sin = 0.0, max_cos = 0.0;
#pragma omp parallel for schedule(static) reduction(max : max_sin, max_cos)
  for (int64_t k = 0; k < (int64_t{1} << 24); ++k) {
    const double turns = static_cast<double>(k) * 0x1p-24;
    const double quarter = std::nearbyint(4.0 * turns);
    const double x = 2.0 * std::numbers::pi * (turns - quarter / 4.0);
    const double sx = std::sin(x), cx = std::cos(x);
    const int q = static_cast<int>(quarter) & 3;
    const double sref = q == 0 ? sx : q == 1 ? cx : q == 2 ? -sx : -cx;
    const double cref = q == 0 ? cx : q == 1 ? -sx : q == 2 ? -cx : sx;
    float s, c;
    math::sincos_2pi_u24(static_cast<uint32_t>(k), &s, &c);
    max_sin = std::max(max_sin, std::abs(s - sref) / float_ulp(sref));
    max_cos = std::max(max_cos, std::abs(c - cref) / float_ulp(cref));
  }
  std::printf("sincos_2pi_u24: max error sin %.3f ulp, cos %.3f ulp\n", max_sin, max_cos);
  EXPECT_LT(max_sin, 1.5);  // measured 1.015
  EXPECT_LT(max_cos, 1.5);
}

TEST(RandomMath, UnitConversionsHitTheirEndpoints) {
  EXPECT_EQ(math::uint32_to_uniform01(0u), 0.0f);
  EXPECT_EQ(math::uint32_to_uniform01(0xffffffffu), 1.0f - 0x1p-24f);
  EXPECT_EQ(math::uint32_to_uniform01_positive(0u), 0x1p-32f);
  EXPECT_EQ(math::uint32_to_uniform01_positive(0xffffffffu), 1.0f);
  EXPECT_EQ(math::uint32_to_uniform01_positive(0x00abcdefu), static_cast<float>(0x00abcdf0) * 0x1p-32f);
}

struct Moments {
  double mean, var;
};

template <class T>
Moments moments(const std::vector<T>& v) {
  double s = 0.0, s2 = 0.0;
  for (T x : v) s += static_cast<double>(x);
  const double mean = s / static_cast<double>(v.size());
  for (T x : v) s2 += (static_cast<double>(x) - mean) * (static_cast<double>(x) - mean);
  return {mean, s2 / static_cast<double>(v.size() - 1)};
}

constexpr int64_t kN = 1000000;

TEST(FillUniform, MatchesPhiloxWordsAndDoubleReference) {
  std::vector<float> unit(1003), shifted(1003);
  cpu::fill_uniform(unit.data(), 1003, 7, 11, 0.0f, 1.0f);
  cpu::fill_uniform(shifted.data(), 1003, 7, 11, -2.0f, 3.0f);
  for (int64_t i = 0; i < 1003; ++i) {
    const uint32_t w = philox(7, 11 + i / 4).v[i % 4];
    const double u = static_cast<double>(w >> 8) * 0x1p-24;  // exact
    ASSERT_EQ(unit[i], static_cast<float>(u)) << i;
    ASSERT_EQ(shifted[i], static_cast<float>(-2.0 + 5.0 * u)) << i;  // -2 + 5u is exact in double
  }
}

TEST(FillUniform, RangeAndMoments) {
  std::vector<float> v(kN);
  cpu::fill_uniform(v.data(), kN, 1234, 0, -2.0f, 3.0f);
  for (float x : v) ASSERT_TRUE(x >= -2.0f && x < 3.0f) << x;
  const Moments m = moments(v);
  // U(a, b): mean (a+b)/2, variance (b-a)^2/12, fourth central moment (b-a)^4/80.
  const double var = 25.0 / 12.0, mu4 = 625.0 / 80.0;
  EXPECT_NEAR(m.mean, 0.5, 5.0 * std::sqrt(var / kN));
  EXPECT_NEAR(m.var, var, 5.0 * std::sqrt((mu4 - var * var) / kN));
}

TEST(FillUniform, RoundingNeverReachesHigh) {
  // With low = -1e8 and high = -1e8 + 8, float spacing is 8: every fma rounds to low or high.
  std::vector<float> v(4096);
  cpu::fill_uniform(v.data(), 4096, 3, 0, -1e8f, -1e8f + 8.0f);
  for (float x : v) ASSERT_TRUE(x >= -1e8f && x < -1e8f + 8.0f) << x;
}

TEST(FillUniform, DeterministicAcrossCallsAndThreadCounts) {
  std::vector<float> a(kN), b(kN), c(kN);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::fill_uniform(a.data(), kN, 99, 5, 0.0f, 1.0f);
  omp_set_num_threads(2);
  cpu::fill_uniform(b.data(), kN, 99, 5, 0.0f, 1.0f);
  cpu::fill_uniform(c.data(), kN, 99, 5, 0.0f, 1.0f);
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
  EXPECT_EQ(b, c);
}

TEST(FillUniform, OffsetSelectsASliceOfALongerFill) {
  const uint64_t o = 37;
  const int64_t n = 1001;
  std::vector<float> big(4 * o + n), part(n);
  cpu::fill_uniform(big.data(), static_cast<int64_t>(big.size()), 42, 0, 0.0f, 1.0f);
  cpu::fill_uniform(part.data(), n, 42, o, 0.0f, 1.0f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], big[4 * o + i]) << i;
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(part[i], math::uniform_at(42, o, i, 0.0f, 1.0f)) << i;
}

TEST(FillUniform, CounterCarriesIntoTheHighWord) {
  const uint64_t o = 0xfffffffeull;  // counters 2^32 - 2, 2^32 - 1, 2^32, 2^32 + 1
  std::vector<float> v(16);
  cpu::fill_uniform(v.data(), 16, 5, o, 0.0f, 1.0f);
  for (int g = 0; g < 4; ++g) {
    const uint64_t ctr = o + static_cast<uint64_t>(g);
    const Philox4x32 c{{static_cast<uint32_t>(ctr), static_cast<uint32_t>(ctr >> 32), 0, 0}};
    const Philox4x32 w = philox4x32_10(c, 5, 0);
    for (int j = 0; j < 4; ++j) EXPECT_EQ(v[4 * g + j], static_cast<float>(w.v[j] >> 8) * 0x1p-24f);
  }
}

TEST(FillUniform, DifferentSeedsAndOffsetsDiffer) {
  std::vector<float> a(4096), b(4096), c(4096);
  cpu::fill_uniform(a.data(), 4096, 1, 0, 0.0f, 1.0f);
  cpu::fill_uniform(b.data(), 4096, 2, 0, 0.0f, 1.0f);
  cpu::fill_uniform(c.data(), 4096, 1, 1, 0.0f, 1.0f);
  int same_seed = 0, same_offset = 0;
  for (int i = 0; i < 4096; ++i) same_seed += a[i] == b[i], same_offset += a[i] == c[i];
  EXPECT_LE(same_seed, 2);  // expected 4096 / 2^24 coincidences
  EXPECT_LE(same_offset, 2);
}

TEST(FillUniform, DoubleIsTheFloatFillWidened) {
  std::vector<float> f(999);
  std::vector<double> d(999);
  cpu::fill_uniform(f.data(), 999, 8, 3, -1.0f, 1.0f);
  cpu::fill_uniform(d.data(), 999, 8, 3, -1.0f, 1.0f);
  for (int i = 0; i < 999; ++i) ASSERT_EQ(d[i], static_cast<double>(f[i])) << i;
}


double normal_cdf(double x) { return 0.5 * std::erfc(-x / std::numbers::sqrt2); }

TEST(FillNormal, MatchesDoubleBoxMullerOnTheSameWords) {
  // Independent float64 Box-Muller on the same Philox words and the same input quantization.
  const int64_t n = 40001;
  std::vector<float> v(n);
  cpu::fill_normal(v.data(), n, 77, 9, 0.0f, 1.0f);
  double max_ulp = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const Philox4x32 w = philox(77, 9 + static_cast<uint64_t>(i) / 4);
    const int pair = static_cast<int>(i & 2);
    const double u1 = static_cast<double>(static_cast<float>(uint64_t{w.v[pair]} + 1)) * 0x1p-32;
    const double theta = 2.0 * std::numbers::pi * static_cast<double>(w.v[pair + 1] >> 8) * 0x1p-24;
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double ref = (i & 1) ? r * std::sin(theta) : r * std::cos(theta);
    // Error relative to the float spacing of max(|ref|, 2^-20): below that the exact zeros of cos/sin
    // at multiples of pi/2 make a relative measure meaningless for the double reference.
    max_ulp = std::max(max_ulp, std::abs(v[i] - ref) / float_ulp(std::max(std::abs(ref), 0x1p-20)));
    ASSERT_EQ(v[i], math::normal_at(77, 9, i, 0.0f, 1.0f)) << i;
  }
  std::printf("fill_normal vs float64 Box-Muller: max error %.3f ulp\n", max_ulp);
  EXPECT_LT(max_ulp, 4.0);  // measured 2.12
}

TEST(FillNormal, MomentsTailsAndEmpiricalCdf) {
  std::vector<float> v(kN);
  cpu::fill_normal(v.data(), kN, 2024, 0, 0.0f, 1.0f);
  const Moments m = moments(v);
  EXPECT_NEAR(m.mean, 0.0, 5.0 / std::sqrt(static_cast<double>(kN)));
  EXPECT_NEAR(m.var, 1.0, 5.0 * std::sqrt(2.0 / kN));  // Var(s^2) = (mu4 - 1) / n = 2 / n
  int64_t beyond4 = 0;
  float max_abs = 0.0f;
  for (float x : v) beyond4 += std::abs(x) > 4.0f, max_abs = std::max(max_abs, std::abs(x));
  EXPECT_LE(max_abs, 6.661f);  // sqrt(-2 ln 2^-32) bounds the radius
  const double p4 = 2.0 * normal_cdf(-4.0);
  EXPECT_NEAR(static_cast<double>(beyond4), p4 * kN, 5.0 * std::sqrt(p4 * kN));
  const double points[] = {-3.0, -2.0, -1.5, -1.0, -0.5, 0.0, 0.5, 1.0, 1.5, 2.0, 3.0};
  for (double x : points) {
    int64_t below = 0;
    for (float z : v) below += z <= x;
    const double p = normal_cdf(x);
    EXPECT_NEAR(static_cast<double>(below) / kN, p, 5.0 * std::sqrt(p * (1.0 - p) / kN)) << "x = " << x;
  }
}

TEST(FillNormal, MeanAndStdAreApplied) {
  std::vector<float> v(kN);
  cpu::fill_normal(v.data(), kN, 31, 4, 2.0f, 3.0f);
  const Moments m = moments(v);
  EXPECT_NEAR(m.mean, 2.0, 5.0 * 3.0 / std::sqrt(static_cast<double>(kN)));
  EXPECT_NEAR(m.var, 9.0, 5.0 * 9.0 * std::sqrt(2.0 / kN));
}

TEST(FillNormal, DeterministicAcrossThreadCountsAndOffsetIsASlice) {
  std::vector<float> a(kN), b(kN);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::fill_normal(a.data(), kN, 5, 0, 0.0f, 1.0f);
  omp_set_num_threads(2);
  cpu::fill_normal(b.data(), kN, 5, 0, 0.0f, 1.0f);
  omp_set_num_threads(saved);
  EXPECT_EQ(a, b);
  std::vector<float> part(4097);
  cpu::fill_normal(part.data(), 4097, 5, 1000, 0.0f, 1.0f);
  for (int64_t i = 0; i < 4097; ++i) ASSERT_EQ(part[i], a[4000 + i]) << i;
  std::vector<double> d(4097);
  cpu::fill_normal(d.data(), 4097, 5, 1000, 0.0f, 1.0f);
  for (int64_t i = 0; i < 4097; ++i) ASSERT_EQ(d[i], static_cast<double>(part[i])) << i;
}

template <class T>
void expect_rounded_float_fill(bool normal) {
  const int64_t n = 5003;
  std::vector<float> f(n);
  std::vector<T> h(n);
  if (normal) {
    cpu::fill_normal(f.data(), n, 12, 345, 1.0f, 2.0f);
    cpu::fill_normal(h.data(), n, 12, 345, 1.0f, 2.0f);
  } else {
    cpu::fill_uniform(f.data(), n, 12, 345, -1.0f, 1.0f);
    cpu::fill_uniform(h.data(), n, 12, 345, -1.0f, 1.0f);
  }
  int64_t inexact = 0;
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(h[i].bits, T(f[i]).bits) << i;
    inexact += static_cast<float>(h[i]) != f[i];
  }
  EXPECT_GT(inexact, n / 2);  // the float values really were rounded
}

TEST(FillLowPrecision, F16IsTheFloatFillRounded) {
  expect_rounded_float_fill<mpt::f16>(false);
  expect_rounded_float_fill<mpt::f16>(true);
}

TEST(FillLowPrecision, BF16IsTheFloatFillRounded) {
  expect_rounded_float_fill<mpt::bf16>(false);
  expect_rounded_float_fill<mpt::bf16>(true);
}

}  // namespace
