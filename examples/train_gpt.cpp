// examples/train_gpt.cpp: trains a character-level GPT-2 on a text file (tinyshakespeare) with AdamW, printing progress.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <sstream>

#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/lr_schedule.h"

namespace {

struct Options {
  std::string data;
  int64_t steps = 500, batch = 16, seq = 128, layers = 4, heads = 4, embd = 128;
  double lr = 3e-3, min_lr = 3e-4, weight_decay = 0.1, clip = 1.0, dropout = 0.0;
  int64_t warmup = -1, log_every = 10, eval_every = 100, eval_batches = 8, sample_chars = 200;
  uint64_t seed = 1337;
  bool checkpoint = false;
};

// Characters to ids: the sorted distinct bytes of the text.
struct CharCodec {
  std::vector<unsigned char> chars;
  std::vector<int64_t> index = std::vector<int64_t>(256, -1);
  explicit CharCodec(const std::string& text) {
    for (unsigned char c : text) index[c] = 0;
    for (int c = 0; c < 256; ++c)
      if (index[c] == 0) index[c] = static_cast<int64_t>(chars.size()), chars.push_back(static_cast<unsigned char>(c));
  }
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[train_gpt] cannot open the training text '{}' (pass --data PATH or set MPT_DATA, e.g. "
            "MPT_DATA=../shared/data/tinyshakespeare.txt)", path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A batch of random windows of `tokens`: inputs [B, T] and the next-character targets [B, T].
std::pair<mpt::Tensor, mpt::Tensor> batch(const std::vector<int64_t>& tokens, int64_t B, int64_t T,
                                          std::mt19937_64& rng, mpt::Device device) {
  MPT_CHECK(static_cast<int64_t>(tokens.size()) > T + 1, "[train_gpt] the split has {} tokens, fewer than seq + 2",
            tokens.size());
  std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(tokens.size()) - T - 2);
  std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = start(rng);
    std::copy_n(tokens.begin() + s, T, x.begin() + b * T);
    std::copy_n(tokens.begin() + s + 1, T, y.begin() + b * T);
  }
  return {mpt::Tensor::from_vector(x, {B, T}, device), mpt::Tensor::from_vector(y, {B, T}, device)};
}

double evaluate(const mpt::nn::GPT& model, const std::vector<int64_t>& tokens, const Options& o, mpt::Device device) {
  mpt::autograd::NoGradGuard no_grad;
  std::mt19937_64 rng(o.seed + 1);  // the same windows at every evaluation
  double total = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    auto [x, y] = batch(tokens, o.batch, o.seq, rng, device);
    total += model.loss(x, y).item<double>();
  }
  return total / static_cast<double>(o.eval_batches);
}

// Samples `n` characters after a one-character prompt (temperature 1, top-all).
std::string sample(const mpt::nn::GPT& model, const CharCodec& codec, int64_t n, mpt::Device device, uint64_t seed) {
  mpt::autograd::NoGradGuard no_grad;
  std::mt19937_64 rng(seed);
  std::vector<int64_t> context{codec.index['\n'] >= 0 ? codec.index['\n'] : 0};
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(context.size()), model.config().block_size);
    const std::vector<int64_t> window(context.end() - T, context.end());
    const mpt::Tensor logits = model.forward(mpt::Tensor::from_vector(window, {1, T}, device));
    const std::vector<float> last = mpt::ops::softmax(logits.select(1, T - 1)).to_vector<float>();
    std::discrete_distribution<int64_t> pick(last.begin(), last.end());
    context.push_back(pick(rng));
    out.push_back(static_cast<char>(codec.chars[static_cast<size_t>(context.back())]));
  }
  return out;
}

void run(const Options& o) {
  const mpt::Device device = mpt::Device::best();
  fmt::print("device: {} ({})\n", device, mpt::Device::best_reason());
  const std::string text = read_text(o.data);
  const CharCodec codec(text);
  std::vector<int64_t> tokens;
  tokens.reserve(text.size());
  for (unsigned char c : text) tokens.push_back(codec.index[c]);
  const size_t split = tokens.size() * 9 / 10;
  const std::vector<int64_t> train(tokens.begin(), tokens.begin() + static_cast<int64_t>(split));
  const std::vector<int64_t> val(tokens.begin() + static_cast<int64_t>(split), tokens.end());

  mpt::nn::GPTConfig config;
  config.vocab_size = static_cast<int64_t>(codec.chars.size());
  config.block_size = o.seq;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  config.dropout = o.dropout;
  config.where.device = device;
  config.seed = o.seed;
  mpt::nn::GPT model(config);
  model.set_activation_checkpointing(o.checkpoint);
  fmt::print("data: {} ({} characters, vocab {}; {} train / {} val tokens)\n", o.data, text.size(),
             config.vocab_size, train.size(), val.size());
  fmt::print("model: GPT-2 {} layers, {} heads, {} wide, context {}: {:.2f}M parameters; batch {} x {}\n", o.layers,
             o.heads, o.embd, o.seq, static_cast<double>(model.num_parameters()) / 1e6, o.batch, o.seq);

  mpt::optim::AdamW opt(mpt::optim::weight_decay_groups(model.named_parameters(), o.weight_decay),
                        {.lr = o.lr, .betas = {0.9, 0.95}});
  mpt::optim::WarmupCosineLr schedule(
      opt, {.max_lr = o.lr, .min_lr = o.min_lr, .warmup_steps = o.warmup, .total_steps = o.steps});
  std::mt19937_64 rng(o.seed);
  const double tokens_per_step = static_cast<double>(o.batch * o.seq);
  double window_ms = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    auto [x, y] = batch(train, o.batch, o.seq, rng, device);
    const mpt::Tensor loss = model.loss(x, y);
    loss.backward();
    const double norm = mpt::optim::clip_grad_norm_(model.parameters(), o.clip).item<double>();
    const double lr = schedule.current_lr();
    opt.step();
    opt.zero_grad();
    schedule.step();
    const double loss_value = loss.item<double>();
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    window_ms += ms;
    MPT_CHECK(std::isfinite(loss_value), "[train_gpt] the loss became {} at step {}", loss_value, step);
    if (step % o.log_every == 0 || step + 1 == o.steps) {
      const int64_t n = step % o.log_every == 0 ? std::min<int64_t>(o.log_every, step + 1) : (step % o.log_every) + 1;
      fmt::print("step {:5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:7.1f} ms | {:8.0f} tok/s\n", step,
                 o.steps, loss_value, lr, norm, ms, tokens_per_step * static_cast<double>(n) / window_ms * 1e3);
      window_ms = 0;
      std::fflush(stdout);
    }
    if (o.eval_every > 0 && ((step + 1) % o.eval_every == 0 || step + 1 == o.steps)) {
      model.eval();
      fmt::print("step {:5} | val loss {:.4f}\n", step, evaluate(model, val, o, device));
      model.train();
    }
  }
  const auto stats = mpt::memory_stats(device);
  fmt::print("peak memory on {}: {:.1f} MiB\n", device, static_cast<double>(stats.peak_bytes) / (1 << 20));
  if (o.sample_chars > 0) {
    model.eval();
    fmt::print("sample:\n{}\n", sample(model, codec, o.sample_chars, device, o.seed));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mptrain train_gpt: a character-level GPT-2 trained on a text file (CPU when no GPU is usable)"};
  Options o;
  const char* env = std::getenv("MPT_DATA");
  o.data = env != nullptr ? env : "";
  app.add_option("--data", o.data, "training text (default: $MPT_DATA)");
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "sequence length (the model's context)")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "transformer blocks")->check(CLI::NonNegativeNumber);
  app.add_option("--heads", o.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--embd", o.embd, "model width")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--min-lr", o.min_lr, "final learning rate of the cosine decay")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", o.warmup, "linear warmup steps (default: steps / 10)");
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of the Linear weights");
  app.add_option("--clip", o.clip, "gradient-norm clipping threshold")->check(CLI::NonNegativeNumber);
  app.add_option("--dropout", o.dropout, "dropout probability")->check(CLI::Range(0.0, 1.0));
  app.add_option("--log-every", o.log_every, "steps between progress lines")->check(CLI::PositiveNumber);
  app.add_option("--eval-every", o.eval_every, "steps between validation losses (0: only at the end)");
  app.add_option("--sample", o.sample_chars, "characters to sample at the end");
  app.add_option("--seed", o.seed, "initialisation and data-order seed");
  app.add_flag("--checkpoint-activations", o.checkpoint, "recompute each block in backward (less memory)");
  CLI11_PARSE(app, argc, argv);
  try {
    MPT_CHECK(!o.data.empty(), "[train_gpt] no training text: pass --data PATH or set MPT_DATA");
    if (o.warmup < 0) o.warmup = o.steps / 10;
    MPT_CHECK(o.warmup <= o.steps, "[train_gpt] --warmup {} exceeds --steps {}", o.warmup, o.steps);
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
