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

constexpr double kMaxUlp = 1.0104;  // the worst case over all 2.2e9 floats in range, at x = -5.87788439

TEST(ExpOp, WithinOneUlpOverTheNormalRange) {
  // Every 127th float pattern in [kLo, kHi] (17M values), then the worst case of the full sweep.
  double worst = 0;
  float worst_x = 0;
  int64_t checked = 0;
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 127) {
    const float x = from_bits(static_cast<uint32_t>(b));
    if (!(x >= kLo && x <= kHi)) continue;
    const double err = ulp_error(x, exp_op(x));
    if (err > worst) worst = err, worst_x = x;
    ++checked;
  }
  EXPECT_GT(checked, 15'000'000);
  EXPECT_LE(worst, kMaxUlp) << "at x = " << worst_x;
  EXPECT_GT(ulp_error(-5.87788439f, exp_op(-5.87788439f)), 1.0);  // the bound is tight: the sweep's worst case
  EXPECT_LE(ulp_error(-5.87788439f, exp_op(-5.87788439f)), kMaxUlp);
}

TEST(ExpOp, EdgesOfTheRange) {
  for (float x : {kLo, std::nextafter(kLo, 0.0f), kHi, std::nextafter(kHi, 0.0f), -1e-30f, 1e-30f, 0.5f, -0.5f,
                  88.0f, -87.0f, 0.34657359f, -0.34657359f}) {
    EXPECT_LE(ulp_error(x, exp_op(x)), kMaxUlp) << "x = " << x;
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
