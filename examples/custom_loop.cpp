// examples/custom_loop.cpp: the shortest complete training loop, written against the installed package.
#include <mpt/mpt.h>

#include <cstdio>
#include <filesystem>
#include <vector>

// A GPT learns to count: after token t comes (t + 1) mod 64. Mixed precision (BF16 autocast, FP32 master weights,
// a loss scaler that stays off unless the policy is FP16), two micro-batches per step, clipping, AdamW, and a
// checkpoint to resume from: run it twice and the second run continues where the first stopped.
int main(int argc, char** argv) {
  const std::filesystem::path dir = argc > 1 ? argv[1] : "custom_loop_ckpt";
  const int64_t steps_per_run = 60, vocab = 64, T = 32, batch = 8, micro_batches = 2;
  try {
    const mpt::Device device = mpt::Device::best();
    mpt::nn::GPTConfig config;
    config.vocab_size = vocab, config.block_size = T, config.n_layer = 2, config.n_head = 2, config.n_embd = 64;
    config.where.device = device;
    mpt::nn::GPT model(config);
    mpt::optim::AdamW opt(mpt::optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 3e-3});
    const mpt::amp::Policy policy = mpt::amp::Policy::named("bf16", config.n_layer, device);
    mpt::amp::GradScaler scaler(device, {.enabled = false});  // {.enabled = true} with Policy::named("fp16", ...)

    mpt::io::TrainingState state{.model = &model, .optimizer = &opt, .scaler = &scaler, .precision = "bf16"};
    int64_t start = 0;
    if (std::filesystem::exists(dir / "latest")) {
      start = mpt::io::load_checkpoint(dir, state).step;
      std::printf("resumed at step %lld\n", static_cast<long long>(start));
    }
    for (int64_t step = start; step < start + steps_per_run; ++step) {
      opt.zero_grad();
      double loss_sum = 0;
      for (int64_t m = 0; m < micro_batches; ++m) {
        std::vector<int64_t> x(batch * T), y(batch * T);
        for (int64_t i = 0; i < batch * T; ++i) {
          x[i] = (i / T * 7 + i % T + step * 3 + m) % vocab;  // each row counts up from its own start
          y[i] = (x[i] + 1) % vocab;
        }
        mpt::Tensor loss;
        {
          mpt::amp::Autocast autocast(policy);
          const mpt::Tensor xs = mpt::Tensor::from_vector(x, {batch, T}, device);
          loss = model.loss(xs, mpt::Tensor::from_vector(y, {batch, T}, device));
        }
        scaler.scale(mpt::ops::scale(loss, 1.0 / micro_batches)).backward();  // gradients add up over micro-batches
        if (step % 20 == 0 || step + 1 == start + steps_per_run) loss_sum += loss.item<double>();
      }
      scaler.unscale_(opt);
      mpt::optim::clip_grad_norm_(model.parameters(), 1.0);
      scaler.step(opt);
      scaler.update();
      if (step % 20 == 0 || step + 1 == start + steps_per_run)
        std::printf("step %3lld  loss %.4f\n", static_cast<long long>(step), loss_sum / micro_batches);
    }
    state.step = start + steps_per_run;
    std::printf("saved %s\n", mpt::io::save_checkpoint(dir, state, {.keep = 2}).string().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_loop: %s\n", e.what());
    return 1;
  }
  return 0;
}
