// tests/autograd/test_engine.cpp: the autograd engine on graphs recorded with autograd::record (values, order, memory, errors).
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/memory.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/reduction.h"
#include "test_util.h"

namespace mpt {
namespace {

namespace ag = autograd;

// Differentiable test ops built on autograd::record (saved inputs detached, so no cycles through grad_fn).
Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor out = ops::mul(a, b);
  ag::record("Mul", {&a, &b}, {&out}, [a = a.detach(), b = b.detach()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{ops::mul(g[0], b), ops::mul(g[0], a)};
  });
  return out;
}

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor out = ops::add(a, b);
  ag::record("Add", {&a, &b}, {&out}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0], g[0]}; });
  return out;
}

Tensor sum(const Tensor& x) {
  Tensor out = ops::sum(x);
  ag::record("Sum", {&x}, {&out}, [shape = x.shape()](const std::vector<Tensor>& g) {
    return std::vector<Tensor>{Tensor::full(shape, g[0].item<double>())};
  });
  return out;
}

Tensor leaf(const std::vector<float>& v) {
  Tensor t = Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
  t.requires_grad_();
  return t;
}

std::vector<float> values(const Tensor& t) { return t.to_vector<float>(); }

TEST(AutogradEngine, ChainRuleGivesAnalyticGradients) {
  const Tensor x = leaf({1.5f, -2.0f, 0.25f}), w = leaf({3.0f, 0.5f, -4.0f});
  const Tensor loss = sum(add(mul(x, w), x));  // d/dx = w + 1, d/dw = x
  EXPECT_TRUE(loss.requires_grad());
  EXPECT_FALSE(loss.is_leaf());
  EXPECT_EQ(loss.grad_fn()->name(), "Sum");
  loss.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4.0f, 1.5f, -3.0f}));
  EXPECT_EQ(values(w.grad()), (std::vector<float>{1.5f, -2.0f, 0.25f}));
  EXPECT_FALSE(x.grad().requires_grad());
}

TEST(AutogradEngine, GradientsAccumulateAcrossBackwardCallsUntilCleared) {
  const Tensor x = leaf({1.0f, 2.0f}), w = leaf({5.0f, 7.0f});
  sum(mul(x, w)).backward();
  sum(mul(x, w)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{10.0f, 14.0f}));
  x.set_grad(Tensor{});
  sum(mul(x, w)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{5.0f, 7.0f}));
  EXPECT_EQ(values(w.grad()), (std::vector<float>{3.0f, 6.0f}));
}

TEST(AutogradEngine, ATensorUsedTwiceGetsTheSumOfBothPaths) {
  const Tensor x = leaf({2.0f, -3.0f});
  const Tensor y = mul(x, x);                 // dy/dx = 2x, through both inputs of one node
  const Tensor z = add(y, mul(x, leaf({10.0f, 10.0f})));  // + 10
  sum(z).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{14.0f, 4.0f}));
}

// A leaf's first gradient is taken over without a copy when nothing else holds it (PyTorch's stealing), and copied
// when something does: here the gradient an add passes through to both of its leaves. The leaves then own separate
// buffers (writing into one leaves the other alone), and the stolen one costs no allocation.
TEST(AutogradEngine, ALeafTakesOverAGradientNothingElseHolds) {
  const int64_t n = 1 << 16;  // 256 KiB of f32
  const Tensor w0 = Tensor::full({n}, 1.5, DType::F32);
  // y = 2 w: ScaleBackward makes a fresh dw that only the engine holds.
  Tensor w = w0.clone().requires_grad_(true);
  const Tensor loss = ops::sum(ops::scale(w, 2.0));
  const int64_t before = memory_stats(Device::cpu()).allocations;
  loss.backward();
  const int64_t allocations = memory_stats(Device::cpu()).allocations - before;
  for (float v : w.grad().to_vector<float>()) ASSERT_EQ(v, 2.0f);
  // The seed (the loss's 1), the sum's gradient (n copies of it) and dw, which becomes w.grad: a copy would be a
  // fourth.
  EXPECT_EQ(allocations, 3);
  // a + b hands one dy to both leaves: the first to run copies it, the second takes it over.
  Tensor a = w0.clone().requires_grad_(true), b = w0.clone().requires_grad_(true);
  ops::sum(ops::add(a, b)).backward();
  EXPECT_FALSE(a.grad().shares_storage(b.grad()));
  ops::add_(a.grad(), Tensor::ones({n}, DType::F32));
  for (float v : b.grad().to_vector<float>()) ASSERT_EQ(v, 1.0f);
  for (float v : a.grad().to_vector<float>()) ASSERT_EQ(v, 2.0f);
}

TEST(AutogradEngine, DeepChainsRunWithoutRecursion) {
  // 20,000 nodes: a recursive engine would overflow the stack long before.
  const Tensor x = leaf({1.0f, 2.0f});
  const Tensor two = Tensor::from_vector(std::vector<float>{1.0f, 1.0f}, {2});
  Tensor y = x;
  for (int i = 0; i < 20000; ++i) y = mul(y, two);
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{1.0f, 1.0f}));
}

TEST(AutogradEngine, NodesRunInADeterministicOrderLatestRecordedFirst) {
  auto run_once = [] {
    std::vector<std::string> order;
    const Tensor x = leaf({1.0f});
    auto tracked = [&order](const std::string& name, const Tensor& in) {
      Tensor out = ops::scale(in, 1.0);
      ag::record(name, {&in}, {&out}, [&order, name](const std::vector<Tensor>& g) {
        order.push_back(name);
        return std::vector<Tensor>{g[0]};
      });
      return out;
    };
    const Tensor a = tracked("a", x), b = tracked("b", x), c = tracked("c", a), d = tracked("d", b);
    sum(add(c, d)).backward();
    return order;
  };
  const std::vector<std::string> first = run_once();
  EXPECT_EQ(first, (std::vector<std::string>{"d", "c", "b", "a"}));
  for (int i = 0; i < 5; ++i) EXPECT_EQ(run_once(), first);
}

TEST(AutogradEngine, SavedTensorsAreFreedAsSoonAsTheirNodeRan) {
  const Tensor x = leaf({1.0f, 2.0f, 3.0f});
  std::weak_ptr<Storage> saved_storage;
  Tensor loss;
  {
    Tensor w = Tensor::from_vector(std::vector<float>{4.0f, 5.0f, 6.0f}, {3});
    saved_storage = w.storage();
    loss = sum(mul(x, w));  // Mul saves w
  }
  EXPECT_FALSE(saved_storage.expired()) << "the graph holds the saved tensor until backward";
  loss.backward();
  EXPECT_TRUE(saved_storage.expired()) << "backward must release saved tensors";
  EXPECT_EQ(values(x.grad()), (std::vector<float>{4.0f, 5.0f, 6.0f}));
}

TEST(AutogradEngine, SecondBackwardThroughAFreedGraphThrowsUnlessRetained) {
  const Tensor x = leaf({1.0f, 2.0f}), w = leaf({3.0f, 4.0f});
  const Tensor loss = sum(mul(x, w));
  loss.backward();
  EXPECT_MPT_ERROR(loss.backward(), "a second time");
  const Tensor kept = sum(mul(x, w));
  kept.backward(Tensor{}, /*retain_graph=*/true);
  kept.backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{9.0f, 12.0f}));  // 3 backward passes of w
}

TEST(AutogradEngine, NoGradGuardRecordsNothingAndDetachCutsHistory) {
  const Tensor x = leaf({1.0f, 2.0f});
  {
    ag::NoGradGuard guard;
    EXPECT_FALSE(ag::is_grad_enabled());
    const Tensor y = mul(x, x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    {
      ag::EnableGradGuard again;
      EXPECT_TRUE(mul(x, x).requires_grad());
    }
  }
  EXPECT_TRUE(ag::is_grad_enabled());
  const Tensor y = mul(x, x);
  const Tensor d = y.detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.shares_storage(y));
  EXPECT_EQ(mul(d, d).grad_fn(), nullptr);
}

TEST(AutogradEngine, PostAccumulateHooksSeeTheFinalGradientOncePerBackward) {
  const Tensor x = leaf({1.0f, 2.0f});
  std::vector<std::vector<float>> seen;
  x.register_post_accumulate_grad_hook([&seen](const Tensor& leaf_tensor) { seen.push_back(values(leaf_tensor.grad())); });
  sum(add(mul(x, x), x)).backward();  // x reached along three paths: 2x + 1
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen[0], (std::vector<float>{3.0f, 5.0f}));
  sum(x).backward();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1], (std::vector<float>{4.0f, 6.0f}));
}

TEST(AutogradEngine, ExplicitGradientsAndMultipleRoots) {
  const Tensor x = leaf({1.0f, 2.0f}), w = leaf({3.0f, 4.0f});
  const Tensor y = mul(x, w);
  y.backward(Tensor::from_vector(std::vector<float>{10.0f, 100.0f}, {2}));
  EXPECT_EQ(values(x.grad()), (std::vector<float>{30.0f, 400.0f}));
  const Tensor a = sum(mul(x, x)), b = sum(w);
  ag::backward({a, b});
  EXPECT_EQ(values(x.grad()), (std::vector<float>{32.0f, 404.0f}));
  EXPECT_EQ(values(w.grad()), (std::vector<float>{11.0f, 201.0f}));
}

// A node that takes partial gradients (autograd::Node::apply_partial): y = k * x whose backward adds k * g into the
// gradient already waiting for x when it is offered one and `add` says so, else returns a fresh k * g. `offered`
// counts the offers.
Tensor scale_adding(const Tensor& x, double k, bool add, int& offered) {
  Tensor out = ops::scale(x, k);
  ag::record(std::make_shared<ag::FunctionNode>(
                 "ScaleAdding", ag::PartialBackwardFn([k, add, &offered](const std::vector<Tensor>& g,
                                                                        std::vector<Tensor>& partial) {
                   if (!partial[0].defined()) return std::vector<Tensor>{ops::scale(g[0], k)};
                   ++offered;
                   if (!add) return std::vector<Tensor>{ops::scale(g[0], k)};
                   ops::add_(partial[0], ops::scale(g[0], k));
                   return std::vector<Tensor>{partial[0]};
                 })),
             {&x}, {&out});
  return out;
}

// The engine offers a waiting gradient to a node that takes partial ones, and only one that nothing else holds:
// x's gradient is 3 (ScaleBackward, recorded later, so it runs first) + 5 (the adding node) either way, and a
// gradient the engine does not own stays untouched.
TEST(AutogradEngine, ANodeAddsIntoTheGradientWaitingForItsInputWhenNothingElseHoldsIt) {
  for (bool add : {true, false}) {
    SCOPED_TRACE(add ? "adds in place" : "declines");
    int offered = 0;
    const Tensor x = leaf({1.0f, -2.0f});
    const Tensor adding = scale_adding(x, 5.0, add, offered);
    const Tensor later = ops::scale(x, 3.0);
    sum(ops::add(adding, later)).backward();
    EXPECT_EQ(offered, 1);
    EXPECT_EQ(values(x.grad()), (std::vector<float>{8.0f, 8.0f}));
  }
  // The waiting gradient is held elsewhere too (the node before kept a handle): not offered, not written.
  int offered = 0;
  const Tensor x = leaf({1.0f, -2.0f});
  const Tensor first = scale_adding(x, 5.0, true, offered);  // recorded first: runs after Keeps
  Tensor kept;
  Tensor held = ops::scale(x.detach(), 3.0);
  ag::record("Keeps", {&x}, {&held}, [&kept](const std::vector<Tensor>& g) {
    kept = ops::scale(g[0], 3.0);
    return std::vector<Tensor>{kept};
  });
  sum(ops::add(first, held)).backward();
  EXPECT_EQ(offered, 0);
  EXPECT_EQ(values(x.grad()), (std::vector<float>{8.0f, 8.0f}));
  EXPECT_EQ(values(kept), (std::vector<float>{3.0f, 3.0f}));
}

// A leaf that already has a gradient (a later micro-batch) offers its own .grad to a producer that adds: the sum
// lands there in place, and whatever else reaches the leaf in that pass is added into it too; the leaf's hook fires
// once, after everything arrived. Either order of the two consumers.
TEST(AutogradEngine, ALeafsOwnGradientIsOfferedToAProducerThatAddsIntoIt) {
  for (bool adding_first : {true, false}) {
    SCOPED_TRACE(adding_first ? "the adding node recorded first (runs last)" : "the adding node runs first");
    int offered = 0;
    const Tensor x = leaf({1.0f, -2.0f});
    int hooks = 0;
    std::vector<float> at_hook;
    x.register_post_accumulate_grad_hook([&](const Tensor& l) { ++hooks, at_hook = values(l.grad()); });
    sum(ops::scale(x, 2.0)).backward();  // x.grad = 2
    const Tensor first = x.grad();
    Tensor a, b;
    if (adding_first) {
      a = scale_adding(x, 5.0, true, offered);
      b = ops::scale(x, 3.0);
    } else {
      b = ops::scale(x, 3.0);
      a = scale_adding(x, 5.0, true, offered);
    }
    sum(ops::add(a, b)).backward();
    EXPECT_EQ(offered, 1);
    EXPECT_EQ(values(x.grad()), (std::vector<float>{10.0f, 10.0f}));  // 2 + 5 + 3
    EXPECT_TRUE(x.grad().shares_storage(first));
    EXPECT_EQ(hooks, 2);
    EXPECT_EQ(at_hook, (std::vector<float>{10.0f, 10.0f}));
  }
}

// A node that takes offers: when `asks`, it asks for its input's (autograd::offer) and writes its gradient into a
// fresh one (a leaf's destination: beta = 0) or adds into any other; otherwise (or offered nothing) it returns a new
// gradient. Counts the fresh offers it saw.
Tensor scale_writing(const Tensor& x, double k, int& fresh, bool asks = true) {
  Tensor out = ops::scale(x, k);
  ag::record(std::make_shared<ag::FunctionNode>(
                 "ScaleWriting", ag::PartialBackwardFn([k, &fresh, asks](const std::vector<Tensor>& g,
                                                                        std::vector<Tensor>& partial) {
                   if (!asks || !ag::offer(partial, 0, g[0].dtype()).defined()) return std::vector<Tensor>{ops::scale(g[0], k)};
                   if (ag::is_fresh_offer(partial[0])) {
                     ++fresh;
                     Tensor(partial[0]).copy_(ops::scale(g[0], k));
                   } else {
                     ops::add_(partial[0], ops::scale(g[0], k));
                   }
                   return std::vector<Tensor>{partial[0]};
                 })),
             {&x}, {&out});
  return out;
}

// A leaf's gradient destination (autograd::set_grad_destination: a slice of a flat buffer, DataParallel's bucket):
// made when a producer that takes offers asks for it (autograd::offer) and nothing waits for the leaf (written over
// its NaNs, and the leaf's gradient from then on, a later pass adding into it, not fresh). A gradient that arrives
// otherwise (something waited, a producer that does not ask, one that takes no offers) stays the leaf's own and the
// destination is never asked for (its owner copies it). Either way the values are those without a destination, the
// hook fires once per pass, and a destination of the wrong shape is refused with the leaf named.
TEST(AutogradEngine, ALeafsGradientIsMadeInItsDestination) {
  const char* names[] = {"written by the producer", "not made (something waited)", "not made (the producer did not ask)",
                         "not made (no offers taken)"};
  for (int scenario = 0; scenario < 4; ++scenario) {
    SCOPED_TRACE(names[scenario]);
    const bool written = scenario == 0;
    const Tensor flat = Tensor::full({6}, std::nan(""));
    const Tensor x = leaf({1.0f, -2.0f});
    int asked = 0, fresh = 0, hooks = 0;
    ag::set_grad_destination(x, [&] { return ++asked, flat.slice(0, 3, 5); });
    x.register_post_accumulate_grad_hook([&](const Tensor&) { ++hooks; });
    for (int pass = 0; pass < 2; ++pass) {
      Tensor loss;
      if (scenario == 0) loss = sum(scale_writing(x, 5.0, fresh));
      if (scenario == 1) {  // 3x, recorded later, runs first: its gradient waits when the writer runs
        const Tensor five = scale_writing(x, 5.0, fresh);
        loss = sum(ops::add(five, ops::scale(x, 3.0)));
      }
      if (scenario == 2) loss = sum(scale_writing(x, 5.0, fresh, /*asks=*/false));
      if (scenario == 3) loss = sum(ops::scale(x, 8.0));
      loss.backward();
      const float want = static_cast<float>((scenario == 0 || scenario == 2 ? 5 : 8) * (pass + 1));
      EXPECT_EQ(values(x.grad()), (std::vector<float>{want, want})) << "pass " << pass;
      EXPECT_EQ(x.grad().shares_storage(flat), written) << "pass " << pass;
      if (written) {
        EXPECT_EQ(x.grad().data_ptr(), flat.slice(0, 3, 5).data_ptr()) << "pass " << pass;
      }
      EXPECT_EQ(hooks, pass + 1);
    }
    EXPECT_EQ(fresh, written ? 1 : 0) << "fresh offers";
    EXPECT_EQ(asked, written ? 1 : 0) << "the destination is asked for once per gradient written there";
    const std::vector<float> all = values(flat);
    EXPECT_TRUE(std::isnan(all[0]) && std::isnan(all[2]) && std::isnan(all[5])) << "only the leaf's slice written";
    if (!written) {
      EXPECT_TRUE(std::isnan(all[3]) && std::isnan(all[4])) << "the destination was written";
    }
    x.set_grad(Tensor());  // released: the next pass asks again
    sum(scale_writing(x, 1.0, fresh)).backward();
    EXPECT_EQ(asked, written ? 2 : 1);
    EXPECT_EQ(values(flat.slice(0, 3, 5)), (std::vector<float>{1.0f, 1.0f}));
    EXPECT_TRUE(x.grad().shares_storage(flat));
  }
  const Tensor x = leaf({1.0f, -2.0f});
  int fresh = 0;
  ag::set_grad_destination(x, [] { return Tensor::zeros({3}); });
  EXPECT_MPT_ERROR(sum(scale_writing(x, 2.0, fresh)).backward(), "the gradient destination of the leaf");
  ag::set_grad_destination(x, nullptr);
  sum(scale_writing(x, 2.0, fresh)).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<float>{2.0f, 2.0f}));
  EXPECT_EQ(fresh, 0);
  EXPECT_MPT_ERROR(ag::set_grad_destination(ops::scale(x, 1.0), [] { return Tensor{}; }), "expected a leaf");
}

TEST(AutogradEngine, ErrorsNameTheProblem) {
  const Tensor plain = Tensor::ones({2});
  EXPECT_MPT_ERROR(plain.backward(), "does not require grad");
  const Tensor x = leaf({1.0f, 2.0f});
  EXPECT_MPT_ERROR(mul(x, x).backward(), "implied only for a root with one element");
  EXPECT_MPT_ERROR(mul(x, x).backward(Tensor::ones({3})), "does not match root");
  Tensor y = mul(x, x);
  EXPECT_MPT_ERROR(y.requires_grad_(false), "only leaves");
  Tensor ids = Tensor::arange(3);
  EXPECT_MPT_ERROR(ids.requires_grad_(), "only floating tensors");
  EXPECT_MPT_ERROR(Tensor::ones({2}).register_post_accumulate_grad_hook([](const Tensor&) {}),
                   "must be a leaf that requires grad");
}

}  // namespace
}  // namespace mpt
