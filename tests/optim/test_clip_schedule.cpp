// tests/optim/test_clip_schedule.cpp: clip_grad_norm_ against float64, the lr schedules against their closed
// forms, and weight_decay_groups.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numbers>
#include <vector>

#include "mpt/ops/elementwise.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/lr_schedule.h"
#include "mpt/optim/sgd.h"
#include "optim_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::optim_test;

namespace {

// ---- clip_grad_norm_ ----

struct ClipCase {
  std::vector<Tensor> params;
  std::vector<std::vector<double>> grads;  // as stored
  double norm = 0;                          // float64 reference
};

ClipCase clip_case(DType grad_dtype, double scale) {
  ClipCase c;
  const std::vector<int64_t> sizes = {1000, 3, 64};
  double sq = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    Tensor p = leaf(values(static_cast<size_t>(sizes[i]), i), {sizes[i]}, grad_dtype == DType::F64 ? DType::F64
                                                                                                   : DType::F32);
    const std::vector<double> g = stored(values(static_cast<size_t>(sizes[i]), 10 + i, scale), grad_dtype);
    set_grad(p, g, grad_dtype);
    for (double x : g) sq += x * x;
    c.params.push_back(p);
    c.grads.push_back(g);
  }
  c.params.push_back(leaf(values(5, 9), {5}));  // no gradient: ignored
  c.norm = std::sqrt(sq);
  return c;
}

TEST(ClipGradNorm, NormAndScaling) {
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    SCOPED_TRACE(fmt::format("{}", dt));
    ClipCase c = clip_case(dt, 2.0);
    const double max_norm = 1.5;
    const Tensor norm = optim::clip_grad_norm_(c.params, max_norm);
    EXPECT_EQ(norm.dim(), 0);
    const double tol = dt == DType::F64 ? 1e-14 : 1e-6;  // f32 accumulation over ~1000 terms
    EXPECT_NEAR(norm.item<double>(), c.norm, tol * c.norm);
    const double coef = max_norm / (c.norm + 1e-6);
    ASSERT_LT(coef, 1.0);
    const double rel = dt == DType::F64 ? 1e-14 : dt == DType::BF16 ? 0x1p-8 : 0x1p-22;  // one rounding of g * coef
    for (size_t i = 0; i < c.grads.size(); ++i) {
      std::vector<double> expect = c.grads[i];
      for (double& x : expect) x *= coef;
      expect_close(c.params[i].grad(), expect, rel, 1e-30, fmt::format("grad {}", i));
    }
    EXPECT_FALSE(c.params.back().grad().defined());
    // The clipped gradients now have norm max_norm.
    EXPECT_NEAR(optim::clip_grad_norm_(c.params, 1e9).item<double>(), max_norm, dt == DType::BF16 ? 1e-2 : 1e-5);
  }
}

TEST(ClipGradNorm, BelowMaxNormKeepsTheBits) {
  ClipCase c = clip_case(DType::F32, 0.01);
  std::vector<Tensor> before;
  for (size_t i = 0; i < c.grads.size(); ++i) before.push_back(c.params[i].grad().clone());
  const double max_norm = c.norm * 1.0001;
  EXPECT_NEAR(optim::clip_grad_norm_(c.params, max_norm).item<double>(), c.norm, 1e-6 * c.norm);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(same_bits(c.params[i].grad(), before[i])) << i;
}

// torch's error_if_nonfinite=False: an infinite norm gives coef 0 (finite gradients become zeros, infinite ones
// NaN); a NaN norm makes every gradient NaN.
TEST(ClipGradNorm, NonFiniteNorm) {
  const double inf = std::numeric_limits<double>::infinity();
  Tensor a = leaf({1.0, 2.0}, {2}), b = leaf({3.0}, {1});
  set_grad(a, {inf, 2.0}, DType::F32);
  set_grad(b, {-3.0}, DType::F32);
  EXPECT_TRUE(std::isinf(optim::clip_grad_norm_({a, b}, 1.0).item<double>()));
  const std::vector<double> ga = a.grad().to_vector<double>();
  EXPECT_TRUE(std::isnan(ga[0]));
  EXPECT_EQ(ga[1], 0.0);
  EXPECT_EQ(b.grad().to_vector<double>()[0], 0.0);

  set_grad(a, {std::nan(""), 2.0}, DType::F32);
  set_grad(b, {-3.0}, DType::F32);
  EXPECT_TRUE(std::isnan(optim::clip_grad_norm_({a, b}, 1.0).item<double>()));
  EXPECT_TRUE(std::isnan(a.grad().to_vector<double>()[1]));
  EXPECT_TRUE(std::isnan(b.grad().to_vector<double>()[0]));
}

TEST(ClipGradNorm, NoGradientsAndBadMaxNorm) {
  Tensor a = leaf({1.0}, {1});
  EXPECT_EQ(optim::clip_grad_norm_({a}, 1.0).item<double>(), 0.0);
  EXPECT_EQ(optim::clip_grad_norm_({}, 1.0).item<double>(), 0.0);
  EXPECT_MPT_ERROR(optim::clip_grad_norm_({a}, -1.0), "max_norm must be >= 0");
}

// The sums of squares combined on the device (ZeRO-1's all-reduce): here `combine` stands in for 3 ranks holding
// the same gradients (x3), and for a rank without gradients of its own (0, then 3 x the others'). The total is
// sqrt(3) x the float64 norm and the coefficient torch's min(max_norm / (total + 1e-6), 1), both within f32
// roundings; the gradients are not touched. f64 gradients are refused with the host overload's name.
TEST(ClipGradNorm, CoefficientWithTheSumOfSquaresCombinedOnTheDevice) {
  ClipCase c = clip_case(DType::F32, 2.0);
  std::vector<Tensor> before;
  for (size_t i = 0; i < c.grads.size(); ++i) before.push_back(c.params[i].grad().clone());
  double seen = -1;
  const optim::ClipCoefficient got = optim::clip_coefficient_on_device(
      c.params, 1.5, Device::cpu(), [&](Tensor& sq) {
        ASSERT_EQ(sq.shape(), (Shape{1}));
        seen = sq.to_vector<double>()[0];
        sq = ops::scale(sq, 3.0);  // what a SUM over 3 equal ranks leaves
      });
  EXPECT_NEAR(seen, c.norm * c.norm, 1e-6 * c.norm * c.norm);
  const double total = std::sqrt(3.0) * c.norm;
  EXPECT_NEAR(got.total_norm.item<double>(), total, 1e-6 * total);
  EXPECT_NEAR(got.coefficient.item<double>(), 1.5 / (total + 1e-6), 1e-6);
  EXPECT_EQ(got.total_norm.dim(), 0);
  for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(same_bits(c.params[i].grad(), before[i])) << i;
  // A rank without gradients still takes part in the combine, with 0.
  Tensor none = leaf({1.0}, {1});
  const optim::ClipCoefficient other = optim::clip_coefficient_on_device({none}, 1.5, Device::cpu(), [&](Tensor& sq) {
    EXPECT_EQ(sq.to_vector<double>()[0], 0.0);
    sq = Tensor::full({1}, 3.0 * seen, DType::F32);
  });
  EXPECT_NEAR(other.total_norm.item<double>(), total, 1e-6 * total);
  ClipCase f64 = clip_case(DType::F64, 2.0);
  EXPECT_MPT_ERROR(optim::clip_coefficient_on_device(f64.params, 1.0, Device::cpu(), [](Tensor&) {}),
                   "f64 gradients combine on the host: clip_coefficient");
}

// ---- learning-rate schedules ----

// Karpathy's build-nanogpt get_lr, written independently here.
double nanogpt_lr(int64_t it, double max_lr, double min_lr, int64_t warmup, int64_t total) {
  if (it < warmup) return max_lr * double(it + 1) / double(warmup);
  if (it > total) return min_lr;
  const double ratio = double(it - warmup) / double(total - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (max_lr - min_lr);
}

TEST(LrSchedule, WarmupCosineMatchesTheClosedForm) {
  Tensor p = leaf({1.0}, {1});
  optim::SGD opt({p});
  optim::WarmupCosineLr s(opt, {.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 10, .total_steps = 110});
  EXPECT_DOUBLE_EQ(s.lr_at(0), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(4), 0.5);
  EXPECT_DOUBLE_EQ(s.lr_at(9), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(10), 1.0);
  EXPECT_DOUBLE_EQ(s.lr_at(60), 0.55);  // half way: coeff 1/2
  EXPECT_DOUBLE_EQ(s.lr_at(110), 0.1);
  EXPECT_DOUBLE_EQ(s.lr_at(5000), 0.1);
  for (int64_t it = 0; it < 130; ++it) EXPECT_NEAR(s.lr_at(it), nanogpt_lr(it, 1.0, 0.1, 10, 110), 1e-15) << it;
  // No warmup: the first step is at max_lr.
  optim::WarmupCosineLr s0(opt, {.max_lr = 2.0, .min_lr = 0.0, .warmup_steps = 0, .total_steps = 4});
  EXPECT_DOUBLE_EQ(s0.lr_at(0), 2.0);
  EXPECT_DOUBLE_EQ(s0.lr_at(2), 1.0);
  EXPECT_DOUBLE_EQ(s0.lr_at(4), 0.0);
}

TEST(LrSchedule, StepSetsEveryGroupsLrAndResumes) {
  Tensor a = leaf({1.0}, {1}), b = leaf({2.0}, {1});
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {a};
  groups[1].params = {b};
  groups[1].lr = 0.7;
  optim::SGD opt(groups, {.lr = 0.3});
  const optim::WarmupCosineOptions o{.max_lr = 0.6, .min_lr = 0.06, .warmup_steps = 3, .total_steps = 20};
  optim::WarmupCosineLr s(opt, o);
  EXPECT_DOUBLE_EQ(*opt.param_groups()[0].lr, 0.2);  // construction applies lr_at(0)
  EXPECT_DOUBLE_EQ(*opt.param_groups()[1].lr, 0.2);
  for (int i = 0; i < 7; ++i) s.step();
  EXPECT_EQ(s.current_step(), 7);
  EXPECT_DOUBLE_EQ(*opt.param_groups()[1].lr, nanogpt_lr(7, 0.6, 0.06, 3, 20));
  const mpt::StateDict d = s.state_dict();
  EXPECT_EQ(d.at("step").dtype(), DType::I64);
  optim::SGD opt2(groups, {.lr = 0.3});
  optim::WarmupCosineLr s2(opt2, o);
  s2.load_state_dict(d);
  EXPECT_EQ(s2.current_step(), 7);
  EXPECT_EQ(*opt2.param_groups()[0].lr, *opt.param_groups()[0].lr);
  s2.step();
  EXPECT_DOUBLE_EQ(*opt2.param_groups()[0].lr, nanogpt_lr(8, 0.6, 0.06, 3, 20));
  EXPECT_MPT_ERROR(s2.load_state_dict({{"steps", Tensor::full({}, 1, DType::I64)}}), "missing key 'step'");
  EXPECT_MPT_ERROR(s2.load_state_dict({{"step", Tensor::full({}, 1, DType::F32)}}), "expected a 0-d i64 tensor");
  EXPECT_EQ(s2.current_step(), 8);

  optim::ConstantLr c(opt, 0.25);
  EXPECT_DOUBLE_EQ(*opt.param_groups()[1].lr, 0.25);
  c.step();
  EXPECT_DOUBLE_EQ(c.lr_at(1000), 0.25);
}

TEST(LrSchedule, InvalidOptionsThrow) {
  Tensor p = leaf({1.0}, {1});
  optim::SGD opt({p});
  EXPECT_MPT_ERROR(optim::WarmupCosineLr(opt, {.max_lr = 0.1, .min_lr = 0.2}), "min_lr <= max_lr");
  EXPECT_MPT_ERROR(optim::WarmupCosineLr(opt, {.warmup_steps = 10, .total_steps = 5}), "warmup_steps <= total_steps");
  EXPECT_MPT_ERROR(optim::ConstantLr(opt, -1), "invalid learning rate: -1");
}

// ---- weight_decay_groups ----

TEST(ParamGroups, WeightDecayGroups) {
  Tensor w = leaf({1.0, 2.0}, {2}), b = leaf({3.0}, {1}), e = leaf({4.0}, {1}), w2 = leaf({5.0}, {1});
  Tensor frozen = Tensor::from_vector(std::vector<double>{6.0}, {1});
  const std::vector<mpt::NamedParameter> named = {
      {"h.0.w", w, true}, {"h.0.b", b, false}, {"frozen.w", frozen, true}, {"wte", e, false}, {"h.1.w", w2, true}};
  const std::vector<optim::ParamGroup> g = optim::weight_decay_groups(named, 0.1);
  ASSERT_EQ(g.size(), 2u);
  EXPECT_EQ(*g[0].weight_decay, 0.1);
  EXPECT_EQ(*g[1].weight_decay, 0.0);
  EXPECT_EQ(g[0].names, (std::vector<std::string>{"h.0.w", "h.1.w"}));
  EXPECT_EQ(g[1].names, (std::vector<std::string>{"h.0.b", "wte"}));
  ASSERT_EQ(g[0].params.size(), 2u);
  EXPECT_TRUE(g[0].params[0].shares_storage(w));
  EXPECT_TRUE(g[1].params[1].shares_storage(e));
  EXPECT_FALSE(g[0].lr.has_value());  // the optimizer's default applies

  // The groups drive the decay: one SGD step, only the decayed weights feel it.
  optim::SGD opt(g, {.lr = 1.0});
  EXPECT_EQ(*opt.param_groups()[0].lr, 1.0);
  for (const Tensor& t : {w, b, e, w2}) t.set_grad(Tensor::zeros(t.shape()));
  opt.step();
  expect_close(w, {0.9, 1.8}, 1e-7, 1.0, "decayed weight");
  EXPECT_EQ(b.to_vector<double>(), std::vector<double>{3.0});
  EXPECT_EQ(opt.state_dict().count("h.1.w.step"), 1u);
}

}  // namespace
