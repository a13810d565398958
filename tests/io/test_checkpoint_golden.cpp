// tests/io/test_checkpoint_golden.cpp: checkpoints of an earlier mptrain (tests/goldens/checkpoint_v1_*) still load.
//
// The goldens were written by the disabled tests below with the save path of commit 719c68f (before models described
// themselves to checkpoints): a 1-layer GPT (vocab 16, width 16, 2 heads, context 8) and a 1-layer Llama (the same,
// 1 kv head, SwiGLU 32 wide), each trained 3 steps with AdamW (8-bit moments) and a warmup-cosine schedule. To
// regenerate (only when the format changes on purpose):
//   build/cpu/tests/test_io --gtest_also_run_disabled_tests --gtest_filter='CheckpointGolden.DISABLED_*'
// and paste the digests it prints into kGolden* below.
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;

namespace {

const fs::path kGoldens = MPT_GOLDENS_DIR;

// xxh3 of every tensor's name, dtype, shape and bytes, in name order: equal digests mean bit-identical state.
std::string digest(const StateDict& dict) {
  std::string all;
  for (const auto& [name, t] : dict) {
    const Tensor c = t.to(Device::cpu()).contiguous();
    all += fmt::format("{}|{}|{}|", name, c.dtype(), shape_str(c.shape()));
    if (c.nbytes() > 0) all.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return fmt::format("{:016x}", XXH3_64bits(all.data(), all.size()));
}


// A model with AdamW and a schedule; train() takes deterministic steps on tokens drawn from a fixed stream.
template <class Model>
struct GoldenRun {
  template <class Config>
  explicit GoldenRun(const Config& config)
      : model(config),
        opt(optim::weight_decay_groups(model.named_parameters(), 0.1),
            {.lr = 1e-2, .moments = ops::MomentStorage::Int8}),
        schedule(opt, {.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = 10}) {}

  void train(int64_t steps) {
    std::mt19937_64 data(5);
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      std::vector<int64_t> ids(2 * 8);
      for (auto& id : ids) id = static_cast<int64_t>(data() % 16);
      const Tensor x = Tensor::from_vector(ids, {2, 8});
      model.loss(x, x).backward();
      opt.step();
      schedule.step();
      ++step;
    }
  }

  train::TrainingState state() {
    return {.model = &model, .optimizer = &opt, .schedule = &schedule, .dropout_generator = &dropout, .step = step,
            .precision = "fp32", .run_config_json = R"({"golden": "v1"})"};
  }

  Model model;
  optim::AdamW opt;
  optim::WarmupCosineLr schedule;
  Generator dropout{42};
  int64_t step = 0;
};

template <class Model, class Config>
void write_golden(const Config& config, const std::string& name) {
  GoldenRun<Model> run(config);
  run.train(3);
  const fs::path dir = kGoldens / name;
  fs::remove_all(dir);
  train::save_checkpoint(dir, run.state());
  std::printf("%s: model %s optimizer %s\n", name.c_str(), digest(run.model.state_dict()).c_str(),
              digest(run.opt.state_dict()).c_str());
}

// Loads the golden into a differently initialised run of the same config and requires the state it was saved with.
template <class Model, class Config>
void expect_golden_loads(const Config& config, const std::string& name, const char* model_digest,
                         const char* optimizer_digest) {
  GoldenRun<Model> run(config);
  ASSERT_NE(digest(run.model.state_dict()), model_digest) << "the fresh model must start from other weights";
  train::TrainingState state = run.state();
  const train::CheckpointInfo info = train::load_checkpoint(kGoldens / name, state);
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(state.step, 3);
  EXPECT_EQ(info.format_version, 1);
  EXPECT_EQ(info.run_config_json, R"({"golden":"v1"})");
  EXPECT_EQ(run.schedule.current_step(), 3);
  EXPECT_EQ(digest(run.model.state_dict()), model_digest) << name;
  EXPECT_EQ(digest(run.opt.state_dict()), optimizer_digest) << name;
  // And it trains on from there.
  run.step = state.step;
  run.train(1);
  EXPECT_EQ(run.step, 4);
}

constexpr const char* kGoldenGptModel = "32c692b3bd0e78eb";
constexpr const char* kGoldenGptOptimizer = "fdf76b79538600ed";
constexpr const char* kGoldenLlamaModel = "35c2480089aac052";
constexpr const char* kGoldenLlamaOptimizer = "9223e5face3e059a";

}  // namespace

TEST(CheckpointGolden, DISABLED_WriteGpt) { write_golden<nn::GPT>(tiny_gpt_config(3), "checkpoint_v1_gpt"); }
TEST(CheckpointGolden, DISABLED_WriteLlama) { write_golden<nn::Llama>(tiny_llama_config(3), "checkpoint_v1_llama"); }

TEST(CheckpointGolden, V1GptLoadsBitExactly) {
  expect_golden_loads<nn::GPT>(tiny_gpt_config(11), "checkpoint_v1_gpt", kGoldenGptModel, kGoldenGptOptimizer);
}

TEST(CheckpointGolden, V1LlamaLoadsBitExactly) {
  expect_golden_loads<nn::Llama>(tiny_llama_config(11), "checkpoint_v1_llama", kGoldenLlamaModel, kGoldenLlamaOptimizer);
}
