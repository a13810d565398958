// mpt/deploy/export.h: a trained GPT or Llama written for inference runtimes: GGUF (llama.cpp) and compressed-tensors Hugging Face checkpoints (transformers, vLLM).
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/amp/qat.h"
#include "mpt/data/tokenizer.h"
#include "mpt/nn/language_model.h"
#include "mpt/nn/module.h"

namespace mpt::deploy {

// The formats, by the name mpt-export takes:
//   gguf-f32    GGUF, every tensor F32 (the reference for the quantized files)
//   gguf-q8_0   GGUF, the Linear weights Q8_0: INT8 per output channel, FP16 scales (QatScheme "int8"'s weights)
//   gguf-q4_0   GGUF, the Linear weights Q4_0: INT4 per group (32, or 128 repeated over its 32-blocks), FP16 scales
//               (QatScheme "int4"'s weights)
//   gguf-q4_k   GGUF, the Linear weights Q4_K (llama.cpp's 4-bit k-quant, io::quantize_q4_k): post-training
//               quantization of the FP32 weights, with no QAT scheme of its own; a weight whose width (inputs) is
//               not a multiple of Q4_K's 256-wide blocks is Q8_0 instead (gguf-q8_0's weights), as llama.cpp's own
//               quantizer falls back per tensor. deploy::apply_export_quantization gives mptrain the same weights.
//   ct-int8     compressed-tensors "int-quantized": INT8 weights per channel, dynamic INT8 inputs per token (W8A8)
//   ct-int4     compressed-tensors "pack-quantized": INT4 weights per group, inputs unquantized (W4A16)
//   ct-fp8      compressed-tensors "float-quantized": FP8 E4M3 weights per channel, dynamic FP8 inputs per token
// The quantized weights (but gguf-q4_k's) are ops::quantize_groups of the FP32 weights with the scheme QAT trains
// with (scheme()), so a consumer's dequantized weights are exactly the ones mptrain's QAT forward and quantized
// inference compute with. Embeddings, norms, biases and the LM head stay F32 (QatPolicy::linears_but_head).
enum class Format : uint8_t { GgufF32, GgufQ8_0, GgufQ4_0, CtInt8, CtInt4, CtFp8, GgufQ4_K };
Format parse_format(std::string_view name);  // throws naming the formats
std::string_view format_name(Format f);
bool is_gguf(Format f);

struct ExportOptions {
  Format format = Format::GgufQ8_0;
  int64_t group_size = 32;  // INT4 formats: 32 or 128 (a multiple of 32 for gguf-q4_0)
  // The tokenizer written into a GGUF file's metadata (tokenizer.ggml.*); required for GGUF. compressed-tensors
  // checkpoints carry no tokenizer (transformers reads ids).
  const data::Tokenizer* tokenizer = nullptr;
  std::string name = "mptrain";  // general.name
};

// The QAT scheme whose quantized model the format holds: none for gguf-f32, and none for gguf-q4_k, whose Q4_K
// weights are post-training quantization of the FP32 weights (no QAT scheme trains on them; its Q8_0 fallbacks are
// gguf-q8_0's weights).
std::optional<amp::QatScheme> scheme(const ExportOptions& options);

// What export_model would write: every tensor's name, shape and type ("Q4_0", "F32", "I32 packed INT4", "Q8_0 (Q4_K
// fallback: width 384 is not a multiple of 256)", ...), in file order. Throws, before anything is written, when the
// format cannot hold the model: a model that is neither an nn::GPT nor an nn::Llama, a quantized width not a multiple
// of the block, a group size that does not divide a width, a vocabulary the format's tokenizer fields cannot
// describe, a missing tokenizer.
struct TensorPlan {
  std::string name;
  std::vector<int64_t> shape;
  std::string type;
};
std::vector<TensorPlan> plan_export(const nn::Module& model, const ExportOptions& options);

// Writes the export: a GGUF file at `out`, or a directory `out` (config.json + model.safetensors) for
// compressed-tensors; whole or not at all (temporary, fsync, rename; a directory is written beside and renamed into
// place, replacing an older export only once the new one is complete). Returns the bytes written.
int64_t export_model(const nn::Module& model, const ExportOptions& options, const std::filesystem::path& out);

// The model of a training checkpoint (a save directory, whose latest checkpoint is taken, or a step-* directory): an
// nn::GPT or nn::Llama built from its config.json and loaded with its weights (sizes and checksums verified) on
// `device`. Throws naming the directory for anything else.
std::unique_ptr<nn::LanguageModel> load_checkpoint_model(const std::filesystem::path& checkpoint,
                                                         Device device = Device::cpu());

}  // namespace mpt::deploy
