// tests/tools/crash_child_model.h: the run checkpoint_crash_child saves: a GPT with AdamW state, `steps` steps in.
#pragma once

#include <memory>
#include <vector>

#include "mpt/train/checkpoint.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"

namespace mpt::testing {

// A GPT of about 0.53M parameters (model.safetensors ~2.1 MB, optimizer.safetensors ~4.2 MB: several 1 MiB write
// points each), trained `steps` AdamW steps on fixed token ids.
struct CrashChildRun {
  static nn::GPTConfig config() {
    nn::GPTConfig c;
    c.vocab_size = 1024;
    c.block_size = 16;
    c.n_layer = 2;
    c.n_head = 4;
    c.n_embd = 128;
    c.seed = 7;
    return c;
  }
  explicit CrashChildRun(int64_t steps)
      : model(config()), opt(model.parameters(), {.lr = 1e-3}) {
    std::vector<int64_t> ids(2 * 16);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 37 + 11) % 1024);
    const Tensor x = Tensor::from_vector(ids, {2, 16});
    for (int64_t s = 0; s < steps; ++s) {
      opt.zero_grad();
      model.loss(x, x).backward();
      opt.step();
    }
    step = steps;
  }
  train::TrainingState state() {
    return {.model = &model, .optimizer = &opt, .step = step, .precision = "fp32"};
  }

  nn::GPT model;
  optim::AdamW opt;
  int64_t step = 0;
};

}  // namespace mpt::testing
