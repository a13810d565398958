// tests/ops/test_fake_quant.cpp: fake quantization (INT8 / INT4 / FP8 E4M3, per tensor, channel, token, group) against a float64 reference, bit for bit; its straight-through gradient; codes + scales; refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "numerics_reference.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using ops::QuantFormat;
using ops::QuantGranularity;
using ops::QuantSpec;
using testing::error_message;
using testing::random_tensor;

// ---- the reference: doubles and the long-double rounding of tests/support/numerics_reference (no kernels/math code)
double qmax_of(QuantFormat f) { return f == QuantFormat::Int8 ? 127.0 : (f == QuantFormat::Int4 ? 7.0 : 448.0); }

// A float division, correctly rounded: the double quotient of two floats rounded to float (53 >= 2 * 24 + 2 bits, so
// no double rounding).
float fdiv(float a, float b) { return static_cast<float>(static_cast<double>(a) / static_cast<double>(b)); }

float ref_scale(float amax, const QuantSpec& spec) {
  float s = fdiv(amax, static_cast<float>(qmax_of(spec.format)));
  if (spec.f16_scale) s = static_cast<float>(test::ref_decode(test::RefFormat::F16, test::ref_encode(test::RefFormat::F16, s, true)));
  return s == 0.0f ? 1.0f : s;
}

// The code as a double: round half to even of the float quotient (std::nearbyint in the default rounding mode),
// clamped; E4M3 through the reference encoder.
double ref_code(float x, float s, const QuantSpec& spec) {
  const float v = fdiv(x, s);
  if (spec.format == QuantFormat::FP8) {
    return static_cast<double>(test::ref_decode(test::RefFormat::E4M3, test::ref_encode(test::RefFormat::E4M3, v, true)));
  }
  const double r = std::nearbyint(static_cast<double>(v)), q = qmax_of(spec.format);
  return std::isnan(r) ? r : std::min(q, std::max(-q, r));
}

struct RefResult {
  std::vector<float> values;  // code * scale rounded to float
  std::vector<float> scales;
  std::vector<double> codes;
};

RefResult reference(const std::vector<float>& x, int64_t group, const QuantSpec& spec) {
  RefResult r;
  for (size_t g0 = 0; g0 < x.size(); g0 += static_cast<size_t>(group)) {
    double amax = 0;
    bool nan = false;
    for (int64_t i = 0; i < group; ++i) {
      nan |= std::isnan(x[g0 + i]);
      amax = std::max(amax, std::fabs(static_cast<double>(x[g0 + i])));
    }
    const float s = ref_scale(nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(amax), spec);
    r.scales.push_back(s);
    for (int64_t i = 0; i < group; ++i) {
      const double c = ref_code(x[g0 + i], s, spec);
      r.codes.push_back(c);
      r.values.push_back(static_cast<float>(c * static_cast<double>(s)));
    }
  }
  return r;
}

// Inputs with outliers (so scales differ between groups) and exact halves on the grid (ties).
Tensor test_input(const Shape& shape, uint64_t seed) {
  std::vector<float> v = random_tensor(shape, DType::F32, seed, 1.0).to_vector<float>();
  for (size_t i = 0; i < v.size(); i += 37) v[i] *= 9.0f;
  return Tensor::from_vector(v, shape);
}

void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << what << " [" << i << "]";
    } else {
      ASSERT_EQ(got[i], want[i]) << what << " [" << i << "] (" << got[i] - want[i] << " off)";
    }
  }
}

struct Case {
  QuantSpec spec;
  Shape shape;
};

std::vector<Case> cases() {
  std::vector<Case> c;
  for (bool f16 : {false, true}) {
    c.push_back({{QuantFormat::Int8, QuantGranularity::PerChannel, 0, f16}, {7, 96}});
    c.push_back({{QuantFormat::Int8, QuantGranularity::PerToken, 0, f16}, {3, 4, 64}});
    c.push_back({{QuantFormat::Int4, QuantGranularity::PerGroup, 32, f16}, {5, 256}});
    c.push_back({{QuantFormat::Int4, QuantGranularity::PerGroup, 128, f16}, {5, 256}});
    c.push_back({{QuantFormat::Int8, QuantGranularity::PerGroup, 32, f16}, {4, 64}});
    c.push_back({{QuantFormat::FP8, QuantGranularity::PerTensor, 0, f16}, {9, 40}});
    c.push_back({{QuantFormat::FP8, QuantGranularity::PerChannel, 0, f16}, {9, 40}});
    c.push_back({{QuantFormat::Int4, QuantGranularity::PerChannel, 0, f16}, {6, 48}});
  }
  return c;
}

TEST(FakeQuantize, ForwardMatchesTheFloat64ReferenceBitForBit) {
  uint64_t seed = 10;
  for (const Case& c : cases()) {
    const Tensor x = test_input(c.shape, ++seed);
    const int64_t group = c.spec.group_elements(x, "test");
    const RefResult want = reference(x.to_vector<float>(), group, c.spec);
    const Tensor y = ops::fake_quantize(x, c.spec);
    EXPECT_EQ(y.shape(), x.shape());
    EXPECT_EQ(y.dtype(), DType::F32);
    expect_same_floats(y.to_vector<float>(), want.values, c.spec.str() + " values");
    const auto q = ops::quantize_groups(x, c.spec);
    expect_same_floats(q.scales.to_vector<float>(), want.scales, c.spec.str() + " scales");
    expect_same_floats(ops::dequantize_groups(q).to_vector<float>(), want.values, c.spec.str() + " dequantized codes");
    Shape scale_shape = c.spec.granularity == QuantGranularity::PerTensor ? Shape{} : c.shape;
    if (!scale_shape.empty()) scale_shape.back() /= group;
    EXPECT_EQ(q.scales.shape(), scale_shape) << c.spec.str();
    if (c.spec.format != QuantFormat::FP8) {
      const std::vector<int8_t> codes = q.codes.to_vector<int8_t>();
      for (size_t i = 0; i < codes.size(); ++i) ASSERT_EQ(static_cast<double>(codes[i]), want.codes[i]) << c.spec.str();
    }
  }
}

TEST(FakeQuantize, LowPrecisionInputsRoundTheReferenceValueOnce) {
  const QuantSpec spec{QuantFormat::Int4, QuantGranularity::PerGroup, 32, false};
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor x = test_input({4, 128}, 3).to(dt);
    const RefResult want = reference(x.to(DType::F32).to_vector<float>(), 32, spec);
    const Tensor y = ops::fake_quantize(x, spec);
    ASSERT_EQ(y.dtype(), dt);
    const Tensor want_t = Tensor::from_vector(want.values, {4, 128}).to(dt);
    expect_same_floats(y.to(DType::F32).to_vector<float>(), want_t.to(DType::F32).to_vector<float>(), dtype_name(dt).data());
  }
}

TEST(FakeQuantize, TiesRoundToEvenAndTheGridIsSymmetric) {
  // amax 127 gives s = 1 exactly: x / s is x, and the halves are ties.
  const std::vector<float> x = {127.0f, 2.5f, 3.5f, -2.5f, -0.5f, 0.5f, 1.5f, -127.0f};
  const Tensor y = ops::fake_quantize(Tensor::from_vector(x, {1, 8}),
                                      {QuantFormat::Int8, QuantGranularity::PerChannel, 0, false});
  EXPECT_EQ(y.to_vector<float>(), (std::vector<float>{127.0f, 2.0f, 4.0f, -2.0f, -0.0f, 0.0f, 2.0f, -127.0f}));
  // INT4, amax 7: s = 1; 6.5 -> 6, -6.5 -> -6; codes stay within [-7, 7].
  const auto q = ops::quantize_groups(Tensor::from_vector(std::vector<float>{7.0f, 6.5f, -6.5f, -7.0f}, {1, 4}),
                                      {QuantFormat::Int4, QuantGranularity::PerChannel, 0, false});
  EXPECT_EQ(q.codes.to_vector<int8_t>(), (std::vector<int8_t>{7, 6, -6, -7}));
  EXPECT_EQ(q.scales.to_vector<float>(), (std::vector<float>{1.0f}));
}

TEST(FakeQuantize, ZeroGroupsGetScaleOneAndNaNPropagatesWithinItsGroup) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const Tensor x = Tensor::from_vector(std::vector<float>{0, 0, 0, 0, 1, nan, 2, 3}, {2, 4});
  const QuantSpec spec{QuantFormat::Int8, QuantGranularity::PerChannel, 0, false};
  const auto q = ops::quantize_groups(x, spec);
  const std::vector<float> s = q.scales.to_vector<float>();
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_TRUE(std::isnan(s[1]));
  const std::vector<float> y = ops::fake_quantize(x, spec).to_vector<float>();
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], 0.0f);
  for (int i = 4; i < 8; ++i) EXPECT_TRUE(std::isnan(y[i])) << i;
}

TEST(FakeQuantize, StraightThroughGradientPassesDyUnchanged) {
  for (const Case& c : cases()) {
    Tensor x = test_input(c.shape, 5).requires_grad_();
    const Tensor dy = random_tensor(c.shape, DType::F32, 6, 1.0);
    const Tensor y = ops::fake_quantize(x, c.spec);
    ASSERT_TRUE(y.requires_grad());
    ops::sum(y * dy).backward();
    EXPECT_EQ(x.grad().to_vector<float>(), dy.to_vector<float>()) << c.spec.str();
  }
  // Under no_grad nothing is recorded.
  Tensor x = test_input({2, 32}, 7).requires_grad_();
  autograd::NoGradGuard off;
  EXPECT_FALSE(ops::fake_quantize(x, {}).requires_grad());
}

TEST(FakeQuantize, AStridedViewQuantizesItsOwnRows) {
  const Tensor base = test_input({64, 6}, 9);
  const Tensor xt = base.t();  // [6, 64], not contiguous
  const QuantSpec spec{QuantFormat::Int4, QuantGranularity::PerGroup, 32, true};
  const RefResult want = reference(xt.contiguous().to_vector<float>(), 32, spec);
  expect_same_floats(ops::fake_quantize(xt, spec).to_vector<float>(), want.values, "strided");
}

TEST(FakeQuantize, RefusesAGroupThatDoesNotDivideTheWidthAndNonFloatInputs) {
  const Tensor x = Tensor::zeros({4, 96}, DType::F32);
  const std::string m = error_message([&] { ops::fake_quantize(x, {QuantFormat::Int4, QuantGranularity::PerGroup, 128}); });
  EXPECT_NE(m.find("[fake_quantize] group size 128 does not divide the last dimension 96"), std::string::npos) << m;
  EXPECT_NE(error_message([&] { ops::quantize_groups(x, {QuantFormat::Int4, QuantGranularity::PerGroup, 0}); })
                .find("positive group size"),
            std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize(Tensor::zeros({2, 4}, DType::I32), {}); }).find("[fake_quantize]"),
            std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize(Tensor::zeros({2, 4}, DType::F64), {}); }).find("f64"),
            std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize(Tensor::zeros({}, DType::F32), {}); }).find("last dimension"),
            std::string::npos);
}

TEST(FakeQuantize, SpecNames) {
  EXPECT_EQ((QuantSpec{QuantFormat::Int4, QuantGranularity::PerGroup, 128, false}).str(), "int4-g128");
  EXPECT_EQ((QuantSpec{QuantFormat::Int8, QuantGranularity::PerToken, 0, false}).str(), "int8-token");
  EXPECT_EQ((QuantSpec{QuantFormat::FP8, QuantGranularity::PerTensor, 0, true}).str(), "fp8-tensor-f16scale");
}

}  // namespace
}  // namespace mpt
