// benchmarks/bench_convert.cpp: dtype conversion throughput (GB/s) next to memcpy bandwidth on the same buffers.
#include <mpt/mpt.h>

#include "bench_util.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <nlohmann/json.hpp>
#include <omp.h>

#include "kernels/cpu/convert.h"

namespace {

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_convert: CPU dtype conversion bandwidth"};
  int64_t n = 32 << 20;
  int reps = 9;
  std::string json_path;
  app.add_option("-n,--elements", n, "elements per buffer (default 32M: far above L2)");
  app.add_option("-r,--reps", reps, "timed repetitions (median reported)");
  app.add_option("--json", json_path, "also write the results to this file");
  CLI11_PARSE(app, argc, argv);

  using mpt::DType;
  const mpt::Tensor f32 = mpt::Tensor::normal({n}, 0, 1, DType::F32);
  nlohmann::json results = nlohmann::json::array();
  fmt::print("{:<22} {:>12} {:>10} {:>12}\n", "conversion", "bytes/elem", "GB/s", "% of memcpy");

  // Baseline: memcpy of the same bytes split over the same OpenMP threads the conversions use.
  const double memcpy_gbs = mpt::bench::memcpy_gbps(static_cast<size_t>(n) * 4, reps);
  fmt::print("{:<22} {:>12} {:>10.1f} {:>12}\n", "memcpy (baseline)", 8, memcpy_gbs, "100%");
  results.push_back({{"name", "memcpy"}, {"gbps", memcpy_gbs}, {"threads", omp_get_max_threads()}});

  for (auto [src, dst] : std::vector<std::pair<DType, DType>>{{DType::F32, DType::BF16}, {DType::BF16, DType::F32},
                                                             {DType::F32, DType::F16},  {DType::F16, DType::F32},
                                                             {DType::F32, DType::F8E4M3}, {DType::F8E4M3, DType::F32},
                                                             {DType::BF16, DType::F8E5M2}}) {
    const mpt::Tensor s = f32.to(src);
    mpt::Tensor d = mpt::Tensor::empty({n}, dst);
    const double sec = mpt::bench::median_seconds(reps, [&] { d.copy_(s); });
    const double bytes = static_cast<double>(n) * static_cast<double>(mpt::dtype_size(src) + mpt::dtype_size(dst));
    const double gbs = bytes / sec / 1e9;
    const std::string name = fmt::format("{} -> {}", src, dst);
    fmt::print("{:<22} {:>12} {:>10.1f} {:>11.0f}%\n", name, mpt::dtype_size(src) + mpt::dtype_size(dst), gbs,
               100 * gbs / memcpy_gbs);
    results.push_back({{"name", name}, {"gbps", gbs}, {"fraction_of_memcpy", gbs / memcpy_gbs}});
  }
  const nlohmann::json out = {{"benchmark", "convert"}, {"elements", n}, {"results", results}};
  fmt::print("{}\n", out.dump());
  if (!json_path.empty()) {
    std::FILE* f = std::fopen(json_path.c_str(), "w");
    if (!f) {
      fmt::print(stderr, "bench_convert: cannot write {}\n", json_path);
      return 1;
    }
    fmt::print(f, "{}\n", out.dump(2));
    std::fclose(f);
  }
  return 0;
}
