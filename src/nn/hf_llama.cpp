// src/nn/hf_llama.cpp: LlamaForCausalLM's config.json for an nn::LlamaConfig, and Llama as an Exportable.
#include "mpt/nn/hf_llama.h"

#include <cstring>
#include <nlohmann/json.hpp>
#include <vector>

#include "io/json_object.h"
#include "mpt/core/error.h"

namespace mpt::nn {
namespace {

using json = nlohmann::json;

// A token id of LlamaConfig's defaults (bos 1, eos 2), or null when the vocabulary has no such token.
json token_id(int64_t id, int64_t vocab_size) { return id < vocab_size ? json(id) : json(nullptr); }

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

}  // namespace

std::string hf_llama_config_json(const nn::LlamaConfig& c) {
  const json j = {
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
      {"bos_token_id", token_id(1, c.vocab_size)},
      {"eos_token_id", token_id(2, c.vocab_size)},
  };
  return j.dump(2) + "\n";
}

nn::LlamaConfig parse_hf_llama_config(std::string_view text, const std::string& where) {
  const json j = io::detail::parse_json_object(text, "hf_llama", where);
  const auto integer = [&](const char* key) { return io::detail::positive_integer(j, key, "hf_llama", where); };
  const auto number = [&](const char* key, double fallback) -> double {
    const auto it = j.find(key);
    if (it == j.end()) return fallback;
    MPT_CHECK(it->is_number() && it->get<double>() > 0, "[hf_llama] {}: key \"{}\": expected a positive number, got {}",
              where, key, it->dump());
    return it->get<double>();
  };
  const auto unsupported = [&](const char* key, const json& want, const char* what) {
    const auto it = j.find(key);
    MPT_CHECK(it == j.end() || it->is_null() || *it == want, "[hf_llama] {}: key \"{}\" is {}, but nn::Llama has {}",
              where, key, it == j.end() ? "" : it->dump(), what);
  };
  if (const auto it = j.find("model_type"); it != j.end())
    MPT_CHECK(*it == "llama", "[hf_llama] {}: key \"model_type\" is {}, expected \"llama\"", where, it->dump());
  unsupported("hidden_act", "silu", "SiLU (SwiGLU)");
  unsupported("attention_bias", false, "no attention biases");
  unsupported("mlp_bias", false, "no MLP biases");
  unsupported("rope_scaling", nullptr, "no rope scaling");
  nn::LlamaConfig c;
  c.vocab_size = integer("vocab_size");
  c.n_embd = integer("hidden_size");
  c.intermediate_size = integer("intermediate_size");
  c.n_layer = integer("num_hidden_layers");
  c.n_head = integer("num_attention_heads");
  c.n_kv_head = j.contains("num_key_value_heads") ? integer("num_key_value_heads") : c.n_head;
  c.block_size = integer("max_position_embeddings");
  c.rope_theta = number("rope_theta", 10000.0);
  c.norm_eps = number("rms_norm_eps", 1e-6);
  if (const auto it = j.find("tie_word_embeddings"); it != j.end() && it->is_boolean()) c.tie_embeddings = *it;
  MPT_CHECK(c.n_embd % c.n_head == 0 && c.n_head % c.n_kv_head == 0,
            "[hf_llama] {}: hidden_size {} must be a multiple of num_attention_heads {}, itself a multiple of "
            "num_key_value_heads {}", where, c.n_embd, c.n_head, c.n_kv_head);
  if (j.contains("head_dim") && !j.at("head_dim").is_null()) {
    MPT_CHECK(integer("head_dim") == c.n_embd / c.n_head, "[hf_llama] {}: key \"head_dim\" is {}, but nn::Llama's "
              "heads are hidden_size / num_attention_heads = {} wide", where, j.at("head_dim").dump(), c.n_embd / c.n_head);
  }
  return c;
}

// ---- Llama as an Exportable ----

std::string Llama::config_json() const {
  const LlamaConfig& c = config_;
  const json j = {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
                  {"n_head", c.n_head},         {"n_kv_head", c.n_kv_head},   {"n_embd", c.n_embd},
                  {"ffn_size", c.ffn_size()},   {"rope_theta", c.rope_theta}, {"norm_eps", c.norm_eps},
                  {"tie_embeddings", c.tie_embeddings}, {"init_seed", c.seed}};
  return j.dump();
}

std::optional<ConfigDifference> Llama::config_difference(std::string_view saved) const {
  const json theirs = json::parse(saved, nullptr, /*allow_exceptions=*/false);
  const json ours = json::parse(config_json());
  for (const auto& [k, v] : ours.items()) {
    if (k == "init_seed") continue;
    const bool has = theirs.is_object() && theirs.contains(k);
    if (!has || theirs.at(k) != v) return ConfigDifference{k, has ? theirs.at(k).dump() : "none", v.dump()};
  }
  return std::nullopt;
}

std::string Llama::export_config_json() const { return hf_llama_config_json(config_); }

StateDict Llama::export_state_dict() const { return state_dict(); }

StateDict Llama::import_state_dict(const StateDict& tensors, const std::string& where) const {
  const StateDict own = state_dict();
  StateDict out;
  std::vector<std::string> unexpected;
  for (const auto& [name, t] : tensors) {
    if (name.ends_with(".rotary_emb.inv_freq")) continue;  // a buffer older transformers saved; we compute it
    if (name == "lm_head.weight" && config_.tie_embeddings) {
      const auto embed = tensors.find("model.embed_tokens.weight");
      MPT_CHECK(embed != tensors.end() && bitwise_equal(t.to(DType::F32), embed->second.to(DType::F32)),
                "[hf_llama] {}: \"lm_head.weight\" differs from \"model.embed_tokens.weight\", but this Llama ties "
                "them (tie_embeddings)", where);
      continue;
    }
    const auto it = own.find(name);
    if (it == own.end()) {
      unexpected.push_back(name);
      continue;
    }
    MPT_CHECK(t.shape() == it->second.shape(), "[hf_llama] {}: tensor \"{}\" has shape {}, expected {} for vocab {}, "
              "width {}, {} heads / {} kv heads, SwiGLU {}", where, name, shape_str(t.shape()),
              shape_str(it->second.shape()), config_.vocab_size, config_.n_embd, config_.n_head, config_.n_kv_head,
              config_.ffn_size());
    out.emplace(name, t);
  }
  MPT_CHECK(unexpected.empty(), "[hf_llama] {}: unexpected tensor \"{}\" ({} in all): a Llama with {} layers has no "
            "such weight", where, unexpected.front(), unexpected.size(), config_.n_layer);
  for (const auto& [name, t] : own)
    MPT_CHECK(out.count(name) == 1, "[hf_llama] {}: missing tensor \"{}\" (expected shape {})", where, name,
              shape_str(t.shape()));
  return out;
}

}  // namespace mpt::nn
