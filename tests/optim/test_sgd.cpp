// tests/optim/test_sgd.cpp: optim::SGD against a float64 re-implementation of torch.optim.SGD, its skipping rules,
// zero_grad and hyperparameter checks.
#include <gtest/gtest.h>

#include <vector>

#include "mpt/optim/sgd.h"
#include "optim_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::optim_test;

namespace {

struct SgdConfig {
  double lr, momentum, dampening, weight_decay;
  bool nesterov;
};

// torch.optim.SGD._single_tensor_sgd (maximize=False), in double.
struct RefSgd {
  std::vector<double> p, buf;
  bool has_buf = false;

  void step(const std::vector<double>& g, const SgdConfig& c) {
    for (size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + c.weight_decay * p[i];
      if (c.momentum != 0) {
        buf[i] = has_buf ? c.momentum * buf[i] + (1 - c.dampening) * d : d;
        d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
      }
      p[i] -= c.lr * d;
    }
    if (c.momentum != 0) has_buf = true;
  }
};

optim::SgdOptions options_of(const SgdConfig& c) {
  return {.lr = c.lr, .momentum = c.momentum, .dampening = c.dampening, .weight_decay = c.weight_decay,
          .nesterov = c.nesterov};
}

const SgdConfig kConfigs[] = {
    {0.1, 0, 0, 0, false},        // plain
    {0.05, 0.9, 0, 0, false},     // momentum
    {0.05, 0.9, 0.3, 0.01, false},  // dampening + weight decay
    {0.05, 0.8, 0, 0.05, true},   // nesterov + weight decay
    {0.2, 0, 0, 0.1, false},      // weight decay only
};

// Runs 4 steps of SGD(config) on two parameters of `dtype` and compares every step with the reference.
void run_against_reference(const SgdConfig& c, DType dtype, double rel) {
  const std::vector<double> a0 = values(37, 1), b0 = values(6, 2, 3.0);
  Tensor a = leaf(a0, {37}, dtype), b = leaf(b0, {2, 3}, dtype);
  optim::SGD opt({a, b}, options_of(c));
  RefSgd ra{a0, std::vector<double>(37)}, rb{b0, std::vector<double>(6)};
  for (int s = 0; s < 4; ++s) {
    const std::vector<double> ga = stored(values(37, 10 + s), dtype), gb = stored(values(6, 20 + s, 0.5), dtype);
    set_grad(a, ga, dtype);
    set_grad(b, gb, dtype);
    opt.step();
    ra.step(ga, c);
    rb.step(gb, c);
    expect_close(a, ra.p, rel, 1.0, fmt::format("a after step {}", s + 1));
    expect_close(b, rb.p, rel, 1.0, fmt::format("b after step {}", s + 1));
    if (c.momentum != 0) {
      expect_close(opt.state(0, 0)->tensors.at("momentum_buffer"), ra.buf, rel, 1.0, "momentum buffer of a");
    }
    EXPECT_EQ(opt.state(0, 0)->steps(), s + 1);
  }
}

TEST(SGD, F64MatchesReferenceNearlyExactly) {
  for (const SgdConfig& c : kConfigs) {
    SCOPED_TRACE(fmt::format("lr {} momentum {} dampening {} wd {} nesterov {}", c.lr, c.momentum, c.dampening,
                             c.weight_decay, c.nesterov));
    run_against_reference(c, DType::F64, 1e-14);
  }
}

TEST(SGD, F32MatchesReferenceWithinF32Rounding) {
  for (const SgdConfig& c : kConfigs) {
    SCOPED_TRACE(fmt::format("lr {} momentum {} dampening {} wd {} nesterov {}", c.lr, c.momentum, c.dampening,
                             c.weight_decay, c.nesterov));
    run_against_reference(c, DType::F32, 4 * 4 * 0x1p-24);  // a few roundings per step, 4 steps
  }
}

TEST(SGD, MomentumBufferIsTheGradientOnTheFirstStep) {
  const std::vector<double> p0 = values(5, 3), g = values(5, 4);
  Tensor p = leaf(p0, {5}, DType::F64);
  optim::SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5, .weight_decay = 0.2});
  set_grad(p, g, DType::F64);
  opt.step();
  std::vector<double> expect(5);
  for (size_t i = 0; i < 5; ++i) expect[i] = g[i] + 0.2 * p0[i];  // no dampening on the first step
  expect_close(opt.state(0, 0)->tensors.at("momentum_buffer"), expect, 1e-15, 1.0, "buffer");
}

TEST(SGD, GroupsWithTheirOwnHyperparametersAndMixedGradientDtypes) {
  const std::vector<double> a0 = values(300, 5), b0 = values(7, 6);
  Tensor a = leaf(a0, {300}), b = leaf(b0, {7});
  std::vector<optim::ParamGroup> groups(2);
  groups[0].params = {a};
  groups[1].params = {b};
  groups[1].lr = 0.3;
  groups[1].options = {{"momentum", 0.5}, {"dampening", 0}, {"nesterov", 1}};
  optim::SGD opt(groups, {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01});
  const SgdConfig ca{0.1, 0.9, 0.1, 0.01, false}, cb{0.3, 0.5, 0, 0.01, true};
  EXPECT_EQ(opt.param_groups()[1].options.at("dampening"), 0.0);
  RefSgd ra{a0, std::vector<double>(300)}, rb{b0, std::vector<double>(7)};
  for (int s = 0; s < 3; ++s) {
    const std::vector<double> ga = stored(values(300, 30 + s), DType::BF16), gb = values(7, 40 + s);
    set_grad(a, ga, DType::BF16);
    set_grad(b, gb, DType::F32);
    opt.step();
    ra.step(ga, ca);
    rb.step(gb, cb);
  }
  expect_close(a, ra.p, 12 * 0x1p-24, 1.0, "a (bf16 gradients)");
  expect_close(b, rb.p, 12 * 0x1p-24, 1.0, "b (second group)");
}

TEST(SGD, SkipsParametersWithoutGradientsAndFrozenOnes) {
  Tensor a = leaf(values(4, 7), {4}), b = leaf(values(4, 8), {4});
  Tensor frozen = Tensor::from_vector(values(4, 9), {4});
  optim::SGD opt({a, b, frozen}, {.lr = 0.1, .momentum = 0.9});
  set_grad(a, values(4, 10), DType::F32);
  frozen.set_grad(Tensor::ones({4}));  // a gradient on a tensor that does not require grad is ignored
  const Tensor b_before = b.clone(), frozen_before = frozen.clone();
  opt.step();
  EXPECT_TRUE(same_bits(b, b_before));
  EXPECT_TRUE(same_bits(frozen, frozen_before));
  EXPECT_NE(opt.state(0, 0), nullptr);
  EXPECT_EQ(opt.state(0, 1), nullptr);
  EXPECT_EQ(opt.state(0, 2), nullptr);
}

TEST(SGD, ZeroGrad) {
  Tensor a = leaf(values(3, 1), {3}), b = leaf(values(3, 2), {3});
  optim::SGD opt({a, b});
  set_grad(a, values(3, 3), DType::F32);
  set_grad(b, values(3, 4), DType::F32);
  const Tensor held = b.grad();
  opt.zero_grad(false);
  EXPECT_EQ(held.to_vector<double>(), std::vector<double>(3, 0.0));  // zeroed in place
  opt.zero_grad();
  EXPECT_FALSE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(SGD, InvalidHyperparametersThrowWithTheirValues) {
  Tensor p = leaf(values(2, 1), {2});
  EXPECT_MPT_ERROR(optim::SGD({p}, {.lr = -0.5}), "Invalid learning rate: -0.5");
  EXPECT_MPT_ERROR(optim::SGD({p}, {.momentum = -0.1}), "Invalid momentum value: -0.1");
  EXPECT_MPT_ERROR(optim::SGD({p}, {.weight_decay = -1}), "Invalid weight_decay value: -1");
  EXPECT_MPT_ERROR(optim::SGD({p}, {.nesterov = true}), "Nesterov momentum requires a momentum and zero dampening");
  EXPECT_MPT_ERROR(optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
                   "Nesterov momentum requires");
  std::vector<optim::ParamGroup> groups(1);
  groups[0].params = {p};
  groups[0].options = {{"momentun", 0.9}};
  EXPECT_MPT_ERROR(optim::SGD{groups}, "unknown option 'momentun'");
  groups[0].options = {};
  groups[0].names = {"a", "b"};
  EXPECT_MPT_ERROR(optim::SGD{groups}, "2 names for 1 parameters");
  EXPECT_MPT_ERROR(optim::SGD({p, p}), "appears more than once");
  EXPECT_MPT_ERROR(optim::SGD(std::vector<optim::ParamGroup>{}), "empty list of parameter groups");
  Tensor half = Tensor::zeros({2}, DType::BF16);
  half.requires_grad_();
  EXPECT_MPT_ERROR(optim::SGD({half}), "must be an f32 master");
  // Hyperparameters changed after construction are checked at the next step.
  optim::SGD opt({p}, {.lr = 0.1});
  opt.param_groups()[0].lr = -1.0;
  set_grad(p, values(2, 5), DType::F32);
  EXPECT_MPT_ERROR(opt.step(), "Invalid learning rate: -1");
}

}  // namespace
