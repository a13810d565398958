// benchmarks/bench_train.cpp: full GPT-2 training steps (forward, backward, AdamW) in one precision on the CPU or a GPU: step time and its phases, tokens/s, peak memory; compare_pytorch.py runs PyTorch's twin beside it.
#include <mpt/core/memory_peak.h>
#include <mpt/mpt.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <nlohmann/json.hpp>
#include <vector>

#include "gpt_bench.h"
#include "mpt/core/kernel_trace.h"
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

// --profile: every profile::Range of one step (modules, phases, autograd nodes), the device synchronized at each
// boundary so that a range's time covers its kernels (--profile-host: not synchronized, the host's own time to queue
// the work). Exclusive time per name, layer indices folded ("h.*.mlp").
class RangeTimer {
 public:
  RangeTimer(mpt::Device device, bool synchronize) : device_(device), synchronize_(synchronize) {
    mpt::profile::set_range_observer([this](std::string_view name, bool push) { on_range(name, push); });
  }
  ~RangeTimer() { mpt::profile::set_range_observer(nullptr); }
  RangeTimer(const RangeTimer&) = delete;
  RangeTimer& operator=(const RangeTimer&) = delete;

  struct Total {
    double exclusive_s = 0, inclusive_s = 0;
    int64_t count = 0;
  };
  // Names by exclusive time, largest first.
  std::vector<std::pair<std::string, Total>> sorted() const {
    std::vector<std::pair<std::string, Total>> v(totals_.begin(), totals_.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second.exclusive_s > b.second.exclusive_s; });
    return v;
  }

 private:
  void on_range(std::string_view name, bool push) noexcept {
    try {
      if (synchronize_) sync(device_);
      const auto now = Clock::now();
      if (push) {
        open_.push_back({mpt::bench::fold_layer_indices(name), now, 0});
        return;
      }
      if (open_.empty()) return;
      const Open o = open_.back();
      open_.pop_back();
      const double inclusive = std::chrono::duration<double>(now - o.start).count();
      Total& t = totals_[o.name];
      t.inclusive_s += inclusive, t.exclusive_s += inclusive - o.children_s, ++t.count;
      if (!open_.empty()) open_.back().children_s += inclusive;
    } catch (...) {  // an observer must not throw; a failed sync shows in the step itself
    }
  }
  struct Open {
    std::string name;
    Clock::time_point start;
    double children_s;
  };
  mpt::Device device_;
  bool synchronize_;
  std::vector<Open> open_;
  std::map<std::string, Total> totals_;
};

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
  int profile_rows = 0, kernel_rows = 0;
  bool profile_host = false, dispatch = false, cuda_graph = false;
  std::string model_name = "gpt";
  int64_t kv_heads = 0, ffn = 0;
  app.add_option("--model", model_name, "gpt (GPT-2) or llama (RMSNorm, rotary, GQA, SwiGLU; untied head)")
      ->check(CLI::IsMember({"gpt", "llama"}));
  app.add_option("--kv-heads", kv_heads, "llama: key/value heads (default --heads)");
  app.add_option("--ffn", ffn, "llama: SwiGLU width (default 8/3 --embd rounded up to 32: a GPT block's FLOPs)");
  std::string precision = "bf16", json_path, device_name = "cpu";
  mpt::bench::add_gpt_shape_options(app, config);
  app.add_option("--batch", batch, "sequences per step");
  app.add_option("--warmup", warmup, "untimed steps first (primitive caches, pools, page faults)");
  app.add_option("--steps", steps, "timed steps (medians are reported)");
  app.add_option("--precision", precision, "fp32, bf16, fp16, fp8-delayed, fp8-current or fp8-block");
  mpt::bench::Fp8RuleOptions fp8_rule_options;
  fp8_rule_options.add(app);
  mpt::bench::DtypeOptions dtypes;
  dtypes.add(app);
  std::string qat;
  app.add_option("--qat", qat, "quantization-aware training of every Linear but the head: int8, int4 (group 32), fp8 "
                 "(the fake quantization's cost against the same --precision without it)");
  std::string moments = "f32";
  mpt::bench::add_moments_option(app, moments);
  app.add_option("--device", device_name, "cpu, cuda or cuda:N (phases are timed with the device synchronized)");
  app.add_option("--profile", profile_rows,
                 "after the timed steps, one step with every range timed (device synchronized at each): the N "
                 "largest by exclusive time");
  app.add_flag("--cuda-graph", cuda_graph,
               "also time the Trainer's step as a CUDA graph (TrainerOptions::cuda_graph: three warm-up steps, the "
               "capture, then replays)");
  app.add_flag("--dispatch", dispatch,
               "first, the host's cost per call of a device allocation, a small elementwise op and a small matmul");
  app.add_option("--kernel-times", kernel_rows,
                 "cuda: after the timed steps, one step traced with CUPTI (profile::KernelTrace): the device's own "
                 "time per kernel, copy and memset, the N largest");
  app.add_flag("--profile-host", profile_host,
               "--profile without synchronizing: each range's host time to queue its work (launch overhead)");
  app.add_option("--json", json_path, "write the result as JSON to this file ('-': stdout, instead of the table)");
  CLI11_PARSE(app, argc, argv);

  try {
    const mpt::Device device = mpt::Device::parse(device_name);
    mpt::check_device_available(device);
    config.where.device = device;
    const int64_t rss_before = rss_now();
    if (dispatch && device.is_cuda()) {
      // Host microseconds per call, the device left to run behind (medians of 5 rounds of 2000 calls).
      auto per_call_us = [&](auto&& call) {
        std::vector<double> rounds;
        for (int r = 0; r < 5; ++r) {
          sync(device);
          const auto t0 = Clock::now();
          for (int i = 0; i < 2000; ++i) call();
          rounds.push_back(seconds_since(t0) / 2000 * 1e6);
          sync(device);
        }
        return median(rounds);
      };
      const mpt::Tensor a = mpt::Tensor::ones({1024}, mpt::DType::F32, device);
      const mpt::Tensor m = mpt::Tensor::ones({64, 64}, mpt::DType::BF16, device);
      std::printf("host per call: empty(1 MiB) %.2f us, add(1024 f32) %.2f us, matmul(64x64x64 bf16) %.2f us\n",
                  per_call_us([&] { (void)mpt::Tensor::empty({1 << 18}, mpt::DType::F32, device); }),
                  per_call_us([&] { (void)mpt::ops::add(a, a); }),
                  per_call_us([&] { (void)mpt::ops::matmul(m, m); }));
    }
    const std::unique_ptr<mpt::nn::LanguageModel> model_ptr =
        mpt::bench::make_model(model_name, config, kv_heads, ffn);
    mpt::nn::LanguageModel& model = *model_ptr;
    // The step is the Trainer's, as in train_gpt: autocast, the FP16 loss scaler, clipping, AdamW, FP8 updates.
    const char* blocks = model_name == "llama" ? "model.layers" : "h";
    mpt::train::Trainer trainer(
        model, mpt::train::adamw({.lr = 3e-4, .betas = {0.9, 0.95}, .moments = mpt::bench::moment_storage(moments)}),
        {.policy = [&] {
           mpt::amp::Policy p = mpt::amp::Policy::named(precision, config.n_layer, device, blocks);
           fp8_rule_options.apply(p, batch * config.block_size);
           dtypes.apply(p);
           if (!qat.empty()) {
             p.qat = std::make_shared<const mpt::amp::QatPolicy>(
                 mpt::amp::QatPolicy::linears_but_head(mpt::amp::QatScheme::named(qat)));
           }
           return p;
         }(),
         .precision_name = dtypes.label(precision), .clip = 1.0, .weight_decay = 0.1});
    const auto [x_cpu, y_cpu] = mpt::bench::random_tokens(config, batch);
    const mpt::Tensor x = x_cpu.to(device), y = y_cpu.to(device);

    // One training step; `phases` synchronizes the device after forward and backward (for their times).
    auto train_step = [&](bool phases, Clock::time_point* t1, Clock::time_point* t2) {
      const auto t0 = Clock::now();
      trainer.set_synchronize_phases(phases);
      const mpt::train::StepMetrics m = trainer.step([&](int64_t) {
        mpt::Tensor l = model.loss(x, y);
        if (phases) sync(device), *t1 = Clock::now();
        return l;
      });
      if (phases) {
        *t2 = t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(m.backward_done_seconds));
      }
      return m.loss;
    };
    std::vector<double> fwd, bwd, optim, total;
    double loss = 0;
    for (int s = 0; s < warmup + steps; ++s) {
      if (s == warmup) mpt::reset_peak_memory_stats(device);
      sync(device);
      const auto t0 = Clock::now();
      Clock::time_point t1, t2;
      loss = train_step(true, &t1, &t2).item<double>();
      if (s < warmup) continue;
      fwd.push_back(std::chrono::duration<double>(t1 - t0).count());
      bwd.push_back(std::chrono::duration<double>(t2 - t1).count());
      optim.push_back(seconds_since(t2));
      total.push_back(seconds_since(t0));
    }
    // Free-running: the steps back to back with no synchronization between them (the host may run ahead of the
    // device), then one. `host` is when the host had queued them all: near `free` means the host is the bottleneck.
    double free_s = 0, host_s = 0;
    if (device.is_cuda() && steps > 0) {
      sync(device);
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) train_step(false, nullptr, nullptr);
      host_s = seconds_since(t0) / steps;
      sync(device);
      free_s = seconds_since(t0) / steps;
    }
    // The host's own cost of queueing one step: each starts on an idle device (synchronised first), so nothing the
    // device has not yet run throttles the host. Back to back (`host_s` above) the host waits once it is a few steps
    // ahead (the launch queue fills; a graph's replay slots run out), so that figure tends to the device's step.
    const auto queue_cost = [&](const std::function<void()>& one_step) {
      std::vector<double> q;
      for (int s = 0; s < steps; ++s) {
        sync(device);
        const auto t0 = Clock::now();
        one_step();
        q.push_back(seconds_since(t0));
      }
      sync(device);
      return median(q);
    };
    const double host_queue_s =
        device.is_cuda() && steps > 0 ? queue_cost([&] { train_step(false, nullptr, nullptr); }) : 0.0;
    // The same step as the Trainer's CUDA graph (TrainerOptions::cuda_graph), replayed back to back: each step copies
    // the inputs into the graph's static buffers, replays, and copies the loss, norm and skip verdict out.
    double graph_s = 0, graph_host_s = 0, graph_queue_s = 0;
    std::string graph_off;
    if (cuda_graph && device.is_cuda() && steps > 0) {
      trainer.set_cuda_graph(true);
      const std::vector<mpt::train::Batch> inputs{{x, y}};
      const mpt::train::BatchLoss batch_loss = [&](int64_t, const mpt::train::Batch& in) {
        return model.loss(in[0], in[1]);
      };
      mpt::Tensor graph_loss;
      for (int s = 0; s < 4; ++s) graph_loss = trainer.step(inputs, batch_loss).loss;  // warm-ups, capture
      graph_off = trainer.graph_status().off;
      sync(device);
      const auto t0 = Clock::now();
      for (int s = 0; s < steps; ++s) graph_loss = trainer.step(inputs, batch_loss).loss;
      graph_host_s = seconds_since(t0) / steps;
      sync(device);
      graph_s = seconds_since(t0) / steps;
      graph_queue_s = queue_cost([&] { graph_loss = trainer.step(inputs, batch_loss).loss; });
      loss = graph_loss.item<double>();
      trainer.set_cuda_graph(false);
    }
    nlohmann::json profile = nlohmann::json::array();
    if (profile_rows > 0) {
      std::vector<std::pair<std::string, RangeTimer::Total>> rows;
      {
        RangeTimer timer(device, !profile_host);
        mpt::profile::set_nvtx(true);
        sync(device);
        train_step(false, nullptr, nullptr);
        mpt::profile::set_nvtx(false);
        rows = timer.sorted();
      }
      for (const auto& [name, t] : rows)
        profile.push_back({{"range", name}, {"count", t.count}, {"exclusive_s", t.exclusive_s},
                           {"inclusive_s", t.inclusive_s}});
      if (json_path != "-") {
        std::printf("%-36s %6s %12s %12s\n", profile_host ? "range (one step, host time)" : "range (one step, synchronized)",
                    "count", "exclusive ms", "inclusive ms");
        for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(profile_rows); ++i)
          std::printf("%-36s %6lld %12.3f %12.3f\n", rows[i].first.c_str(), static_cast<long long>(rows[i].second.count),
                      rows[i].second.exclusive_s * 1e3, rows[i].second.inclusive_s * 1e3);
      }
    }
    nlohmann::json kernel_times = nlohmann::json::array();
    const std::string trace_off = kernel_rows > 0 ? mpt::profile::kernel_trace_unavailable_reason() : std::string();
    if (!trace_off.empty()) std::printf("kernel times: not traced: %s\n", trace_off.c_str());  // the rest still runs
    if (kernel_rows > 0 && trace_off.empty()) {
      MPT_CHECK(device.is_cuda(), "--kernel-times traces a CUDA device's kernels: give --device cuda");
      std::vector<mpt::profile::KernelTime> rows;
      const auto t0 = Clock::now();
      {
        mpt::profile::KernelTrace trace;
        train_step(false, nullptr, nullptr);
        rows = trace.stop();
      }
      const double wall_ms = seconds_since(t0) * 1e3;
      double busy_ms = 0;
      for (const auto& r : rows) busy_ms += r.total_ms;
      for (const auto& r : rows)
        kernel_times.push_back({{"name", r.name}, {"kind", r.kind}, {"calls", r.calls}, {"total_ms", r.total_ms},
                                {"max_ms", r.max_ms}, {"bytes", r.bytes}});
      if (json_path != "-") {
        std::printf("device time of one traced step: %.2f ms in %zu kernels/copies (the step took %.2f ms, traced)\n",
                    busy_ms, rows.size(), wall_ms);
        std::printf("%-96s %6s %9s %6s %9s\n", "kernel, copy or memset", "calls", "total ms", "share", "mean us");
        for (size_t i = 0; i < rows.size() && i < static_cast<size_t>(kernel_rows); ++i)
          std::printf("%-96s %6llu %9.3f %5.1f%% %9.1f\n", rows[i].name.c_str(),
                      static_cast<unsigned long long>(rows[i].calls), rows[i].total_ms,
                      busy_ms > 0 ? 100 * rows[i].total_ms / busy_ms : 0.0,
                      1e3 * rows[i].total_ms / static_cast<double>(rows[i].calls));
      }
    }
    const std::string fp8_rule = mpt::amp::fp8_rule_report(trainer.policy().fp8_rule);  // judged on a GPU only
    if (!fp8_rule.empty() && json_path != "-") std::printf("%s\n", fp8_rule.c_str());
    const double tokens = static_cast<double>(batch * config.block_size);
    const mpt::MemoryStats mem = mpt::memory_stats(device);
    nlohmann::json j{{"framework", "mptrain"},
                     {"version", mpt::version()},
                     {"precision", dtypes.label(precision)}, {"qat", qat}, {"moments", moments},
                     {"fp8_rule", fp8_rule},
                     {"device", device.str()},
                     {"device_name", device.is_cuda() ? mpt::cuda_status().devices.at(device.index()).name : "cpu"},
                     {"threads", mpt::cpu_features().omp_threads},
                     {"model", model.describe()},
                     {"params", model.num_parameters()},
                     {"flops_per_token", model.flops_per_token(config.block_size)},
                     {"tokens_per_step", tokens},
                     {"step_s", median(total)},
                     {"forward_s", median(fwd)},
                     {"backward_s", median(bwd)},
                     {"optimizer_s", median(optim)},
                     {"tokens_per_s", tokens / median(total)},
                     {"free_running_step_s", free_s},
                     {"host_enqueue_step_s", host_s},
                     {"host_queue_one_step_s", host_queue_s},
                     {"cuda_graph_host_queue_one_step_s", graph_queue_s},
                     {"cuda_graph_step_s", graph_s},
                     {"cuda_graph_host_step_s", graph_host_s},
                     {"cuda_graph_off", graph_off},
                     {"final_loss", loss},
                     {"rss_peak_bytes", rss_peak()},
                     {"rss_growth_bytes", rss_peak() - rss_before},
                     {"allocator_peak_bytes", mem.peak_bytes},
                     {"allocator_reserved_bytes", mem.reserved_bytes},
                     {"allocator_reserved_peak_bytes", mpt::reserved_peak_bytes(device)}};
    if (profile_rows > 0) j["profile"] = profile;
    if (kernel_rows > 0) j["kernel_times"] = kernel_times;
    if (!trace_off.empty()) j["kernel_times_off"] = trace_off;
    if (json_path == "-") {
      std::printf("%s\n", j.dump().c_str());
    } else {
      std::printf("%s, T=%lld, batch %lld, %.2f MFLOP/token, %s (moments %s) on %s: %.0f tok/s (step %.1f ms: forward "
                  "%.1f, backward %.1f, optimizer %.1f); peak RSS %.0f MiB, allocator peak %.0f MiB (reserved "
                  "%.0f MiB)\n",
                  model.describe().c_str(), static_cast<long long>(config.block_size), static_cast<long long>(batch),
                  model.flops_per_token(config.block_size) / 1e6,
                  (dtypes.label(precision) + (qat.empty() ? "" : " + QAT " + qat)).c_str(), moments.c_str(),
                  device.str().c_str(),
                  tokens / median(total), median(total) * 1e3,
                  median(fwd) * 1e3, median(bwd) * 1e3, median(optim) * 1e3, rss_peak() / 1048576.0,
                  mem.peak_bytes / 1048576.0, mpt::reserved_peak_bytes(device) / 1048576.0);
      if (free_s > 0)
        std::printf("free-running (no synchronization between steps): %.1f ms per step, the host done queueing after "
                    "%.1f ms; one step queued on an idle device: %.2f ms of host time\n", free_s * 1e3, host_s * 1e3,
                    host_queue_s * 1e3);
      if (graph_s > 0 && graph_off.empty())
        std::printf("CUDA graph replays: %.1f ms per step (%.0f tok/s), the host done launching after %.3f ms; one "
                    "replay on an idle device: %.3f ms of host time\n",
                    graph_s * 1e3, tokens / graph_s, graph_host_s * 1e3, graph_queue_s * 1e3);
      if (!graph_off.empty()) std::printf("CUDA graph: off (%s); the steps ran eagerly\n", graph_off.c_str());
      if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  return 0;
}
