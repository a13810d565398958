// src/deploy/quantized_tensor.h: the tensors an export writes: each view tensor as F32, as codes + scales of the export's scheme, or as Q4_K blocks.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "deploy/model_view.h"
#include "mpt/amp/qat.h"
#include "mpt/deploy/export.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::deploy::detail {

struct ExportTensor {
  const ViewTensor* source;
  Tensor value;                          // f32, in the file's row order (Llama's q/k reordered for GGUF)
  std::optional<ops::GroupQuantized> q;  // a quantized Linear weight of the scheme (gguf-q4_k: its Q8_0 fallback)
  std::string q4_k;                      // gguf-q4_k: the Q4_K blocks (io::quantize_q4_k) of a quantized Linear weight
  std::string note;                      // why the type is not the format's: "Q4_K fallback: width 384 is not ..."
};

// The Linear weights the format quantizes, and the scheme of their codes and scales: scheme()'s under
// QatPolicy::linears_but_head; for gguf-q4_k the same Linears, with gguf-q8_0's scheme (its fallback). None for
// gguf-f32.
std::optional<amp::QatPolicy> weight_policy(const ExportOptions& options);

// How the format writes a Linear weight of `width` inputs that weight_policy gives `spec`: as Q4_K blocks (gguf-q4_k,
// a width that is a multiple of 256), else as `spec`'s codes and scales. Throws when GGUF's 32-wide blocks do not
// fit the width or the spec's group; `what` names the weight ("blk.0.attn_q.weight (f32[64, 48])").
enum class WeightCoding : uint8_t { Q4_K, Scheme };
WeightCoding weight_coding(const ExportOptions& options, const ops::QuantSpec& spec, int64_t width,
                           std::string_view what);

// The learned scales (LSQ) an export writes a Linear weight's codes on: `scale` (the Linear's, in our row order) when
// the format writes `spec` codes and the weight learned its scales for `spec` (FP16 rounding aside); undefined for a
// weight without learned scales and for gguf-q4_k (its own post-training quantization, fallbacks included). Throws,
// naming `what`, when the weight learned them for another spec (another format or group size).
Tensor learned_scales(const Tensor& scale, const std::optional<ops::QuantSpec>& learned, const ops::QuantSpec& spec,
                      const ExportOptions& options, std::string_view what);

// Every tensor of `view` as `options` writes it: the model's Linear weights quantized (weight_policy, weight_coding),
// after the GGUF rotary reordering when `gguf`. Checks the widths first: throws naming the tensor, its shape and the
// block or group it must fit.
std::vector<ExportTensor> export_tensors(const ModelView& view, const ExportOptions& options);

}  // namespace mpt::deploy::detail
