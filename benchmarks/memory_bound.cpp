// benchmarks/memory_bound.cpp: GB/s of the memory-bound ops (elementwise, norms, losses, casts, optimizer) end to
// end through the op layer, next to a 2-thread memcpy measured in the same run.
#include "memory_bound.h"

#include <mpt/mpt.h>

#include "bench_util.h"
#include <mpt/ops/cast.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <vector>

namespace {

using mpt::DType;
using mpt::Tensor;

struct Case {
  std::string name;
  double bytes;  // bytes the op must read plus write
  std::function<void()> run;
};

}  // namespace

nlohmann::json bench_memory_bound(int64_t n, int reps) {
  const int64_t rows = n / 768, cols = 768;  // LayerNorm-like rows
  const int64_t vocab = 50257, ce_rows = std::max<int64_t>(1, n / vocab);
  mpt::Generator gen(1);
  const Tensor x32 = Tensor::normal({n}, 0, 1, DType::F32, mpt::Device::cpu(), gen);
  const Tensor y32 = Tensor::normal({n}, 0, 1, DType::F32, mpt::Device::cpu(), gen);
  const Tensor x16 = x32.to(DType::BF16);
  const Tensor rows32 = x32.slice(0, 0, rows * cols).view({rows, cols});
  const Tensor w = Tensor::ones({cols}), b = Tensor::zeros({cols});
  const Tensor logits = x32.slice(0, 0, ce_rows * vocab).view({ce_rows, vocab});
  const Tensor targets = Tensor::arange(ce_rows, DType::I64);
  const Tensor scale = Tensor::full({}, 64.0);
  Tensor param = x32.clone(), grad = y32.clone();
  mpt::ops::AdamWState state = mpt::ops::adamw_state(param);
  const double f = 4, h = 2, e = static_cast<double>(n);

  std::vector<Case> cases = {
      {"add f32", 3 * f * e, [&] { mpt::ops::add(x32, y32); }},
      {"add_ f32 (residual, in place)", 3 * f * e, [&] { mpt::ops::add_(param, y32); }},
      {"gelu f32", 2 * f * e, [&] { mpt::ops::gelu(x32); }},
      {"gelu bf16", 2 * h * e, [&] { mpt::ops::gelu(x16); }},
      {"gelu_backward f32", 3 * f * e, [&] { mpt::ops::gelu_backward(y32, x32); }},
      {"dropout f32 p=0.1", 2 * f * e, [&] { mpt::ops::dropout(x32, 0.1f, gen); }},
      {"layer_norm f32 [N,768]", 2 * f * static_cast<double>(rows * cols), [&] { mpt::ops::layer_norm(rows32, w, b); }},
      {"softmax_cross_entropy f32 [N,50257]", f * static_cast<double>(ce_rows * vocab),
       [&] { mpt::ops::softmax_cross_entropy(logits, targets); }},
      {"sum over last dim f32", f * static_cast<double>(rows * cols), [&] { mpt::ops::sum(rows32, -1); }},
      {"amax f32", f * e, [&] { mpt::ops::amax(x32); }},
      {"quantize f32 -> e4m3 (given scale)", 5 * e, [&] { mpt::ops::QuantizeOptions opt; opt.scale = scale; mpt::ops::quantize_fp8(x32, DType::F8E4M3, opt); }},
      {"to bf16 (f32 -> bf16)", 6 * e, [&] { x32.to(DType::BF16); }},
      {"adamw f32 moments", 7 * f * e,
       [&] { mpt::ops::adamw_step(std::vector<mpt::ops::AdamWSlot>{{param, grad, state}}, mpt::ops::AdamWParams{}); }},
  };

  const double copy_gbs = mpt::bench::memcpy_gbps(static_cast<size_t>(n) * 4, reps);

  nlohmann::json out = nlohmann::json::array();
  fmt::print("\nmemory-bound ops, {} elements, {} threads (bytes = reads + writes the op must make)\n", n,
             omp_get_max_threads());
  fmt::print("{:<38} {:>9} {:>9} {:>11}\n", "op", "ms", "GB/s", "% memcpy");
  fmt::print("{:<38} {:>9} {:>9.1f} {:>10}%\n", "memcpy (baseline)", "", copy_gbs, 100);
  out.push_back({{"name", "memcpy"}, {"gbps", copy_gbs}});
  for (const Case& c : cases) {
    const double s = mpt::bench::median_seconds(reps, c.run);
    const double gbs = c.bytes / s / 1e9;
    fmt::print("{:<38} {:>9.2f} {:>9.1f} {:>10.0f}%\n", c.name, s * 1e3, gbs, 100 * gbs / copy_gbs);
    out.push_back({{"name", c.name}, {"ms", s * 1e3}, {"gbps", gbs}, {"fraction_of_memcpy", gbs / copy_gbs}});
  }
  return out;
}
