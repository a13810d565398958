// src/io/hf_llama.cpp: LlamaForCausalLM's config.json for an nn::LlamaConfig.
#include "mpt/io/hf_llama.h"

#include <nlohmann/json.hpp>

namespace mpt::io {

std::string hf_llama_config_json(const nn::LlamaConfig& c) {
  const nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.n_embd},
      {"intermediate_size", c.ffn_size()},
      {"num_hidden_layers", c.n_layer},
      {"num_attention_heads", c.n_head},
      {"num_key_value_heads", c.n_kv_head},
      {"head_dim", c.head_dim()},
      {"max_position_embeddings", c.block_size},
      {"rope_theta", c.rope_theta},
      {"rms_norm_eps", c.norm_eps},
      {"tie_word_embeddings", c.tie_embeddings},
      {"hidden_act", "silu"},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"torch_dtype", "float32"},
  };
  return j.dump(2) + "\n";
}

}  // namespace mpt::io
