// tests/optim/test_adamw.cpp: optim::AdamW against a float64 re-implementation of torch.optim.AdamW (per-parameter
// step counts, groups, skipping, frozen parameters, bf16 / 8-bit moments, GradScaling) and its hyperparameter checks.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mpt/optim/adamw.h"
#include "optim_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::optim_test;

namespace {

struct AdamConfig {
  double lr, beta1, beta2, eps, weight_decay;
};

// torch.optim.AdamW._single_tensor_adamw (amsgrad=False, maximize=False), in double; step is this parameter's own.
struct RefAdamW {
  std::vector<double> p, m, v;
  int64_t step = 0;

  explicit RefAdamW(std::vector<double> p0) : p(std::move(p0)), m(p.size()), v(p.size()) {}

  void update(const std::vector<double>& g, const AdamConfig& c) {
    ++step;
    const double bc1 = 1 - std::pow(c.beta1, double(step)), bc2 = 1 - std::pow(c.beta2, double(step));
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] *= 1 - c.lr * c.weight_decay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      p[i] -= (c.lr / bc1) * m[i] / (std::sqrt(v[i] / bc2) + c.eps);
    }
  }
};

// Two groups with their own lr, weight decay, betas and eps (eps large enough to matter), 5 steps.
void run_two_groups(DType dtype, double rel, double floor) {
  const std::vector<double> a0 = values(600, 1), b0 = values(12, 2, 2.0), c0 = values(5, 3);
  Tensor a = leaf(a0, {600}, dtype), b = leaf(b0, {3, 4}, dtype), c = leaf(c0, {5}, dtype);
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {a, b};
  groups[1].params = {c};
  groups[1].lr = 0.05;
  groups[1].weight_decay = 0.0;
  groups[1].options = {{"beta1", 0.8}, {"beta2", 0.99}, {"eps", 1e-2}};
  optim::AdamW opt(groups, {.lr = 1e-2, .betas = {0.9, 0.95}, .weight_decay = 0.1});
  const AdamConfig c_ab{1e-2, 0.9, 0.95, 1e-8, 0.1}, c_c{0.05, 0.8, 0.99, 1e-2, 0.0};
  RefAdamW ra(a0), rb(b0), rc(c0);
  for (int s = 0; s < 5; ++s) {
    const std::vector<double> ga = values(600, 10 + s), gb = values(12, 20 + s, 0.1), gc = values(5, 30 + s, 1e-2);
    set_grad(a, ga, dtype);
    set_grad(b, gb, dtype);
    set_grad(c, gc, dtype);
    opt.step();
    ra.update(ga, c_ab);
    rb.update(gb, c_ab);
    rc.update(gc, c_c);
    expect_close(a, ra.p, rel, floor, fmt::format("a after step {}", s + 1));
    expect_close(b, rb.p, rel, floor, fmt::format("b after step {}", s + 1));
    expect_close(c, rc.p, rel, floor, fmt::format("c after step {}", s + 1));
  }
  expect_close(opt.state(0, 0)->tensors.at("exp_avg"), ra.m, rel * 10, 1e-3, "exp_avg of a");
  expect_close(opt.state(1, 0)->tensors.at("exp_avg_sq"), rc.v, rel * 10, 1e-6, "exp_avg_sq of c");
}

TEST(AdamW, F64MatchesReferenceNearlyExactly) { run_two_groups(DType::F64, 1e-13, 1.0); }

// f32 masters and moments: each step rounds p twice and the update carries a few f32 roundings.
TEST(AdamW, F32MatchesReferenceWithinF32Rounding) { run_two_groups(DType::F32, 5 * 4 * 0x1p-24, 1.0); }

TEST(AdamW, DefaultsAreTorchs) {
  Tensor p = leaf(values(2, 1), {2});
  optim::AdamW opt({p});
  const optim::ParamGroup& g = opt.param_groups()[0];
  EXPECT_EQ(*g.lr, 1e-3);
  EXPECT_EQ(*g.weight_decay, 1e-2);
  EXPECT_EQ(g.options.at("beta1"), 0.9);
  EXPECT_EQ(g.options.at("beta2"), 0.999);
  EXPECT_EQ(g.options.at("eps"), 1e-8);
  EXPECT_EQ(opt.moment_storage(), ops::MomentStorage::F32);
}

// A parameter without a gradient in step 2 keeps its values, state and step count; at step 3 its bias correction
// uses its own count (2), while its neighbour's uses 3 (two kernel calls in one group).
TEST(AdamW, ParameterWithoutGradientIsSkippedAndKeepsItsStepCount) {
  const std::vector<double> a0 = values(9, 4), b0 = values(9, 5);
  Tensor a = leaf(a0, {9}, DType::F64), b = leaf(b0, {9}, DType::F64);
  optim::AdamW opt({a, b}, {.lr = 0.1, .weight_decay = 0.05});
  const AdamConfig cfg{0.1, 0.9, 0.999, 1e-8, 0.05};
  RefAdamW ra(a0), rb(b0);
  for (int s = 0; s < 3; ++s) {
    const std::vector<double> ga = values(9, 40 + s), gb = values(9, 50 + s);
    set_grad(a, ga, DType::F64);
    ra.update(ga, cfg);
    if (s == 1) {
      b.set_grad({});
      const Tensor before = b.clone(), m_before = opt.state(0, 1)->tensors.at("exp_avg").clone();
      opt.step();
      EXPECT_TRUE(same_bits(b, before));
      EXPECT_TRUE(same_bits(opt.state(0, 1)->tensors.at("exp_avg"), m_before));
      EXPECT_EQ(opt.state(0, 1)->steps(), 1);
      continue;
    }
    set_grad(b, gb, DType::F64);
    rb.update(gb, cfg);
    opt.step();
  }
  EXPECT_EQ(opt.state(0, 0)->steps(), 3);
  EXPECT_EQ(opt.state(0, 1)->steps(), 2);
  expect_close(a, ra.p, 1e-13, 1.0, "a");
  expect_close(b, rb.p, 1e-13, 1.0, "b");
}

TEST(AdamW, FrozenParametersGetNoState) {
  Tensor a = leaf(values(4, 1), {4});
  Tensor frozen = Tensor::from_vector(values(4, 2), {4});
  frozen.set_grad(Tensor::ones({4}));
  optim::AdamW opt({a, frozen});
  set_grad(a, values(4, 3), DType::F32);
  const Tensor before = frozen.clone();
  opt.step();
  opt.step();
  EXPECT_EQ(opt.state(0, 1), nullptr);
  EXPECT_TRUE(same_bits(frozen, before));
  for (const auto& [key, t] : opt.state_dict()) EXPECT_EQ(key.find("group0.param1"), std::string::npos) << key;
}

// materialize_state creates what a first step would (zero moments, count 0; 8-bit: codes and absmaxes), none for a
// frozen parameter, and changes no bit of the run: the same parameters and state as an optimizer that made its state
// lazily, and a parameter that never gets a gradient keeps its zero state.
TEST(AdamW, MaterializedStateIsTheFirstStepsAndChangesNoBit) {
  for (ops::MomentStorage storage : {ops::MomentStorage::F32, ops::MomentStorage::Int8}) {
    Tensor a = leaf(values(300, 1), {300}), b = leaf(values(7, 2), {7}), unused = leaf(values(5, 3), {5});
    Tensor frozen = Tensor::from_vector(values(4, 4), {4}).to(DType::F32);
    Tensor a_lazy = leaf(values(300, 1), {300}), b_lazy = leaf(values(7, 2), {7});
    optim::AdamW opt({a, b, unused, frozen}, {.lr = 0.05, .moments = storage});
    optim::AdamW lazy({a_lazy, b_lazy}, {.lr = 0.05, .moments = storage});
    opt.materialize_state();
    for (size_t i : {0, 1, 2}) {
      ASSERT_NE(opt.state(0, i), nullptr) << i;
      EXPECT_EQ(opt.state(0, i)->steps(), 0);
      for (const auto& [name, t] : opt.state(0, i)->tensors) {
        for (double v : t.to_vector<double>()) ASSERT_EQ(v, 0.0) << name;
      }
    }
    EXPECT_EQ(opt.state(0, 3), nullptr) << "frozen: never any state";
    const optim::ParamState* before = opt.state(0, 0);
    opt.materialize_state();
    EXPECT_EQ(opt.state(0, 0), before) << "existing state is kept";
    for (int s = 0; s < 3; ++s) {
      set_grad(a, values(300, 10 + s), DType::F32);
      set_grad(b, values(7, 20 + s), DType::F32);
      set_grad(a_lazy, values(300, 10 + s), DType::F32);
      set_grad(b_lazy, values(7, 20 + s), DType::F32);
      opt.step();
      lazy.step();
    }
    EXPECT_TRUE(same_bits(a, a_lazy));
    EXPECT_TRUE(same_bits(b, b_lazy));
    for (size_t i : {0, 1}) {
      EXPECT_EQ(opt.state(0, i)->steps(), 3);
      for (const auto& [name, t] : lazy.state(0, i)->tensors) {
        EXPECT_TRUE(same_bits(opt.state(0, i)->tensors.at(name), t)) << name;
      }
    }
    EXPECT_EQ(opt.state(0, 2)->steps(), 0) << "never stepped";
    EXPECT_TRUE(opt.state_dict().count("group0.param2.exp_avg")) << "its zero state is saved";
  }
}

// Low-precision moments: the same run as the f32 reference, within a documented looser tolerance, and clearly
// not the f32 result (the rounding of the moments is visible). Tolerances are absolute, in units of lr per step:
// bf16 moments carry 2^-9 relative rounding (measured: worst 0.28% of lr per step here; allowed 0.5%); the 8-bit
// blockwise dynamic map loses more on elements far below their block's absmax (measured 2.8%; allowed 5%).
void run_low_precision(ops::MomentStorage storage, double lr_fraction_per_step) {
  const double lr = 1e-2;
  const int steps = 6;
  const std::vector<double> p0 = values(1000, 6);  // several 256-element blocks, the last one partial
  Tensor p = leaf(p0, {1000}), p32 = leaf(p0, {1000});
  optim::AdamW opt({p}, {.lr = lr, .moments = storage}), opt32({p32}, {.lr = lr});
  RefAdamW ref(p0);
  for (int s = 0; s < steps; ++s) {
    const std::vector<double> g = values(1000, 60 + s);
    set_grad(p, g, DType::F32);
    set_grad(p32, g, DType::F32);
    opt.step();
    opt32.step();
    ref.update(g, {lr, 0.9, 0.999, 1e-8, 1e-2});
  }
  expect_close(p, ref.p, lr * lr_fraction_per_step * steps, 1.0, "low-precision moments vs f64 reference");
  EXPECT_FALSE(same_bits(p, p32)) << "the moments were not stored in low precision";
}

TEST(AdamW, Bf16MomentsStayWithinTolerance) { run_low_precision(ops::MomentStorage::BF16, 0.005); }
TEST(AdamW, Int8MomentsStayWithinTolerance) { run_low_precision(ops::MomentStorage::Int8, 0.05); }

TEST(AdamW, Int8StateHasCodesAndBlockAbsmax) {
  Tensor p = leaf(values(300, 1), {300});
  optim::AdamW opt({p}, {.moments = ops::MomentStorage::Int8});
  set_grad(p, values(300, 2), DType::BF16);
  opt.step();
  const auto& t = opt.state(0, 0)->tensors;
  EXPECT_EQ(t.at("exp_avg").dtype(), DType::U8);
  EXPECT_EQ(t.at("exp_avg_sq_absmax").shape(), Shape{2});
  EXPECT_GT(t.at("exp_avg_absmax").to_vector<double>()[0], 0.0);
}

TEST(AdamW, GradScalingUnscalesAndFoundInfSkipsTheStep) {
  const std::vector<double> p0 = values(8, 7), g = values(8, 8);
  std::vector<double> g4(g.size());
  for (size_t i = 0; i < g.size(); ++i) g4[i] = 4 * g[i];
  Tensor p = leaf(p0, {8}), q = leaf(p0, {8});
  optim::AdamW opt_p({p}, {.lr = 0.1}), opt_q({q}, {.lr = 0.1});
  set_grad(p, g, DType::F32);
  set_grad(q, g4, DType::F32);
  const Tensor inv = Tensor::full({1}, 0.25), found = Tensor::full({1}, 1.0), none = Tensor::zeros({1});
  // found_inf: the kernels skip on the device: nothing changes and the count does not advance. The state exists
  // (created at the first attempted step, as torch's fused optimizers do) with count 0 and zero moments.
  opt_q.step({.grad_scale_inv = inv, .found_inf = found});
  EXPECT_EQ(q.to_vector<double>(), p0);
  ASSERT_NE(opt_q.state(0, 0), nullptr);
  EXPECT_EQ(opt_q.state(0, 0)->steps(), 0);
  EXPECT_EQ(opt_q.state(0, 0)->tensors.at("exp_avg").to_vector<double>(), std::vector<double>(8, 0.0));
  EXPECT_EQ(opt_q.state(0, 0)->tensors.at("exp_avg_sq").to_vector<double>(), std::vector<double>(8, 0.0));
  opt_p.step();
  opt_q.step({.grad_scale_inv = inv, .found_inf = none});
  EXPECT_TRUE(same_bits(p, q));  // 4 g * 0.25 == g exactly
  EXPECT_EQ(opt_q.state(0, 0)->steps(), 1);
}

// The step rewrites an FP16/BF16 compute copy as the cast of each new parameter (amp's cached copies).
TEST(AdamW, WritesTheComputeCopyAsTheCastOfTheNewParameter) {
  expect_adamw_writes_compute_copies(Device::cpu());
  const Tensor p = leaf(values(8, 1), {8});
  p.set_grad(Tensor::zeros({8}));
  const std::vector<ops::AdamWSlot> bad{{p, p.grad(), ops::adamw_state(p), Tensor{}, Tensor::zeros({8})}};
  EXPECT_MPT_ERROR(ops::adamw_step(bad, {}), "[adamw_step] parameter 0: a compute copy must be a contiguous bf16/f16 "
                   "tensor of at least the f32 parameter's 8 elements on cpu, got f32[8] cpu");
  const std::vector<ops::AdamWSlot> short_copy{{p, p.grad(), ops::adamw_state(p), Tensor{},
                                                Tensor::zeros({7}, DType::BF16)}};
  EXPECT_MPT_ERROR(ops::adamw_step(short_copy, {}), "got bf16[7] cpu");
}

TEST(AdamW, InvalidHyperparametersThrowWithTheirValues) {
  Tensor p = leaf(values(2, 1), {2});
  EXPECT_MPT_ERROR(optim::AdamW({p}, {.lr = -1e-3}), "Invalid learning rate: -0.001");
  EXPECT_MPT_ERROR(optim::AdamW({p}, {.betas = {1.0, 0.999}}), "Invalid beta parameter at index 0: 1");
  EXPECT_MPT_ERROR(optim::AdamW({p}, {.betas = {0.9, -0.1}}), "Invalid beta parameter at index 1: -0.1");
  EXPECT_MPT_ERROR(optim::AdamW({p}, {.eps = -1e-8}), "Invalid epsilon value: -1e-08");
  EXPECT_MPT_ERROR(optim::AdamW({p}, {.weight_decay = -0.1}), "Invalid weight_decay value: -0.1");
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {p};
  groups[1].params = {leaf(values(2, 2), {2})};
  groups[1].options = {{"beta2", 1.5}};
  EXPECT_MPT_ERROR(optim::AdamW{groups}, "group 1: Invalid beta parameter at index 1: 1.5");
  Tensor d = leaf(values(2, 3), {2}, DType::F64);
  EXPECT_MPT_ERROR(optim::AdamW({d}, {.moments = ops::MomentStorage::Int8}), "need f32 parameters");
}

// A bad gradient anywhere is found before any parameter changes.
TEST(AdamW, BadGradientThrowsBeforeAnyUpdate) {
  Tensor a = leaf(values(3, 1), {3}), b = leaf(values(3, 2), {3});
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {a};
  groups[0].names = {"a"};
  groups[1].params = {b};
  groups[1].names = {"b"};
  optim::AdamW opt(groups);
  set_grad(a, values(3, 3), DType::F32);
  set_grad(b, values(3, 4), DType::F64);
  const Tensor before = a.clone();
  EXPECT_MPT_ERROR(opt.step(), "parameter b");
  EXPECT_TRUE(same_bits(a, before));
  EXPECT_EQ(opt.state(0, 0), nullptr);
}

}  // namespace
