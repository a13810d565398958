// benchmarks/bench_step_cost.cpp: both halves of a GPU training step measured without a GPU: the host's time to issue a full-size GPT-2 step on the emulated device in record-only mode, and the device work it issued (launches, kernel bytes, GEMM FLOPs, copies, allocations), eager and CUDA-graph replayed.
// Built only by the emulation build (preset emu): the device is tests/support/cuda_emu's, told to record work
// without doing it (cuda_emu/device_work.h), so a 124M-parameter step costs the host what issuing it costs.
#include <mpt/core/memory_peak.h>
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cuda_emu/counters.h"
#include "cuda_emu/cudnn.h"
#include "cuda_emu/device_work.h"
#include "gpt_bench.h"
#include "mpt/nn/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace emu = mpt::cuda_emu;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

// One step's cost: host seconds and what it issued.
struct Cost {
  double host_s = 0;
  emu::Counters c{};
};

nlohmann::json to_json(const Cost& cost) {
  const emu::Counters& c = cost.c;
  return {{"host_s", cost.host_s},
          {"kernel_launches", c.kernel_launches},
          {"kernel_launches_unsized", c.kernel_launches_unsized},
          {"kernel_bytes_read", c.kernel_bytes_read},
          {"kernel_bytes_written", c.kernel_bytes_written},
          {"matmuls", c.matmuls},
          {"matmul_flops", c.matmul_flops},
          {"matmul_bytes", c.matmul_bytes},
          {"memsets", c.memsets},
          {"d2d", c.d2d},
          {"d2d_bytes", c.d2d_bytes},
          {"h2d", c.h2d},
          {"d2h", c.d2h},
          {"syncs", c.syncs},
          {"pool_allocs", c.pool_allocs},
          {"driver_allocations", c.mallocs + c.frees + c.host_mallocs + c.host_frees},
          {"graph_launches", c.graph_launches},
          {"counters", emu::to_string(c)}};
}

// --profile: what each profile range of one step issued, exclusive of its child ranges (layer indices folded):
// host time, launches, kernel bytes, GEMM FLOPs. Counters are process-wide, so the step must be the only work.
class RangeCosts {
 public:
  struct Row {
    double host_s = 0;
    int64_t count = 0;
    emu::Counters c{};
  };
  RangeCosts() {
    mpt::profile::set_range_observer([this](std::string_view name, bool push) { on_range(name, push); });
    mpt::profile::set_nvtx(true);
  }
  ~RangeCosts() {
    mpt::profile::set_nvtx(false);
    mpt::profile::set_range_observer(nullptr);
  }
  RangeCosts(const RangeCosts&) = delete;
  RangeCosts& operator=(const RangeCosts&) = delete;
  const std::map<std::string, Row>& rows() const { return rows_; }

 private:
  struct Open {
    std::string name;
    Clock::time_point start;
    emu::Counters at;
    double child_s = 0;
    emu::Counters child{};
  };
  static void add(emu::Counters& into, const emu::Counters& a, const emu::Counters& b, int sign) {
    // Only the fields the table shows.
    into.kernel_launches += sign * (a.kernel_launches - b.kernel_launches);
    into.kernel_bytes_read += sign * (a.kernel_bytes_read - b.kernel_bytes_read);
    into.kernel_bytes_written += sign * (a.kernel_bytes_written - b.kernel_bytes_written);
    into.matmuls += sign * (a.matmuls - b.matmuls);
    into.matmul_flops += sign * (a.matmul_flops - b.matmul_flops);
    into.matmul_bytes += sign * (a.matmul_bytes - b.matmul_bytes);
    into.memsets += sign * (a.memsets - b.memsets);
    into.d2d_bytes += sign * (a.d2d_bytes - b.d2d_bytes);
    into.pool_allocs += sign * (a.pool_allocs - b.pool_allocs);
  }
  void on_range(std::string_view name, bool push) noexcept {
    try {
      const auto now = Clock::now();
      const emu::Counters c = emu::counters();
      if (push) {
        open_.push_back({mpt::bench::fold_layer_indices(name), now, c});
        return;
      }
      if (open_.empty()) return;
      Open o = std::move(open_.back());
      open_.pop_back();
      const double inclusive = std::chrono::duration<double>(now - o.start).count();
      Row& r = rows_[o.name];
      r.host_s += inclusive - o.child_s, ++r.count;
      emu::Counters incl{};
      add(incl, c, o.at, 1);
      add(r.c, incl, emu::Counters{}, 1);
      add(r.c, o.child, emu::Counters{}, -1);
      if (!open_.empty()) {
        open_.back().child_s += inclusive;
        add(open_.back().child, incl, emu::Counters{}, 1);
      }
    } catch (...) {  // an observer must not throw
    }
  }
  std::vector<Open> open_;
  std::map<std::string, Row> rows_;
};

// Device operations a real driver would be asked for (each costs the host a launch-sized call).
uint64_t operations(const emu::Counters& c) {
  return c.kernel_launches + c.matmuls + c.memsets + c.h2d + c.d2h + c.d2d + c.event_records + c.stream_waits +
         c.pool_allocs + c.pool_frees;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_step_cost: the host's time to issue one GPT-2 training step and the device work it issues, on "
               "the emulated GPU in record-only mode (no GPU needed; the results of the step are meaningless)"};
  mpt::nn::GPTConfig config;  // GPT-2 124M
  config.vocab_size = 50257;
  config.block_size = 1024;
  config.n_layer = 12;
  config.n_head = 12;
  config.n_embd = 768;
  int64_t batch = 8, kv_heads = 0, ffn = 0;
  int warmup = 2, steps = 3, profile_rows = 0, kernel_rows = 0;
  int64_t grad_accum = 1;
  bool cuda_graph = false;
  std::string model_name = "gpt", precision = "bf16", json_path;
  app.add_option("--model", model_name,
                 "gpt (GPT-2) or llama (RMSNorm, rotary, GQA, SwiGLU; vocabulary 32000 unless --vocab)")
      ->check(CLI::IsMember({"gpt", "llama"}));
  app.add_option("--kv-heads", kv_heads, "llama: key/value heads (default --heads)");
  app.add_option("--ffn", ffn, "llama: SwiGLU width (default: a GPT block's FLOPs)");
  mpt::bench::add_gpt_shape_options(app, config);
  app.add_option("--batch", batch, "sequences per micro-batch");
  app.add_option("--grad-accum", grad_accum, "micro-batches per optimizer step (TrainerOptions::grad_accum)")
      ->check(CLI::PositiveNumber);
  app.add_option("--precision", precision, "fp32, bf16, fp16, fp8-delayed, fp8-current or fp8-block");
  std::string moments = "f32";
  mpt::bench::add_moments_option(app, moments);
  mpt::bench::Fp8RuleOptions fp8_rule_options;
  fp8_rule_options.add(app);
  mpt::bench::DtypeOptions dtypes;
  dtypes.add(app);
  std::string dp = "off";
  app.add_option("--dp", dp, "data parallelism over the single-process communicator (its collectives are no-ops; "
                 "the gradient buckets, their compression and their host reads are real): off, none, bf16 or fp8")
      ->check(CLI::IsMember({"off", "none", "bf16", "fp8"}));
  app.add_option("--warmup", warmup, "untimed steps first (the allocator's pool, optimizer state, plan caches)");
  app.add_option("--steps", steps, "timed steps (medians; counters are the last step's)");
  app.add_flag("--cuda-graph", cuda_graph,
               "also run the Trainer's step as a CUDA graph (TrainerOptions::cuda_graph) and time a replayed step: "
               "the emulator's cost of the same device work plus what the Trainer does around a replay (inputs "
               "copied in, metrics copied out), so eager minus replay is about mptrain's host cost of an eager step");
  app.add_option("--profile", profile_rows,
                 "after the timed steps, one step broken down by profile range (exclusive of child ranges): the N "
                 "with the most kernel + GEMM bytes");
  app.add_option("--kernels", kernel_rows,
                 "after the timed steps, one step broken down by launching site (the launcher that made each "
                 "kernel's LaunchConfig): the N with the most kernel bytes");
  std::string attention = "cudnn";
  app.add_option("--attention", attention,
                 "cudnn: attention as a GPU with cuDNN 9.16+ runs it in BF16/FP16 (the emulated cuDNN: one launch per "
                 "forward or backward with its operands' bytes); gemm: the cuBLASLt fallback (B x H x T x T scores; "
                 "the only path of this benchmark before 2026-11-29)")
      ->check(CLI::IsMember({"cudnn", "gemm"}));
  app.add_option("--json", json_path, "write the result as JSON to this file ('-': stdout, instead of the table)");
  CLI11_PARSE(app, argc, argv);
  // Llama's vocabulary unless --vocab says otherwise (issue 31's Llama of GPT-2's width: 32000).
  if (model_name == "llama" && app.count("--vocab") == 0) config.vocab_size = 32000;
  emu::set_cudnn_sdpa(attention == "cudnn");

  // An H200's memory, unless the environment says otherwise; read at the first CUDA call.
  setenv("MPT_EMU_DEVICE_MEMORY_MB", "144384", 0);
  emu::set_record_only(true);
  try {
    const mpt::Device device = mpt::Device::cuda(0);
    mpt::check_device_available(device);
    // As on a GPU: the block cache serves a step's tensors (the emulation build's tests start with it off).
    mpt::set_cuda_memory_caching(true);
    config.where.device = device;
    const std::unique_ptr<mpt::nn::LanguageModel> model_ptr =
        mpt::bench::make_model(model_name, config, kv_heads, ffn);
    mpt::nn::LanguageModel& model = *model_ptr;
    const char* blocks = model_name == "llama" ? "model.layers" : "h";
    mpt::train::Trainer trainer(
        model, mpt::train::adamw({.lr = 3e-4, .betas = {0.9, 0.95}, .moments = mpt::bench::moment_storage(moments)}),
        {.policy = [&] {
           mpt::amp::Policy p = mpt::amp::Policy::named(precision, config.n_layer, device, blocks);
           fp8_rule_options.apply(p, batch * config.block_size);
           dtypes.apply(p);
           return p;
         }(),
         .precision_name = dtypes.label(precision), .grad_accum = grad_accum, .clip = 1.0, .weight_decay = 0.1,
         .comm = dp == "off" ? nullptr : mpt::dist::single_process(),
         .data_parallel = {.compression = dp == "fp8" ? mpt::train::GradCompression::FP8
                                          : dp == "bf16" ? mpt::train::GradCompression::BF16
                                                         : mpt::train::GradCompression::None}});
    const auto [x_cpu, y_cpu] = mpt::bench::random_tokens(config, batch);
    const mpt::Tensor x = x_cpu.to(device), y = y_cpu.to(device);
    mpt::Tensor loss;
    const std::function<void()> step = [&] {
      loss = trainer.step([&](int64_t) { return model.loss(x, y); }).loss;
    };

    auto measure = [&](const std::function<void()>& fn) {
      std::vector<double> times;
      Cost cost;
      for (int s = 0; s < steps; ++s) {
        emu::reset_counters();
        const auto t0 = Clock::now();
        fn();
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
        cost.c = emu::counters();
      }
      cost.host_s = median(times);
      return cost;
    };
    for (int s = 0; s < warmup; ++s) step();
    mpt::reset_peak_memory_stats(device);
    const Cost eager = measure(step);
    // The library's own allocator on the emulated device: what a GPU run of the same step holds at its peak (with
    // --attention gemm, the fallback's B x H x T x T probabilities too, which cuDNN never holds).
    const mpt::MemoryStats memory = mpt::memory_stats(device);
    const int64_t reserved_peak = mpt::reserved_peak_bytes(device);
    Cost graph;
    std::string graph_note;
    int64_t graph_reserved_peak = 0;  // the reserve's high-water mark over the eager steps, the capture and replays
    if (cuda_graph) {  // the Trainer's own graph step (TrainerOptions::cuda_graph): warm-ups, capture, replays
      trainer.set_cuda_graph(true);
      const std::vector<mpt::train::Batch> inputs(static_cast<size_t>(grad_accum), mpt::train::Batch{x, y});
      const std::function<void()> graph_step = [&] {
        loss = trainer.step(inputs, [&](int64_t, const mpt::train::Batch& in) { return model.loss(in[0], in[1]); })
                   .loss;
      };
      for (int s = 0; s < 4; ++s) graph_step();
      graph_note = trainer.graph_status().off;
      if (graph_note.empty()) graph = measure(graph_step);
      graph_reserved_peak = mpt::reserved_peak_bytes(device);
      trainer.set_cuda_graph(false);
    }

    std::vector<std::pair<std::string, RangeCosts::Row>> profile;
    if (profile_rows > 0) {
      RangeCosts costs;
      step();
      profile.assign(costs.rows().begin(), costs.rows().end());
      const auto bytes = [](const RangeCosts::Row& r) {
        return r.c.kernel_bytes_read + r.c.kernel_bytes_written + r.c.matmul_bytes + 2 * r.c.d2d_bytes;
      };
      std::sort(profile.begin(), profile.end(), [&](const auto& a, const auto& b) { return bytes(a.second) > bytes(b.second); });
    }

    std::vector<emu::KernelSite> sites;
    if (kernel_rows > 0) {
      emu::reset_counters();
      emu::set_kernel_sites(true);
      step();
      emu::set_kernel_sites(false);
      sites = emu::kernel_sites();
    }

    const double flops_per_token = model.flops_per_token(config.block_size);
    const double tokens = static_cast<double>(grad_accum * batch * config.block_size);
    const emu::Counters& c = eager.c;
    const double kernel_bytes = static_cast<double>(c.kernel_bytes_read + c.kernel_bytes_written);
    nlohmann::json j{{"framework", "mptrain"},
                     {"version", mpt::version()},
                     {"device", "cuda_emu (record-only)"},
                     {"model", model.describe()},
                     {"params", model.num_parameters()},
                     {"precision", dtypes.label(precision)}, {"moments", moments}, {"attention", attention},
                     {"batch", batch}, {"grad_accum", grad_accum},
                     {"seq", config.block_size},
                     {"tokens_per_step", tokens},
                     {"model_flops_per_step", flops_per_token * tokens},
                     {"operations_per_step", operations(c)},
                     {"allocator_peak_bytes", memory.peak_bytes},
                     {"eager", to_json(eager)},
                     {"fp8_rule", mpt::amp::fp8_rule_report(trainer.policy().fp8_rule)}};
    for (const emu::KernelSite& k : sites) {
      j["kernels"].push_back({{"site", k.name}, {"launches", k.launches}, {"bytes_read", k.bytes_read},
                              {"bytes_written", k.bytes_written}, {"min_blocks", k.min_blocks},
                              {"min_threads", k.min_threads}, {"few_block_max_bytes", k.few_block_max_bytes},
                              {"few_block_launches", k.few_block_launches}, {"few_block_bytes", k.few_block_bytes}});
    }
    for (const auto& [name, r] : profile) {
      j["profile"].push_back({{"range", name}, {"count", r.count}, {"host_s", r.host_s},
                              {"kernel_launches", r.c.kernel_launches}, {"kernel_bytes_read", r.c.kernel_bytes_read},
                              {"kernel_bytes_written", r.c.kernel_bytes_written}, {"matmuls", r.c.matmuls},
                              {"matmul_flops", r.c.matmul_flops}, {"matmul_bytes", r.c.matmul_bytes},
                              {"memsets", r.c.memsets}, {"d2d_bytes", r.c.d2d_bytes}});
    }
    if (cuda_graph) {
      j["graph"] = graph_note.empty() ? to_json(graph) : nlohmann::json{{"refused", graph_note}};
      j["graph_reserved_peak_bytes"] = graph_reserved_peak;
    }
    if (json_path == "-") {
      std::printf("%s\n", j.dump().c_str());
      return 0;
    }
    std::printf("%s, batch %lld x %lld%s, %s, AdamW moments %s, attention %s, emulated device in record-only mode\n",
                model.describe().c_str(), static_cast<long long>(batch), static_cast<long long>(config.block_size),
                grad_accum > 1 ? fmt::format(" x {} micro-batches", grad_accum).c_str() : "",
                dtypes.label(precision).c_str(), moments.c_str(), attention.c_str());
    if (const std::string r = mpt::amp::fp8_rule_report(trainer.policy().fp8_rule); !r.empty())
      std::printf("%s\n", r.c_str());
    std::printf("host per step (eager): %.2f ms for %llu device operations (%.2f us each)\n", eager.host_s * 1e3,
                static_cast<unsigned long long>(operations(c)), eager.host_s * 1e6 / std::max<double>(1, operations(c)));
    if (cuda_graph && graph_note.empty()) {
      std::printf("host per step (the Trainer's graph replay: the emulator, the input and metric copies): %.2f ms; "
                  "mptrain's own host cost of an eager step: about %.2f ms\n",
                  graph.host_s * 1e3, (eager.host_s - graph.host_s) * 1e3);
      std::printf("reserve's high-water mark with the graph (its warm-ups, capture and replays after the eager steps): "
                  "%.1f MiB\n", graph_reserved_peak / 1048576.0);
    } else if (cuda_graph) {
      std::printf("CUDA graph: refused: %s\n", graph_note.c_str());
    }
    std::printf("device work per step: %llu kernel launches (%llu unsized), kernel bytes %.3f GB (read %.3f, written "
                "%.3f); %llu GEMMs, %.1f GFLOP (model: %.1f), GEMM bytes %.3f GB; %llu memsets, %llu d2d copies "
                "(%.3f GB); %llu h2d, %llu d2h, %llu syncs, %llu pool allocations\n",
                static_cast<unsigned long long>(c.kernel_launches),
                static_cast<unsigned long long>(c.kernel_launches_unsized), kernel_bytes / 1e9,
                c.kernel_bytes_read / 1e9, c.kernel_bytes_written / 1e9, static_cast<unsigned long long>(c.matmuls),
                c.matmul_flops / 1e9, flops_per_token * tokens / 1e9, c.matmul_bytes / 1e9,
                static_cast<unsigned long long>(c.memsets), static_cast<unsigned long long>(c.d2d), c.d2d_bytes / 1e9,
                static_cast<unsigned long long>(c.h2d), static_cast<unsigned long long>(c.d2h),
                static_cast<unsigned long long>(c.syncs), static_cast<unsigned long long>(c.pool_allocs));
    std::printf("allocator peak over the timed steps: %.1f MiB (reserve's high-water mark %.1f MiB)\n",
                memory.peak_bytes / 1048576.0, reserved_peak / 1048576.0);
    if (!profile.empty()) {
      std::printf("\n%-34s %5s %9s %8s %10s %10s %7s %9s %10s\n", "range (one step, exclusive)", "count", "host ms",
                  "kernels", "kernel MB", "GEMM MB", "GEMMs", "GFLOP", "d2d MB");
      for (size_t i = 0; i < profile.size() && i < static_cast<size_t>(profile_rows); ++i) {
        const auto& [name, r] = profile[i];
        std::printf("%-34s %5lld %9.3f %8llu %10.1f %10.1f %7llu %9.1f %10.1f\n", name.c_str(),
                    static_cast<long long>(r.count), r.host_s * 1e3, static_cast<unsigned long long>(r.c.kernel_launches),
                    (r.c.kernel_bytes_read + r.c.kernel_bytes_written) / 1e6, r.c.matmul_bytes / 1e6,
                    static_cast<unsigned long long>(r.c.matmuls), r.c.matmul_flops / 1e9, r.c.d2d_bytes / 1e6);
      }
    }
    if (!sites.empty()) {
      // "few-block": launches whose grid has fewer blocks than an H100's SMs (emu::kSmsOfAnH100), SMs left idle.
      std::printf("\n%-52s %8s %10s %10s %10s %11s %9s %12s\n", "launching site (one step)", "kernels", "read MB",
                  "written MB", "min blocks", "min threads", "few-block", "few-block MB");
      uint64_t few = 0, few_bytes = 0;
      for (const emu::KernelSite& k : sites) few += k.few_block_launches, few_bytes += k.few_block_bytes;
      for (size_t i = 0; i < sites.size() && i < static_cast<size_t>(kernel_rows); ++i) {
        const emu::KernelSite& k = sites[i];
        std::printf("%-52s %8llu %10.1f %10.1f %10llu %11llu %9llu %12.1f\n", k.name.c_str(),
                    static_cast<unsigned long long>(k.launches), k.bytes_read / 1e6, k.bytes_written / 1e6,
                    static_cast<unsigned long long>(k.min_blocks), static_cast<unsigned long long>(k.min_threads),
                    static_cast<unsigned long long>(k.few_block_launches), k.few_block_bytes / 1e6);
      }
      std::printf("launches with fewer blocks than an H100's %llu SMs: %llu, moving %.1f MB\n",
                  static_cast<unsigned long long>(emu::kSmsOfAnH100), static_cast<unsigned long long>(few),
                  few_bytes / 1e6);
    }
    if (!json_path.empty()) std::ofstream(json_path) << j.dump(2) << "\n";
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_step_cost: %s\n", e.what());
    return 1;
  }
  return 0;
}
