// src/deploy/writers.h: the two export writers (GGUF, compressed-tensors) and their plans.
#pragma once

#include <filesystem>
#include <vector>

#include "deploy/quantized_tensor.h"

namespace mpt::deploy::detail {

std::vector<TensorPlan> gguf_plan(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                  const ExportOptions& options);
int64_t write_gguf(const ModelView& view, const std::vector<ExportTensor>& tensors, const ExportOptions& options,
                   const std::filesystem::path& out);

std::vector<TensorPlan> ct_plan(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                const ExportOptions& options);
int64_t write_compressed_tensors(const ModelView& view, const std::vector<ExportTensor>& tensors,
                                 const ExportOptions& options, const std::filesystem::path& out);

}  // namespace mpt::deploy::detail
