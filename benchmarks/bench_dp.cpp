// benchmarks/bench_dp.cpp: full data-parallel training steps of a GPT under mpirun (or alone): global tokens/s, the
// communication hidden behind backward, and the optimizer state each rank holds (benchmarks/dp_scaling.sh compares).
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <omp.h>
#include <random>

#include "gpt_bench.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"

namespace {

using mpt::Tensor;

double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<int64_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_dp: data-parallel GPT training steps (mpirun -np N bench_dp)"};
  mpt::nn::GPTConfig config;  // train_gpt's default model on tinyshakespeare's 65 characters
  config.vocab_size = 65;
  config.block_size = 128;
  config.n_layer = 4;
  config.n_head = 6;
  config.n_embd = 192;
  int64_t batch = 16;
  int steps = 30, warmup = 5;
  double bucket_mb = 25;
  bool zero1 = false;
  std::string compression = "none", json_path, label;
  mpt::bench::add_gpt_shape_options(app, config, /*vocab=*/false);
  app.add_option("--batch", batch, "sequences per step over all ranks (each rank: batch / ranks)");
  app.add_option("--steps", steps, "timed steps (after --warmup)");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--bucket-mb", bucket_mb, "gradient MB per bucket");
  app.add_flag("--zero1", zero1, "shard the AdamW state (ZeRO-1)");
  app.add_option("--compression", compression, "gradients on the wire: none, bf16 or fp8");
  app.add_option("--label", label, "a name for this configuration in the output");
  app.add_option("--json", json_path, "append the result as one JSON line here (rank 0)");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto comm = mpt::dist::world();
    const int n = comm->size(), me = comm->rank();
    MPT_CHECK(batch % n == 0, "[bench_dp] --batch {} is not a multiple of the {} ranks", batch, n);
    const int64_t per_rank = batch / n;
    const auto compress = compression == "bf16" ? mpt::train::GradCompression::BF16
                          : compression == "fp8" ? mpt::train::GradCompression::FP8
                                                 : mpt::train::GradCompression::None;
    MPT_CHECK(compression == "none" || compression == "bf16" || compression == "fp8",
              "[bench_dp] unknown --compression '{}'", compression);
    mpt::nn::GPT model(config);
    // The Trainer's step, as train_gpt runs it: DataParallel's buckets, finish, clipping, AdamW, ZeRO-1's gather.
    mpt::train::Trainer trainer(
        model, mpt::train::adamw({.lr = 1e-3}),
        {.clip = 1.0, .weight_decay = 0.1, .comm = comm,
         .data_parallel = {.bucket_bytes = static_cast<int64_t>(bucket_mb * (1 << 20)), .compression = compress,
                           .zero1 = zero1}});
    mpt::train::DataParallel& dp = *trainer.data_parallel();
    std::mt19937_64 rng(1);
    std::vector<double> step_ms, forward_ms, backward_ms, hidden, wait_ms;
    for (int s = 0; s < warmup + steps; ++s) {
      std::vector<int64_t> ids(static_cast<size_t>(batch * (config.block_size + 1)));
      for (auto& v : ids) v = static_cast<int64_t>(rng() % static_cast<uint64_t>(config.vocab_size));
      const Tensor all = Tensor::from_vector(ids, {batch, config.block_size + 1})
                             .slice(0, me * per_rank, (me + 1) * per_rank);
      const Tensor x = all.slice(1, 0, config.block_size).contiguous();
      const Tensor y = all.slice(1, 1, config.block_size + 1).contiguous();
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      std::chrono::steady_clock::time_point t1;
      const mpt::train::StepMetrics m = trainer.step([&](int64_t) {
        Tensor loss = model.loss(x, y);
        t1 = std::chrono::steady_clock::now();
        return loss;
      });
      if (s < warmup) continue;
      step_ms.push_back(m.seconds * 1e3);
      // backward_done_seconds includes finish(): the exposed communication wait, reported beside it.
      forward_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
      backward_ms.push_back(m.backward_done_seconds * 1e3 - forward_ms.back() - m.comm_wait_seconds * 1e3);
      hidden.push_back(m.comm_hidden_fraction);
      wait_ms.push_back(m.comm_wait_seconds * 1e3);
    }
    int64_t state_bytes = 0;
    for (const auto& [k, t] : trainer.optimizer().state_dict())
      if (k.find(".exp_avg") != std::string::npos) state_bytes += static_cast<int64_t>(t.nbytes());
    Tensor most = Tensor::full({1}, static_cast<double>(state_bytes), mpt::DType::F32);
    comm->all_reduce(most, mpt::dist::ReduceOp::Max)->wait();
    // The slowest rank's median step sets the pace.
    Tensor slowest = Tensor::full({1}, median(step_ms), mpt::DType::F32);
    comm->all_reduce(slowest, mpt::dist::ReduceOp::Max)->wait();
    const double ms = slowest.to_vector<float>()[0];
    const double tps = static_cast<double>(batch * config.block_size) / ms * 1e3;
    double hidden_mean = 0, wait_mean = 0;
    for (double h : hidden) hidden_mean += h / static_cast<double>(hidden.size());
    for (double w : wait_ms) wait_mean += w / static_cast<double>(wait_ms.size());
    if (me == 0) {
      const std::string comm_text =
          n == 1 ? std::string("no communication              ")
                 : fmt::format("comm hidden {:3.0f}%, exposed wait {:6.2f} ms", 100 * hidden_mean, wait_mean);
      std::printf("%-20s ranks %d x %d threads | step %8.1f ms (forward %.1f, backward %.1f) | %8.0f tok/s | %s | "
                  "AdamW state per rank %7.2f MB | %lld buckets\n", label.empty() ? "bench_dp" : label.c_str(), n,
                  omp_get_max_threads(), ms, median(forward_ms), median(backward_ms), tps, comm_text.c_str(),
                  most.to_vector<float>()[0] / 1e6, static_cast<long long>(dp.num_buckets()));
      if (!json_path.empty()) {
        std::ofstream(json_path, std::ios::app)
            << nlohmann::json{{"label", label}, {"ranks", n}, {"threads", omp_get_max_threads()},
                              {"step_ms", ms}, {"forward_ms", median(forward_ms)},
                              {"backward_ms", median(backward_ms)}, {"tokens_per_s", tps}, {"hidden_fraction", hidden_mean},
                              {"exposed_wait_ms", wait_mean}, {"optimizer_state_bytes_per_rank",
                                                               most.to_vector<float>()[0]},
                              {"zero1", zero1}, {"compression", compression}, {"bucket_mb", bucket_mb},
                              {"batch", batch}, {"seq", config.block_size}}
                   .dump()
            << "\n";
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dp: %s\n", e.what());
    return 1;
  }
  return 0;
}
