// benchmarks/bench_gpt.cpp: GPT-2 forward+backward on the CPU: step time, tokens/s and peak memory, with and without activation checkpointing.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "bench_util.h"
#include "gpt_bench.h"
#include "mpt/nn/gpt.h"

namespace {

struct Result {
  double seconds = 0;
  int64_t peak_bytes = 0;     // allocator peak during one forward + backward, above what was live before it
  int64_t weights_bytes = 0;  // parameters + gradients (live before and after)
};

Result measure(const mpt::nn::GPTConfig& config, int64_t batch, int reps, bool checkpoint) {
  mpt::nn::GPT model(config);
  model.set_activation_checkpointing(checkpoint);
  const auto [x, y] = mpt::bench::random_tokens(config, batch);
  auto step = [&] {
    model.loss(x, y).backward();
  };
  step();  // gradients allocated: what stays live across steps
  Result r;
  const int64_t before = mpt::memory_stats(mpt::Device::cpu()).current_bytes;
  mpt::reset_peak_memory_stats(mpt::Device::cpu());
  step();
  r.peak_bytes = mpt::memory_stats(mpt::Device::cpu()).peak_bytes - before;
  r.weights_bytes = before;
  r.seconds = mpt::bench::median_seconds(reps, step);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_gpt: GPT-2 forward+backward on the CPU, plain and with every block checkpointed"};
  mpt::nn::GPTConfig config;
  config.vocab_size = 65;
  config.block_size = 256;
  config.n_layer = 12;
  config.n_head = 6;
  config.n_embd = 384;
  int64_t batch = 4;
  int reps = 3;
  std::string json_path;
  mpt::bench::add_gpt_shape_options(app, config);
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--reps", reps, "timed repetitions (median)");
  app.add_option("--json", json_path, "also write the results to this JSON file");
  CLI11_PARSE(app, argc, argv);
  try {
    const double tokens = static_cast<double>(batch * config.block_size);
    std::printf("GPT-2 %lld layers, %lld heads, %lld wide, T=%lld, B=%lld, vocab %lld, f32 on the CPU\n",
                static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
                static_cast<long long>(config.n_embd), static_cast<long long>(config.block_size),
                static_cast<long long>(batch), static_cast<long long>(config.vocab_size));
    std::printf("%-14s %12s %12s %16s %18s\n", "run", "step (ms)", "tokens/s", "peak (MiB)", "weights+grads (MiB)");
    nlohmann::json out;
    for (bool ckpt : {false, true}) {
      const Result r = measure(config, batch, reps, ckpt);
      const char* name = ckpt ? "checkpointed" : "plain";
      std::printf("%-14s %12.1f %12.0f %16.1f %18.1f\n", name, r.seconds * 1e3, tokens / r.seconds,
                  static_cast<double>(r.peak_bytes) / (1 << 20), static_cast<double>(r.weights_bytes) / (1 << 20));
      out[name] = {{"step_ms", r.seconds * 1e3}, {"tokens_per_s", tokens / r.seconds},
                   {"peak_bytes_above_weights", r.peak_bytes}, {"weights_and_grads_bytes", r.weights_bytes}};
    }
    out["config"] = {{"n_layer", config.n_layer}, {"n_head", config.n_head}, {"n_embd", config.n_embd},
                     {"T", config.block_size}, {"B", batch}, {"vocab", config.vocab_size}};
    std::printf("%s\n", out.dump().c_str());
    if (!json_path.empty()) {
      std::FILE* f = std::fopen(json_path.c_str(), "w");
      MPT_CHECK(f != nullptr, "[bench_gpt] cannot write {}", json_path);
      std::fprintf(f, "%s\n", out.dump(2).c_str());
      std::fclose(f);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
