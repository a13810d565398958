// src/amp/fp8_rule.cpp: the per-shape FP8/BF16 rule: its calibration (JSON), the fitted cost model and its report.
#include "mpt/amp/fp8_rule.h"

#include <cmath>
#include <fstream>
#include <utility>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "mpt/core/error.h"

namespace mpt::amp {

namespace {

using json = nlohmann::json;
constexpr Fp8RecipeKind kRecipes[] = {Fp8RecipeKind::Delayed, Fp8RecipeKind::Current, Fp8RecipeKind::Block};

size_t index(Fp8RecipeKind k) { return static_cast<size_t>(k); }

double flops(int64_t n, int64_t k, int64_t m) { return 6.0 * double(n) * double(k) * double(m); }

// Bytes one layer's quantization passes move (fp8_rule.h): x [n, k] and dy [n, m] read as BF16 and written as
// rowwise + columnwise codes, W [m, k] read as FP32 and written twice; current scaling reads each once more (amax).
double quant_bytes(Fp8RecipeKind r, int64_t n, int64_t k, int64_t m) {
  const double nk = double(n) * double(k), nm = double(n) * double(m), km = double(k) * double(m);
  return r == Fp8RecipeKind::Current ? 6 * nk + 6 * nm + 10 * km : 4 * nk + 4 * nm + 6 * km;
}

double bf16_cast_bytes(int64_t k, int64_t m) { return 6.0 * double(k) * double(m); }

// The FP8 GEMMs' rate over a layer's three GEMMs: the forward (a third of the flops) with fast accumulation under
// the per-tensor recipes, the two gradient GEMMs without; block scaling's GEMMs at one rate.
double fp8_gemm_tflops(const Fp8Calibration& c, Fp8RecipeKind r) {
  if (r == Fp8RecipeKind::Block) return c.block_tflops;
  return 3.0 / (1.0 / c.fp8_fprop_tflops + 2.0 / c.fp8_tflops);
}

bool positive(double v) { return std::isfinite(v) && v > 0; }

void check(const Fp8Calibration& c, const std::string& where) {
  MPT_CHECK(c.tokens > 0 && c.in > 0 && c.out > 0, "[fp8 rule] {}: the shape must be positive, got tokens {}, in {}, "
            "out {}", where, c.tokens, c.in, c.out);
  for (const auto& [name, v] : {std::pair{"bf16_layer_ms", c.bf16_layer_ms},
                                {"fp8_layer_ms.delayed", c.fp8_layer_ms[0]},
                                {"fp8_layer_ms.current", c.fp8_layer_ms[1]},
                                {"fp8_layer_ms.block", c.fp8_layer_ms[2]},
                                {"fp8_fprop_tflops", c.fp8_fprop_tflops},
                                {"fp8_tflops", c.fp8_tflops},
                                {"block_tflops", c.block_tflops},
                                {"elementwise_gbps", c.elementwise_gbps}})
    MPT_CHECK(positive(v), "[fp8 rule] {}: {} must be a positive number, got {}", where, name, v);
}

}  // namespace

std::string_view to_string(Fp8RecipeKind k) {
  switch (k) {
    case Fp8RecipeKind::Delayed: return "delayed";
    case Fp8RecipeKind::Current: return "current";
    case Fp8RecipeKind::Block: return "block";
  }
  return "?";
}

Fp8Calibration Fp8Calibration::h200() {
  Fp8Calibration c;
  c.device = "NVIDIA H200 (bench_fp8 --tokens 8192 --in 2048 --out 8192, commit 53b495d, 2026-11-30)";
  c.tokens = 8192, c.in = 2048, c.out = 8192;
  c.bf16_layer_ms = 1.138;
  c.fp8_layer_ms[0] = 1.042, c.fp8_layer_ms[1] = 1.133, c.fp8_layer_ms[2] = 1.256;
  c.fp8_fprop_tflops = 1411, c.fp8_tflops = 1223, c.block_tflops = 1065;
  c.elementwise_gbps = 1616;
  return c;
}

Fp8Calibration Fp8Calibration::load(const std::string& path) {
  std::ifstream in(path);
  MPT_CHECK(in.good(), "[fp8 rule] cannot open the calibration '{}'", path);
  Fp8Calibration c;
  try {
    const json j = json::parse(in);
    c.device = j.at("device").get<std::string>();
    c.tokens = j.at("tokens").get<int64_t>(), c.in = j.at("in").get<int64_t>(), c.out = j.at("out").get<int64_t>();
    c.bf16_layer_ms = j.at("bf16_layer_ms").get<double>();
    for (Fp8RecipeKind r : kRecipes)
      c.fp8_layer_ms[index(r)] = j.at("fp8_layer_ms").at(std::string(to_string(r))).get<double>();
    c.fp8_fprop_tflops = j.at("fp8_fprop_tflops").get<double>();
    c.fp8_tflops = j.at("fp8_tflops").get<double>();
    c.block_tflops = j.at("block_tflops").get<double>();
    c.elementwise_gbps = j.at("elementwise_gbps").get<double>();
  } catch (const json::exception& e) {
    MPT_THROW("[fp8 rule] the calibration '{}' is not what bench_fp8 --calibration writes: {}", path, e.what());
  }
  check(c, path);
  return c;
}

void Fp8Calibration::save(const std::string& path) const {
  check(*this, path);
  json j = {{"device", device}, {"tokens", tokens}, {"in", in}, {"out", out}, {"bf16_layer_ms", bf16_layer_ms},
            {"fp8_fprop_tflops", fp8_fprop_tflops}, {"fp8_tflops", fp8_tflops}, {"block_tflops", block_tflops},
            {"elementwise_gbps", elementwise_gbps}};
  for (Fp8RecipeKind r : kRecipes) j["fp8_layer_ms"][std::string(to_string(r))] = fp8_layer_ms[index(r)];
  std::ofstream out_file(path);
  MPT_CHECK(out_file.good(), "[fp8 rule] cannot write the calibration '{}'", path);
  out_file << j.dump(2) << "\n";
  MPT_CHECK(out_file.good(), "[fp8 rule] writing the calibration '{}' failed", path);
}

Fp8Rates Fp8Rates::fit(const Fp8Calibration& c) {
  check(c, c.device.empty() ? "calibration" : c.device);
  const double f = flops(c.tokens, c.in, c.out);
  Fp8Rates r;
  r.elementwise_gbps = c.elementwise_gbps;
  const double bf16_gemm_s = c.bf16_layer_ms * 1e-3 - bf16_cast_bytes(c.in, c.out) / (c.elementwise_gbps * 1e9);
  MPT_CHECK(bf16_gemm_s > 0, "[fp8 rule] {}: the BF16 layer's {} ms leave no time for its GEMMs after its weight cast",
            c.device, c.bf16_layer_ms);
  r.bf16_tflops = f / bf16_gemm_s * 1e-12;
  for (Fp8RecipeKind k : kRecipes) {
    const size_t i = index(k);
    r.fp8_tflops[i] = fp8_gemm_tflops(c, k);
    const double quant_s = c.fp8_layer_ms[i] * 1e-3 - f / (r.fp8_tflops[i] * 1e12);
    MPT_CHECK(quant_s > 0, "[fp8 rule] {}: the fp8-{} layer's {} ms are less than its GEMMs alone take at {:.0f} "
              "TFLOP/s", c.device, to_string(k), c.fp8_layer_ms[i], r.fp8_tflops[i]);
    r.quant_gbps[i] = quant_bytes(k, c.tokens, c.in, c.out) / quant_s * 1e-9;
  }
  return r;
}

Fp8GemmRule::Fp8GemmRule(Fp8Calibration calibration, int64_t tokens, bool on_cpu_too)
    : calibration_(std::move(calibration)), rates_(Fp8Rates::fit(calibration_)), tokens_(tokens),
      on_cpu_too_(on_cpu_too) {
  MPT_CHECK(tokens > 0, "[fp8 rule] tokens per micro-batch must be positive, got {}", tokens);
}

Fp8LayerEstimate Fp8GemmRule::estimate(Fp8RecipeKind recipe, int64_t in, int64_t out) const {
  MPT_CHECK(in > 0 && out > 0, "[fp8 rule] a layer's shape must be positive, got in {}, out {}", in, out);
  const double f = flops(tokens_, in, out);
  const size_t i = index(recipe);
  Fp8LayerEstimate e;
  e.bf16_ms = (f / (rates_.bf16_tflops * 1e12) + bf16_cast_bytes(in, out) / (rates_.elementwise_gbps * 1e9)) * 1e3;
  e.fp8_ms = (f / (rates_.fp8_tflops[i] * 1e12) + quant_bytes(recipe, tokens_, in, out) / (rates_.quant_gbps[i] * 1e9)) *
             1e3;
  return e;
}

bool Fp8GemmRule::use_fp8(std::string_view path, Fp8RecipeKind recipe, int64_t in, int64_t out, Device device) const {
  if (!device.is_cuda() && !on_cpu_too_) return true;
  const std::lock_guard<std::mutex> lock(mutex_);
  // Asked on every forward: a layer already judged at this shape and recipe costs one lookup, no allocation.
  if (const auto it = decisions_.find(path);
      it != decisions_.end() && it->second.recipe == recipe && it->second.in == in && it->second.out == out)
    return it->second.estimate.fp8();
  const Fp8LayerEstimate e = estimate(recipe, in, out);
  decisions_.insert_or_assign(std::string(path), Decision{std::string(path), recipe, in, out, e});
  return e.fp8();
}

std::vector<Fp8GemmRule::Decision> Fp8GemmRule::decisions() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Decision> out;
  out.reserve(decisions_.size());
  for (const auto& [path, d] : decisions_) out.push_back(d);
  return out;
}

std::string Fp8GemmRule::report() const {
  const std::vector<Decision> ds = decisions();
  if (ds.empty()) return "";
  struct Shape {
    int64_t count = 0;
    Fp8LayerEstimate estimate;
  };
  std::map<std::pair<int64_t, int64_t>, Shape> shapes;  // the decision depends on the shape alone
  size_t fp8 = 0;
  for (const Decision& d : ds) {
    Shape& s = shapes[{d.in, d.out}];
    ++s.count;
    s.estimate = d.estimate;
    fp8 += d.estimate.fp8() ? 1 : 0;
  }
  std::string by_shape;
  for (const auto& [shape, s] : shapes) {
    by_shape += fmt::format("{}[{} -> {}] x{} {} (fp8 {:.3f} ms, bf16 {:.3f} ms)", by_shape.empty() ? "" : ", ",
                            shape.first, shape.second, s.count, s.estimate.fp8() ? "FP8" : "BF16", s.estimate.fp8_ms,
                            s.estimate.bf16_ms);
  }
  return fmt::format("fp8 layers (rule: {}; {} tokens per micro-batch): {} of {} judged run FP8; {}",
                     calibration_.device, tokens_, fp8, ds.size(), by_shape);
}

std::string fp8_rule_report(const std::shared_ptr<const Fp8GemmRule>& rule) {
  return rule != nullptr ? rule->report() : "";
}

std::shared_ptr<const Fp8GemmRule> fp8_rule_named(std::string_view layers, const std::string& calibration,
                                                  int64_t tokens) {
  if (layers == "all") return nullptr;
  MPT_CHECK(layers == "auto", "[fp8 rule] unknown FP8 layer choice '{}': expected auto or all", layers);
  return std::make_shared<const Fp8GemmRule>(calibration.empty() ? Fp8Calibration::h200()
                                                                 : Fp8Calibration::load(calibration),
                                             tokens);
}

}  // namespace mpt::amp
