// examples/custom_loop.cpp: the shortest complete training loop, written against the installed package.
#include <mpt/mpt.h>

#include <cstdio>
#include <filesystem>
#include <vector>

// A GPT learns to count: after token t comes (t + 1) mod 64. The Trainer owns the step: BF16 autocast with FP32 master
// weights (a loss scaler appears by itself with an FP16 policy), two micro-batches per step, clipping, AdamW, and a
// checkpoint to resume from: run it twice and the second run continues where the first stopped.
int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "custom_loop_ckpt";
  const int64_t steps_per_run = 60, vocab = 64, T = 32, batch = 8;
  try {
    const mpt::Device device = mpt::Device::best();
    mpt::nn::GPTConfig config;
    config.vocab_size = vocab, config.block_size = T, config.n_layer = 2, config.n_head = 2, config.n_embd = 64;
    config.where.device = device;
    mpt::nn::GPT model(config);
    mpt::train::Trainer trainer(model, mpt::train::adamw({.lr = 3e-3}),
                                {.policy = mpt::amp::Policy::named("bf16", config.n_layer, device),  // or "fp16"
                                 .grad_accum = 2, .clip = 1.0, .weight_decay = 0.1});
    if (std::filesystem::exists(dir / "latest"))
      std::printf("resumed at step %lld\n", static_cast<long long>(trainer.load(dir).step));
    const int64_t start = trainer.steps_done();
    for (int64_t step = start; step < start + steps_per_run; ++step) {
      const mpt::train::StepMetrics m = trainer.step([&](int64_t micro) {
        std::vector<int64_t> x(batch * T), y(batch * T);
        for (int64_t i = 0; i < batch * T; ++i) {
          x[i] = (i / T * 7 + i % T + step * 3 + micro) % vocab;  // each row counts up from its own start
          y[i] = (x[i] + 1) % vocab;
        }
        return model.loss(mpt::Tensor::from_vector(x, {batch, T}, device),
                          mpt::Tensor::from_vector(y, {batch, T}, device));
      });
      if (step % 20 == 0 || step + 1 == start + steps_per_run)
        std::printf("step %3lld  loss %.4f\n", static_cast<long long>(step), m.loss.item<double>());
    }
    std::printf("saved %s\n", trainer.save(dir, {.keep = 2}).string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop: %s\n", e.what());
    return 1;
  }
  return 0;
}
