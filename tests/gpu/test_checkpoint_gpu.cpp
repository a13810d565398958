// tests/gpu/test_checkpoint_gpu.cpp: a checkpoint of a run on cuda:0 resumes it bit for bit and loads on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "device_test.h"
#include "mpt/mpt.h"

namespace mpt {
namespace {

namespace fs = std::filesystem;

// A 3-layer GPT on `device` with delayed FP8 scaling (state on the device), 8-bit AdamW and dropout.
struct DeviceRun {
  static nn::GPTConfig config(Device device, uint64_t seed) {
    nn::GPTConfig c;
    c.vocab_size = 32, c.block_size = 16, c.n_layer = 3, c.n_head = 2, c.n_embd = 32, c.dropout = 0.1, c.seed = seed;
    c.where.device = device;
    return c;
  }
  DeviceRun(Device device, uint64_t seed)
      : device(device),
        model(config(device, seed)),
        policy(amp::Policy::fp8(3, std::make_shared<fp8::Fp8ScalingState>(fp8::DelayedScaling{.amax_history_len = 4},
                                                                           device))),
        opt(optim::weight_decay_groups(model.named_parameters(), 0.1),
            {.lr = 1e-2, .moments = ops::MomentStorage::Int8}),
        data(seed) {
    manual_seed(seed);
  }
  void train(int steps) {
    for (int s = 0; s < steps; ++s) {
      std::vector<int64_t> ids(2 * 16);
      for (auto& id : ids) id = static_cast<int64_t>(data() % 32);
      const Tensor x = Tensor::from_vector(ids, {2, 16}).to(device);
      opt.zero_grad();
      {
        amp::Autocast autocast(policy);
        losses.push_back(model.loss(x, x).item<double>());
      }
      amp::Autocast autocast(policy);
      model.loss(x, x).backward();
      opt.step();
      policy.fp8_state->update();
      ++step;
    }
  }
  train::TrainingState state() {
    return {.model = &model, .optimizer = &opt, .fp8 = policy.fp8_state.get(), .step = step, .precision = "fp8"};
  }
  Device device;
  nn::GPT model;
  amp::Policy policy;
  optim::AdamW opt;
  std::mt19937_64 data;
  int64_t step = 0;
  std::vector<double> losses;
};

std::map<std::string, std::string> bytes_of(const std::map<std::string, Tensor>& dict) {
  std::map<std::string, std::string> out;
  for (const auto& [k, t] : dict) {
    const Tensor c = testing::to_cpu(t).contiguous();
    out[k] = std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

// Skipped without a GPU in a CUDA build; run under emulation.
TEST(GpuCheckpoint, ResumesADeviceRunBitForBitAndLoadsOnTheCpu) {
  MPT_REQUIRE_GPU(8);
  const Device gpu = Device::cuda(0);
  const fs::path dir = fs::temp_directory_path() / fmt::format("mpt_gpu_ckpt_{}", ::getpid());
  fs::remove_all(dir);
  DeviceRun straight(gpu, 1);
  straight.train(4);
  const std::string straight_dropout = fmt::format("{}", default_generator().offset());

  DeviceRun first(gpu, 1);
  first.train(2);
  std::mt19937_64 data_after = first.data;
  train::save_checkpoint(dir, first.state());
  DeviceRun second(gpu, 7);
  train::TrainingState s = second.state();
  train::load_checkpoint(dir, s);
  second.step = s.step;
  second.data = data_after;
  EXPECT_EQ(bytes_of(second.model.state_dict()), bytes_of(first.model.state_dict()));
  EXPECT_EQ(bytes_of(second.opt.state_dict()), bytes_of(first.opt.state_dict()));
  EXPECT_EQ(bytes_of(second.policy.fp8_state->state_dict()), bytes_of(first.policy.fp8_state->state_dict()));
  second.train(2);
  EXPECT_EQ(fmt::format("{}", default_generator().offset()), straight_dropout);
  EXPECT_EQ(std::vector<double>(straight.losses.begin() + 2, straight.losses.end()), second.losses);
  EXPECT_EQ(bytes_of(second.model.state_dict()), bytes_of(straight.model.state_dict()));
  EXPECT_EQ(bytes_of(second.opt.state_dict()), bytes_of(straight.opt.state_dict()));

  // The same checkpoint into a run on the CPU: the weights and optimizer state arrive unchanged.
  DeviceRun cpu(Device::cpu(), 9);
  train::TrainingState c = cpu.state();
  train::load_checkpoint(dir, c);
  EXPECT_EQ(bytes_of(cpu.model.state_dict()), bytes_of(first.model.state_dict()));
  EXPECT_EQ(bytes_of(cpu.opt.state_dict()), bytes_of(first.opt.state_dict()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace mpt
