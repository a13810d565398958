// benchmarks/bench_train.cpp: full GPT-2 training steps (forward, backward, AdamW) in one precision on the CPU or a GPU: step time and its phases, tokens/s, peak memory; compare_pytorch.py runs PyTorch's twin beside it.
#include <mpt/mpt.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "gpt_bench.h"
#include "mpt/nn/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// Resident set size now (/proc/self/statm) and at its peak (VmHWM of /proc/self/status: this process image's own
// high-water mark; getrusage's ru_maxrss would carry over the RSS of the process that forked and exec'ed us), bytes.
int64_t rss_now() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<int64_t>(sysconf(_SC_PAGESIZE));
}
int64_t rss_peak() {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6)) * 1024;  // "VmHWM:   123456 kB"
  return 0;
}

// Waits for the device's queued work, so that a phase's wall time covers its kernels (the CPU is synchronous).
void sync(mpt::Device device) {
  if (device.is_cuda()) mpt::Stream::current(device).synchronize();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_train: GPT-2 training steps (forward, backward, clip, AdamW) in one precision, with phase times "
               "and peak memory (one JSON object on stdout with --json -)"};
  mpt::nn::GPTConfig config;
  config.vocab_size = 65;
  config.block_size = 256;
  config.n_layer = 6;
  config.n_head = 6;
  config.n_embd = 384;
  int64_t batch = 16;
  int warmup = 2, steps = 5;
  std::string precision = "bf16", json_path, device_name = "cpu";
  mpt::bench::add_gpt_shape_options(app, config);
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--warmup", warmup, "untimed steps first (primitive caches, pools, page faults)");
  app.add_option("--steps", steps, "timed steps (medians are reported)");
  app.add_option("--precision", precision, "fp32, bf16, fp16, fp8-delayed, fp8-current or fp8-block");
  app.add_option("--device", device_name, "cpu, cuda or cuda:N (phases are timed with the device synchronized)");
  app.add_option("--json", json_path, "write the result as JSON to this file ('-': stdout, instead of the table)");
  CLI11_PARSE(app, argc, argv);

  try {
    const mpt::Device device = mpt::Device::parse(device_name);
    mpt::check_device_available(device);
    config.where.device = device;
    const int64_t rss_before = rss_now();
    mpt::nn::GPT model(config);
    const mpt::amp::Policy policy = mpt::amp::Policy::named(precision, config.n_layer, device);
    mpt::amp::GradScaler scaler(mpt::amp::GradScalerOptions{.enabled = precision == "fp16"}, device);
    mpt::optim::AdamW opt(mpt::optim::weight_decay_groups(model.named_parameters(), 0.1),
                          {.lr = 3e-4, .betas = {0.9, 0.95}});
    std::vector<mpt::Tensor> params;
    for (const auto& p : model.named_parameters()) params.push_back(p.tensor);
    const auto [x_cpu, y_cpu] = mpt::bench::random_tokens(config, batch);
    const mpt::Tensor x = x_cpu.to(device), y = y_cpu.to(device);

    std::vector<double> fwd, bwd, optim, total;
    double loss = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup) mpt::reset_peak_memory_stats(device);
      sync(device);
      const auto t0 = Clock::now();
      mpt::Tensor l;
      {
        mpt::amp::Autocast autocast(policy);
        l = model.loss(x, y);
      }
      sync(device);
      const auto t1 = Clock::now();
      scaler.scale(l).backward();
      sync(device);
      const auto t2 = Clock::now();
      scaler.unscale_(opt);
      mpt::optim::clip_grad_norm_(params, 1.0);
      scaler.step(opt);
      scaler.update();
      if (policy.fp8_state) policy.fp8_state->update();
      opt.zero_grad();
      loss = l.item<double>();
      if (s < warmup) continue;
      fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      optim.push_back(seconds_since(t2));
      total.push_back(seconds_since(t0));
    }
    const double tokens = static_cast<double>(batch * config.block_size);
    const mpt::MemoryStats mem = mpt::memory_stats(device);
    nlohmann::json j{{"framework", "mptrain"},
                     {"version", mpt::version()},
                     {"precision", precision},
                     {"device", device.str()},
                     {"device_name", device.is_cuda() ? mpt::cuda_status().devices.at(device.index()).name : "cpu"},
                     {"threads", mpt::cpu_features().omp_threads},
                     {"params", model.num_parameters()},
                     {"tokens_per_step", tokens},
                     {"step_s", median(total)},
                     {"forward_s", median(fwd)},
                     {"backward_s", median(bwd)},
                     {"optimizer_s", median(optim)},
                     {"tokens_per_s", tokens / median(total)},
                     {"final_loss", loss},
                     {"rss_peak_bytes", rss_peak()},
                     {"rss_growth_bytes", rss_peak() - rss_before},
                     {"allocator_peak_bytes", mem.peak_bytes},
                     {"allocator_reserved_bytes", mem.reserved_bytes}};
    if (json_path == "-") {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("GPT-2 %lld layers, %lld heads, %lld wide, T=%lld, batch %lld, %s on %s: %.0f tok/s (step %.1f ms: forward "
                  "%.1f, backward %.1f, optimizer %.1f); peak RSS %.0f MiB, allocator peak %.0f MiB\n",
                  static_cast<long long>(config.n_layer), static_cast<long long>(config.n_head),
                  static_cast<long long>(config.n_embd), static_cast<long long>(config.block_size),
                  static_cast<long long>(batch), precision.c_str(), device.str().c_str(), tokens / median(total), median(total) * 1e3,
                  median(fwd) * 1e3, median(bwd) * 1e3, median(optim) * 1e3, rss_peak() / 1048576.0,
                  mem.peak_bytes / 1048576.0);
      if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
