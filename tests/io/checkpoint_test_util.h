// tests/io/checkpoint_test_util.h: a small training run for the checkpoint tests, and state.json editing.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "io_test_util.h"
#include "mpt/mpt.h"

namespace mpt::testing {

// A 3-layer GPT trained with AdamW (8-bit moments by default), a warmup-cosine schedule, dropout 0.1, two micro-batches per step and the
// precision's policy (fp16: GradScaler, its init_scale given; fp8-*: the middle block in FP8).
struct TinyRun {
  static nn::GPTConfig config(uint64_t seed) {
    nn::GPTConfig c;
    c.vocab_size = 32;
    c.block_size = 16;
    c.n_layer = 3;
    c.n_head = 2;
    c.n_embd = 32;
    c.dropout = 0.1;
    c.seed = seed;
    return c;
  }
  static amp::Policy policy_of(const std::string& precision) {
    if (precision == "bf16") return amp::Policy::bf16();
    if (precision == "fp16") return amp::Policy::fp16();
    if (precision == "fp8-delayed")
      return amp::Policy::fp8(3, std::make_shared<fp8::Fp8ScalingState>(fp8::DelayedScaling{.amax_history_len = 8}));
    if (precision == "fp8-current")
      return amp::Policy::fp8(3, std::make_shared<fp8::Fp8ScalingState>(fp8::CurrentScaling{}));
    return amp::Policy::fp32();
  }

  explicit TinyRun(std::string precision_ = "fp32", uint64_t seed = 1, double init_scale = 65536,
                   ops::MomentStorage moments = ops::MomentStorage::Int8)
      : precision(std::move(precision_)),
        model(config(seed)),
        policy(policy_of(precision)),
        scaler(train::GradScalerOptions{.init_scale = init_scale, .enabled = precision == "fp16"}),
        opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-2, .moments = moments}),
        schedule(opt, {.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 2, .total_steps = 20}),
        data(seed) {
    manual_seed(1000 + seed);  // the dropout stream (process-wide): runs of one seed draw the same masks
  }

  void train(int64_t steps) {
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      for (int micro = 0; micro < 2; ++micro) {
        std::vector<int64_t> ids(2 * 16);
        for (auto& id : ids) id = static_cast<int64_t>(data() % 32);
        const Tensor x = Tensor::from_vector(ids, {2, 16});
        Tensor loss;
        {
          amp::Autocast autocast(policy);
          loss = model.loss(x, x);
        }
        losses.push_back(loss.item<double>());
        scaler.scale(ops::scale(loss, 0.5)).backward();
      }
      scaler.unscale_(opt);
      if (!scaler.step(opt)) ++skipped;
      scaler.update();
      if (policy.fp8_state) policy.fp8_state->update();
      schedule.step();
      ++step;
    }
  }

  train::TrainingState state() {
    train::TrainingState s{.model = &model, .optimizer = &opt, .schedule = &schedule, .scaler = &scaler,
                        .fp8 = policy.fp8_state.get(), .step = step, .precision = precision};
    std::ostringstream d;
    d << data;
    s.data_json = nlohmann::json{{"sampler", d.str()}}.dump();
    return s;
  }
  train::CheckpointInfo load(const std::filesystem::path& path) {
    train::TrainingState s = state();
    train::CheckpointInfo info = train::load_checkpoint(path, s);
    step = s.step;
    std::istringstream d(nlohmann::json::parse(s.data_json).at("sampler").get<std::string>());
    d >> data;
    return info;
  }

  std::string precision;
  nn::GPT model;
  amp::Policy policy;
  train::GradScaler scaler;
  optim::AdamW opt;
  optim::WarmupCosineLr schedule;
  std::mt19937_64 data;
  int64_t step = 0, skipped = 0;
  std::vector<double> losses;
};

// Every tensor's bytes, by name.
inline std::map<std::string, std::string> bytes_of(const std::map<std::string, Tensor>& dict) {
  std::map<std::string, std::string> out;
  for (const auto& [k, t] : dict) {
    const Tensor c = t.to(Device::cpu()).contiguous();
    out[k] = c.nbytes() == 0 ? std::string() : std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

// Rewrites `dir`/state.json after `edit`, with a valid checksum (so that the field checks behind it are reached).
template <class F>
void edit_state_json(const std::filesystem::path& dir, F&& edit) {
  nlohmann::json j = nlohmann::json::parse(read_bytes(dir / "state.json"));
  edit(j);
  j.erase("checksum");
  const std::string dump = j.dump();
  j["checksum"] = fmt::format("{:016x}", XXH3_64bits(dump.data(), dump.size()));
  write_bytes(dir / "state.json", j.dump(1));
}

// The one-block models of the checkpoint goldens and the init_from tests (vocab 16, width 16, 2 heads, context 8).
inline nn::GPTConfig tiny_gpt_config(uint64_t seed, int64_t vocab = 16, int64_t width = 16) {
  return {.vocab_size = vocab, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = width, .seed = seed};
}

inline nn::LlamaConfig tiny_llama_config(uint64_t seed) {
  nn::LlamaConfig c;
  c.vocab_size = 16;
  c.block_size = 8;
  c.n_layer = 1;
  c.n_head = 2;
  c.n_kv_head = 1;
  c.n_embd = 16;
  c.intermediate_size = 32;
  c.seed = seed;
  return c;
}

}  // namespace mpt::testing
