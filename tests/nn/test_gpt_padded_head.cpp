// tests/nn/test_gpt_padded_head.cpp: the padded LM head of GPT and Llama (set_padded_head: logits of a multiple-of-64
// width, the extra columns no classes) gives the loss and gradients of the unpadded model, in f32 and under BF16
// autocast.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mpt/mpt.h"

namespace mpt {
namespace {

nn::GPTConfig config() {
  nn::GPTConfig c;
  c.vocab_size = 65;  // 128 when padded to a multiple of 64
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.seed = 5;
  return c;
}

std::pair<Tensor, Tensor> batch() {
  std::vector<int64_t> x(3 * 16), y(3 * 16);
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<int64_t>((i * 7 + 3) % 65);
    y[i] = static_cast<int64_t>((i * 11 + 1) % 65);
  }
  y[5] = -100;  // an ignored target
  return {Tensor::from_vector(x, {3, 16}), Tensor::from_vector(y, {3, 16})};
}

// max |got - want| / max |want| over every element.
double normwise(const Tensor& got, const Tensor& want) {
  const auto g = got.contiguous().to_vector<double>(), w = want.contiguous().to_vector<double>();
  double err = 0, mag = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::abs(g[i] - w[i]));
    mag = std::max(mag, std::abs(w[i]));
  }
  return mag > 0 ? err / mag : err;
}

TEST(GptPaddedHead, WidthFollowsTheSetting) {
  using nn::GPT;
  EXPECT_EQ(GPT::padded_head_width(65, -1, false), 65);       // automatic: only on CUDA
  EXPECT_EQ(GPT::padded_head_width(65, -1, true), 128);       // 65 is not a multiple of 8
  EXPECT_EQ(GPT::padded_head_width(50257, -1, true), 50304);  // llm.c's Vp
  EXPECT_EQ(GPT::padded_head_width(64, -1, true), 64);        // aligned already
  EXPECT_EQ(GPT::padded_head_width(65, 64, false), 128);      // forced
  EXPECT_EQ(GPT::padded_head_width(65, 0, true), 65);         // never
  nn::GPT model(config());
  EXPECT_EQ(model.padded_head_width(Device::cpu()), 65);
  model.set_padded_head(64);
  EXPECT_EQ(model.padded_head_width(Device::cpu()), 128);
  EXPECT_THROW(model.set_padded_head(-2), Error);
}

// plain (set_padded_head(0)) and padded (64) of one model: under `precision`'s autocast the losses and every
// gradient agree (f32: 1e-6 and 1e-5; bf16: 2e-3 and 2e-2 normwise), and forward() keeps the vocabulary's width.
void expect_padded_head_is_the_unpadded_model(nn::LanguageModel& plain, nn::LanguageModel& padded,
                                              const std::string& precision) {
  SCOPED_TRACE(precision);
  const auto [x, y] = batch();
  plain.set_padded_head(0);
  padded.set_padded_head(64);
  EXPECT_EQ(padded.padded_head_width(Device::cpu()), 128);
  const amp::Policy policy = amp::Policy::named(precision, 2, Device::cpu());
  Tensor lp, lq;
  {
    amp::Autocast autocast(policy);
    lp = plain.loss(x, y);
    lq = padded.loss(x, y);
  }
  const bool fp32 = precision == "fp32";
  EXPECT_NEAR(lq.item<double>(), lp.item<double>(), (fp32 ? 1e-6 : 2e-3) * std::abs(lp.item<double>()));
  lp.backward();
  lq.backward();
  const auto a = plain.named_parameters(), b = padded.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(b[i].tensor.grad().shape(), a[i].tensor.grad().shape()) << a[i].name;
    EXPECT_LT(normwise(b[i].tensor.grad(), a[i].tensor.grad()), fp32 ? 1e-5 : 2e-2) << a[i].name;
  }
  EXPECT_EQ(padded.forward(x).size(-1), 65);
}

TEST(GptPaddedHead, LossAndGradientsAreTheUnpaddedModels) {
  for (const char* precision : {"fp32", "bf16"}) {
    nn::GPT plain(config()), padded(config());
    expect_padded_head_is_the_unpadded_model(plain, padded, precision);
  }
}

// Llama's head, untied (its own Linear) and tied (the embedding), the same way.
TEST(LlamaPaddedHead, LossAndGradientsAreTheUnpaddedModels) {
  for (bool tied : {false, true}) {
    nn::LlamaConfig c;
    c.vocab_size = 65, c.block_size = 16, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 32;
    c.tie_embeddings = tied, c.seed = 5;
    for (const char* precision : {"fp32", "bf16"}) {
      SCOPED_TRACE(tied ? "tied" : "untied");
      nn::Llama plain(c), padded(c);
      expect_padded_head_is_the_unpadded_model(plain, padded, precision);
    }
  }
  nn::LlamaConfig c;
  c.vocab_size = 65, c.block_size = 16, c.n_layer = 1, c.n_head = 2, c.n_kv_head = 2, c.n_embd = 16;
  nn::Llama model(c);
  EXPECT_EQ(model.padded_head_width(Device::cpu()), 65);  // automatic: only on CUDA
  EXPECT_THROW(model.set_padded_head(-2), Error);
}

}  // namespace
}  // namespace mpt
