// mpt/amp/fp8_rule.h: which Linear layers gain from FP8 on a GPU, decided per shape from one GPU's measured rates.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/core/device.h"

namespace mpt::amp {

// The FP8 recipes the rule tells apart (mpt::fp8's DelayedScaling, CurrentScaling, BlockScaling).
enum class Fp8RecipeKind : uint8_t { Delayed, Current, Block };
std::string_view to_string(Fp8RecipeKind k);

// What bench_fp8 measures on one GPU at one Linear shape (x [tokens, in] BF16, W [out, in] FP32 master): the layers'
// forward + backward per recipe, each with its weight quantized (or cast to BF16) in the call, and the GEMM and
// elementwise rates the fit below takes as given.
struct Fp8Calibration {
  std::string device;  // "NVIDIA H200", with the commit and date it was measured at
  int64_t tokens = 0, in = 0, out = 0;
  double bf16_layer_ms = 0;        // BF16 Linear forward + backward, W cast to BF16 in the call
  double fp8_layer_ms[3] = {};     // fp8-delayed, -current, -block Linear forward + backward (Fp8RecipeKind order)
  double fp8_fprop_tflops = 0;     // per-tensor FP8 GEMM with fast accumulation (the forward's)
  double fp8_tflops = 0;           // per-tensor FP8 GEMM (the gradient GEMMs')
  double block_tflops = 0;         // 1x128 x 128x128 block-scaled FP8 GEMM
  double elementwise_gbps = 0;     // one rowwise quantization pass (read BF16, write E4M3)

  static Fp8Calibration h200();  // docs/benchmarks.md, "One H200 (2026-11-30, one lease)"
  static Fp8Calibration load(const std::string& path);  // a JSON file as save() writes it (bench_fp8 --calibration)
  void save(const std::string& path) const;
};

// The rates a cost model of one layer's forward + backward runs at (docs/fp8.md, "Which layers run FP8"):
//   BF16: 6 N K M flops at bf16_tflops + its weight cast (K M x 6 bytes) at elementwise_gbps;
//   FP8:  6 N K M flops at the recipe's fp8_tflops + its quantization bytes at the recipe's quant_gbps, where x and dy
//         are read as BF16 and written as rowwise + columnwise codes (4 bytes an element) and W read as FP32 and
//         written twice as codes (6 bytes); current scaling reads x, dy and W once more for their amax (+2, +2, +4).
// fit() picks bf16_tflops and each quant_gbps so that the model gives the calibration's measured layer times at its
// shape exactly; the GEMM rates and elementwise_gbps are taken as measured. Away from that shape the model is a
// roofline extrapolation: it assumes the GEMMs keep their rates, which small GEMMs do not (both lose, FP8 more).
struct Fp8Rates {
  double bf16_tflops = 0, elementwise_gbps = 0;
  double fp8_tflops[3] = {}, quant_gbps[3] = {};  // Fp8RecipeKind order
  static Fp8Rates fit(const Fp8Calibration& c);
};

// One layer's estimate: forward + backward of one micro-batch, in milliseconds.
struct Fp8LayerEstimate {
  double bf16_ms = 0, fp8_ms = 0;
  bool fp8() const { return fp8_ms < bf16_ms; }
};

// The rule an amp::Policy consults for each layer its FP8 precision covers (Policy::fp8_rule): the layer runs FP8
// where the model says FP8 is faster at its shape with `tokens` rows per micro-batch, else BF16 (as an override to
// BF16 would run it: its norm writes BF16, its weight a cached BF16 copy, no FP8 metas). By default only layers on a
// CUDA device are judged (the rates are a GPU's; the CPU's FP8 exists for numerics); `on_cpu_too` judges CPU layers
// as well (a CPU run choosing the layers a GPU run would). The decisions depend on shapes only, so every
// micro-batch, rank and resumed run makes the same ones; each is recorded for report().
class Fp8GemmRule {
 public:
  Fp8GemmRule(Fp8Calibration calibration, int64_t tokens, bool on_cpu_too = false);

  Fp8LayerEstimate estimate(Fp8RecipeKind recipe, int64_t in, int64_t out) const;
  // Whether the layer at `path` (W [out, in] on `device`) runs FP8 under `recipe`; records the decision.
  bool use_fp8(std::string_view path, Fp8RecipeKind recipe, int64_t in, int64_t out, Device device) const;

  struct Decision {
    std::string path;
    Fp8RecipeKind recipe = Fp8RecipeKind::Delayed;
    int64_t in = 0, out = 0;
    Fp8LayerEstimate estimate;
  };
  std::vector<Decision> decisions() const;  // by path, each layer once
  // "fp8 layers (rule: <device>; 8192 tokens per micro-batch): 66 of 88 judged run FP8; [2048 -> 2048] x22 BF16
  // (fp8 0.306 ms, bf16 0.285 ms), [2048 -> 6144] x22 FP8 (...), ...": the decisions by layer shape, for a program
  // to print after its first step; "" while no layer has been judged (a CPU run, or before the first forward).
  std::string report() const;

  const Fp8Calibration& calibration() const { return calibration_; }
  const Fp8Rates& rates() const { return rates_; }
  int64_t tokens() const { return tokens_; }

 private:
  Fp8Calibration calibration_;
  Fp8Rates rates_;
  int64_t tokens_;
  bool on_cpu_too_;
  mutable std::mutex mutex_;
  mutable std::map<std::string, Decision, std::less<>> decisions_;
};

// `rule`'s report, "" without a rule (--fp8-layers all) or before it has judged a layer: what a program prints.
std::string fp8_rule_report(const std::shared_ptr<const Fp8GemmRule>& rule);

// The rule a program's flags name (train_gpt's --fp8-layers and --fp8-calibration): "all" gives none (every layer the
// policy gives FP8 runs FP8); "auto" the rule fitted to the calibration file (the H200's when `calibration` is empty)
// for `tokens` rows per micro-batch.
std::shared_ptr<const Fp8GemmRule> fp8_rule_named(std::string_view layers, const std::string& calibration,
                                                  int64_t tokens);

}  // namespace mpt::amp
