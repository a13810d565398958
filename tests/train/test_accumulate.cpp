// tests/train/test_accumulate.cpp: k micro-batches of b sequences give the gradients of one batch of k*b.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mpt/train/accumulate.h"
#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "test_util.h"

namespace mpt {
namespace {

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 29;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  return c;
}

std::vector<std::vector<float>> grads_of(const nn::GPT& model) {
  std::vector<std::vector<float>> g;
  for (const auto& p : model.named_parameters()) g.push_back(p.tensor.grad().to_vector<float>());
  return g;
}

// Worst over tensors of max|a - b| / max|b|.
double worst_relative(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double worst = 0;
  for (size_t t = 0; t < a.size(); ++t) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a[t].size(); ++i)
      num = std::max(num, std::abs(static_cast<double>(a[t][i]) - b[t][i])), den = std::max(den, std::abs(static_cast<double>(b[t][i])));
    worst = std::max(worst, num / den);
  }
  return worst;
}

struct Batch {
  Tensor x, y;
  int64_t valid = 0;
};

// B sequences; sequence s gets its first ignored[s] targets set to -100.
Batch make_batch(int64_t B, const std::vector<int64_t>& ignored) {
  Generator gen(21);
  const Tensor ids = Tensor::uniform({B, 17}, 0, 29, DType::F32, Device::cpu(), gen).to(DType::I64);
  std::vector<int64_t> y = ids.slice(1, 1, 17).contiguous().to_vector<int64_t>();
  int64_t valid = B * 16;
  for (int64_t s = 0; s < B; ++s)
    for (int64_t t = 0; t < ignored[static_cast<size_t>(s)]; ++t) y[static_cast<size_t>(s * 16 + t)] = -100, --valid;
  return {ids.slice(1, 0, 16).contiguous(), Tensor::from_vector(y, {B, 16}), valid};
}

// Full batch versus k = 4 micro-batches of 1 sequence. The results differ only in summation order: each weight
// gradient's GEMM sums 64 rows at once in the full batch and 16 per micro-batch followed by 3 FP32 additions into
// .grad (LayerNorm's weight and bias reductions likewise), so FP32 agreement is ~1e-7, asserted at 1e-6.
TEST(GradientAccumulation, MicroBatchMeansMatchTheFullBatch) {
  nn::GPT full(config()), micro(config());
  const Batch b = make_batch(4, {0, 0, 0, 0});
  full.loss(b.x, b.y).backward();
  const train::AccumulateResult r = train::accumulate_gradients(4, [&](int64_t i) {
    return train::MicroBatchLoss{micro.loss(b.x.slice(0, i, i + 1), b.y.slice(0, i, i + 1)), 16};
  });
  const double worst = worst_relative(grads_of(micro), grads_of(full));
  std::printf("micro-batch means: worst relative gradient difference %.3e\n", worst);
  EXPECT_LE(worst, 1e-6);
  EXPECT_NEAR(r.value(), full.loss(b.x, b.y).item<double>(), 1e-6);
  EXPECT_EQ(r.tokens, 64);
}

// With ignored targets spread unevenly the full batch's mean divides by the batch's valid count: TokenSum
// reproduces it; averaging micro-batch means does not (the negative control).
TEST(GradientAccumulation, TokenSumNormalisationHandlesUnevenCounts) {
  nn::GPT full(config()), by_tokens(config()), by_means(config());
  const Batch b = make_batch(4, {12, 0, 3, 0});
  ASSERT_EQ(b.valid, 64 - 15);
  full.loss(b.x, b.y).backward();
  auto run = [&](nn::GPT& m, ops::LossReduction red, int64_t i) {
    const Tensor yi = b.y.slice(0, i, i + 1).contiguous();
    int64_t tokens = 0;
    for (int64_t v : yi.to_vector<int64_t>()) tokens += v != -100;
    return train::MicroBatchLoss{m.loss(b.x.slice(0, i, i + 1), yi, red), tokens};
  };
  train::accumulate_gradients(4, [&](int64_t i) { return run(by_tokens, ops::LossReduction::Sum, i); },
                            {.normalization = train::LossNormalization::TokenSum, .total_tokens = b.valid, .scale_loss = {}});
  train::accumulate_gradients(4, [&](int64_t i) { return run(by_means, ops::LossReduction::Mean, i); });
  const double tokens_err = worst_relative(grads_of(by_tokens), grads_of(full));
  const double means_err = worst_relative(grads_of(by_means), grads_of(full));
  std::printf("uneven counts: token-sum %.3e, mean of means %.3e\n", tokens_err, means_err);
  EXPECT_LE(tokens_err, 1e-6);
  EXPECT_GT(means_err, 1e-2);
}

// accumulate_gradients offers each micro-batch's loss its gradient before the forward (autograd::LossSeed), so
// GPT's cross-entropy writes the logits' gradient in the forward pass: the gradients keep the bits of the backward
// from the normalised, scaled loss (the scale here 1000, no power of two, passed as a device tensor as a GradScaler
// does). A micro-batch that returns twice its loss gets another upstream gradient than the one offered: the
// fused gradient is rescaled, exactly for a factor 2.
TEST(GradientAccumulation, LossGradientWrittenInTheForwardKeepsTheBits) {
  const Batch batch = make_batch(2, {3, 0});
  const Tensor scale = Tensor::full({}, 1000.0);
  const auto scale_loss = [&](const Tensor& l) { return ops::mul(l, scale); };
  for (bool twice : {false, true}) {
    SCOPED_TRACE(twice ? "twice the loss" : "the loss");
    nn::GPT ref(config()), got(config());
    for (int64_t i = 0; i < 2; ++i) {  // the backward of the normalised, scaled loss, with no LossSeed alive
      Tensor l = ref.loss(batch.x.slice(0, i, i + 1), batch.y.slice(0, i, i + 1));
      if (twice) l = ops::scale(l, 2.0);
      scale_loss(ops::scale(l, 0.5)).backward();
    }
    train::accumulate_gradients(2, [&](int64_t i) {
      const Tensor l = got.loss(batch.x.slice(0, i, i + 1), batch.y.slice(0, i, i + 1));
      return train::MicroBatchLoss{twice ? ops::scale(l, 2.0) : l, 16};
    }, {.scale_loss = scale_loss});
    const auto want = grads_of(ref), have = grads_of(got);
    for (size_t t = 0; t < want.size(); ++t) EXPECT_EQ(have[t], want[t]) << "parameter " << t;
  }
}

TEST(GradientAccumulation, ScalesEachLossAndChecksItsInputs) {
  nn::GPT a(config()), b(config());
  const Batch batch = make_batch(2, {0, 0});
  train::accumulate_gradients(2, [&](int64_t i) {
    return train::MicroBatchLoss{a.loss(batch.x.slice(0, i, i + 1), batch.y.slice(0, i, i + 1)), 16};
  });
  train::accumulate_gradients(2, [&](int64_t i) {
    return train::MicroBatchLoss{b.loss(batch.x.slice(0, i, i + 1), batch.y.slice(0, i, i + 1)), 16};
  }, {.scale_loss = [](const Tensor& l) { return ops::scale(l, 1024.0); }});
  const auto ga = grads_of(a), gb = grads_of(b);
  for (size_t t = 0; t < ga.size(); ++t)
    for (size_t i = 0; i < ga[t].size(); ++i) EXPECT_EQ(gb[t][i], ga[t][i] * 1024.0f);  // a power of two: exact
  EXPECT_MPT_ERROR(train::accumulate_gradients(0, [](int64_t) { return train::MicroBatchLoss{}; }), "k >= 1");
  EXPECT_MPT_ERROR(train::accumulate_gradients(1, [](int64_t) { return train::MicroBatchLoss{Tensor::zeros({}), 1}; }),
                   "expected a one-element loss that requires grad");
  EXPECT_MPT_ERROR(train::accumulate_gradients(1, [&](int64_t) {
    return train::MicroBatchLoss{a.loss(batch.x, batch.y, ops::LossReduction::Sum), 32};
  }, {.normalization = train::LossNormalization::TokenSum, .total_tokens = 30, .scale_loss = {}}), "reported 32 tokens but total_tokens was 30");
}

}  // namespace
}  // namespace mpt
