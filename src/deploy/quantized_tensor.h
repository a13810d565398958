// src/deploy/quantized_tensor.h: the tensors an export writes: each view tensor as F32 or as codes + scales of the export's scheme.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "deploy/model_view.h"
#include "mpt/deploy/export.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::deploy::detail {

struct ExportTensor {
  const ViewTensor* source;
  Tensor value;                            // f32, in the file's row order (Llama's q/k reordered for GGUF)
  std::optional<ops::GroupQuantized> q;    // set for a quantized Linear weight
};

// Every tensor of `view` as `options` writes it: the model's Linear weights quantized with the format's scheme
// (QatPolicy::linears_but_head), after the GGUF rotary reordering when `gguf`. Checks the widths first: throws naming
// the tensor, its shape and the block or group it must fit.
std::vector<ExportTensor> export_tensors(const ModelView& view, const ExportOptions& options);

}  // namespace mpt::deploy::detail
