// src/deploy/model_view.cpp: GPT-2's and Llama's tensors under their llama.cpp and Hugging Face names.
#include "deploy/model_view.h"

#include <fmt/format.h>

#include <map>

#include "mpt/core/error.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/layers.h"
#include "mpt/nn/llama.h"

namespace mpt::deploy::detail {

namespace {

Tensor host(const Tensor& t) { return t.to(Device::cpu()).contiguous(); }

// The parameter `name` of `model` (state_dict names).
Tensor param(const nn::Module& model, const std::string& name) {
  for (const auto& p : model.named_parameters())
    if (p.name == name) return host(p.tensor);
  MPT_THROW("[export] the model has no parameter '{}'", name);
}

ModelView gpt_view(const nn::GPT& m) {
  const nn::GPTConfig& c = m.config();
  ModelView v{"gpt2", c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_head, c.n_embd, 4 * c.n_embd, 1e-5, 0, true, {}};
  const auto add = [&](std::string gguf, const std::string& ours, bool linear = false) {
    v.tensors.push_back({std::move(gguf), "transformer." + ours, param(m, ours),
                         linear ? ours.substr(0, ours.size() - std::string(".weight").size()) : std::string(), 0,
                         linear});
  };
  add("token_embd.weight", "wte.weight");
  add("position_embd.weight", "wpe.weight");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = fmt::format("h.{}.", l), b = fmt::format("blk.{}.", l);
    const auto both = [&](const std::string& gguf, const std::string& ours, bool linear) {
      add(b + gguf + ".weight", h + ours + ".weight", linear);
      if (c.bias) add(b + gguf + ".bias", h + ours + ".bias");
    };
    both("attn_norm", "ln_1", false);
    both("attn_qkv", "attn.c_attn", true);
    both("attn_output", "attn.c_proj", true);
    both("ffn_norm", "ln_2", false);
    both("ffn_up", "mlp.c_fc", true);
    both("ffn_down", "mlp.c_proj", true);
  }
  add("output_norm.weight", "ln_f.weight");
  if (c.bias) add("output_norm.bias", "ln_f.bias");
  return v;
}

ModelView llama_view(const nn::Llama& m) {
  const nn::LlamaConfig& c = m.config();
  ModelView v{"llama", c.vocab_size, c.block_size, c.n_layer, c.n_head, c.n_kv_head, c.n_embd, c.ffn_size(),
              c.norm_eps, c.rope_theta, c.tie_embeddings, {}};
  const auto add = [&](std::string gguf, const std::string& ours, bool linear = false, int64_t rope = 0) {
    v.tensors.push_back({std::move(gguf), ours, param(m, ours),
                         linear ? ours.substr(0, ours.size() - std::string(".weight").size()) : std::string(), rope,
                         false});
  };
  add("token_embd.weight", "model.embed_tokens.weight");
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = fmt::format("model.layers.{}.", l), b = fmt::format("blk.{}.", l);
    add(b + "attn_norm.weight", h + "input_layernorm.weight");
    add(b + "attn_q.weight", h + "self_attn.q_proj.weight", true, c.n_head);
    add(b + "attn_k.weight", h + "self_attn.k_proj.weight", true, c.n_kv_head);
    add(b + "attn_v.weight", h + "self_attn.v_proj.weight", true);
    add(b + "attn_output.weight", h + "self_attn.o_proj.weight", true);
    add(b + "ffn_norm.weight", h + "post_attention_layernorm.weight");
    add(b + "ffn_gate.weight", h + "mlp.gate_proj.weight", true);
    add(b + "ffn_up.weight", h + "mlp.up_proj.weight", true);
    add(b + "ffn_down.weight", h + "mlp.down_proj.weight", true);
  }
  add("output_norm.weight", "model.norm.weight");
  if (!c.tie_embeddings) add("output.weight", "lm_head.weight", true);  // the policy keeps the head in F32
  return v;
}

}  // namespace

// Each Linear weight's learned scales (LSQ), from its module.
void add_learned_scales(const nn::Module& model, ModelView& v) {
  std::map<std::string, const nn::Linear*> linears;
  for (const auto& [name, module] : model.named_modules())
    if (const auto* l = dynamic_cast<const nn::Linear*>(module); l != nullptr && l->weight_scale().defined())
      linears[module->path()] = l;
  for (ViewTensor& t : v.tensors) {
    const auto it = t.linear.empty() ? linears.end() : linears.find(t.linear);
    if (it == linears.end()) continue;
    t.weight_scale = host(it->second->weight_scale());
    t.weight_scale_spec = it->second->weight_scale_spec();
  }
}

ModelView view_of(const nn::Module& model) {
  ModelView v;
  if (const auto* g = dynamic_cast<const nn::GPT*>(&model)) v = gpt_view(*g);
  else if (const auto* l = dynamic_cast<const nn::Llama*>(&model)) v = llama_view(*l);
  else
    MPT_THROW("[export] a {} cannot be exported: the exporters know GPT-2 (nn::GPT) and Llama (nn::Llama)",
              model.type_name());
  add_learned_scales(model, v);
  return v;
}

Tensor rope_interleave(const Tensor& w, int64_t heads) {
  const int64_t rows = w.shape()[0], in = w.shape()[1], d = rows / heads;
  MPT_CHECK(rows % heads == 0 && d % 2 == 0, "[export] cannot reorder a {} weight into {} rotary heads", w.meta_str(),
            heads);
  return w.reshape({heads, 2, d / 2, in}).transpose(1, 2).contiguous().reshape({rows, in});
}

}  // namespace mpt::deploy::detail
