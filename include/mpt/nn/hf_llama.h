// mpt/nn/hf_llama.h: nn::Llama's config as Hugging Face's LlamaForCausalLM config.json (its weights need no mapping).
#pragma once

#include <string>

#include "mpt/nn/llama.h"

namespace mpt::nn {

// config.json of LlamaForCausalLM for `config` (silu, no biases, rope_theta, rms_norm_eps, tie_word_embeddings). With
// Llama::state_dict() saved as safetensors ({"format": "pt"}) beside it, LlamaForCausalLM.from_pretrained(dir) loads
// the model: the parameter names are Hugging Face's.
std::string hf_llama_config_json(const nn::LlamaConfig& config);

}  // namespace mpt::nn
