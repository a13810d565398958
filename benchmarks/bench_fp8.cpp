// benchmarks/bench_fp8.cpp: each piece of an FP8 Linear timed alone beside the BF16 GEMM of the same shape (the GEMMs
// with each recipe's scales and accumulation, the quantization, cast + transpose (+ dbias), amax and block passes),
// then the whole layer forward + backward per recipe against the BF16 Linear, on a GPU or the CPU; in the emulation
// build, each piece's launches and bytes on the emulated device instead of times.
#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "mpt/fp8/linear.h"
#include "mpt/ops/cast.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/matmul.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#endif

namespace {

using mpt::DType;

mpt::fp8::Fp8Recipe recipe_named(const std::string& precision) {
  if (precision == "fp8-current") return mpt::fp8::CurrentScaling{};
  if (precision == "fp8-block") return mpt::fp8::BlockScaling{};
  return mpt::fp8::DelayedScaling{};
}
using mpt::Tensor;
using Clock = std::chrono::steady_clock;

struct Piece {
  std::string name;
  double flops = 0;  // GEMMs: 2 N M K per product
  double bytes = 0;  // memory passes: what they must read and write at least
  std::function<void()> run;
};

void sync(mpt::Device d) {
  if (d.is_cuda()) mpt::Stream::current(d).synchronize();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One Linear's forward + backward (dx, dW, db) in `precision` ("bf16": the weight cast to BF16 in the call; FP8:
// fp8_linear quantizing it in the call, as once per step in training); the FP8 scaling state lives across calls.
std::function<void()> linear_step(const std::string& precision, const Tensor& x, const Tensor& w, const Tensor& b,
                                  const Tensor& dy) {
  const auto state = std::make_shared<mpt::fp8::Fp8ScalingState>(recipe_named(precision), x.device());
  const mpt::fp8::Fp8LinearMetas metas = state->register_linear("l");
  return [=] {
    Tensor xi = x.detach().requires_grad_(), wi = w.detach().requires_grad_(), bi = b.detach().requires_grad_();
    const Tensor y = precision == "bf16"
                         ? mpt::ops::linear(xi, wi, bi, {.compute_weight = wi.to(DType::BF16)})
                         : mpt::fp8::fp8_linear(xi, wi, bi, {recipe_named(precision), metas, DType::BF16, nullptr});
    y.backward(dy);
  };
}

double time_ms(const std::function<void()>& f, mpt::Device dev, int reps) {
  f();  // warm-up
  sync(dev);
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    sync(dev);
    t.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return median(t);
}

// --sweep: GPT's four Linear shapes at widths 768, 1024 and 2048, each layer timed in BF16 and per FP8 recipe, beside
// what the per-shape rule (fitted to `cal`) predicts: whether the rule's extrapolation from one shape holds.
nlohmann::json sweep(mpt::Device dev, int64_t tokens, int reps, const mpt::amp::Fp8Calibration& cal) {
  const mpt::amp::Fp8GemmRule rule(cal, tokens);
  const mpt::amp::Fp8RecipeKind kinds[] = {mpt::amp::Fp8RecipeKind::Delayed, mpt::amp::Fp8RecipeKind::Current,
                                           mpt::amp::Fp8RecipeKind::Block};
  const char* names[] = {"fp8-delayed", "fp8-current", "fp8-block"};
  std::printf("\nsweep: %lld tokens; FP8 layer speed-up over BF16, measured (and the rule's, fitted to %s)\n",
              static_cast<long long>(tokens), cal.device.c_str());
  std::printf("%-18s %9s %22s %22s %22s\n", "layer [in -> out]", "bf16 ms", "delayed", "current", "block");
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t c : {768, 1024, 2048}) {
    for (const auto& [in, out] : std::vector<std::pair<int64_t, int64_t>>{{c, 3 * c}, {c, c}, {c, 4 * c}, {4 * c, c}}) {
      const Tensor x = Tensor::normal({tokens, in}, 0, 1, DType::F32, dev).to(DType::BF16);
      const Tensor dy = Tensor::normal({tokens, out}, 0, 1, DType::F32, dev).to(DType::BF16);
      const Tensor w = Tensor::normal({out, in}, 0, 0.02, DType::F32, dev), b = Tensor::zeros({out}, DType::F32, dev);
      const double bf16 = time_ms(linear_step("bf16", x, w, b, dy), dev, reps);
      nlohmann::json row{{"in", in}, {"out", out}, {"bf16_ms", bf16}};
      std::string cells;
      for (int i = 0; i < 3; ++i) {
        const double ms = time_ms(linear_step(names[i], x, w, b, dy), dev, reps);
        const mpt::amp::Fp8LayerEstimate e = rule.estimate(kinds[i], in, out);
        cells += fmt::format(" {:>8.2f}x ({:.2f}x {:>4})", bf16 / ms, e.bf16_ms / e.fp8_ms, e.fp8() ? "FP8" : "BF16");
        row[names[i]] = {{"ms", ms}, {"rule_bf16_ms", e.bf16_ms}, {"rule_fp8_ms", e.fp8_ms}};
      }
      std::printf("%-18s %9.3f%s\n", fmt::format("[{} -> {}]", in, out).c_str(), bf16, cells.c_str());
      rows.push_back(row);
    }
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_fp8: the pieces of an FP8 Linear y = x W^T + b alone, beside the BF16 GEMM of the same shape, "
               "and whole FP8 layers (forward + backward) per recipe against the BF16 Linear"};
  int64_t tokens = 8192, in = 2048, out = 8192;  // GPT 1.3B's MLP up-projection at batch 8 x 1024
  int reps = 10;
  std::string device_name = "cuda", json_path;
  app.add_option("--tokens", tokens, "N: rows of x (batch x sequence)");
  app.add_option("--in", in, "K: input features");
  app.add_option("--out", out, "M: output features");
  app.add_option("--reps", reps, "timed repetitions after one warm-up (median)")->check(CLI::PositiveNumber);
  app.add_option("--device", device_name, "cuda or cpu")->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--json", json_path, "also write the rows as JSON to this file");
  bool do_sweep = false;
  app.add_flag("--sweep", do_sweep, "on a GPU: also time GPT's four Linear shapes at widths 768, 1024 and 2048 (BF16 "
               "and each FP8 recipe) beside the per-shape rule's predictions (fitted to this run's --calibration, "
               "else the built-in H200 one)");
  std::string calibration_path;
  app.add_option("--calibration", calibration_path, "on a GPU: also write what the per-shape FP8 rule is fitted to "
                 "(the layers' and GEMMs' times at this shape) as JSON, for train_gpt / bench_train "
                 "--fp8-calibration FILE (docs/fp8.md, \"Which layers run FP8\")");
  CLI11_PARSE(app, argc, argv);
#if defined(MPT_CUDA_EMULATION)
  if (!calibration_path.empty()) {
    std::fprintf(stderr, "bench_fp8: --calibration measures a GPU; the emulated device has no times\n");
    return 1;
  }
#endif
#if defined(MPT_CUDA_EMULATION)
  if (do_sweep) {
    std::fprintf(stderr, "bench_fp8: --sweep times a GPU; the emulated device has no times\n");
    return 1;
  }
#endif
  if (do_sweep && device_name != "cuda")
    std::printf("note: --sweep on the CPU times the CPU against a GPU's rule (a smoke run; the rule is for GPUs)\n");
  if (!calibration_path.empty() && device_name != "cuda") {
    std::fprintf(stderr, "bench_fp8: --calibration measures a GPU (the rule judges CUDA layers): give --device cuda\n");
    return 1;
  }
#if defined(MPT_CUDA_EMULATION)
  namespace emu = mpt::cuda_emu;
  setenv("MPT_EMU_DEVICE_MEMORY_MB", "144384", 0);
  emu::set_record_only(true);  // the emulated device counts what each piece issues; times are meaningless
  reps = 1;
#endif
  try {
    const mpt::Device dev = device_name == "cuda" ? mpt::Device::cuda(0) : mpt::Device::cpu();
    mpt::check_device_available(dev);
    const double n = static_cast<double>(tokens), k = static_cast<double>(in), m = static_cast<double>(out);
    const Tensor x = Tensor::normal({tokens, in}, 0, 1, DType::F32, dev).to(DType::BF16);
    const Tensor dy = Tensor::normal({tokens, out}, 0, 1, DType::F32, dev).to(DType::BF16);
    const Tensor w = Tensor::normal({out, in}, 0, 0.02, DType::F32, dev);
    const Tensor b = Tensor::zeros({out}, DType::F32, dev);
    const Tensor wb = w.to(DType::BF16);
    const Tensor scale = Tensor::full({}, 64.0, DType::F32, dev), slot = Tensor::zeros({}, DType::F32, dev);
    const Tensor dbias = Tensor::empty({out}, DType::F32, dev);
    mpt::ops::QuantizeOptions delayed{.scale = scale, .amax = slot, .amax_ignore_nan = true, .amax_accumulate = true};
    mpt::ops::QuantizeOptions with_dbias = delayed;
    with_dbias.dbias = dbias;
    mpt::ops::QuantizeOptions with_gelu = delayed;
    with_gelu.gelu = true;
    const auto [xq, xqt] = mpt::ops::quantize_fp8_transpose(x, DType::F8E4M3, delayed);
    const auto [wq, wqt] = mpt::ops::quantize_fp8_transpose(w, DType::F8E4M3, delayed);
    const auto xb = mpt::ops::quantize_blockwise(x, DType::F8E4M3, mpt::ops::ScaleLayout::Block1x128);
    const auto wbq = mpt::ops::quantize_blockwise(w, DType::F8E4M3, mpt::ops::ScaleLayout::Block128x128);
    auto fp8_gemm = [&](const mpt::ops::Quantized& a, const mpt::ops::Quantized& bq, bool fast) {
      mpt::ops::MatmulOptions o;
      o.trans_b = true;
      o.out_dtype = DType::BF16;
      o.scale_a = a.layout == mpt::ops::ScaleLayout::PerTensor ? mpt::ops::Fp8Scaling::per_tensor(a.scale_inv)
                                                                 : mpt::ops::Fp8Scaling::block_1x128(a.scale_inv);
      o.scale_b = bq.layout == mpt::ops::ScaleLayout::PerTensor ? mpt::ops::Fp8Scaling::per_tensor(bq.scale_inv)
                                                                  : mpt::ops::Fp8Scaling::block_128x128(bq.scale_inv);
      o.fp8_fast_accum = fast;
      return mpt::ops::matmul(a.data, bq.data, o);
    };
    const double gemm = 2 * n * m * k;
    std::vector<Piece> pieces = {
        {"bf16 GEMM x W^T", gemm, 0, [&] { mpt::ops::matmul(x, wb, {.trans_b = true}); }},
        {"fp8 GEMM per-tensor", gemm, 0, [&] { fp8_gemm(xq, wq, false); }},
        {"fp8 GEMM per-tensor, fast accum", gemm, 0, [&] { fp8_gemm(xq, wq, true); }},
        {"fp8 GEMM 1x128 x 128x128 blocks", gemm, 0, [&] { fp8_gemm(xb, wbq, false); }},
        {"amax of x (current scaling)", 0, 2 * n * k, [&] { mpt::ops::amax(x); }},
        {"quantize x, rowwise", 0, 3 * n * k, [&] { mpt::ops::quantize_fp8(x, DType::F8E4M3, delayed); }},
        {"cast + transpose x", 0, 4 * n * k, [&] { mpt::ops::quantize_fp8_transpose(x, DType::F8E4M3, delayed); }},
        {"cast + transpose dy", 0, 4 * n * m,
         [&] { mpt::ops::quantize_fp8_transpose(dy, DType::F8E5M2, delayed); }},
        {"cast + transpose + dbias dy", 0, 4 * n * m,
         [&] { mpt::ops::quantize_fp8_transpose(dy, DType::F8E5M2, with_dbias); }},
        {"gelu + cast + transpose (dy as pre)", 0, 4 * n * m,  // the FP8 MLP's hidden codes from its pre-activation
         [&] { mpt::ops::quantize_fp8_transpose(dy, DType::F8E4M3, with_gelu); }},
        {"1x128 blocks of x", 0, 3 * n * k,
         [&] { mpt::ops::quantize_blockwise(x, DType::F8E4M3, mpt::ops::ScaleLayout::Block1x128); }},
        {"1x128 blocks of x^T", 0, 3 * n * k,
         [&] { mpt::ops::quantize_blockwise(x, DType::F8E4M3, mpt::ops::ScaleLayout::Block1x128, {.transpose = true}); }},
        {"1x128 blocks of x and x^T, one pass", 0, 4 * n * k,
         [&] { mpt::ops::quantize_blockwise_transpose(x, DType::F8E4M3); }},
        {"1x128 blocks of dy and dy^T + dbias, one pass", 0, 4 * n * m,
         [&] { mpt::ops::quantize_blockwise_transpose(dy, DType::F8E4M3, {.dbias = dbias}); }},
        {"128x128 blocks of W (f32)", 0, 5 * m * k,
         [&] { mpt::ops::quantize_blockwise(w, DType::F8E4M3, mpt::ops::ScaleLayout::Block128x128); }},
    };
    // Whole layers, forward + backward (dx, dW, db), the weight quantized per call as without a cache.
    for (const std::string p : {"bf16", "fp8-delayed", "fp8-current", "fp8-block"})
      pieces.push_back({p + " Linear forward + backward", 3 * gemm, 0, linear_step(p, x, w, b, dy)});

    nlohmann::json rows = nlohmann::json::array();
    std::printf("bench_fp8 on %s: x [%lld, %lld] bf16, W [%lld, %lld] f32 master, %d reps (median)\n",
                dev.str().c_str(), static_cast<long long>(tokens), static_cast<long long>(in),
                static_cast<long long>(out), static_cast<long long>(in), reps);
#if defined(MPT_CUDA_EMULATION)
    std::printf("emulated device, record-only: what each piece issues (no times)\n%-40s %8s %7s %12s %10s\n", "piece",
                "kernels", "GEMMs", "kernel MB", "GEMM MB");
#else
    std::printf("%-40s %10s %10s %8s %8s\n", "piece", "ms", "TFLOP/s", "GB/s", "vs bf16");
#endif
    [[maybe_unused]] double bf16_gemm_s = 0, bf16_layer_s = 0;  // unused under emulation (no times)
    std::map<std::string, double> seconds;                      // by piece, for --calibration
    for (const Piece& piece : pieces) {
      piece.run();  // warm-up: plans, caches, the allocator's pool
      sync(dev);
      std::vector<double> times;
#if defined(MPT_CUDA_EMULATION)
      emu::reset_counters();
      emu::set_kernel_sites(true);
#endif
      for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        piece.run();
        sync(dev);
        times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      }
      const double s = median(times);
      seconds[piece.name] = s;
      nlohmann::json row{{"piece", piece.name}, {"seconds", s}};
#if defined(MPT_CUDA_EMULATION)
      const emu::Counters c = emu::counters();
      const double kernel_mb = (c.kernel_bytes_read + c.kernel_bytes_written) / 1e6;
      row.update({{"kernel_launches", c.kernel_launches}, {"matmuls", c.matmuls},
                  {"kernel_bytes", c.kernel_bytes_read + c.kernel_bytes_written}, {"matmul_bytes", c.matmul_bytes}});
      std::printf("%-40s %8llu %7llu %12.1f %10.1f\n", piece.name.c_str(),
                  static_cast<unsigned long long>(c.kernel_launches), static_cast<unsigned long long>(c.matmuls),
                  kernel_mb, c.matmul_bytes / 1e6);
      emu::set_kernel_sites(false);
      if (c.kernel_launches > 2) {  // what the launches are, by launching site
        for (const emu::KernelSite& site : emu::kernel_sites()) {
          std::printf("    %-36s %8llu %7s %12.1f\n", site.name.c_str(), static_cast<unsigned long long>(site.launches),
                      "", (site.bytes_read + site.bytes_written) / 1e6);
        }
      }
#else
      if (piece.name == "bf16 GEMM x W^T") bf16_gemm_s = s;
      if (piece.name == "bf16 Linear forward + backward") bf16_layer_s = s;
      const double base = piece.name.find("Linear") != std::string::npos ? bf16_layer_s
                          : piece.flops > 0                              ? bf16_gemm_s
                                                                         : 0;
      row.update({{"tflops", piece.flops / s / 1e12}, {"gbps", piece.bytes / s / 1e9}});
      std::printf("%-40s %10.3f %10s %8s %8s\n", piece.name.c_str(), s * 1e3,
                  piece.flops > 0 ? fmt::format("{:.1f}", piece.flops / s / 1e12).c_str() : "",
                  piece.bytes > 0 ? fmt::format("{:.0f}", piece.bytes / s / 1e9).c_str() : "",
                  base > 0 ? fmt::format("{:.2f}x", base / s).c_str() : "");
#endif
      rows.push_back(row);
    }
    std::optional<mpt::amp::Fp8Calibration> measured;  // this run's, with --calibration
    if (!calibration_path.empty()) {
      mpt::amp::Fp8Calibration c;
      c.device = fmt::format("{} (bench_fp8 --tokens {} --in {} --out {}, mptrain {})",
                             mpt::cuda_status().devices.at(dev.index()).name, tokens, in, out, mpt::version());
      c.tokens = tokens, c.in = in, c.out = out;
      c.bf16_layer_ms = seconds.at("bf16 Linear forward + backward") * 1e3;
      c.fp8_layer_ms[0] = seconds.at("fp8-delayed Linear forward + backward") * 1e3;
      c.fp8_layer_ms[1] = seconds.at("fp8-current Linear forward + backward") * 1e3;
      c.fp8_layer_ms[2] = seconds.at("fp8-block Linear forward + backward") * 1e3;
      const double gemm_tflop = 2 * n * m * k / 1e12;
      c.fp8_fprop_tflops = gemm_tflop / seconds.at("fp8 GEMM per-tensor, fast accum");
      c.fp8_tflops = gemm_tflop / seconds.at("fp8 GEMM per-tensor");
      c.block_tflops = gemm_tflop / seconds.at("fp8 GEMM 1x128 x 128x128 blocks");
      c.elementwise_gbps = 3 * n * k / seconds.at("quantize x, rowwise") / 1e9;
      c.save(calibration_path);  // checks every rate; a layer faster than its GEMMs alone is refused by the fit
      const mpt::amp::Fp8Rates r = mpt::amp::Fp8Rates::fit(c);
      std::printf("calibration written to %s (rates: bf16 %.0f TFLOP/s; fp8 %.0f / %.0f / %.0f TFLOP/s and "
                  "quantization %.0f / %.0f / %.0f GB/s for delayed / current / block): give it to train_gpt or "
                  "bench_train as --fp8-calibration %s\n",
                  calibration_path.c_str(), r.bf16_tflops, r.fp8_tflops[0], r.fp8_tflops[1], r.fp8_tflops[2],
                  r.quant_gbps[0], r.quant_gbps[1], r.quant_gbps[2], calibration_path.c_str());
      measured = c;
    }
    const nlohmann::json swept =
        do_sweep ? sweep(dev, tokens, reps, measured.value_or(mpt::amp::Fp8Calibration::h200())) : nlohmann::json();
    if (!json_path.empty()) {
      std::ofstream(json_path) << nlohmann::json{{"device", dev.str()}, {"tokens", tokens}, {"in", in},
                                                 {"out", out}, {"reps", reps}, {"rows", rows}, {"sweep", swept}}
                                      .dump(2)
                               << "\n";
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_fp8: %s\n", e.what());
    return 1;
  }
  return 0;
}
