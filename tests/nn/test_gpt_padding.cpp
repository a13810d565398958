// tests/nn/test_gpt_padding.cpp: a GPT on a dynamically padded batch (data::pad_batch + lengths): each sample's real
// positions get the logits and the gradients it gets alone, and the padding's tokens change nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "mpt/data/batching.h"
#include "mpt/mpt.h"

namespace mpt {
namespace {

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 40;
  c.block_size = 80;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.seed = 9;
  return c;
}

std::vector<std::vector<int32_t>> samples() {
  std::vector<std::vector<int32_t>> s;
  for (int64_t n : {70, 9, 66}) {  // the longest crosses a 64-key block
    std::vector<int32_t> ids(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) ids[static_cast<size_t>(i)] = static_cast<int32_t>((i * 7 + n * 3) % 40);
    s.push_back(ids);
  }
  return s;
}

double normwise(const Tensor& got, const Tensor& want) {
  const auto g = got.contiguous().to_vector<double>(), w = want.contiguous().to_vector<double>();
  double err = 0, mag = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::abs(g[i] - w[i]));
    mag = std::max(mag, std::abs(w[i]));
  }
  return err / mag;
}

TEST(GptPadding, RealPositionsGetTheUnpaddedLogitsWhateverThePaddingHolds) {
  nn::GPT model(config());
  autograd::NoGradGuard no_grad;
  const auto s = samples();
  const data::PaddedBatch b = data::pad_batch(s, {.pad_id = 3});
  const data::PaddedBatch other = data::pad_batch(s, {.pad_id = 17});  // other tokens at the padding
  const Tensor logits = model.forward(b.ids, b.lengths), other_logits = model.forward(other.ids, other.lengths);
  const Tensor feats = model.features(b.ids, b.lengths);
  ASSERT_EQ(feats.shape(), (Shape{3, 70, 32}));
  for (size_t i = 0; i < s.size(); ++i) {
    const auto n = static_cast<int64_t>(s[i].size());
    std::vector<int64_t> ids(s[i].begin(), s[i].end());
    const Tensor alone = model.forward(Tensor::from_vector(ids, {1, n}));
    const Tensor mine = logits.slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1).slice(1, 0, n);
    EXPECT_LE(normwise(mine, alone), 1e-6) << "sample " << i;
    // (A padding position's own logits depend on its own token; no real position's do.)
    const Tensor theirs = other_logits.slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i) + 1).slice(1, 0, n);
    EXPECT_EQ(normwise(theirs, mine), 0.0) << "the padding's tokens reached sample " << i;
  }
}

TEST(GptPadding, TheLossOnAPaddedBatchIsTheTokenMeanOfTheSamplesAlone) {
  const auto s = samples();
  nn::GPT padded(config()), alone(config());
  const data::PaddedBatch b = data::pad_lm_batch(s, {.pad_id = 0});
  const Tensor loss = padded.loss(b.ids, b.targets, ops::LossReduction::Mean, b.lengths);
  loss.backward();
  double sum = 0;
  for (const auto& one : s) {
    const data::PaddedBatch o = data::pad_lm_batch(std::vector<std::vector<int32_t>>{one});
    const Tensor l = alone.loss(o.ids, o.targets, ops::LossReduction::Sum);
    l.backward();
    sum += l.item<double>();
  }
  EXPECT_NEAR(loss.item<double>(), sum / static_cast<double>(b.tokens), 1e-6);
  // Gradients: the padded batch's mean equals the alone runs' sum over the token count.
  const auto pa = padded.named_parameters(), al = alone.named_parameters();
  for (size_t i = 0; i < pa.size(); ++i) {
    const Tensor want = ops::scale(al[i].tensor.grad(), 1.0 / static_cast<double>(b.tokens));
    EXPECT_LE(normwise(pa[i].tensor.grad(), want), 1e-5) << pa[i].name;
  }
}

}  // namespace
}  // namespace mpt
