// tests/optim/test_state_dict.cpp: optimizer state dicts: keys and dtypes, bit-exact resume, and load validation.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <vector>

#include "mpt/optim/adamw.h"
#include "mpt/optim/sgd.h"
#include "optim_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::optim_test;

namespace {

// Three parameters in two named groups (or unnamed), the last one frozen.
struct Model {
  std::vector<Tensor> params;
  std::vector<optim::ParamGroup> groups(bool named) const {
    std::vector<optim::ParamGroup> g(2);
    g[0].params = {params[0], params[1]};
    g[1].params = {params[2]};
    g[1].weight_decay = 0.0;
    if (named) {
      g[0].names = {"h.0.w", "h.0.b"};
      g[1].names = {"ln.w"};
    }
    return g;
  }
};

Model make_model(uint64_t seed) {
  Model m;
  m.params = {leaf(values(300, seed), {10, 30}), leaf(values(30, seed + 1), {30}), leaf(values(7, seed + 2), {7})};
  return m;
}

Model clone_model(const Model& src) {
  Model m;
  for (const Tensor& p : src.params) {
    Tensor c = p.detach().clone();
    c.requires_grad_();
    m.params.push_back(c);
  }
  return m;
}

// The gradients of step s (param 1 has none at step 1, so counts differ).
void set_grads(const Model& m, int s) {
  for (size_t i = 0; i < m.params.size(); ++i) {
    if (i == 1 && s == 1) {
      m.params[i].set_grad({});
      continue;
    }
    set_grad(m.params[i], values(static_cast<size_t>(m.params[i].numel()), 100 + 10 * s + i), DType::F32);
  }
}

using MakeOpt = std::function<std::unique_ptr<optim::Optimizer>(const Model&)>;

// 2 steps, state_dict, a new optimizer over copies of the parameters loads it, 2 more steps: bit-identical to 4
// uninterrupted steps (parameters and every state tensor).
void expect_bit_exact_resume(const MakeOpt& make) {
  Model full = make_model(1), first = make_model(1);
  auto opt_full = make(full), opt_first = make(first);
  for (int s = 0; s < 2; ++s) {
    set_grads(full, s);
    opt_full->step();
    set_grads(first, s);
    opt_first->step();
  }
  Model second = clone_model(first);
  auto opt_second = make(second);
  opt_second->load_state_dict(opt_first->state_dict());
  for (int s = 2; s < 4; ++s) {
    set_grads(full, s);
    opt_full->step();
    set_grads(second, s);
    opt_second->step();
  }
  for (size_t i = 0; i < full.params.size(); ++i) {
    EXPECT_TRUE(same_bits(full.params[i], second.params[i])) << "parameter " << i;
  }
  const mpt::StateDict a = opt_full->state_dict(), b = opt_second->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, t] : a) {
    ASSERT_TRUE(b.count(key)) << key;
    EXPECT_TRUE(same_bits(t, b.at(key))) << key;
  }
}

TEST(OptimStateDict, AdamWResumeIsBitExact) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    SCOPED_TRACE(static_cast<int>(storage));
    expect_bit_exact_resume([storage](const Model& m) {
      return std::make_unique<optim::AdamW>(m.groups(true), optim::AdamWOptions{.lr = 0.05, .moments = storage});
    });
  }
}

TEST(OptimStateDict, SgdResumeIsBitExact) {
  expect_bit_exact_resume([](const Model& m) {
    return std::make_unique<optim::SGD>(m.groups(false),
                                        optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
  });
}

TEST(OptimStateDict, KeysDtypesAndValues) {
  Model m = make_model(3);
  m.params[2].requires_grad_(false);  // frozen: never in the dict
  optim::AdamW opt(m.groups(true), {.lr = 0.01});
  set_grads(m, 0);
  opt.step();
  m.params[1].set_grad({});
  opt.step();
  const mpt::StateDict d = opt.state_dict();
  const std::vector<std::string> keys = {"group0.beta1", "group0.beta2", "group0.eps", "group0.lr",
                                         "group0.weight_decay", "group1.beta1", "group1.beta2", "group1.eps",
                                         "group1.lr", "group1.weight_decay", "h.0.b.exp_avg", "h.0.b.exp_avg_sq",
                                         "h.0.b.step", "h.0.w.exp_avg", "h.0.w.exp_avg_sq", "h.0.w.step"};
  std::vector<std::string> got;
  for (const auto& [k, t] : d) got.push_back(k);
  EXPECT_EQ(got, keys);
  EXPECT_EQ(d.at("h.0.w.step").dtype(), DType::I64);
  EXPECT_EQ(d.at("h.0.w.step").dim(), 0);
  EXPECT_EQ(d.at("h.0.w.step").item<int64_t>(), 2);
  EXPECT_EQ(d.at("h.0.b.step").item<int64_t>(), 1);
  EXPECT_EQ(d.at("group0.lr").dtype(), DType::F64);
  EXPECT_EQ(d.at("group0.lr").item<double>(), 0.01);
  EXPECT_EQ(d.at("group1.weight_decay").item<double>(), 0.0);
  EXPECT_EQ(d.at("h.0.w.exp_avg").shape(), (Shape{10, 30}));
  EXPECT_TRUE(d.at("h.0.w.exp_avg").shares_storage(opt.state(0, 0)->tensors.at("exp_avg")));

  optim::SGD sgd({m.params[0]}, {.momentum = 0.5});
  set_grads(m, 0);
  sgd.step();
  EXPECT_TRUE(sgd.state_dict().count("group0.param0.momentum_buffer"));
  EXPECT_TRUE(sgd.state_dict().count("group0.nesterov"));
}

TEST(OptimStateDict, LoadRestoresHyperparameters) {
  Model m = make_model(4);
  optim::AdamW a(m.groups(true), {.lr = 0.01});
  mpt::StateDict d = a.state_dict();
  d["group1.lr"] = Tensor::full({}, 0.5, DType::F64);
  d["group0.beta2"] = Tensor::full({}, 0.95, DType::F64);
  a.load_state_dict(d);
  EXPECT_EQ(*a.param_groups()[1].lr, 0.5);
  EXPECT_EQ(a.param_groups()[0].options.at("beta2"), 0.95);
}

TEST(OptimStateDict, LoadValidatesBeforeModifyingAnything) {
  Model m = make_model(5);
  optim::AdamW opt(m.groups(true), {.lr = 0.01});
  set_grads(m, 0);
  opt.step();
  const mpt::StateDict good = opt.state_dict();
  // Deep copy, to check that failed loads change nothing.
  mpt::StateDict snapshot;
  for (const auto& [k, t] : good) snapshot[k] = t.clone();

  auto with = [&](const std::string& key, Tensor t) {
    mpt::StateDict d = good;
    d[key] = std::move(t);
    return d;
  };
  auto without = [&](const std::string& key) {
    mpt::StateDict d = good;
    d.erase(key);
    return d;
  };
  // Every bad dict also carries a changed lr, which must not be applied.
  auto lr_changed = [&](mpt::StateDict d) {
    d["group0.lr"] = Tensor::full({}, 0.123, DType::F64);
    return d;
  };
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(with("h.0.w.momentum", Tensor::zeros({3})))),
                   "unexpected key 'h.0.w.momentum'");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(without("h.0.w.exp_avg_sq"))),
                   "missing key 'h.0.w.exp_avg_sq' (a f32[10, 30] tensor)");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(without("h.0.b.step"))), "missing key 'h.0.b.step'");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(without("group1.eps"))), "missing key 'group1.eps'");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(with("h.0.w.exp_avg", Tensor::zeros({30, 10})))),
                   "key 'h.0.w.exp_avg': expected a f32[10, 30] tensor, got f32[30, 10]");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(with("h.0.b.exp_avg", Tensor::zeros({30}, DType::BF16)))),
                   "key 'h.0.b.exp_avg': expected a f32[30] tensor, got bf16[30]");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(with("h.0.w.step", Tensor::full({}, 1, DType::F32)))),
                   "key 'h.0.w.step': expected a 0-d i64 tensor");
  EXPECT_MPT_ERROR(opt.load_state_dict(with("group1.lr", Tensor::full({}, -1, DType::F64))),
                   "Invalid learning rate: -1");
  EXPECT_MPT_ERROR(opt.load_state_dict(lr_changed(with("group2.lr", Tensor::full({}, 1, DType::F64)))),
                   "unexpected key 'group2.lr'");

  const mpt::StateDict after = opt.state_dict();
  ASSERT_EQ(after.size(), snapshot.size());
  for (const auto& [k, t] : snapshot) EXPECT_TRUE(same_bits(after.at(k), t)) << k;
  EXPECT_EQ(*opt.param_groups()[0].lr, 0.01);
  // An 8-bit optimizer refuses f32 moments.
  optim::AdamW q(m.groups(true), {.moments = ops::MomentStorage::Int8});
  EXPECT_MPT_ERROR(q.load_state_dict(good), "key 'h.0.w.exp_avg': expected a u8[10, 30] tensor, got f32[10, 30]");
}

}  // namespace
