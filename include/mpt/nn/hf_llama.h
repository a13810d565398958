// mpt/nn/hf_llama.h: nn::Llama's config as Hugging Face's LlamaForCausalLM config.json (its weights need no mapping).
#pragma once

#include <string>
#include <string_view>

#include "mpt/nn/llama.h"

namespace mpt::nn {

// config.json of LlamaForCausalLM for `config` (silu, no biases, rope_theta, rms_norm_eps, tie_word_embeddings). With
// Llama::state_dict() saved as safetensors ({"format": "pt"}) beside it, LlamaForCausalLM.from_pretrained(dir) loads
// the model: the parameter names are Hugging Face's.
std::string hf_llama_config_json(const nn::LlamaConfig& config);

// The nn::LlamaConfig of a LlamaForCausalLM config.json (hf_llama_config_json's keys; head_dim, if present, must be
// hidden_size / num_attention_heads). Throws naming `where` and the key for a missing or unsupported setting (an
// activation other than silu, biases, rope scaling).
nn::LlamaConfig parse_hf_llama_config(std::string_view json_text, const std::string& where = "config.json");

}  // namespace mpt::nn
