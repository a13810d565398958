// tests/nn/test_gpt_checkpoint.cpp: GPT with every block checkpointed gives bit-identical loss and gradients (dropout on).
#include <gtest/gtest.h>

#include <cstring>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"

namespace mpt {
namespace {

struct TrainRun {
  float loss;
  std::vector<std::vector<float>> grads;
  uint64_t offset_after;
};

TrainRun run_once(bool checkpointed) {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 16;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 32;
  c.dropout = 0.2;
  nn::GPT model(c);
  model.set_activation_checkpointing(checkpointed);
  Generator data(5);
  const Tensor ids = Tensor::uniform({3, 17}, 0, 37, DType::F32, Device::cpu(), data).to(DType::I64);
  default_generator().set_state(99, 0);
  const Tensor loss = model.loss(ids.slice(1, 0, 16).contiguous(), ids.slice(1, 1, 17).contiguous());
  loss.backward();
  TrainRun r{loss.item<float>(), {}, default_generator().offset()};
  for (const auto& p : model.named_parameters()) r.grads.push_back(p.tensor.grad().to_vector<float>());
  return r;
}

TEST(GptCheckpoint, GradientsAreBitIdenticalWithDropout) {
  const TrainRun plain = run_once(false), ckpt = run_once(true);
  EXPECT_EQ(std::memcmp(&plain.loss, &ckpt.loss, sizeof(float)), 0);
  EXPECT_EQ(plain.offset_after, ckpt.offset_after);  // the recomputation replays, never advances, the stream
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_EQ(plain.grads[i].size(), ckpt.grads[i].size());
    EXPECT_EQ(std::memcmp(plain.grads[i].data(), ckpt.grads[i].data(), plain.grads[i].size() * sizeof(float)), 0)
        << "parameter " << i;
  }
}

}  // namespace
}  // namespace mpt
