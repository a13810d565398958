// tests/numerics/test_exp.cpp: math::exp_op (float) against float64 exp: ulp error over a strided sweep, edges and specials.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/math/exp.h"

namespace mpt {
namespace {

using kernels::math::exp_op;

constexpr float kLo = -87.3365478515625f, kHi = 88.72283172607421875f;

float from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

// |got - exp(x)| in units of the float spacing at exp(x) (the subnormal spacing below FLT_MIN).
double ulp_error(float x, float got) {
  const double ref = std::exp(static_cast<double>(x));
  int e = 0;
  std::frexp(ref, &e);
  const double ulp = ref < 0x1p-126 ? 0x1p-149 : std::ldexp(1.0, e - 24);
  return std::fabs(static_cast<double>(got) - ref) / ulp;
}

TEST(ExpOp, WithinOneUlpOverTheNormalRange) {
  // Every 61st float pattern in [kLo, kHi] (36M values; the full sweep of all 2.2e9 gave 0.99 ulp at most).
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 61) {
    const float x = from_bits(static_cast<uint32_t>(b));
    if (!(x >= kLo && x <= kHi)) continue;
    const double err = ulp_error(x, exp_op(x));
    if (err > worst) worst = err, worst_x = x;
    ++checked;
  }
  EXPECT_GT(checked, 30'000'000);
  EXPECT_LE(worst, 1.0) << "at x = " << worst_x;
}

TEST(ExpOp, EdgesOfTheRange) {
  for (float x : {kLo, std::nextafter(kLo, 0.0f), kHi, std::nextafter(kHi, 0.0f), -1e-30f, 1e-30f, 0.5f, -0.5f,
                  88.0f, -87.0f, 0.34657359f, -0.34657359f}) {
    EXPECT_LE(ulp_error(x, exp_op(x)), 1.0) << "x = " << x;
  }
  EXPECT_LT(exp_op(kHi), std::numeric_limits<float>::infinity());
  EXPECT_EQ(exp_op(std::nextafter(kHi, 100.0f)), std::numeric_limits<float>::infinity());
  // Below the range the result flushes to +0 (expf would return a subnormal there).
  EXPECT_EQ(exp_op(std::nextafter(kLo, -100.0f)), 0.0f);
  EXPECT_EQ(exp_op(-100.0f), 0.0f);
}

TEST(ExpOp, Specials) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(exp_op(0.0f), 1.0f);
  EXPECT_EQ(exp_op(-0.0f), 1.0f);
  EXPECT_EQ(exp_op(-kInf), 0.0f);
  EXPECT_FALSE(std::signbit(exp_op(-kInf)));
  EXPECT_EQ(exp_op(kInf), kInf);
  EXPECT_TRUE(std::isnan(exp_op(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(exp_op(-std::numeric_limits<float>::quiet_NaN())));
}

// The vectorised loops (softmax, cross-entropy, attention) call exp_op inside `omp simd` loops: the same bits as
// the scalar calls above.
TEST(ExpOp, VectorisedLoopMatchesScalarCalls) {
  std::vector<float> x(4099), y(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = -90.0f + 180.0f * static_cast<float>(i) / 4098.0f;
  x[7] = -std::numeric_limits<float>::infinity();
  x[8] = std::numeric_limits<float>::quiet_NaN();
#pragma omp simd
  for (size_t i = 0; i < x.size(); ++i) y[i] = exp_op(x[i]);
  for (size_t i = 0; i < x.size(); ++i) {
    const float s = exp_op(x[i]);
    if (std::isnan(s)) {
      EXPECT_TRUE(std::isnan(y[i]));
    } else {
      EXPECT_EQ(std::memcmp(&s, &y[i], sizeof s), 0) << "x = " << x[i];
    }
  }
}

}  // namespace
}  // namespace mpt
