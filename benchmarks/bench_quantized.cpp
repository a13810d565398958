// benchmarks/bench_quantized.cpp: one quantized Linear (ops::quantized_linear: W8A8, INT4 per group, FP8) against the
// unquantized Linear of the same shape, at decoding and prefill row counts, on a GPU or the CPU; in the emulation build,
// each one's launches, cuBLASLt calls and bytes on the emulated device instead of times.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <functional>
#include <optional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "mpt/amp/qat.h"
#include "mpt/ops/fake_quant.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/quantized_linear.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#endif

namespace {

using mpt::DType;
using mpt::Tensor;

std::vector<int64_t> parse_rows(const std::string& list) {
  std::vector<int64_t> rows;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) rows.push_back(std::stoll(item));
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_quantized: y = x W^T + b with W as codes and scales (the schemes of train_gpt --qat) against the "
               "unquantized Linear, per row count (1-16: a decoding step; more: prefill)"};
  int64_t in = 768, out = 3072;  // GPT-2 124M's MLP up-projection
  int reps = 20;
  std::string device_name = "cuda", rows_list = "1,16,512", schemes_list = "int8,int4,int4-g128,fp8", json_path;
  app.add_option("--in", in, "K: input features");
  app.add_option("--out", out, "M: output features");
  app.add_option("--rows", rows_list, "comma list of N, the rows of x");
  app.add_option("--schemes", schemes_list, "comma list of int8 (W8A8), int4 (group 32), int4-g128, fp8");
  app.add_option("--reps", reps, "timed repetitions after one warm-up (median)")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--json", json_path, "also write the rows as JSON to this file");
  CLI11_PARSE(app, argc, argv);
#if defined(MPT_CUDA_EMULATION)
  namespace emu = mpt::cuda_emu;
  emu::set_record_only(true);  // the emulated device counts what each call issues; times are meaningless
  reps = 1;
#endif
  try {
    const mpt::Device dev = device_name == "cuda" ? mpt::Device::cuda(0) : mpt::Device::cpu();
    mpt::check_device_available(dev);
    // The activations' dtype: bf16 on CUDA (autocast's), f32 on the CPU (its quantized GEMMs read f32).
    const DType act = dev.is_cuda() ? DType::BF16 : DType::F32;
    const Tensor w = Tensor::normal({out, in}, 0, 0.02, DType::F32, dev);
    const Tensor b = Tensor::zeros({out}, DType::F32, dev);
    const Tensor w_act = w.to(act), b_act = b.to(act);
    std::vector<std::string> schemes;
    std::stringstream ss(schemes_list);
    for (std::string s; std::getline(ss, s, ',');) schemes.push_back(s);
    std::printf("bench_quantized on %s: W [%lld, %lld], x %s, %d reps (median), %d CPU threads, mptrain %s\n",
                dev.str().c_str(), static_cast<long long>(out), static_cast<long long>(in), std::string(mpt::dtype_name(act)).c_str(), reps,
                mpt::cpu_features().omp_threads, mpt::version());
#if defined(MPT_CUDA_EMULATION)
    std::printf("emulated device, record-only: what each call issues (no times)\n%6s %-12s %8s %7s %12s %10s\n", "rows",
                "scheme", "kernels", "GEMMs", "kernel MB", "GEMM MB");
#else
    std::printf("%6s %-12s %10s %10s\n", "rows", "scheme", "ms", "vs first");
#endif
    nlohmann::json rows_json = nlohmann::json::array();
    for (const int64_t n : parse_rows(rows_list)) {
      const Tensor x = Tensor::normal({n, in}, 0, 1, DType::F32, dev).to(act);
      [[maybe_unused]] double base_s = 0;
      for (size_t i = 0; i <= schemes.size(); ++i) {
        const std::string name = i == 0 ? std::string(mpt::dtype_name(act)) : schemes[i - 1];
        std::function<void()> run;
        mpt::ops::GroupQuantized wq;
        std::optional<mpt::ops::QuantSpec> input;
        if (i == 0) {
          run = [&] { mpt::ops::linear(x, w_act, b_act); };
        } else {
          const bool g128 = name == "int4-g128";
          const mpt::amp::QatScheme s = mpt::amp::QatScheme::named(g128 ? "int4" : name, g128 ? 128 : 32);
          wq = mpt::ops::quantize_groups(w, *s.weight);
          input = s.input;
          run = [&] { mpt::ops::quantized_linear(x, wq, b, input); };
        }
        const auto sync = [&] {
          run();
          if (dev.is_cuda()) mpt::Stream::current(dev).synchronize();
        };
        sync();  // warm-up: plans, caches, the allocator's pool
#if defined(MPT_CUDA_EMULATION)
        emu::reset_counters();
#endif
        const double s = mpt::bench::median_seconds(reps, sync);
        nlohmann::json row{{"rows", n}, {"scheme", name}, {"seconds", s}};
#if defined(MPT_CUDA_EMULATION)
        const emu::Counters c = emu::counters();
        const double runs = reps + 1.0;  // median_seconds' own warm-up call counts too
        row.update({{"kernel_launches", c.kernel_launches / runs}, {"matmuls", c.matmuls / runs},
                    {"kernel_bytes", (c.kernel_bytes_read + c.kernel_bytes_written) / runs},
                    {"matmul_bytes", c.matmul_bytes / runs}});
        std::printf("%6lld %-12s %8.0f %7.0f %12.2f %10.2f\n", static_cast<long long>(n), name.c_str(),
                    c.kernel_launches / runs, c.matmuls / runs, (c.kernel_bytes_read + c.kernel_bytes_written) / runs / 1e6,
                    c.matmul_bytes / runs / 1e6);
#else
        if (i == 0) base_s = s;
        row["speedup"] = base_s / s;
        std::printf("%6lld %-12s %10.4f %9.2fx\n", static_cast<long long>(n), name.c_str(), s * 1e3, base_s / s);
#endif
        rows_json.push_back(row);
      }
    }
    if (!json_path.empty()) {
      std::ofstream(json_path) << nlohmann::json{{"benchmark", "quantized"}, {"device", dev.str()}, {"in", in},
                                                 {"out", out}, {"reps", reps}, {"rows", rows_json}}
                                      .dump(2)
                               << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_quantized: %s\n", e.what());
    return 1;
  }
  return 0;
}
