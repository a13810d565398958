// tests/train/test_grad_scaler.cpp: GradScaler against the scaling spec's cases A1-A12 (shared/design/scaling-spec.md),
// plus skipped steps, clipping after unscale_, hysteresis, min_scale, state dicts and the disabled scaler.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "mpt/train/grad_scaler.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/reduction.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/sgd.h"
#include "test_util.h"

namespace mpt::train {
namespace {

using mpt::testing::same_bits;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

Tensor param(const std::vector<float>& v) {
  Tensor p = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  p.requires_grad_();
  return p;
}

void set_grad(const Tensor& p, const std::vector<float>& g) {
  p.set_grad(Tensor::from_vector(g, {static_cast<int64_t>(g.size())}));
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }
std::vector<float> grad_of(const Tensor& p) { return p.grad().to_vector<float>(); }

size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// One iteration with hand-set (already scaled) gradients: unscale, step, update. Returns whether it stepped.
bool iteration(GradScaler& scaler, optim::Optimizer& opt, const Tensor& p, const std::vector<float>& grad) {
  set_grad(p, grad);
  const bool stepped = scaler.step(opt);
  scaler.update();
  return stepped;
}

TEST(GradScaler, A1Defaults) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.get_growth_factor(), 2.0);
  EXPECT_EQ(scaler.get_backoff_factor(), 0.5);
  EXPECT_EQ(scaler.get_growth_interval(), 2000);
  EXPECT_EQ(scaler.get_hysteresis(), 1);
  EXPECT_EQ(scaler.get_min_scale(), 0.0);
  EXPECT_TRUE(scaler.is_enabled());
  EXPECT_FALSE(scaler.scale_collapsed());
  EXPECT_EQ(scaler.device(), Device::cpu());
  const Tensor& s = scaler.scale_tensor();
  EXPECT_EQ(s.dtype(), DType::F32);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.item<float>(), 65536.0f);
}

TEST(GradScaler, ConstructorChecks) {
  EXPECT_MPT_ERROR(GradScaler({.growth_factor = 1.0}), "growth_factor must be > 1");
  EXPECT_MPT_ERROR(GradScaler({.backoff_factor = 1.0}), "backoff_factor must be in (0, 1)");
  EXPECT_MPT_ERROR(GradScaler({.backoff_factor = 0.0}), "backoff_factor must be in (0, 1)");
  EXPECT_MPT_ERROR(GradScaler({.growth_interval = 0}), "growth_interval must be in [1");
  EXPECT_MPT_ERROR(GradScaler({.hysteresis = 0}), "hysteresis must be in [1");
  EXPECT_MPT_ERROR(GradScaler({.min_scale = -1.0}), "min_scale must be finite and >= 0");
  EXPECT_MPT_ERROR(GradScaler({.init_scale = 0.0}), "init_scale must be finite and > 0");
  EXPECT_MPT_ERROR(GradScaler({.init_scale = 1e39}), "init_scale must be finite and > 0");  // inf in f32
  EXPECT_MPT_ERROR(GradScaler({.init_scale = 8.0, .min_scale = 16.0}), "below min_scale");
  GradScaler scaler;
  EXPECT_MPT_ERROR(scaler.set_growth_factor(0.5), "growth_factor must be > 1");
  EXPECT_MPT_ERROR(scaler.set_backoff_factor(2.0), "backoff_factor must be in (0, 1)");
  EXPECT_MPT_ERROR(scaler.set_growth_interval(0), "growth_interval must be in [1");
  EXPECT_MPT_ERROR(scaler.set_hysteresis(-3), "hysteresis must be in [1");
  EXPECT_MPT_ERROR(scaler.set_min_scale(std::nan("")), "min_scale must be finite");
}

TEST(GradScaler, ScaleIsRecordedByAutograd) {
  GradScaler scaler;
  Tensor w = param({1.0f, 2.0f, 3.0f});
  const Tensor x = Tensor::from_vector<float>({0.5f, -1.5f, 2.0f}, {3});
  const Tensor loss = ops::sum(ops::mul(w, x));  // 0.5 - 3 + 6 = 3.5
  const Tensor scaled = scaler.scale(loss);
  EXPECT_EQ(scaled.dtype(), DType::F32);
  EXPECT_EQ(scaled.item<float>(), 3.5f * 65536.0f);
  EXPECT_TRUE(scaled.requires_grad());
  scaled.backward();
  EXPECT_EQ(grad_of(w), (std::vector<float>{32768.0f, -98304.0f, 131072.0f}));  // 65536 x
}

TEST(GradScaler, A2GrowthAfterInterval) {
  GradScaler scaler({.growth_interval = 3});
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.25});
  EXPECT_TRUE(iteration(scaler, opt, p, {65536.0f * 0.5f}));
  EXPECT_EQ(values(p), std::vector<float>{0.875f});  // the true gradient 0.5: 1 - 0.25 * 0.5
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_TRUE(iteration(scaler, opt, p, {65536.0f * 0.5f}));
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.growth_tracker(), 2);
  EXPECT_TRUE(iteration(scaler, opt, p, {65536.0f * 0.5f}));
  EXPECT_EQ(scaler.get_scale(), 131072.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.scale_tensor().item<float>(), 131072.0f);
  EXPECT_EQ(values(p), std::vector<float>{0.625f});
  // The next gradients are unscaled by the new scale.
  EXPECT_TRUE(iteration(scaler, opt, p, {131072.0f * 0.5f}));
  EXPECT_EQ(values(p), std::vector<float>{0.5f});
}

TEST(GradScaler, A3InfNaNElementsUnscaleAndSkip) {
  GradScaler scaler;
  Tensor p = param({1.0f, 2.0f, 3.0f});
  optim::SGD opt({p}, {.lr = 0.25});
  set_grad(p, {65536.0f * 0.5f, kInf, kNaN});
  const std::vector<float> before = values(p);
  EXPECT_FALSE(scaler.step(opt));
  const std::vector<float> g = grad_of(p);
  EXPECT_EQ(g[0], 0.5f);
  EXPECT_EQ(g[1], kInf);
  EXPECT_TRUE(std::isnan(g[2]));
  EXPECT_TRUE(same_bits(values(p), before));
  // The optimizer ran with found_inf and skipped on the device: its state exists with a count of 0.
  ASSERT_NE(opt.state(0, 0), nullptr);
  EXPECT_EQ(opt.state(0, 0)->steps(), 0);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
}

// One gradient of several holds an inf or a NaN: nothing in the optimizer changes, the scale backs off.
using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

void check_skip(float bad, const MakeOptimizer& make_opt) {
  GradScaler scaler({.growth_interval = 100});
  std::vector<Tensor> ps = {param({1.0f, -2.0f}), param({0.5f, 0.25f, 4.0f}), param({3.0f})};
  const std::unique_ptr<optim::Optimizer> opt = make_opt(ps);
  const auto set_all = [&](float s) {
    set_grad(ps[0], {s * 0.5f, s * -1.0f});
    set_grad(ps[1], {s * 2.0f, s * 0.25f, s * 1.0f});
    set_grad(ps[2], {s * -0.75f});
  };
  set_all(65536.0f);
  ASSERT_TRUE(scaler.step(*opt));
  scaler.update();
  EXPECT_EQ(scaler.growth_tracker(), 1);

  std::vector<std::vector<float>> params_before;
  for (const Tensor& p : ps) params_before.push_back(values(p));
  const mpt::StateDict state_before = opt->state_dict();
  mpt::StateDict snapshot;
  for (const auto& [k, t] : state_before) snapshot[k] = t.clone();

  set_all(65536.0f);
  Tensor g = ps[1].grad();
  g.data<float>()[1] = bad;  // one element of one gradient
  EXPECT_FALSE(scaler.step(*opt));
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_TRUE(same_bits(values(ps[i]), params_before[i])) << "param " << i;
  const mpt::StateDict state_after = opt->state_dict();
  ASSERT_EQ(state_after.size(), snapshot.size());
  for (const auto& [k, t] : snapshot) {
    ASSERT_TRUE(state_after.count(k)) << k;
    if (t.dtype() == DType::I64) {
      EXPECT_EQ(state_after.at(k).item<int64_t>(), t.item<int64_t>()) << k;
    } else {
      EXPECT_TRUE(same_bits(state_after.at(k).to_vector<double>(), t.to_vector<double>())) << k;
    }
  }
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(opt->state(0, i)->steps(), 1);
  // The other gradients were unscaled all the same (torch unscales every gradient before deciding).
  EXPECT_EQ(grad_of(ps[0]), (std::vector<float>{0.5f, -1.0f}));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);

  // The next finite iteration steps with gradients unscaled by the new scale.
  set_all(32768.0f);
  EXPECT_TRUE(scaler.step(*opt));
  scaler.update();
  for (size_t i = 0; i < ps.size(); ++i) EXPECT_EQ(opt->state(0, i)->steps(), 2);
}

TEST(GradScaler, InfInOneGradientSkipsSgdStep) {
  check_skip(kInf, [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(ps, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
  });
}

TEST(GradScaler, NaNInOneGradientSkipsSgdStep) {
  check_skip(kNaN, [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::SGD>(ps, optim::SgdOptions{.lr = 0.1, .momentum = 0.9});
  });
}

TEST(GradScaler, InfInOneGradientSkipsAdamWStep) {
  check_skip(-kInf, [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(ps);
  });
}

TEST(GradScaler, NaNInOneGradientSkipsAdamWStep) {
  check_skip(kNaN, [](std::vector<Tensor> ps) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(ps);
  });
}

TEST(GradScaler, A4OverflowAfter1999FiniteSteps) {
  GradScaler scaler;
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(iteration(scaler, opt, p, {1.0f}));
  EXPECT_EQ(scaler.growth_tracker(), 1999);
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_FALSE(iteration(scaler, opt, p, {kInf}));
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScaler, A5NeverGrowsToInf) {
  GradScaler scaler({.init_scale = 0x1p127, .growth_interval = 1});
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  EXPECT_TRUE(iteration(scaler, opt, p, {1.0f}));
  EXPECT_EQ(scaler.get_scale(), 0x1p127);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  GradScaler below({.init_scale = 0x1p126, .growth_interval = 1});
  EXPECT_TRUE(iteration(below, opt, p, {1.0f}));
  EXPECT_EQ(below.get_scale(), 0x1p127);
}

TEST(GradScaler, A6FoundInfIsSummedOverOptimizers) {
  GradScaler scaler;
  Tensor a = param({1.0f});
  Tensor b = param({1.0f});
  optim::SGD opt_a({a}, {.lr = 0.5});
  optim::SGD opt_b({b}, {.lr = 0.5});
  set_grad(a, {65536.0f});
  set_grad(b, {kInf});
  EXPECT_TRUE(scaler.step(opt_a));
  EXPECT_FALSE(scaler.step(opt_b));
  EXPECT_EQ(values(a), std::vector<float>{0.5f});
  EXPECT_EQ(values(b), std::vector<float>{1.0f});
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);  // one backoff, not two
  EXPECT_EQ(scaler.growth_tracker(), 0);
  // An optimizer only unscaled (not stepped) also counts.
  set_grad(a, {kNaN});
  set_grad(b, {32768.0f});
  scaler.unscale_(opt_a);
  EXPECT_TRUE(scaler.step(opt_b));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 16384.0);
}

TEST(GradScaler, A7ReciprocalInF64ThenNarrowed) {
  GradScaler scaler({.init_scale = 3.0});
  Tensor p = param({0.0f, 0.0f});
  optim::SGD opt({p});
  set_grad(p, {3.0f, 1.0f});
  scaler.unscale_(opt);
  const std::vector<float> g = grad_of(p);
  EXPECT_EQ(g[0], 1.0f);                  // 3.0f * 0.3333333432674408f rounds to 1 in f32
  EXPECT_EQ(g[1], 0.3333333432674408f);  // inv = float(1.0 / 3.0)
}

TEST(GradScaler, UnscaleByOneKeepsBits) {
  GradScaler scaler({.init_scale = 1.0});
  Tensor p = param({0.0f, 0.0f});
  optim::SGD opt({p});
  const Tensor g = Tensor::from_vector<float>({0x1p-149f, -0.0f}, {2});
  p.set_grad(g);
  scaler.unscale_(opt);
  EXPECT_TRUE(same_bits(grad_of(p), std::vector<float>{0x1p-149f, -0.0f}));
}

TEST(GradScaler, A8Fp16GradientsAreRejected) {
  GradScaler scaler;
  Tensor a = param({1.0f});
  Tensor b = param({1.0f, 2.0f});
  optim::SGD opt({a, b});
  set_grad(a, {65536.0f});
  b.set_grad(Tensor::from_vector<float>({1.0f, 2.0f}, {2}).to(DType::F16));
  EXPECT_MPT_ERROR(scaler.unscale_(opt), "Attempting to unscale FP16 gradients");
  EXPECT_EQ(grad_of(a), std::vector<float>{65536.0f});  // checked before anything is unscaled
  EXPECT_EQ(scaler.stage(opt), OptStage::Ready);
  EXPECT_MPT_ERROR(scaler.step(opt), "Attempting to unscale FP16 gradients");
}

TEST(GradScaler, Bf16GradientsAreUnscaled) {
  GradScaler scaler;
  Tensor p = param({1.0f, 2.0f});
  optim::SGD opt({p}, {.lr = 1.0});
  p.set_grad(Tensor::from_vector<float>({65536.0f, -32768.0f}, {2}).to(DType::BF16));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(values(p), (std::vector<float>{0.0f, 2.5f}));
}

TEST(GradScaler, A9StageErrors) {
  GradScaler scaler;
  Tensor p = param({1.0f});
  optim::SGD opt({p}, {.lr = 0.5});
  EXPECT_MPT_ERROR(scaler.update(), "No inf checks were recorded prior to update()");
  EXPECT_MPT_ERROR(scaler.step(opt), "No inf checks were recorded for this optimizer");  // no gradient
  EXPECT_EQ(scaler.stage(opt), OptStage::Unscaled);  // like torch: the (empty) unscale_ happened
  EXPECT_MPT_ERROR(scaler.update(), "No inf checks were recorded prior to update()");
  scaler.update(65536.0);  // clears the stages
  EXPECT_EQ(scaler.stage(opt), OptStage::Ready);

  set_grad(p, {65536.0f});
  scaler.unscale_(opt);
  EXPECT_EQ(scaler.stage(opt), OptStage::Unscaled);
  EXPECT_MPT_ERROR(scaler.unscale_(opt),
                   "unscale_() has already been called on this optimizer since the last update()");
  EXPECT_EQ(grad_of(p), std::vector<float>{1.0f});  // unscaled once only
  EXPECT_TRUE(scaler.step(opt));                    // no second unscale
  EXPECT_EQ(values(p), std::vector<float>{0.5f});
  EXPECT_EQ(scaler.stage(opt), OptStage::Stepped);
  EXPECT_MPT_ERROR(scaler.step(opt), "step() has already been called since the last update()");
  EXPECT_MPT_ERROR(scaler.unscale_(opt), "unscale_() is being called after step()");
  scaler.update();
  EXPECT_EQ(scaler.stage(opt), OptStage::Ready);
  EXPECT_EQ(scaler.growth_tracker(), 1);
}

TEST(GradScaler, A10LoweredIntervalDoesNotTriggerGrowth) {
  GradScaler scaler;
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  for (int i = 0; i < 5; ++i) iteration(scaler, opt, p, {1.0f});
  EXPECT_EQ(scaler.growth_tracker(), 5);
  scaler.set_growth_interval(3);
  for (int i = 0; i < 10; ++i) iteration(scaler, opt, p, {1.0f});
  EXPECT_EQ(scaler.growth_tracker(), 15);  // t + 1 == 3 never holds again
  EXPECT_EQ(scaler.get_scale(), 65536.0);
}

TEST(GradScaler, A11CollapseToZeroWarnsOnce) {
  GradScaler scaler;
  Tensor p = param({0.0f});
  optim::SGD opt({p});
  ::testing::internal::CaptureStderr();
  for (int i = 0; i < 40; ++i) iteration(scaler, opt, p, {kInf});
  EXPECT_EQ(scaler.get_scale(), 0x1p-24);
  EXPECT_FALSE(scaler.scale_collapsed());
  EXPECT_EQ(scaler.collapse_count(), 0);
  iteration(scaler, opt, p, {kInf});
  EXPECT_EQ(scaler.get_scale(), 0x1p-25);
  EXPECT_TRUE(scaler.scale_collapsed());
  EXPECT_EQ(scaler.collapse_count(), 1);
  for (int i = 41; i < 165; ++i) iteration(scaler, opt, p, {kInf});
  EXPECT_EQ(scaler.get_scale(), 0x1p-149);  // the smallest f32 subnormal
  iteration(scaler, opt, p, {kInf});
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(scaler.get_scale(), 0.0);  // 166 backoffs
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_EQ(scaler.collapse_count(), 126);
  EXPECT_EQ(count(err, "[GradScaler] warning: the loss scale collapsed"), 1u) << err;
  EXPECT_NE(err.find("every step is being skipped"), std::string::npos) << err;
}

TEST(GradScaler, A12UpdateWithNewScaleKeepsTracker) {
  GradScaler scaler;
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  for (int i = 0; i < 7; ++i) iteration(scaler, opt, p, {1.0f});
  set_grad(p, {1.0f});
  scaler.step(opt);
  scaler.update(1024.0);
  EXPECT_EQ(scaler.get_scale(), 1024.0);
  EXPECT_EQ(scaler.growth_tracker(), 7);
  EXPECT_EQ(scaler.stage(opt), OptStage::Ready);  // per-optimizer state cleared
  EXPECT_EQ(scaler.scale_tensor().item<float>(), 1024.0f);
  EXPECT_MPT_ERROR(scaler.update(0.0), "expected a finite scale > 0");
  EXPECT_MPT_ERROR(scaler.update(std::numeric_limits<double>::infinity()), "expected a finite scale > 0");
}

TEST(GradScaler, ClippingAfterUnscaleSeesTrueGradients) {
  GradScaler scaler;
  Tensor w = param({1.0f, 2.0f, 3.0f});
  const std::vector<float> xs = {0.5f, -1.5f, 2.0f};
  const Tensor x = Tensor::from_vector(xs, {3});
  optim::SGD opt({w}, {.lr = 1.0});
  scaler.scale(ops::sum(ops::mul(w, x))).backward();  // dloss/dw = x, scaled by 65536
  EXPECT_EQ(grad_of(w), (std::vector<float>{32768.0f, -98304.0f, 131072.0f}));
  scaler.unscale_(opt);
  EXPECT_EQ(grad_of(w), xs);
  const double true_norm = std::sqrt(0.25 + 2.25 + 4.0);
  const Tensor norm = optim::clip_grad_norm_({w}, 1.0);
  EXPECT_NEAR(norm.item<double>(), true_norm, 1e-6 * true_norm);
  const std::vector<float> g = grad_of(w);
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(g[i], xs[i] / true_norm, 1e-6) << i;
  EXPECT_TRUE(scaler.step(opt));  // uses the clipped gradients, not unscaled again
  scaler.update();
  const std::vector<float> p = values(w);
  const std::vector<float> w0 = {1.0f, 2.0f, 3.0f};
  for (size_t i = 0; i < 3; ++i) EXPECT_NEAR(p[i], w0[i] - xs[i] / true_norm, 1e-6) << i;
}

TEST(GradScaler, HysteresisDelaysBackoff) {
  GradScaler scaler({.growth_interval = 3, .hysteresis = 2});
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  EXPECT_EQ(scaler.hysteresis_tracker(), 2);
  EXPECT_FALSE(iteration(scaler, opt, p, {kInf}));  // skipped, but no backoff yet
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.hysteresis_tracker(), 1);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_TRUE(iteration(scaler, opt, p, {1.0f}));  // finite steps do not refill the count (cumulative)
  EXPECT_EQ(scaler.hysteresis_tracker(), 1);
  EXPECT_EQ(scaler.growth_tracker(), 1);
  EXPECT_FALSE(iteration(scaler, opt, p, {kNaN}));  // second overflow: back off, refill
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.hysteresis_tracker(), 2);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  EXPECT_FALSE(iteration(scaler, opt, p, {kInf}));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_EQ(scaler.hysteresis_tracker(), 1);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(iteration(scaler, opt, p, {1.0f}));  // growth refills the count
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.hysteresis_tracker(), 2);
  scaler.set_hysteresis(1);  // the remaining count is clamped: the next overflow backs off
  EXPECT_EQ(scaler.hysteresis_tracker(), 1);
  EXPECT_FALSE(iteration(scaler, opt, p, {kInf}));
  EXPECT_EQ(scaler.get_scale(), 32768.0);
}

TEST(GradScaler, MinScaleClampsAndWarnsOnce) {
  GradScaler scaler({.init_scale = 65536.0, .growth_interval = 2, .min_scale = 20000.0});
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  ::testing::internal::CaptureStderr();
  iteration(scaler, opt, p, {kInf});
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  EXPECT_FALSE(scaler.scale_collapsed());
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
  ::testing::internal::CaptureStderr();
  iteration(scaler, opt, p, {kInf});
  EXPECT_EQ(scaler.get_scale(), 20000.0);  // 16384 clamped up to the floor
  EXPECT_TRUE(scaler.scale_collapsed());
  EXPECT_EQ(scaler.collapse_count(), 1);
  EXPECT_FALSE(iteration(scaler, opt, p, {kInf}));  // still skipped, the scale stays at the floor
  EXPECT_EQ(scaler.get_scale(), 20000.0);
  EXPECT_EQ(scaler.collapse_count(), 2);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(count(err, "[GradScaler] warning: the loss scale collapsed to 20000 (min_scale 20000)"), 1u) << err;
  // Growth leaves the floor.
  for (int i = 0; i < 2; ++i) iteration(scaler, opt, p, {1.0f});
  EXPECT_EQ(scaler.get_scale(), 40000.0);
  EXPECT_FALSE(scaler.scale_collapsed());
  EXPECT_MPT_ERROR(scaler.update(100.0), ">= min_scale");
}

TEST(GradScaler, StateDictRoundTrip) {
  const GradScalerOptions options{.init_scale = 1024.0, .growth_factor = 4.0, .backoff_factor = 0.25,
                                  .growth_interval = 5, .hysteresis = 3, .min_scale = 2.0};
  GradScaler a(options);
  Tensor p = param({0.0f});
  optim::SGD opt({p}, {.lr = 0.0});
  const std::vector<float> pattern = {1.0f, 1.0f, kInf, 1.0f, kInf, kInf, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f, kInf};
  for (float g : pattern) iteration(a, opt, p, {g});
  const mpt::StateDict d = a.state_dict();
  EXPECT_EQ(d.size(), 8u);
  EXPECT_EQ(d.at("scale").dtype(), DType::F32);
  EXPECT_EQ(d.at("growth_tracker").dtype(), DType::I32);
  EXPECT_EQ(d.at("growth_interval").dtype(), DType::I64);
  EXPECT_EQ(d.at("min_scale").dtype(), DType::F64);

  GradScaler b;
  b.load_state_dict(d);
  EXPECT_EQ(b.get_scale(), a.get_scale());
  EXPECT_EQ(b.growth_tracker(), a.growth_tracker());
  EXPECT_EQ(b.hysteresis_tracker(), a.hysteresis_tracker());
  EXPECT_EQ(b.get_growth_factor(), 4.0);
  EXPECT_EQ(b.get_backoff_factor(), 0.25);
  EXPECT_EQ(b.get_growth_interval(), 5);
  EXPECT_EQ(b.get_hysteresis(), 3);
  EXPECT_EQ(b.get_min_scale(), 2.0);
  EXPECT_EQ(b.scale_tensor().item<float>(), static_cast<float>(a.get_scale()));
  // Both continue identically.
  for (float g : pattern) {
    iteration(a, opt, p, {g});
    iteration(b, opt, p, {g});
    ASSERT_EQ(a.get_scale(), b.get_scale());
    ASSERT_EQ(a.growth_tracker(), b.growth_tracker());
    ASSERT_EQ(a.hysteresis_tracker(), b.hysteresis_tracker());
  }
}

TEST(GradScaler, LoadStateDictValidates) {
  GradScaler src({.hysteresis = 2});
  const mpt::StateDict good = src.state_dict();
  GradScaler dst({.init_scale = 8.0});
  const auto with = [&](const std::string& key, const Tensor& t) {
    mpt::StateDict d = good;
    d[key] = t;
    return d;
  };
  mpt::StateDict missing = good;
  missing.erase("hysteresis_tracker");
  EXPECT_MPT_ERROR(dst.load_state_dict(missing), "missing key 'hysteresis_tracker'");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("extra", Tensor::zeros({}))), "unexpected key 'extra'");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("scale", Tensor::full({}, 4.0, DType::F64))),
                   "key 'scale': expected a 0-d f32 tensor");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("growth_tracker", Tensor::zeros({1}, DType::I32))),
                   "key 'growth_tracker': expected a 0-d i32 tensor");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("growth_factor", Tensor::full({}, 1.0, DType::F64))),
                   "growth_factor must be > 1");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("scale", Tensor::full({}, -1.0))), "key 'scale'");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("growth_tracker", Tensor::full({}, -1.0, DType::I32))),
                   "key 'growth_tracker': expected >= 0");
  EXPECT_MPT_ERROR(dst.load_state_dict(with("hysteresis_tracker", Tensor::full({}, 3.0, DType::I32))),
                   "key 'hysteresis_tracker'");
  EXPECT_MPT_ERROR(dst.load_state_dict({}), "saved from a disabled instance");
  // Nothing changed.
  EXPECT_EQ(dst.get_scale(), 8.0);
  EXPECT_EQ(dst.get_hysteresis(), 1);
  dst.load_state_dict(good);
  EXPECT_EQ(dst.get_scale(), 65536.0);
  EXPECT_EQ(dst.get_hysteresis(), 2);
}

TEST(GradScaler, DisabledIsANoOp) {
  GradScaler scaler({.enabled = false});
  EXPECT_FALSE(scaler.is_enabled());
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_EQ(scaler.growth_tracker(), 0);
  Tensor w = param({1.0f, 2.0f});
  const Tensor x = Tensor::from_vector<float>({3.0f, -1.0f}, {2});
  const Tensor loss = ops::sum(ops::mul(w, x));
  const Tensor same = scaler.scale(loss);
  EXPECT_TRUE(same.shares_storage(loss));
  EXPECT_EQ(same.grad_fn(), loss.grad_fn());
  same.backward();
  EXPECT_EQ(grad_of(w), (std::vector<float>{3.0f, -1.0f}));
  optim::SGD opt({w}, {.lr = 0.5});
  scaler.unscale_(opt);
  EXPECT_EQ(grad_of(w), (std::vector<float>{3.0f, -1.0f}));
  EXPECT_TRUE(scaler.step(opt));
  EXPECT_EQ(values(w), (std::vector<float>{-0.5f, 2.5f}));
  EXPECT_TRUE(scaler.step(opt));  // no stage tracking
  scaler.update();                // nothing recorded: no error
  scaler.update(8.0);
  EXPECT_EQ(scaler.get_scale(), 1.0);
  EXPECT_TRUE(scaler.state_dict().empty());
  scaler.load_state_dict({});
  EXPECT_FALSE(scaler.scale_collapsed());
}

}  // namespace
}  // namespace mpt::train
