// tests/nn/test_gpt_kv_cache.cpp: GPT::forward_cached (a prompt, then one token at a time) against forward() of the
// whole sequence at every position, in f32 and under BF16 autocast; a full cache started again; errors.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "mpt/amp/policy.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/nn/gpt.h"
#include "device_test.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

nn::GPTConfig small_config() {
  nn::GPTConfig c;
  c.vocab_size = 50;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.seed = 5;
  return c;
}

Tensor random_ids(int64_t B, int64_t T, int64_t vocab, uint64_t seed) {
  std::vector<int64_t> v(static_cast<size_t>(B * T));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 2654435761u + seed * 40503u) % vocab);
  return Tensor::from_vector(v, {B, T});
}

// Logits of the cached path at every position p >= prompt, against forward(ids)[:, p]: normwise error (max |d| over
// max |want|) of each.
double worst_error(const nn::GPT& model, const Tensor& ids, int64_t prompt) {
  autograd::NoGradGuard no_grad;
  const Tensor full = model.forward(ids);  // [B, T, V]
  nn::KvCache cache;
  double worst = 0;
  Tensor got = model.forward_cached(ids.slice(1, 0, prompt), cache);
  for (int64_t p = prompt - 1; p < ids.size(1); ++p) {
    if (p >= prompt) got = model.forward_cached(ids.slice(1, p, p + 1), cache);
    EXPECT_EQ(cache.length, p + 1);
    const Tensor want = full.select(1, p);
    worst = std::max(worst, testing::normwise_error(got.to(DType::F32), want.to(DType::F32)));
  }
  return worst;
}

TEST(GptKvCache, MatchesTheFullForwardAtEveryPosition) {
  const nn::GPT model(small_config());
  const Tensor ids = random_ids(3, 24, 50, 1);
  EXPECT_LE(worst_error(model, ids, 7), 1e-5);   // f32: only the order of the attention sums differs
  EXPECT_LE(worst_error(model, ids, 1), 1e-5);   // a one-token prompt
  amp::Autocast autocast(amp::Policy::named("bf16", 2, Device::cpu()));
  EXPECT_LE(worst_error(model, ids, 7), 0x1p-5);  // bf16: the scores and probabilities round differently
}

TEST(GptKvCache, AFullCacheStartsAgainFromAPrompt) {
  const nn::GPT model(small_config());
  autograd::NoGradGuard no_grad;
  const Tensor ids = random_ids(1, 24, 50, 2);
  nn::KvCache cache;
  model.forward_cached(ids, cache);
  EXPECT_EQ(cache.length, 24);
  EXPECT_MPT_ERROR(model.forward_cached(ids.slice(1, 0, 1), cache), "1 tokens after 24 cached positions exceed "
                   "block_size 24: clear the cache");
  cache.clear();
  const Tensor again = model.forward_cached(ids.slice(1, 12, 24), cache);
  const Tensor want = model.forward(ids.slice(1, 12, 24)).select(1, 11);
  EXPECT_LE(testing::normwise_error(again, want), 1e-5);
  EXPECT_MPT_ERROR(model.forward_cached(ids.slice(1, 0, 2), cache), "a prompt at position 0 or one token, got 2 "
                   "tokens at position 12");
}

}  // namespace
}  // namespace mpt
