// tests/nn/test_gpt_memory.cpp: the GPT parameter count and training-memory estimate against real models and peaks.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <limits>
#include <random>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"

namespace mpt {
namespace {

nn::GPTConfig config(int64_t vocab, int64_t block, int64_t layers, int64_t heads, int64_t embd, bool bias = true) {
  nn::GPTConfig c;
  c.vocab_size = vocab;
  c.block_size = block;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_embd = embd;
  c.bias = bias;
  return c;
}

TEST(GptMemory, ParameterCountMatchesTheModel) {
  for (const auto& c : {config(65, 128, 4, 4, 128), config(100, 64, 2, 6, 192, false), config(7, 3, 0, 1, 8),
                        config(50257, 1024, 1, 12, 768)}) {
    EXPECT_EQ(nn::gpt_parameter_count(c), nn::GPT(c).num_parameters()) << c.n_layer << " layers, " << c.n_embd;
  }
}

// The peak of one AdamW training step (model, forward, backward, step) measured by the CPU allocator.
int64_t measured_peak(const nn::GPTConfig& c, int64_t B, int64_t T, bool checkpointing) {
  empty_cache(Device::cpu());
  const int64_t base = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory_stats(Device::cpu());
  nn::GPT model(c);
  model.set_activation_checkpointing(checkpointing);
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-3});
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int64_t> tok(0, c.vocab_size - 1);
  std::vector<int64_t> ids(static_cast<size_t>(B * T)), targets(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = tok(rng), targets[i] = tok(rng);
  for (int step = 0; step < 2; ++step) {  // the second step runs with the optimizer state already allocated
    const Tensor loss = model.loss(Tensor::from_vector(ids, {B, T}), Tensor::from_vector(targets, {B, T}));
    loss.backward();
    opt.step();
    opt.zero_grad();
  }
  return memory_stats(Device::cpu()).peak_bytes - base;
}

// The estimate must be close enough to refuse what cannot fit without refusing what can: within [0.8, 1.5] of the
// measured peak, for a narrow and a wide model, a large vocabulary and activation checkpointing.
TEST(GptMemory, EstimateTracksTheMeasuredPeak) {
  struct Case {
    nn::GPTConfig c;
    int64_t B, T;
    bool checkpointing;
  };
  for (const Case& k : {Case{config(65, 128, 4, 4, 128), 8, 128, false}, Case{config(65, 64, 2, 6, 192), 4, 64, false},
                        Case{config(2000, 64, 2, 2, 64), 8, 64, false}, Case{config(65, 128, 6, 4, 128), 8, 128, true}}) {
    const int64_t peak = measured_peak(k.c, k.B, k.T, k.checkpointing);
    const nn::TrainingMemory m = nn::estimate_training_memory(
        k.c, {.batch = k.B, .seq = k.T, .activation_checkpointing = k.checkpointing});
    const double ratio = static_cast<double>(m.total()) / static_cast<double>(peak);
    std::printf("C=%lld L=%lld V=%lld B=%lld T=%lld checkpointing=%d: estimate %lld, measured peak %lld, ratio %.3f\n",
                static_cast<long long>(k.c.n_embd), static_cast<long long>(k.c.n_layer),
                static_cast<long long>(k.c.vocab_size), static_cast<long long>(k.B), static_cast<long long>(k.T),
                k.checkpointing ? 1 : 0, static_cast<long long>(m.total()), static_cast<long long>(peak), ratio);
    EXPECT_GE(ratio, 0.8) << "estimate " << m.total() << " measured " << peak << " (C=" << k.c.n_embd
                          << ", V=" << k.c.vocab_size << ", checkpointing " << k.checkpointing << ")";
    EXPECT_LE(ratio, 1.5) << "estimate " << m.total() << " measured " << peak << " (C=" << k.c.n_embd
                          << ", V=" << k.c.vocab_size << ", checkpointing " << k.checkpointing << ")";
    EXPECT_EQ(m.weights, 4 * m.parameters);
    EXPECT_EQ(m.optimizer, 8 * m.parameters);
  }
}

TEST(GptMemory, AbsurdConfigsSaturateInsteadOfOverflowing) {
  const nn::TrainingMemory m =
      nn::estimate_training_memory(config(65, 256, 1000000, 1, 1 << 20), {.batch = 1 << 30, .seq = 1 << 20});
  EXPECT_EQ(m.total(), std::numeric_limits<int64_t>::max());
  EXPECT_EQ(m.activations, std::numeric_limits<int64_t>::max());
  EXPECT_THROW(nn::estimate_training_memory(config(65, 8, 1, 1, 8), {.batch = 0, .seq = 8}), Error);
}

TEST(AvailableMemory, CpuIsPositiveAndBelowPhysicalMemory) {
  const int64_t avail = available_memory(Device::cpu());
  EXPECT_GT(avail, 0);
  // /proc/meminfo's MemTotal bounds it (plus the pool's cache, which MemAvailable does not count).
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  int64_t total_kib = 0;
  meminfo >> key >> total_kib;
  ASSERT_EQ(key, "MemTotal:");
  EXPECT_LE(avail, total_kib * 1024 + memory_stats(Device::cpu()).cached_bytes);
}

}  // namespace
}  // namespace mpt
