// mpt/nn/language_model.h: what a causal language model offers a training loop (GPT-2 and Llama both), and its KV cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mpt/nn/module.h"
#include "mpt/ops/softmax.h"

namespace mpt::nn {

// The keys and values of the positions a model has already seen, per block, so that generating a token runs the model
// on that token alone (forward_cached). Inference only.
struct KvCache {
  std::vector<Tensor> k, v;  // per block: [B, kv heads, capacity, head_dim], valid up to `length`
  int64_t length = 0;        // positions held
  void clear() { length = 0; }
};

// A decoder-only transformer over token ids: one training loop (examples/train_gpt) and the data-parallel, checkpoint
// and generation code drive any family through this interface.
class LanguageModel : public Module {
 public:
  using Module::Module;

  // ids [B, T] (i64 or i32, T <= context_length()) -> logits [B, T, vocab]. `lengths` ((B,) i32 on the CPU): the real
  // tokens of each sample of a right-padded batch; attention ignores the padding keys (ops::AttentionOptions).
  virtual Tensor forward(const Tensor& ids, const Tensor& lengths = {}) const = 0;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  // The final hidden states [B, T, width()] (after the last norm), for other heads.
  virtual Tensor features(const Tensor& ids, const Tensor& lengths = {}) const = 0;
  // Cross-entropy of forward(ids, lengths) against targets [B, T] (-100 ignored): a scalar f32, mean or sum.
  Tensor loss(const Tensor& ids, const Tensor& targets, ops::LossReduction reduction = ops::LossReduction::Mean,
              const Tensor& lengths = {}) const;
  // Generation: ids [B, t] after the cache's `length` positions (a prompt into an empty cache, then one token at a
  // time); appends their keys and values and returns the last position's logits [B, vocab]. Records no gradient.
  virtual Tensor forward_cached(const Tensor& ids, KvCache& cache) const = 0;

  virtual void set_activation_checkpointing(bool on) = 0;
  virtual int64_t context_length() const = 0;  // the longest sequence
  virtual int64_t vocab_size() const = 0;
  virtual int64_t width() const = 0;     // the residual stream's width
  virtual int64_t num_layers() const = 0;
  // The module path of block i ("h.3", "model.layers.3"): precision policies address blocks by it.
  virtual std::string block_path(int64_t i) const = 0;
  // Stops training the token (and position) embeddings and blocks [0, blocks), and so whatever is tied to them.
  virtual void freeze(int64_t blocks) = 0;
  // Model FLOPs of one training token at sequence length `seq` (PaLM's appendix B, nanoGPT's estimate_mfu): 6 per
  // parameter of the blocks and the LM head, plus attention's 12 n_layer width seq (scores and values).
  virtual double flops_per_token(int64_t seq) const = 0;
  // One line for logs: "GPT-2 2 layers, 2 heads, 64 wide, context 64".
  virtual std::string describe() const = 0;

  // The LM head's output width in loss(): the vocabulary rounded up to a multiple of `multiple` (0 or 1: never
  // padded; -1, the default: 64 on CUDA when the vocabulary is not a multiple of 8, as GPT-2's 50257, else none).
  // loss() then reads logits [B, T, padded] whose extra columns take no part (ops::CrossEntropyOptions::classes):
  // the same 50257-class model, its GEMMs all of padded, aligned sizes and no logits copied (llm.c's Vp). forward()
  // keeps returning [B, T, vocab]. Not part of the checkpointed config. GPT and Llama (tied or untied head) both.
  void set_padded_head(int64_t multiple);
  int64_t padded_head_width(Device device) const {
    return padded_head_width(vocab_size(), padded_head_, device.is_cuda());
  }
  static int64_t padded_head_width(int64_t vocab, int64_t multiple, bool cuda);

 protected:
  // The logits loss() reads: [B, T, W] with W >= vocab_size(), whose first vocab_size() columns are the classes (the
  // rest padding that takes no part; GPT::set_padded_head). Default: forward(ids, lengths).
  virtual Tensor loss_logits(const Tensor& ids, const Tensor& lengths) const { return forward(ids, lengths); }

 private:
  int64_t padded_head_ = -1;
};

// Token cross-entropy: logits [..., V] against targets [...] (-100 ignored), reduced to a scalar f32 (f64 for f64)
// mean or sum.
Tensor cross_entropy(const Tensor& logits, const Tensor& targets,
                     ops::LossReduction reduction = ops::LossReduction::Mean);

}  // namespace mpt::nn
