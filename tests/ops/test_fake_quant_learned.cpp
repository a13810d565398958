// tests/ops/test_fake_quant_learned.cpp: LSQ (fake quantization with a learned scale): its forward against the absmax fake quantization and a float64 reference, its gradients against the paper's formula in float64, a scale learned by SGD beating PTQ's, refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using ops::QuantFormat;
using ops::QuantGranularity;
using ops::QuantSpec;
using testing::error_message;
using testing::random_tensor;

const QuantSpec kInt4G32{QuantFormat::Int4, QuantGranularity::PerGroup, 32, false};
const QuantSpec kInt8Channel{QuantFormat::Int8, QuantGranularity::PerChannel, 0, false};
const QuantSpec kInt4Tensor{QuantFormat::Int4, QuantGranularity::PerTensor, 0, false};

// Per element, in float64 from the float inputs: v = x / s correctly rounded to float (the kernels' one IEEE
// division), the code clamp(nearbyint(v)), and LSQ's d value / ds.
struct Ref {
  double value, grad_x, grad_s;
};
Ref reference(float x, float s, double qmax) {
  const double v = static_cast<float>(static_cast<double>(x) / static_cast<double>(s));
  const double r = std::clamp(std::nearbyint(v), -qmax, qmax);
  const bool inside = v >= -qmax && v <= qmax;
  return {r * s, inside ? 1.0 : 0.0, inside ? r - v : (v < 0 ? -qmax : qmax)};
}

// With the absmax scale (quantize_groups' scales) LSQ's forward is PTQ's fake quantization, bit for bit.
TEST(FakeQuantizeLearned, WithTheAbsmaxScaleTheForwardIsFakeQuantize) {
  for (const QuantSpec& spec : {kInt4G32, kInt8Channel, kInt4Tensor}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor x = random_tensor({6, 128}, dt, 3, 2.0);
      const Tensor s = ops::quantize_groups(x, spec).scales;
      EXPECT_EQ(ops::fake_quantize_learned(x, s, spec).to(DType::F32).to_vector<float>(),
                ops::fake_quantize(x, spec).to(DType::F32).to_vector<float>())
          << spec.str() << " " << dtype_name(dt);
    }
  }
}

// Scales below the absmax one clamp part of each group: values, dx (the grid's mask) and dscale (grad_scale times the
// group's sum of dy * (r - v) inside, +-qmax outside) against float64.
TEST(FakeQuantizeLearned, GradientsFollowTheLsqFormula) {
  for (const QuantSpec& spec : {kInt4G32, kInt8Channel, kInt4Tensor}) {
    const int64_t rows = 4, cols = 64;
    const double qmax = spec.format == QuantFormat::Int8 ? 127.0 : 7.0;
    const Tensor x = random_tensor({rows, cols}, DType::F32, 5, 1.0);
    const Tensor s0 = ops::quantize_groups(x, spec).scales * 0.6;  // a part of every group lies beyond the grid
    Tensor xg = x.detach().requires_grad_(), sg = s0.detach().requires_grad_();
    const Tensor dy = random_tensor({rows, cols}, DType::F32, 6, 1.0);
    const float gs = 0.25f;
    const Tensor y = ops::fake_quantize_learned(xg, sg, spec, gs);
    ops::sum(y * dy).backward();
    const std::vector<float> xv = x.to_vector<float>(), sv = s0.contiguous().to_vector<float>(),
                             dyv = dy.to_vector<float>(), yv = y.to_vector<float>(),
                             dxv = xg.grad().to_vector<float>(), dsv = sg.grad().contiguous().to_vector<float>();
    const int64_t group = spec.group_elements(x, "test");
    std::vector<double> ds_ref(sv.size(), 0.0);
    int clamped = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      const size_t g = i / static_cast<size_t>(group);
      const Ref r = reference(xv[i], sv[g], qmax);
      EXPECT_EQ(yv[i], static_cast<float>(r.value)) << spec.str() << " element " << i;
      EXPECT_EQ(dxv[i], static_cast<float>(dyv[i] * r.grad_x)) << spec.str() << " element " << i;
      ds_ref[g] += gs * dyv[i] * r.grad_s;
      clamped += r.grad_x == 0.0;
    }
    EXPECT_GT(clamped, 0) << spec.str() << ": the test must reach the clamped branch";
    EXPECT_LT(clamped, static_cast<int>(xv.size()) / 2) << spec.str();
    for (size_t g = 0; g < ds_ref.size(); ++g)
      EXPECT_NEAR(dsv[g], ds_ref[g], 1e-5 * (1.0 + std::fabs(ds_ref[g]))) << spec.str() << " group " << g;
  }
}

// The default gradient scale is LSQ's 1 / sqrt(group elements * qmax).
TEST(FakeQuantizeLearned, DefaultGradScaleIsTheLsqOne) {
  const Tensor x = random_tensor({2, 64}, DType::F32, 7, 1.0);
  const Tensor s0 = ops::quantize_groups(x, kInt4G32).scales * 0.7;
  Tensor a = s0.detach().requires_grad_(), b = s0.detach().requires_grad_();
  ops::sum(ops::fake_quantize_learned(x, a, kInt4G32)).backward();
  ops::sum(ops::fake_quantize_learned(x, b, kInt4G32, 1.0f)).backward();
  const std::vector<float> ga = a.grad().to_vector<float>(), gb = b.grad().to_vector<float>();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_FLOAT_EQ(ga[i], gb[i] / std::sqrt(32.0f * 7.0f)) << i;
}

// LSQ's purpose: SGD on the scale alone (the weights fixed) lowers the INT4 reconstruction error of Gaussian weights
// per channel of 512 below PTQ's absmax scale (about 3.2 sigma there), which wastes grid points on the tails.
TEST(FakeQuantizeLearned, ALearnedScaleBeatsTheAbsmaxScale) {
  const QuantSpec spec{QuantFormat::Int4, QuantGranularity::PerChannel, 0, false};
  const Tensor w = random_tensor({16, 512}, DType::F32, 8, 1.0);
  const auto mse = [&](const Tensor& s) {
    const Tensor d = ops::fake_quantize_learned(w, s, spec) - w;
    return ops::sum(d * d).item<float>() / static_cast<float>(w.numel());
  };
  const Tensor s_ptq = ops::quantize_groups(w, spec).scales;
  Tensor s = s_ptq.detach().requires_grad_();
  for (int step = 0; step < 300; ++step) {
    const Tensor d = ops::fake_quantize_learned(w, s, spec) - w;
    ops::sum(d * d).backward();
    autograd::NoGradGuard no_grad;
    s = (s - s.grad() * 3e-3).detach().requires_grad_();
  }
  // The best scale per channel by a grid search over 0.3 - 1.0 of the absmax scale (every candidate's error in
  // float64, by the reference formula): LSQ lands near it.
  const std::vector<float> wv = w.to_vector<float>(), sp = s_ptq.contiguous().to_vector<float>();
  double best_total = 0;
  for (int64_t r = 0; r < 16; ++r) {
    double best = 1e30;
    for (int c = 0; c <= 700; ++c) {
      const float cand = sp[r] * (0.3f + 0.001f * c);
      double e = 0;
      for (int64_t l = 0; l < 512; ++l) {
        const double d = reference(wv[r * 512 + l], cand, 7.0).value - wv[r * 512 + l];
        e += d * d;
      }
      best = std::min(best, e);
    }
    best_total += best;
  }
  const double best_mse = best_total / static_cast<double>(w.numel());
  const float before = mse(s_ptq), after = mse(s.detach());
  EXPECT_LT(after, 0.85f * before) << "PTQ " << before << ", LSQ " << after;
  EXPECT_LT(after, 1.03 * best_mse) << "LSQ " << after << ", the grid search's best " << best_mse;
}

// Codes on given scales: with the absmax scales they are quantize_groups' codes (FP16 scales too); with other scales
// the codes times the (FP16-rounded when the spec says so) scales are fake_quantize_learned's values on those scales.
TEST(FakeQuantizeLearned, CodesOnGivenScales) {
  const Tensor x = random_tensor({4, 128}, DType::F32, 10, 1.5);
  for (QuantSpec spec : {kInt4G32, kInt8Channel}) {
    for (const bool f16 : {false, true}) {
      spec.f16_scale = f16;
      const auto absmax = ops::quantize_groups(x, spec);
      const auto given = ops::quantize_groups(x, spec, absmax.scales);
      EXPECT_EQ(given.codes.to_vector<int8_t>(), absmax.codes.to_vector<int8_t>()) << spec.str();
      EXPECT_EQ(given.scales.to_vector<float>(), absmax.scales.to_vector<float>()) << spec.str();
      const Tensor other = absmax.scales * 0.77;
      const auto q = ops::quantize_groups(x, spec, other);
      QuantSpec plain = spec;
      plain.f16_scale = false;
      const Tensor used = f16 ? other.to(DType::F16).to(DType::F32) : other;
      EXPECT_EQ(q.scales.to_vector<float>(), used.contiguous().to_vector<float>()) << spec.str();
      EXPECT_EQ(ops::dequantize_groups(q).to_vector<float>(),
                ops::fake_quantize_learned(x, used, plain).to_vector<float>())
          << spec.str();
    }
  }
}

TEST(FakeQuantizeLearned, RefusesWhatItCannotLearn) {
  const Tensor x = random_tensor({4, 64}, DType::F32, 9, 1.0);
  const Tensor s = ops::quantize_groups(x, kInt4G32).scales;
  const QuantSpec fp8{QuantFormat::FP8, QuantGranularity::PerChannel, 0, false};
  const QuantSpec token{QuantFormat::Int8, QuantGranularity::PerToken, 0, false};
  const QuantSpec f16{QuantFormat::Int4, QuantGranularity::PerGroup, 32, true};
  EXPECT_NE(error_message([&] { ops::fake_quantize_learned(x, s, fp8); }).find("integer grids"), std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize_learned(x, s, token); }).find("not per token"), std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize_learned(x, s, f16); }).find("FP16"), std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize_learned(x, s.reshape({-1}), kInt4G32); }).find("scale"),
            std::string::npos);
  EXPECT_NE(error_message([&] { ops::fake_quantize_learned(x, s.to(DType::BF16), kInt4G32); }).find("f32 scale"),
            std::string::npos);
}

}  // namespace
}  // namespace mpt
