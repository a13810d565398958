// tests/ops/test_cross_entropy_known_gradient.cpp: softmax + cross-entropy with its upstream gradient known before the
// forward (CrossEntropyOptions::gradient): the unfused path's loss and gradient bits, in place or fresh, and the
// rescaling when backward brings another gradient.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/softmax.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

using mpt::testing::same_bits;

struct Case {
  Tensor logits;   // [rows, width]: `classes` classes, then padding (none when classes is 0)
  Tensor targets;  // [rows]: every third row from row 1 ignored
  int64_t classes;
};

Case make_case(int64_t rows, int64_t width, int64_t classes, DType dt, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> t;
  const int64_t v = classes == 0 ? width : classes;
  for (int64_t r = 0; r < rows; ++r) t.push_back(r % 3 == 1 ? -100 : static_cast<int64_t>(rng() % v));
  return {random_tensor({rows, width}, dt, seed, 3.0), Tensor::from_vector(t, {rows}), classes};
}

// A leaf holding the case's logits, whose gradient the tests read.
Tensor leaf_of(const Case& c) {
  Tensor leaf = c.logits.clone();
  leaf.requires_grad_();
  return leaf;
}

DType stats(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }

// The unfused path's loss and its backward for the upstream gradient `g` (a 0-d tensor of the loss's dtype).
std::pair<Tensor, Tensor> unfused(const Case& c, ops::LossReduction red, const Tensor& g) {
  const ops::CrossEntropyOptions o{.reduction = red, .classes = c.classes};
  const ops::CrossEntropyResult r = ops::softmax_cross_entropy(c.logits, c.targets, o);
  return {r.loss, ops::softmax_cross_entropy_backward(g, c.logits, c.targets, r.saved, o)};
}

}  // namespace

// Every dtype, both reductions, dense and padded rows: the loss and the gradient reaching the logits have the unfused
// path's bits, and the gradient was written over the logits in the forward (the call held their only reference).
TEST(CrossEntropyKnownGradient, GivesTheUnfusedBitsWrittenOverTheLogits) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    for (auto red : {ops::LossReduction::Mean, ops::LossReduction::Sum}) {
      for (int64_t classes : {0, 45}) {
        SCOPED_TRACE(fmt::format("{} {} classes {}", dtype_name(dt), red == ops::LossReduction::Mean ? "mean" : "sum",
                                 classes));
        const Case c = make_case(7, 48, classes, dt, 11 + static_cast<uint64_t>(classes));
        const Tensor seed = Tensor::full({}, 0.375, stats(dt));
        const auto [want_loss, want_grad] = unfused(c, red, seed);
        Tensor leaf = leaf_of(c);
        Tensor logits = ops::scale(leaf, 1.0);  // a graph's output, held only here
        const void* storage = logits.data_ptr();
        const auto r = ops::softmax_cross_entropy(std::move(logits), c.targets,
                                                  {.reduction = red, .classes = classes, .gradient = seed});
        EXPECT_TRUE(same_bits(r.loss, want_loss)) << "loss";
        EXPECT_EQ(std::memcmp(storage, want_grad.data_ptr(), want_grad.nbytes()), 0)
            << "the gradient is in the logits' buffer after the forward";
        r.loss.backward(seed);
        EXPECT_TRUE(same_bits(leaf.grad(), want_grad)) << "gradient";
      }
    }
  }
}

// A caller who kept the logits keeps them: the gradient goes to a fresh buffer, with the same bits.
TEST(CrossEntropyKnownGradient, KeptLogitsAreLeftAsTheyWere) {
  const Case c = make_case(6, 40, 0, DType::BF16, 21);
  const Tensor seed = Tensor::full({}, 0.5, DType::F32);
  const auto [want_loss, want_grad] = unfused(c, ops::LossReduction::Mean, seed);
  Tensor leaf = leaf_of(c);
  const Tensor kept = ops::scale(leaf, 1.0);
  const auto r = ops::softmax_cross_entropy(kept, c.targets, {.gradient = seed});
  EXPECT_TRUE(same_bits(kept.detach(), c.logits)) << "the caller's logits are untouched";
  EXPECT_TRUE(same_bits(r.loss, want_loss));
  r.loss.backward(seed);
  EXPECT_TRUE(same_bits(leaf.grad(), want_grad));
}

// Another upstream gradient than the promised one: the gradient is rescaled by their ratio. A power-of-two ratio
// is exact (the unfused bits for that gradient); 3 rounds twice more (the f32 product, then the dtype).
TEST(CrossEntropyKnownGradient, AnotherUpstreamGradientRescales) {
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Case c = make_case(5, 33, 0, dt, 31);
    const Tensor seed = Tensor::full({}, 0.25, DType::F32);
    for (double factor : {2.0, 3.0}) {
      const Tensor other = Tensor::full({}, 0.25 * factor, DType::F32);
      const auto [want_loss, want_grad] = unfused(c, ops::LossReduction::Mean, other);
      Tensor leaf = leaf_of(c);
      const auto r = ops::softmax_cross_entropy(ops::scale(leaf, 1.0), c.targets, {.gradient = seed});
      r.loss.backward(other);
      if (factor == 2.0) {
        EXPECT_TRUE(same_bits(leaf.grad(), want_grad)) << "x2 is exact";
      } else {
        // Against the unfused gradient's one rounding: the promised scale's division, the rounding to dt, the
        // product by 3 and its rounding: at most 4 roundings of dt's unit roundoff (u) of the gradient's magnitude.
        const double u = dt == DType::F32 ? 0x1p-24 : 0x1p-8;
        const auto got = leaf.grad().to_vector<double>(), want = want_grad.to_vector<double>();
        for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 4 * u * std::abs(want[i])) << i;
      }
    }
  }
}

// Backward twice (retain_graph) hands out the same gradient each time: the leaf accumulates it twice.
TEST(CrossEntropyKnownGradient, RetainedGraphGivesTheGradientAgain) {
  const Case c = make_case(4, 20, 0, DType::F32, 41);
  const Tensor seed = Tensor::full({}, 1.0, DType::F32);
  const auto [want_loss, want_grad] = unfused(c, ops::LossReduction::Sum, seed);
  Tensor leaf = leaf_of(c);
  const auto r = ops::softmax_cross_entropy(ops::scale(leaf, 1.0), c.targets,
                                            {.reduction = ops::LossReduction::Sum, .gradient = seed});
  r.loss.backward(seed, /*retain_graph=*/true);
  r.loss.backward(seed);
  EXPECT_TRUE(same_bits(leaf.grad(), ops::scale(want_grad, 2.0)));
}

// Without a recorded gradient (no grad mode, or logits that need none) the option changes nothing: the unfused
// loss, no node, and kept logits as they were. (Logits handed over are freed with the call: nothing to inspect.)
TEST(CrossEntropyKnownGradient, IgnoredWhenNoGradientIsRecorded) {
  const Case c = make_case(4, 20, 0, DType::BF16, 51);
  const Tensor seed = Tensor::full({}, 1.0, DType::F32);
  const auto [want_loss, want_grad] = unfused(c, ops::LossReduction::Mean, seed);
  const Tensor kept = c.logits.clone();
  auto r = ops::softmax_cross_entropy(kept, c.targets, {.gradient = seed});
  EXPECT_TRUE(same_bits(r.loss, want_loss));
  EXPECT_FALSE(r.loss.requires_grad());
  EXPECT_TRUE(same_bits(kept, c.logits)) << "logits untouched";
  r = ops::softmax_cross_entropy(c.logits.clone(), c.targets, {.gradient = seed});
  EXPECT_TRUE(same_bits(r.loss, want_loss)) << "handed over";
  Tensor leaf = leaf_of(c);
  const autograd::NoGradGuard no_grad;
  const Tensor held = ops::scale(leaf, 1.0);
  r = ops::softmax_cross_entropy(held, c.targets, {.gradient = seed});
  EXPECT_TRUE(same_bits(r.loss, want_loss)) << "no grad mode";
  EXPECT_FALSE(r.loss.requires_grad());
  EXPECT_TRUE(same_bits(held, c.logits)) << "logits untouched under NoGradGuard";
}

TEST(CrossEntropyKnownGradient, RejectsBadArguments) {
  const Case c = make_case(3, 8, 0, DType::F32, 61);
  Tensor leaf = leaf_of(c);
  const Tensor seed = Tensor::full({}, 1.0, DType::F32);
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(leaf, c.targets, {.reduction = ops::LossReduction::None, .gradient = seed}),
                   "[softmax_cross_entropy] options.gradient needs a reduced loss (Mean or Sum)");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(leaf, c.targets, {.gradient = Tensor::full({}, 1.0, DType::BF16)}),
                   "[softmax_cross_entropy] options.gradient must be one element of f32 on cpu");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(leaf, c.targets, {.gradient = Tensor::ones({2}, DType::F32)}),
                   "[softmax_cross_entropy] options.gradient must be one element of f32 on cpu");
  // A bad target is the unfused path's error (the CPU checks the targets before the fused pass).
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(ops::scale(leaf, 1.0), Tensor::from_vector<int64_t>({0, 8, 1}, {3}),
                                              {.gradient = seed}),
                   "[softmax_cross_entropy] target 8 at row 1 is out of range [0, 8) and is not ignore_index -100");
  // The backward refuses an upstream gradient of the wrong dtype.
  const auto r = ops::softmax_cross_entropy(ops::scale(leaf, 1.0), c.targets, {.gradient = seed});
  EXPECT_MPT_ERROR(r.loss.backward(Tensor::full({}, 1.0, DType::F64)),
                   "[softmax_cross_entropy_backward] dloss of a reduced loss must be one element of f32, got f64");
}
