// tests/nn/test_gpt_checkpoint.cpp: GPT with every block checkpointed gives bit-identical loss and gradients (dropout on;
// FP32, and under BF16/FP16 Autocast, whose policy the recomputation runs under again).
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

// precision: the Autocast policy of the forward (amp::Policy::named, a fresh FP8 scaling state per run; "" for none);
// backward runs outside it, as train::Trainer runs it.
TrainRun run_once(bool checkpointed, const std::string& precision = "") {
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
  Tensor loss;
  {
    std::optional<amp::Autocast> autocast;
    if (!precision.empty()) autocast.emplace(amp::Policy::named(precision, c.n_layer, Device::cpu()));
    loss = model.loss(ids.slice(1, 0, 16).contiguous(), ids.slice(1, 1, 17).contiguous());
  }
  loss.backward();
  TrainRun r{loss.item<float>(), {}, default_generator().offset()};
  for (const auto& p : model.named_parameters()) r.grads.push_back(p.tensor.grad().to_vector<float>());
  return r;
}

void expect_same_run(const TrainRun& plain, const TrainRun& ckpt) {
  EXPECT_EQ(std::memcmp(&plain.loss, &ckpt.loss, sizeof(float)), 0);
  EXPECT_EQ(plain.offset_after, ckpt.offset_after);  // the recomputation replays, never advances, the stream
  ASSERT_EQ(plain.grads.size(), ckpt.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_EQ(plain.grads[i].size(), ckpt.grads[i].size());
    EXPECT_EQ(std::memcmp(plain.grads[i].data(), ckpt.grads[i].data(), plain.grads[i].size() * sizeof(float)), 0)
        << "parameter " << i;
  }
}

TEST(GptCheckpoint, GradientsAreBitIdenticalWithDropout) { expect_same_run(run_once(false), run_once(true)); }

// The recomputation runs the forward's BF16, FP16 or FP8 GEMMs again (before, it ran FP32 ones: the policy was not in
// force during backward, and the gradients differed from the plain run's).
TEST(GptCheckpoint, GradientsAreBitIdenticalUnderAutocast) {
  for (const std::string precision : {"bf16", "fp16", "fp8-delayed", "fp8-current", "fp8-block"}) {
    SCOPED_TRACE(precision);
    expect_same_run(run_once(false, precision), run_once(true, precision));
  }
}

}  // namespace
}  // namespace mpt
