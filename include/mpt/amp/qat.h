// mpt/amp/qat.h: quantization-aware training as part of the precision policy: which Linear layers see fake-quantized weights and inputs.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "mpt/ops/fake_quant.h"

namespace mpt::amp {

// What a quantized Linear computes with: its weight and (optionally) its input through ops::fake_quantize (the
// straight-through gradient reaches the FP32 master). The deployed model is exactly this: the exporters write the
// weight's codes and scales (ops::quantize_groups), and quantized inference quantizes inputs the same way.
struct QatScheme {
  std::string name;                      // "int8", "int4-g32", ... (logs, checkpoints)
  std::optional<ops::QuantSpec> weight;  // e.g. INT4 per group of 32
  std::optional<ops::QuantSpec> input;   // dynamic activations, e.g. INT8 per token; none: weight-only

  // The schemes `train_gpt --qat` names (weight scales in FP16, so exports hold exactly the trained model):
  //   "int8"  W8A8: INT8 weights per output channel, INT8 inputs per token (dynamic)
  //   "int4"  W4A16: INT4 weights per group of `group_size` (32: GGUF q4_0's block; 128), inputs unquantized
  //   "fp8"   FP8 E4M3 weights per output channel and inputs per token (compressed-tensors' FP8_DYNAMIC)
  // Throws for another name, or an INT4 group size that is not positive.
  static QatScheme named(std::string_view name, int64_t group_size = 32);
  // The scheme a run's precision name records ("fp32+qat-int4-g32", "bf16+qat-int8+lsq": train_gpt's), and whether it
  // learned its weight scales ("+lsq"); std::nullopt for a name without "+qat-". Throws for an unknown scheme.
  struct Recorded;
  static std::optional<Recorded> from_precision(std::string_view precision);
  bool operator==(const QatScheme&) const = default;
};

struct QatScheme::Recorded {
  QatScheme scheme;
  bool learned_scales = false;
};

// Which modules a scheme applies to, by dotted module path like amp::Policy's overrides: the longest matching prefix
// (whole components) wins, else `all`. std::nullopt leaves a module in full precision.
struct QatPolicy {
  std::optional<QatScheme> all;
  std::map<std::string, std::optional<QatScheme>> overrides;

  const QatScheme* at(std::string_view path) const;
  // `scheme` on every Linear but the LM head ("lm_head": GPT's tied head and Llama's), the usual QAT recipe (torchao
  // and llama.cpp keep the output layer in higher precision).
  static QatPolicy linears_but_head(QatScheme scheme);
};

}  // namespace mpt::amp
