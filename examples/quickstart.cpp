// examples/quickstart.cpp: a first mptrain program: probe the device, make tensors, convert precisions.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"mptrain quickstart: device probe, tensors and low-precision conversions"};
  uint64_t seed = 1234;
  app.add_option("--seed", seed, "Philox seed for the random tensor");
  CLI11_PARSE(app, argc, argv);
  try {
    const mpt::Device device = mpt::Device::best();
    fmt::print("device: {} ({})\n", device, mpt::cuda_status().reason);
    mpt::Generator gen(seed);
    const mpt::Tensor x = mpt::Tensor::normal({4, 6}, 0.0, 1.0, mpt::DType::F32, device, gen);
    fmt::print("x = {}\n", x);
    for (mpt::DType dt : {mpt::DType::BF16, mpt::DType::F16, mpt::DType::F8E4M3, mpt::DType::F8E5M2}) {
      const auto back = x.to(dt).to(mpt::DType::F32).to_vector<float>();
      const auto ref = x.to_vector<float>();
      double max_rel = 0;
      for (size_t i = 0; i < ref.size(); ++i) max_rel = std::max(max_rel, std::abs(static_cast<double>(back[i]) - ref[i]) / std::abs(static_cast<double>(ref[i])));
      fmt::print("{:>7}: max relative round-trip error {:.3e}\n", dt, max_rel);
    }
    const mpt::Tensor xt = x.t().contiguous();
    fmt::print("x^T (contiguous copy of a transposed view) = {}\n", xt.to(mpt::DType::BF16));
    const auto stats = mpt::memory_stats(device);
    fmt::print("memory on {}: current {} B, peak {} B, reused {} of {} allocations\n", device, stats.current_bytes,
               stats.peak_bytes, stats.reused, stats.allocations);
  } catch (const std::exception& e) {
    fmt::print(stderr, "quickstart: {}\n", e.what());
    return 1;
  }
  return 0;
}
