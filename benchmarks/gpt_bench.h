// benchmarks/gpt_bench.h: what the GPT benchmarks share: the model-shape options and a batch of random tokens.
#pragma once

#include <mpt/mpt.h>

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "mpt/nn/gpt.h"
#include "mpt/nn/llama.h"

namespace mpt::bench {

// --layers, --heads, --embd, --seq and (when `vocab`) --vocab, writing into config (its values are the defaults).
inline void add_gpt_shape_options(CLI::App& app, nn::GPTConfig& config, bool vocab = true) {
  app.add_option("--layers", config.n_layer, "transformer blocks");
  app.add_option("--heads", config.n_head, "attention heads");
  app.add_option("--embd", config.n_embd, "model width");
  app.add_option("--seq", config.block_size, "sequence length");
  if (vocab) app.add_option("--vocab", config.vocab_size, "vocabulary size");
}

// --moments: AdamW's moment storage ("f32", "bf16" or "int8": 8-bit blockwise), the optimizer-state half of a
// step's memory (FP8-LM's memory saving includes lower-precision moments).
inline void add_moments_option(CLI::App& app, std::string& moments) {
  app.add_option("--moments", moments, "AdamW moments: f32, bf16 or int8 (8-bit blockwise)")
      ->check(CLI::IsMember({"f32", "bf16", "int8"}));
}
inline ops::MomentStorage moment_storage(const std::string& moments) {
  return moments == "bf16" ? ops::MomentStorage::BF16 : moments == "int8" ? ops::MomentStorage::Int8
                                                                          : ops::MomentStorage::F32;
}

// --fp8-layers and --fp8-calibration (train_gpt's): which layers an FP8 precision runs in FP8 on a GPU.
struct Fp8RuleOptions {
  std::string layers = "auto", calibration;
  void add(CLI::App& app) {
    app.add_option("--fp8-layers", layers, "FP8 precisions on a GPU: auto (a layer runs FP8 where the per-shape rule "
                   "judges it faster than BF16; docs/fp8.md) or all")->check(CLI::IsMember({"auto", "all"}));
    app.add_option("--fp8-calibration", calibration, "the rule's measured rates (bench_fp8 --calibration FILE on "
                   "your GPU; default an H200's)");
  }
  // Sets policy.fp8_rule for an FP8 policy, `tokens` rows per micro-batch.
  void apply(amp::Policy& policy, int64_t tokens) const {
    if (policy.fp8_state) policy.fp8_rule = amp::fp8_rule_named(layers, calibration, tokens);
  }
};

// --residual (train_gpt's): the residual stream's dtype (amp::Policy::residual), "f32" (the masters') by default.
struct DtypeOptions {
  std::string residual = "f32", grads = "f32";
  void add(CLI::App& app) {
    app.add_option("--residual", residual, "the residual stream's dtype: f32 (the FP32 masters') or bf16 / f16 "
                   "(llm.c's)")->check(CLI::IsMember({"f32", "bf16", "f16"}));
    app.add_option("--grads", grads, "the FP32 masters' gradient dtype: f32 (PyTorch AMP's) or bf16 (llm.c's)")
        ->check(CLI::IsMember({"f32", "bf16"}));
  }
  void apply(amp::Policy& policy) const {
    if (residual != "f32") policy.residual_in(amp::parse_residual_dtype(residual));
    if (grads != "f32") policy.grads_in(amp::parse_grad_dtype(grads));
  }
  // The run's name in tables, JSON and checkpoints: "bf16", or "bf16+residual-bf16+grads-bf16" (train_gpt's).
  std::string label(const std::string& precision) const {
    amp::Policy policy;
    apply(policy);
    return amp::precision_name(precision, policy);
  }
};

// Inputs and next-token targets, [batch, block_size] i64 each, of uniformly random tokens (seeded) on the CPU.
inline std::pair<Tensor, Tensor> random_tokens(const nn::GPTConfig& config, int64_t batch, uint64_t seed = 7) {
  Generator gen(seed);
  const Tensor ids = Tensor::uniform({batch, config.block_size + 1}, 0, static_cast<double>(config.vocab_size),
                                     DType::F32, Device::cpu(), gen)
                         .to(DType::I64);
  return {ids.slice(1, 0, config.block_size).contiguous(), ids.slice(1, 1, config.block_size + 1).contiguous()};
}

// GPT-2 of `config`, or (model_name "llama") the Llama of the same shape: kv_heads (0: config.n_head) key/value
// heads, an ffn-wide SwiGLU (0: a GPT block's FLOPs, rounded up to 32), untied head.
inline std::unique_ptr<nn::LanguageModel> make_model(const std::string& model_name, const nn::GPTConfig& config,
                                                     int64_t kv_heads, int64_t ffn) {
  if (model_name != "llama") return std::make_unique<nn::GPT>(config);
  nn::LlamaConfig c;
  c.vocab_size = config.vocab_size, c.block_size = config.block_size, c.n_layer = config.n_layer;
  c.n_head = config.n_head, c.n_kv_head = kv_heads > 0 ? kv_heads : config.n_head, c.n_embd = config.n_embd;
  c.intermediate_size = ffn, c.ffn_multiple_of = 32, c.where = config.where;
  return std::make_unique<nn::Llama>(c);
}

// A profile range's name with its layer indices folded ("h.3.mlp" -> "h.*.mlp"), so that a table sums over layers.
inline std::string fold_layer_indices(std::string_view name) {
  std::string out;
  for (size_t i = 0; i < name.size(); ++i) {
    if (name[i] >= '0' && name[i] <= '9' && i > 0 && name[i - 1] == '.') {
      while (i + 1 < name.size() && name[i + 1] >= '0' && name[i + 1] <= '9') ++i;
      out += '*';
    } else {
      out += name[i];
    }
  }
  return out;
}

}  // namespace mpt::bench
