// mpt/deploy/quantize.h: a model's Linear weights replaced by what an export's consumer dequantizes, to run mptrain on exactly the exported weights.
#pragma once

#include <string>
#include <vector>

#include "mpt/deploy/export.h"
#include "mpt/nn/module.h"

namespace mpt::deploy {

// Every weight `options`' format quantizes (QatPolicy::linears_but_head's Linears) replaced, in place and under
// no_grad, by the values the file's consumer dequantizes from it: for gguf-q4_k, io::dequantize_gguf of
// io::quantize_q4_k of the row-major weight (Q4_K), or its Q8_0 fallback's values where the width is not a multiple
// of 256; for the other formats, ops::fake_quantize with scheme()'s weight spec (nn::quantize_weights' values).
// Weights only: inputs stay unquantized (llama.cpp and vLLM quantize activations their own way). Nothing for
// gguf-f32. Llama's rotary row reordering for GGUF moves whole rows, so it changes none of these values. Throws
// before changing anything when the format cannot hold a weight (a GGUF width not a multiple of 32). Returns the
// paths of the weights it replaced, as nn::quantize_weights does.
std::vector<std::string> apply_export_quantization(nn::Module& model, const ExportOptions& options);

}  // namespace mpt::deploy
