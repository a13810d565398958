// tests/nn/test_memorize.cpp: a tiny MLP and the tiny GPT overfit one fixed batch (loss < 0.05) with AdamW.
#include <gtest/gtest.h>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/clip.h"

namespace mpt {
namespace {

class TinyMlp : public nn::Module {
 public:
  TinyMlp(int64_t in, int64_t hidden, int64_t classes, Generator& gen) : Module("TinyMlp") {
    fc1_ = register_module("fc1", std::make_shared<nn::Linear>(in, hidden, true, nn::Placement{}, gen));
    fc2_ = register_module("fc2", std::make_shared<nn::Linear>(hidden, classes, true, nn::Placement{}, gen));
  }
  Tensor forward(const Tensor& x) const { return fc2_->forward(ops::gelu(fc1_->forward(x))); }

 private:
  std::shared_ptr<nn::Linear> fc1_, fc2_;
};

// Runs `steps` AdamW steps of loss_fn and returns the losses (first and last).
template <class LossFn>
std::pair<float, float> train(nn::Module& model, LossFn loss_fn, int steps, double lr) {
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.01), {.lr = lr});
  float first = 0, last = 0;
  for (int s = 0; s < steps; ++s) {
    const Tensor loss = loss_fn();
    last = loss.item<float>();
    if (s == 0) first = last;
    loss.backward();
    optim::clip_grad_norm_(model.parameters(), 1.0);
    opt.step();
    opt.zero_grad();
  }
  return {first, last};
}

TEST(Memorize, TinyMlpOverfitsAFixedBatch) {
  Generator gen(3);
  TinyMlp model(16, 64, 10, gen);
  const Tensor x = Tensor::normal({32, 16}, 0, 1, DType::F32, Device::cpu(), gen);
  std::vector<int64_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>((i * 7 + 3) % 10);
  const Tensor y = Tensor::from_vector(labels, {32});
  const auto [first, last] = train(model, [&] { return nn::cross_entropy(model.forward(x), y); }, 300, 1e-2);
  EXPECT_GT(first, 2.0f);  // about ln 10 at the start
  EXPECT_LT(last, 0.05f) << "first loss " << first;
}

TEST(Memorize, TinyGptOverfitsAFixedBatch) {
  nn::GPTConfig c;
  c.vocab_size = 65;
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 48;
  nn::GPT model(c);
  Generator gen(9);
  const Tensor ids = Tensor::uniform({4, 33}, 0, 65, DType::F32, Device::cpu(), gen).to(DType::I64);
  const Tensor x = ids.slice(1, 0, 32).contiguous(), y = ids.slice(1, 1, 33).contiguous();
  const auto [first, last] = train(model, [&] { return model.loss(x, y); }, 200, 3e-3);
  EXPECT_NEAR(first, std::log(65.0f), 0.3f);  // GPT-2 init: near-uniform predictions
  EXPECT_LT(last, 0.05f) << "first loss " << first;
}

}  // namespace
}  // namespace mpt
