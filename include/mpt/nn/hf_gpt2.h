// mpt/nn/hf_gpt2.h: nn::GPT weights in Hugging Face's GPT-2 layout (GPT2LMHeadModel's safetensors and config.json).
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <string_view>

#include "mpt/nn/gpt.h"

namespace mpt::nn {

// The GPT's parameters as GPT2LMHeadModel.save_pretrained stores them: "transformer." + our name, the Conv1D
// weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj) transposed to [in, out], the LM head left out (tied to
// transformer.wte.weight). Contiguous F32 CPU tensors, bit-identical to the parameters (a transpose is exact). A GPT
// without biases (config.bias false) gets zero biases: GPT-2 always has them, and zeros compute the same function.
nn::StateDict hf_gpt2_state_dict(const nn::GPT& model);

// Copies Hugging Face GPT-2 tensors into `model` (converting dtype). Names may carry the "transformer." prefix or not
// (GPT2Model and the hub's gpt2 checkpoints omit it); the causal-mask buffers "h.N.attn.bias" and
// "h.N.attn.masked_bias" of older checkpoints are ignored, and an "lm_head.weight" must equal wte (GPT-2 ties them).
// A missing or unexpected name or a wrong shape throws naming `where`, the tensor and what was expected, before
// anything is copied. A model without biases requires the file's biases to be zero.
void load_hf_gpt2_state_dict(nn::GPT& model, const nn::StateDict& tensors, const std::string& where = "tensors");
// The same checks and conversion without loading: `tensors` by model's parameter names, in its layout.
nn::StateDict from_hf_gpt2_state_dict(const nn::GPT& model, const nn::StateDict& tensors,
                                      const std::string& where = "tensors");

// config.json of GPT2LMHeadModel for `config` (activation gelu_new, LayerNorm epsilon 1e-5, tied embeddings).
std::string hf_gpt2_config_json(const nn::GPTConfig& config);
// The GPTConfig a GPT-2 config.json describes (vocab_size, n_positions, n_layer, n_head, n_embd; dropout from
// resid_pdrop). Settings that compute a different function than nn::GPT (another activation, epsilon, n_inner,
// untied embeddings, layer-scaled or unscaled attention) are refused naming the key.
nn::GPTConfig parse_hf_gpt2_config(std::string_view json_text, const std::string& where = "config.json");

// `dir`/model.safetensors (metadata {"format": "pt"}, which transformers requires) and `dir`/config.json: a
// directory GPT2LMHeadModel.from_pretrained(dir) loads. Creates `dir`; replaces both files whole.
void save_hf_gpt2(const std::filesystem::path& dir, const nn::GPT& model);
// A GPT built from `dir`/config.json and loaded from `dir`/model.safetensors (e.g. a save_pretrained directory).
std::unique_ptr<nn::GPT> load_hf_gpt2(const std::filesystem::path& dir, nn::Placement where = {});

}  // namespace mpt::nn
