// tests/ops/test_optim_8bit.cpp: the bitsandbytes dynamic map and quantizer against scaling-spec.md E, and AdamW
// with 8-bit block-quantized moments against the f32 optimizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/math/optim.h"
#include "mpt/ops/optim.h"
#include "op_test.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

ops::AdamWParams adamw_hp(int64_t step) {
  return {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = step};
}

ops::AdamWSlot make_slot(int64_t n, DType grad_dtype, ops::MomentStorage storage, uint64_t seed) {
  Tensor p = random_tensor({n}, DType::F32, seed);
  return {p, random_tensor({n}, grad_dtype, seed + 1), ops::adamw_state(p, storage)};
}

}  // namespace

namespace {

// create_dynamic_map's entries in exact arithmetic: 10^(i-6) * (0.1 + 0.9 (k + 1/2) / (n_i - 1)).
std::vector<double> exact_map(bool is_signed) {
  std::vector<double> v{0.0, 1.0};
  for (int i = 0; i < 7; ++i) {
    const int n = is_signed ? (1 << i) + 1 : (1 << (i + 1)) + 1;
    for (int k = 0; k + 1 < n; ++k) {
      const double x = std::pow(10.0, i - 6) * (0.1 + 0.9 * (k + 0.5) / (n - 1));
      v.push_back(x);
      if (is_signed) v.push_back(-x);
    }
  }
  std::sort(v.begin(), v.end());
  return v;
}

int64_t ulps_apart(float a, float b) {
  int32_t x, y;
  std::memcpy(&x, &a, 4);
  std::memcpy(&y, &b, 4);
  return std::abs(int64_t(x) - int64_t(y));
}

}  // namespace

TEST(DynamicMap, MatchesTheSpecAndTheExactConstruction) {
  for (bool is_signed : {true, false}) {
    const auto code = ops::dynamic_quantization_map(is_signed).to_vector<float>();
    ASSERT_EQ(code.size(), 256u);
    const auto exact = exact_map(is_signed);
    ASSERT_EQ(exact.size(), 256u);
    for (int i = 0; i < 256; ++i) {
      if (i > 0) {
        EXPECT_LT(code[i - 1], code[i]) << "not strictly increasing at " << i;
      }
      // torch.linspace's rounding moves entries by at most 2 ulp from the exactly rounded value.
      EXPECT_LE(ulps_apart(code[i], float(exact[i])), 2) << "entry " << i << " signed " << is_signed;
    }
    EXPECT_EQ(code[255], 1.0f);
  }
  const auto s = ops::dynamic_quantization_map(true).to_vector<float>();
  const auto u = ops::dynamic_quantization_map(false).to_vector<float>();
  // scaling-spec.md E: 127 negative values, 0 at index 127, 128 positive values; no -1.
  EXPECT_EQ(std::count_if(s.begin(), s.end(), [](float x) { return x < 0; }), 127);
  EXPECT_EQ(s[127], 0.0f);
  EXPECT_FALSE(std::signbit(s[127]));
  EXPECT_NEAR(s[0], -0.99296875, 1e-7);
  EXPECT_NEAR(s[128], 5.5e-7, 1e-13);
  EXPECT_NEAR(s[254], 0.99296875, 1e-7);
  for (int k = 0; k < 127; ++k) EXPECT_EQ(s[126 - k], -s[128 + k]) << "negatives mirror positives, k=" << k;
  EXPECT_EQ(u[0], 0.0f);
  EXPECT_NEAR(u[1], 3.25e-7, 1e-13);
  EXPECT_NEAR(u[254], 0.99648438, 1e-7);
  // Values the spec quotes (G3): entries 219 and 56 of the signed map.
  EXPECT_NEAR(s[219], 0.50078124, 1e-7);
  EXPECT_NEAR(s[56], -0.20546874, 1e-7);
}

TEST(DynamicMap, QuantizesLikeBitsandbytes) {
  using namespace kernels::math;
  // scaling-spec.md G3 (signed, with the sign fix) and G4 (unsigned), absmax 1.
  const float m[] = {1.0f, 0.5f, -0.2f, 1e-8f, -1e-8f, 0.0f};
  const int want_m[] = {255, 219, 56, 127, 126, 127};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(quantize_signed_state(kDynamicMapSigned, m[i], 1.0f), want_m[i]) << m[i];
  EXPECT_EQ(dequantize_state(kDynamicMapSigned, 126, 1.0f), -kDynamicMapSigned[128]);
  const float v[] = {1.0f, 0.5f, 0.001f, 0.0f};
  const int want_v[] = {255, 183, 30, 0};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(quantize_unsigned_state(kDynamicMapUnsigned, v[i], 1.0f), want_v[i]) << v[i];
  // A block with absmax 0 stores the code of zero.
  EXPECT_EQ(quantize_signed_state(kDynamicMapSigned, 0.0f, 0.0f), 127);
  EXPECT_EQ(quantize_unsigned_state(kDynamicMapUnsigned, 0.0f, 0.0f), 0);
}

TEST(DynamicMap, RoundTripPicksTheNearestEntry) {
  using namespace kernels::math;
  const auto x = random_tensor({20000}, DType::F64, 3).to_vector<double>();
  for (bool is_signed : {true, false}) {
    const float* code = is_signed ? kDynamicMapSigned : kDynamicMapUnsigned;
    for (double xd : x) {
      const float xf = float(is_signed ? std::tanh(xd) : std::abs(std::tanh(xd)));  // in the map's range
      const int q = is_signed ? quantize_signed_state(code, xf, 1.0f) : quantize_unsigned_state(code, xf, 1.0f);
      const float err = std::abs(dequantize_state(code, uint8_t(q), 1.0f) - xf);
      float best = std::numeric_limits<float>::infinity();
      int nearest = 0;
      for (int k = 0; k < 256; ++k) {
        if (std::abs(code[k] - xf) < best) best = std::abs(code[k] - xf), nearest = k;
      }
      // The error is the nearest entry's (ties aside), hence at most half the gap around xf; the sign fix may
      // only move a value to the neighbour on its own side of zero.
      const bool sign_fixed = is_signed && std::signbit(code[nearest]) != std::signbit(xf);
      if (!sign_fixed) {
        ASSERT_LE(err, best * (1 + 1e-6f)) << "x=" << xf << " q=" << q << " nearest=" << nearest;
      }
      const int lo = std::max(nearest - 1, 0), hi = std::min(nearest + 1, 255);
      ASSERT_LE(err, std::max(code[hi] - code[nearest], code[nearest] - code[lo])) << "x=" << xf;
    }
  }
}

TEST(AdamW8bit, FirstStepOfAConstantGradientMatchesTheSpec) {
  // scaling-spec.md G2: n = 256, g = 1, p = 0, t = 1 (lr 1e-3, wd 0).
  Tensor p = Tensor::zeros({256});
  ops::AdamWSlot s{p, Tensor::ones({256}), ops::adamw_state(p, ops::MomentStorage::Int8)};
  ASSERT_EQ(s.state.exp_avg_absmax.shape(), Shape{1});
  ops::adamw_step({&s, 1}, {.lr = 1e-3, .weight_decay = 0, .step = 1});
  for (uint8_t q : s.state.exp_avg.to_vector<uint8_t>()) EXPECT_EQ(q, 255);
  for (uint8_t q : s.state.exp_avg_sq.to_vector<uint8_t>()) EXPECT_EQ(q, 255);
  EXPECT_NEAR(s.state.exp_avg_absmax.item<double>(), 0.1, 1e-7);
  EXPECT_NEAR(s.state.exp_avg_sq_absmax.item<double>(), 0.001, 1e-9);
  for (double x : values(s.param)) EXPECT_NEAR(x, -1e-3, 1e-9);
}

TEST(AdamW8bit, NonFiniteGradientResetsItsElementOnly) {
  // scaling-spec.md G5: g = [NaN, 1, ...]: element 0 gets m = v = 0 and keeps its parameter.
  const int64_t n = 300;
  ops::AdamWSlot s = make_slot(n, DType::F32, ops::MomentStorage::Int8, 9);
  ops::adamw_step({&s, 1}, adamw_hp(1));
  std::vector<float> g(n, 1.0f);
  g[0] = std::numeric_limits<float>::quiet_NaN();
  g[1] = std::numeric_limits<float>::infinity();
  s.grad = Tensor::from_vector(g, {n});
  const auto p_before = values(s.param);
  ops::adamw_step({&s, 1}, adamw_hp(2));
  const auto p = values(s.param);
  const auto qm = s.state.exp_avg.to_vector<uint8_t>(), qv = s.state.exp_avg_sq.to_vector<uint8_t>();
  for (int i : {0, 1}) {
    EXPECT_EQ(p[i], p_before[i]);
    EXPECT_EQ(kernels::math::kDynamicMapSigned[qm[i]], 0.0f);
    EXPECT_EQ(kernels::math::kDynamicMapUnsigned[qv[i]], 0.0f);
  }
  for (int64_t i = 2; i < n; ++i) ASSERT_NE(p[i], p_before[i]) << i;
}

TEST(AdamW8bit, TracksTheF32OptimizerOverManySteps) {
  const int64_t n = 5000;  // 20 blocks, the last one partial
  ops::AdamWSlot q = make_slot(n, DType::F32, ops::MomentStorage::Int8, 123);
  ops::AdamWSlot f{q.param.clone(), q.grad, ops::adamw_state(q.param, ops::MomentStorage::F32)};
  const int steps = 30;
  for (int64_t step = 1; step <= steps; ++step) {
    // Gradients with a persistent component, as in training, plus noise.
    Tensor g = random_tensor({n}, DType::F64, 7000 + step, 0.5);
    auto gv = values(g);
    const auto base = values(random_tensor({n}, DType::F64, 6999));
    for (int64_t i = 0; i < n; ++i) gv[i] += base[i];
    q.grad = f.grad = Tensor::from_vector(gv, {n}).to(DType::F32);
    ops::adamw_step({&q, 1}, adamw_hp(step));
    ops::adamw_step({&f, 1}, adamw_hp(step));
  }
  // Each step moves a parameter by at most ~lr; the 8-bit moments are within a few % of the block's absmax (see
  // below), so the trajectories differ by a small fraction of lr per step, and by a few % of the distance the
  // parameters travelled (measured here: max 1.9 lr, mean 0.3 lr after 30 steps, ~1% of the mean travel).
  const auto pq = values(q.param), pf = values(f.param), p0 = values(make_slot(n, DType::F32,
                                                                               ops::MomentStorage::F32, 123).param);
  double worst = 0, mean = 0, travel = 0;
  for (int64_t i = 0; i < n; ++i) {
    worst = std::max(worst, std::abs(pq[i] - pf[i]));
    mean += std::abs(pq[i] - pf[i]) / n;
    travel += std::abs(pf[i] - p0[i]) / n;
  }
  EXPECT_LT(worst, 0.15 * 1e-2 * steps) << "mean " << mean;
  EXPECT_LT(mean, 0.05 * travel) << "worst " << worst << " travel " << travel;
  EXPECT_GT(mean, 0.0);  // really quantized
  std::printf("8-bit vs f32 AdamW after %d steps: max |dp| %.3g, mean %.3g, mean travel %.3g (lr 1e-2)\n", steps,
              worst, mean, travel);
  // The dequantized moments stay near the f32 ones: each step's requantization errs by at most half a map gap
  // (<= 0.7% of the block's absmax, the widest gap being at the top), and beta1 carries the errors on with weight
  // sum 1 / (1 - beta1) = 10: at most ~7% of absmax.
  const auto codes = q.state.exp_avg.to_vector<uint8_t>();
  const auto absmax = values(q.state.exp_avg_absmax);
  const auto mf = values(f.state.exp_avg);
  for (int64_t i = 0; i < n; ++i) {
    const double mq = kernels::math::kDynamicMapSigned[codes[i]] * absmax[i / 256];
    ASSERT_LE(std::abs(mq - mf[i]), 0.08 * absmax[i / 256]) << i;
  }
}


// The AVX-512 requantization (16 lanes per vector, gathered map entries) against the scalar math::quantize_*_state
// loop (set_vector_conversions(false) selects it): the same codes, absmaxes and parameters bit for bit, over blocks
// with gradients spanning 12 decades, zeros, a whole zero block (absmax 0), non-finite gradients and a partial block.
TEST(AdamW8bit, VectorRequantizationMatchesTheScalarLoop) {
  if (!kernels::cpu::convert_isa().avx512) GTEST_SKIP() << "no AVX-512 on this CPU: only the scalar loop runs";
  const int64_t n = 256 * 9 + 77;
  std::vector<float> g(n);
  uint64_t s = 7;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) / 9007199254740992.0;
    g[i] = static_cast<float>((u < 0.5 ? -1 : 1) * std::pow(10.0, -9 + 12 * u));
  }
  for (int64_t i = 512; i < 768; ++i) g[i] = 0.0f;  // a block whose moments stay 0
  g[5] = 0.0f;
  g[300] = std::numeric_limits<float>::quiet_NaN();
  g[301] = -std::numeric_limits<float>::infinity();
  auto run = [&](bool vector) {
    kernels::cpu::set_vector_conversions(vector);
    ops::AdamWSlot slot = make_slot(n, DType::F32, ops::MomentStorage::Int8, 31);
    for (int64_t step = 1; step <= 4; ++step) {
      std::vector<float> gs(g);
      for (float& x : gs) x *= static_cast<float>(step);  // moments change scale between steps
      slot.grad = Tensor::from_vector(gs, {n});
      ops::adamw_step({&slot, 1}, adamw_hp(step));
    }
    kernels::cpu::set_vector_conversions(true);
    return slot;
  };
  const ops::AdamWSlot vec = run(true), scalar = run(false);
  EXPECT_EQ(vec.state.exp_avg.to_vector<uint8_t>(), scalar.state.exp_avg.to_vector<uint8_t>());
  EXPECT_EQ(vec.state.exp_avg_sq.to_vector<uint8_t>(), scalar.state.exp_avg_sq.to_vector<uint8_t>());
  EXPECT_EQ(vec.state.exp_avg_absmax.to_vector<float>(), scalar.state.exp_avg_absmax.to_vector<float>());
  EXPECT_EQ(vec.state.exp_avg_sq_absmax.to_vector<float>(), scalar.state.exp_avg_sq_absmax.to_vector<float>());
  const auto pv = vec.param.to_vector<float>(), ps = scalar.param.to_vector<float>();
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(std::memcmp(&pv[i], &ps[i], 4), 0) << "parameter " << i;
  // Both ran the requantization for real: the codes spread over the map, and the zero block holds the code of 0.
  const auto qm = vec.state.exp_avg.to_vector<uint8_t>();
  EXPECT_GT(std::set<uint8_t>(qm.begin(), qm.end()).size(), 100u);
  EXPECT_EQ(kernels::math::kDynamicMapSigned[qm[600]], 0.0f);
}
