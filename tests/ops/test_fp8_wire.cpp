// tests/ops/test_fp8_wire.cpp: the FP8 gradient all-reduce's scales (ops::fp8_wire_amax_, ops::fp8_wire_scales) against MS-AMP's formula written out in double here.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "mpt/mpt.h"
#include "test_util.h"

namespace mpt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// MS-AMP's compute_scaling_factor(amax, 1, 448, 0) floored to a power of two, then / sqrt(world): in double, from the
// float quotient (scaling-spec.md), 1 for an amax of 0 or a non-finite one.
double reference_scale(float amax, int world) {
  double pow2 = 1;
  if (amax > 0 && std::isfinite(amax)) {
    const float q = 448.0f / amax;
    pow2 = std::isinf(q) ? std::ldexp(1.0, 127) : std::exp2(std::floor(std::log2(static_cast<double>(q))));
  }
  return pow2 * (1.0 / std::sqrt(static_cast<double>(world)));
}

TEST(Fp8Wire, NanAmaxesTravelAsInfAndNothingElseMoves) {
  Tensor a = Tensor::from_vector(std::vector<float>{0, 1.5f, kNaN, kInf, -0.0f, 3e-40f}, {6});
  ops::fp8_wire_amax_(a);
  const std::vector<float> v = a.to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 1.5f);
  EXPECT_EQ(v[2], kInf);
  EXPECT_EQ(v[3], kInf);
  EXPECT_TRUE(std::signbit(v[4]));
  EXPECT_EQ(v[5], 3e-40f);
}

TEST(Fp8Wire, ScalesAndInversesAreMsAmpsInDouble) {
  const std::vector<float> amax{0.0f, 1.0f, 448.0f, 447.99f, 1e-3f, 3.3e-7f, 1e-44f, 6.5e4f, kInf, kNaN, 2.0f};
  for (const int world : {1, 2, 3, 8}) {
    SCOPED_TRACE(world);
    const ops::Fp8WireScales s = ops::fp8_wire_scales(Tensor::from_vector(amax, {static_cast<int64_t>(amax.size())}), world);
    const std::vector<float> scale = s.scale.to_vector<float>(), inv = s.inv.to_vector<float>();
    for (size_t i = 0; i < amax.size(); ++i) {
      const double want = reference_scale(amax[i], world);
      EXPECT_EQ(scale[i], static_cast<float>(want)) << "amax " << amax[i];
      if (std::isfinite(amax[i])) {
        EXPECT_EQ(inv[i], static_cast<float>(1.0 / (want * world))) << "amax " << amax[i];
      } else {
        EXPECT_TRUE(std::isnan(inv[i])) << "amax " << amax[i] << ": a non-finite gradient averages to NaN";
      }
    }
  }
  // scaling-spec.md's F9: four ranks whose shared amax is 3: s = 128 * 0.5 = 64, scale_inv = 1/256.
  const ops::Fp8WireScales f9 = ops::fp8_wire_scales(Tensor::from_vector(std::vector<float>{3.0f}, {1}), 4);
  EXPECT_EQ(f9.scale.to_vector<float>()[0], 64.0f);
  EXPECT_EQ(f9.inv.to_vector<float>()[0], 1.0f / 256);
  EXPECT_MPT_ERROR(ops::fp8_wire_scales(Tensor::zeros({2, 2}, DType::F32), 2), "expected a contiguous 1-d f32 vector");
  EXPECT_MPT_ERROR(ops::fp8_wire_scales(Tensor::zeros({2}, DType::F32), 0), "world must be >= 1, got 0");
  EXPECT_MPT_ERROR(ops::amax(Tensor::ones({3}), Tensor::zeros({2})), "out must be one contiguous f32 element");
}

}  // namespace
}  // namespace mpt
