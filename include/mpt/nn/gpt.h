// mpt/nn/gpt.h: the GPT-2 architecture (causal self-attention, MLP, pre-LN block, tied LM head) and its loss.
#pragma once

#include <cstdint>
#include <memory>

#include "mpt/nn/exportable.h"
#include "mpt/nn/language_model.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/softmax.h"

namespace mpt::nn {

struct GPTConfig {
  int64_t vocab_size = 50257;
  int64_t block_size = 1024;  // longest sequence (learned positions)
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;
  double dropout = 0;  // after the embeddings, on each sublayer's output (before the residual add)
  bool bias = true;    // Linear and LayerNorm biases
  Placement where{};
  uint64_t seed = 1337;  // initialisation stream
};

// Multi-head causal self-attention: c_attn (C -> 3C: q, k, v, each split into n_head heads), scaled dot-product
// attention (ops::causal_attention), c_proj (C -> C), dropout. x: [B, T, C] -> [B, T, C].
class CausalSelfAttention : public Module {
 public:
  CausalSelfAttention(const GPTConfig& config, Generator& gen);
  // lengths: optional key padding of a dynamically padded batch (ops::AttentionOptions::lengths).
  Tensor forward(const Tensor& x, const Tensor& lengths = {}) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // x [B, t, C] at positions [pos, pos + t): their keys and values go into k_cache / v_cache ([B, H, capacity, D],
  // made at the prompt in the keys' dtype), and each query attends to every cached position up to its own. pos == 0
  // (a prompt) or t == 1.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos, int64_t capacity) const;
  Linear& c_attn() const { return *c_attn_; }
  Linear& c_proj() const { return *c_proj_; }

 private:
  int64_t n_head_;
  std::shared_ptr<Linear> c_attn_, c_proj_;
  std::shared_ptr<Dropout> drop_;
};

// c_proj(gelu_tanh(c_fc(x))) then dropout, hidden width 4C.
class MLP : public Module {
 public:
  MLP(const GPTConfig& config, Generator& gen);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Linear& c_fc() const { return *c_fc_; }
  Linear& c_proj() const { return *c_proj_; }

 private:
  std::shared_ptr<Linear> c_fc_, c_proj_;
  std::shared_ptr<Dropout> drop_;
};

// Pre-LN transformer block: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)). The second residual add and ln_2 run as
// one fused op (ops::residual_layer_norm).
class Block : public Module {
 public:
  Block(const GPTConfig& config, Generator& gen);
  Tensor forward(const Tensor& x, const Tensor& lengths = {}) const;  // lengths: as CausalSelfAttention's
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // The block on a residual stream whose last addition is pending: the stream before it is x + pending (pending: the
  // previous block's MLP output, or undefined), added by ln_1 as a fused residual norm. Returns (h, mlp_out): the
  // stream after the block is h + mlp_out, left for the next norm to add (llm.c's fused residual + LayerNorm: no
  // separate add pass, no cast of mlp_out into an FP32 stream). The bits of forward()'s stream and gradients.
  std::pair<Tensor, Tensor> forward_pending(const Tensor& x, const Tensor& pending, const Tensor& lengths = {}) const;
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos, int64_t capacity) const;
  CausalSelfAttention& attn() const { return *attn_; }
  MLP& mlp() const { return *mlp_; }

 private:
  std::shared_ptr<LayerNorm> ln_1_, ln_2_;
  std::shared_ptr<CausalSelfAttention> attn_;
  std::shared_ptr<MLP> mlp_;
};

// GPT-2: token (wte) and learned position (wpe) embeddings, n_layer blocks (h.0 ... h.{n-1}), a final LayerNorm
// (ln_f) and an LM head tied to wte (logits = x wte^T; no separate parameter). Parameter names follow nanoGPT
// without its "transformer." prefix. GPT-2 initialisation: weights N(0, 0.02), the residual projections
// (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2 n_layer)), biases 0, LayerNorm 1 and 0, from config.seed.
// Checkpoints store it in Hugging Face's GPT-2 layout (Exportable, implemented in hf_gpt2.cpp).
class GPT : public LanguageModel, public Exportable {
 public:
  explicit GPT(const GPTConfig& config);
  const GPTConfig& config() const { return config_; }
  using LanguageModel::operator();

  // ids [B, T] (i64 or i32, T <= block_size) -> logits [B, T, vocab]. For a dynamically padded batch (data::pad_batch)
  // `lengths` ((B,) i32 on the CPU, each sample's real tokens) masks the padding keys in every attention layer
  // (ops::AttentionOptions::lengths): a sample's real positions then get the logits it gets alone, whatever the padding
  // holds (with right padding and causal attention they would anyway; the mask also keeps the padding positions
  // themselves from attending padding, and lets the CPU kernel skip its key blocks).
  Tensor forward(const Tensor& ids, const Tensor& lengths = {}) const override;
  // The final hidden states [B, T, n_embd] (after ln_f): what forward() feeds the LM head, for other heads (a sequence
  // classifier reads each sample's state at its last real position, lengths[b] - 1).
  Tensor features(const Tensor& ids, const Tensor& lengths = {}) const override;
  // loss() (LanguageModel): cross-entropy against targets [B, T] (targets of -100 are ignored: put them at padding),
  // a scalar (f32), the mean over the counted tokens or (Sum) their sum, for gradient accumulation normalised by a
  // token count.
  // Generation with a KV cache: ids [B, t] are the t tokens after the cache's `length` positions (a prompt into an
  // empty cache, then one token at a time; length + t <= block_size). Appends their keys and values to `cache` and
  // returns the logits of the last one, [B, vocab]. The same function as forward() of the whole sequence at that
  // position (up to the order of its sums), for O(length) work per token instead of O(length^2). Records no
  // gradient. When the cache is full, clear it and give the last tokens again as a prompt (the positions are learned,
  // so the window cannot slide).
  Tensor forward_cached(const Tensor& ids, KvCache& cache) const override;

  // Recompute each block in backward instead of keeping its activations (autograd::checkpoint).
  void set_activation_checkpointing(bool on) override { checkpoint_blocks_ = on; }
  bool activation_checkpointing() const { return checkpoint_blocks_; }
  int64_t context_length() const override { return config_.block_size; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t width() const override { return config_.n_embd; }
  int64_t num_layers() const override { return config_.n_layer; }
  std::string block_path(int64_t i) const override { return "h." + std::to_string(i); }
  void freeze(int64_t blocks) override;  // wte (and so the tied LM head), wpe and blocks [0, blocks)
  double flops_per_token(int64_t seq) const override;
  std::string describe() const override;

  // Exportable: "gpt2"; the GPTConfig fields; hf_gpt2_config_json, hf_gpt2_state_dict and from_hf_gpt2_state_dict.
  std::string model_type() const override { return "gpt2"; }
  std::string config_json() const override;
  std::optional<ConfigDifference> config_difference(std::string_view saved) const override;
  std::string export_config_json() const override;
  StateDict export_state_dict() const override;
  StateDict import_state_dict(const StateDict& tensors, const std::string& where) const override;

  Embedding& wte() const { return *wte_; }
  Embedding& wpe() const { return *wpe_; }
  Block& block(size_t i) const { return (*h_)[i]; }
  LayerNorm& ln_f() const { return *ln_f_; }

 protected:
  Tensor loss_logits(const Tensor& ids, const Tensor& lengths) const override;

 private:
  Tensor head(const Tensor& x, int64_t out_padded) const;  // features [B, T, C] -> logits [B, T, vocab or padded]
  std::string head_path() const;  // "lm_head" under the model's path: what a policy calls the LM head
  // The blocks' output before ln_f, as (x, pending): the stream is x + pending (Block::forward_pending; pending is
  // undefined when the last block added its own MLP output, as checkpointed blocks do).
  std::pair<Tensor, Tensor> trunk(const Tensor& ids, const Tensor& lengths) const;
  // ln_f of the stream x + pending [.., C], stored as `out` says (default: the stream's dtype).
  Tensor final_norm(const std::pair<Tensor, Tensor>& stream, const ops::NormOutput& out = {}) const;
  // ln_f in the dtype the LM head's GEMM reads (its cast folded into the norm).
  Tensor head_norm(const std::pair<Tensor, Tensor>& stream) const;

  GPTConfig config_;
  bool checkpoint_blocks_ = false;
  std::shared_ptr<Embedding> wte_, wpe_;
  std::shared_ptr<Dropout> drop_;
  std::shared_ptr<ModuleList<Block>> h_;
  std::shared_ptr<LayerNorm> ln_f_;
  // Position ids 0..block_size-1 per (device, dtype), made once: a forward uploads nothing.
  mutable std::vector<Tensor> positions_;
};

// What training a GPT needs in memory, estimated from its config before anything is allocated, so that a
// configuration that cannot fit is refused with numbers instead of failing (or swapping) halfway through.
struct TrainingMemoryOptions {
  int64_t batch = 1;                             // sequences per micro-batch
  int64_t seq = 1;                               // tokens per sequence
  int64_t optimizer_bytes_per_parameter = 8;     // AdamW with FP32 moments: 8; 8-bit moments: 2; SGD: 0 or 4
  int64_t compute_copy_bytes_per_parameter = 0;  // cached FP16/BF16 weight copies under autocast: 2
  bool activation_checkpointing = false;
};
struct TrainingMemory {
  int64_t parameters = 0;   // count (the tied LM head adds none)
  int64_t weights = 0;      // bytes: FP32 masters plus compute copies
  int64_t gradients = 0;    // FP32
  int64_t optimizer = 0;    // optimizer state
  int64_t activations = 0;  // saved for backward, the logits and their gradient, the token batch
  int64_t total() const;    // saturates at INT64_MAX instead of overflowing
};
int64_t gpt_parameter_count(const GPTConfig& config);  // equals GPT(config).num_parameters()
TrainingMemory estimate_training_memory(const GPTConfig& config, const TrainingMemoryOptions& options);

}  // namespace mpt::nn
