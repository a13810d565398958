// mpt/nn/llama.h: the Llama architecture (RMSNorm, rotary embeddings, grouped-query attention, SwiGLU) with Hugging
// Face's parameter names.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "mpt/nn/exportable.h"
#include "mpt/nn/language_model.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/rope.h"

namespace mpt::nn {

struct LlamaConfig {
  int64_t vocab_size = 32000;
  int64_t block_size = 2048;  // the longest sequence (the rotary table's positions; HF: max_position_embeddings)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_kv_head = 12;  // key/value heads, dividing n_head (grouped-query attention; 1: multi-query)
  int64_t n_embd = 768;
  // The SwiGLU hidden width (HF: intermediate_size); 0 derives it as Meta's Llama does: 8/3 n_embd rounded up to a
  // multiple of ffn_multiple_of.
  int64_t intermediate_size = 0;
  int64_t ffn_multiple_of = 64;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;         // RMSNorm's eps (HF: rms_norm_eps)
  bool tie_embeddings = false;    // lm_head shares embed_tokens' weight (HF: tie_word_embeddings)
  Placement where{};
  uint64_t seed = 1337;           // initialisation stream

  int64_t head_dim() const { return n_head > 0 ? n_embd / n_head : 0; }
  int64_t ffn_size() const;       // intermediate_size, or the derived width
};

// Named presets: "llama-tiny" (2 layers, 4 heads / 2 kv heads, 64 wide, context 64: seconds on a CPU) and
// "llama-100m" (12 layers, 12 heads / 4 kv heads, 768 wide, context 1024: about 100M parameters with a 32k vocab).
// vocab_size and where are left to the caller.
LlamaConfig llama_preset(const std::string& name);

// Grouped-query causal self-attention: q_proj (C -> H D), k_proj and v_proj (C -> H_kv D), rotary embeddings on q and
// k, ops::causal_attention (kv heads shared by H / H_kv query heads), o_proj (H D -> C). No biases.
class LlamaAttention : public Module {
 public:
  LlamaAttention(const LlamaConfig& config, Generator& gen);
  // f32_grad: x is a norm's f16/bf16 output or FP8 codes of an f32 stream (input_format): the projections' gradients
  // reach it summed in f32 in one pass (ops::fan_out), as when each cast or quantized its own copy.
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const Tensor& lengths = {}, bool f32_grad = false) const;
  // x [B, t, C] at positions [pos, pos + t) (pos == 0 or t == 1): keys and values into caches [B, H_kv, capacity, D].
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                        int64_t capacity) const;
  Linear& q_proj() const { return *q_; }
  Linear& k_proj() const { return *k_; }
  Linear& v_proj() const { return *v_; }
  Linear& o_proj() const { return *o_; }
  // How the input norm stores its output for q_proj, k_proj and v_proj (shared_input_format): their common cast (BF16
  // / FP16 under Autocast, folded into the norm), under FP8 delayed scaling the E4M3 codes of q_proj's input scale
  // (k_proj's and v_proj's input metas made q_proj's), else x's dtype.
  ops::NormOutput input_format(DType x) const;

 private:
  int64_t n_head_, n_kv_head_, head_dim_;
  std::shared_ptr<Linear> q_, k_, v_, o_;
};

// down_proj(silu(gate_proj(x)) * up_proj(x)), the gate fused (ops::swiglu). No biases. gate_proj and up_proj run as
// one GEMM over their packed weights (ops::packed_linear, gated by ops::swiglu_packed) whenever the policy runs both in
// one precision other than FP8 without QAT; FP8 layers run one by one.
class LlamaMLP : public Module {
 public:
  LlamaMLP(const LlamaConfig& config, Generator& gen);
  Tensor forward(const Tensor& x, bool f32_grad = false) const;  // f32_grad: as LlamaAttention::forward's
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // gate_proj's and up_proj's common input format (cast or FP8 codes), as LlamaAttention::input_format.
  ops::NormOutput input_format(DType x) const;
  Linear& gate_proj() const { return *gate_; }
  Linear& up_proj() const { return *up_; }
  Linear& down_proj() const { return *down_; }

 private:
  std::shared_ptr<Linear> gate_, up_, down_;
};

// Pre-norm block: h = x + self_attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)), the second
// residual add and norm fused (ops::residual_rms_norm).
class LlamaBlock : public Module {
 public:
  LlamaBlock(const LlamaConfig& config, Generator& gen);
  Tensor forward(const Tensor& x, const ops::RopeTable& rope, const Tensor& lengths = {}) const;
  // On a stream x + pending (the previous block's MLP output, or undefined): as GPT's Block::forward_pending, the
  // input norm adds it as a fused residual norm and (h, mlp_out) come back for the next norm to add.
  std::pair<Tensor, Tensor> forward_pending(const Tensor& x, const Tensor& pending, const ops::RopeTable& rope,
                                            const Tensor& lengths = {}) const;
  Tensor forward_cached(const Tensor& x, const ops::RopeTable& rope, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                        int64_t capacity) const;
  LlamaAttention& self_attn() const { return *attn_; }
  LlamaMLP& mlp() const { return *mlp_; }

 private:
  std::shared_ptr<RMSNorm> input_norm_, post_norm_;
  std::shared_ptr<LlamaAttention> attn_;
  std::shared_ptr<LlamaMLP> mlp_;
};

// Llama: model.embed_tokens, model.layers.{i} (input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj), model.norm and lm_head (absent when tied): transformers.LlamaForCausalLM's state-dict
// names, so a state_dict() saved as safetensors loads there, and theirs here. Initialisation: N(0, 0.02) weights, the
// residual projections (o_proj, down_proj) N(0, 0.02 / sqrt(2 n_layer)) as GPT-2's, norms 1, from config.seed.
// Checkpoints store it as LlamaForCausalLM stores it (Exportable, implemented in hf_llama.cpp).
class Llama : public LanguageModel, public Exportable {
 public:
  explicit Llama(const LlamaConfig& config);
  const LlamaConfig& config() const { return config_; }
  using LanguageModel::operator();

  Tensor forward(const Tensor& ids, const Tensor& lengths = {}) const override;
  Tensor features(const Tensor& ids, const Tensor& lengths = {}) const override;
  // The KV cache holds H_kv heads per block (GQA's memory saving); a one-token step attends per kv head with its
  // group of queries as rows. The rotary positions follow the cache's length.
  Tensor forward_cached(const Tensor& ids, KvCache& cache) const override;
  void set_activation_checkpointing(bool on) override { checkpoint_blocks_ = on; }
  int64_t context_length() const override { return config_.block_size; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t width() const override { return config_.n_embd; }
  int64_t num_layers() const override { return config_.n_layer; }
  std::string block_path(int64_t i) const override { return "model.layers." + std::to_string(i); }
  void freeze(int64_t blocks) override;  // embed_tokens (and a tied lm_head) and blocks [0, blocks)
  double flops_per_token(int64_t seq) const override;
  std::string describe() const override;

  // Exportable: "llama"; the LlamaConfig fields; hf_llama_config_json; state_dict() as it is (Hugging Face's names),
  // importing with every name and shape checked (a tied lm_head.weight, if present, must equal embed_tokens).
  std::string model_type() const override { return "llama"; }
  std::string config_json() const override;
  std::optional<ConfigDifference> config_difference(std::string_view saved) const override;
  std::string export_config_json() const override;
  StateDict export_state_dict() const override;
  StateDict import_state_dict(const StateDict& tensors, const std::string& where) const override;

  LlamaBlock& block(size_t i) const { return (*layers_)[i]; }
  Embedding& embed_tokens() const { return *embed_; }

 protected:
  // loss()'s logits at padded_head_width() columns (LanguageModel::set_padded_head).
  Tensor loss_logits(const Tensor& ids, const Tensor& lengths) const override;

 private:
  const ops::RopeTable& rope_for(const Tensor& like) const;  // the cached table for like's device and precision
  // The LM head on [N, C]: [N, vocab], or [N, out_padded] when out_padded > vocab (the extra rows of the weight zero).
  Tensor head(const Tensor& x, int64_t out_padded = 0) const;
  std::string head_path() const;                               // the tied LM head's name for a policy: "lm_head"
  // The final norm in the dtype the LM head's GEMM reads (its cast folded into the norm).
  Tensor head_norm(const std::pair<Tensor, Tensor>& stream) const;
  // The blocks' output before the final norm as (x, pending), the stream x + pending (as GPT::trunk).
  std::pair<Tensor, Tensor> trunk(const Tensor& ids, const Tensor& lengths) const;
  // The final norm of the stream x + pending, stored as `out` says (default: the stream's dtype).
  Tensor final_norm(const std::pair<Tensor, Tensor>& stream, const ops::NormOutput& out = {}) const;

  LlamaConfig config_;
  bool checkpoint_blocks_ = false;
  std::shared_ptr<Module> model_;
  std::shared_ptr<Embedding> embed_;
  std::shared_ptr<ModuleList<LlamaBlock>> layers_;
  std::shared_ptr<RMSNorm> norm_;
  std::shared_ptr<Linear> lm_head_;
  mutable std::vector<ops::RopeTable> rope_tables_;
};

}  // namespace mpt::nn
