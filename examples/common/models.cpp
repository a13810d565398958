// examples/common/models.cpp: GPT-2 or Llama from a run's options; the memory check before building one.
#include "models.h"

#include "mpt/core/error.h"
#include "mpt/core/generator.h"
#include "mpt/core/memory.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/llama.h"

namespace mpt_examples {
namespace {

mpt::nn::GPTConfig gpt_config(const Options& o, int64_t vocab, mpt::Device device) {
  mpt::nn::GPTConfig config;
  config.vocab_size = vocab;
  config.block_size = o.seq;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  config.dropout = o.dropout;
  config.where.device = device;
  config.seed = o.seed;
  return config;
}

}  // namespace

void check_memory(const Options& o, int64_t vocab, mpt::Device device) {
  if (o.model != "gpt") return;
  const bool low_precision = o.precision != "fp32";
  const int64_t optimizer_bytes = o.moments == "int8" ? 2 : o.moments == "bf16" ? 4 : 8;
  const mpt::nn::TrainingMemory m = mpt::nn::estimate_training_memory(
      gpt_config(o, vocab, device),
      {.batch = o.batch, .seq = o.seq, .optimizer_bytes_per_parameter = optimizer_bytes,
       .compute_copy_bytes_per_parameter = low_precision ? 2 : 0, .activation_checkpointing = o.checkpoint});
  const int64_t available = mpt::available_memory(device);
  const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); };
  MPT_CHECK(m.total() <= available,
            "[{}] this configuration needs about {:.3g} GiB on {} ({:.4g}M parameters: {:.3g} GiB of weights, {:.3g} "
            "GiB of gradients, {:.3g} GiB of AdamW state; {:.3g} GiB of activations for batch {} x {}), but about "
            "{:.3g} GiB is available: reduce --batch, --seq, --layers or --embd{}",
            o.program, gib(m.total()), device, static_cast<double>(m.parameters) / 1e6, gib(m.weights),
            gib(m.gradients), gib(m.optimizer), gib(m.activations), o.batch, o.seq, gib(available),
            o.checkpoint ? "" : ", or add --checkpoint-activations");
}

std::unique_ptr<mpt::nn::LanguageModel> make_model(const Options& o, int64_t vocab, mpt::Device device) {
  MPT_CHECK(o.embd % o.heads == 0, "[{}] --embd {} is not a multiple of --heads {}", o.program, o.embd, o.heads);
  mpt::manual_seed(o.seed);  // the dropout stream
  if (o.model == "llama") {
    MPT_CHECK(o.dropout == 0, "[{}] --model llama has no dropout (Llama trains without it); drop --dropout {}",
              o.program, o.dropout);
    MPT_CHECK(o.kv_heads == 0 || o.heads % o.kv_heads == 0, "[{}] --kv-heads {} must divide --heads {} (each "
              "key/value head serves a group of query heads)", o.program, o.kv_heads, o.heads);
    mpt::nn::LlamaConfig c;
    c.vocab_size = vocab;
    c.block_size = o.seq;
    c.n_layer = o.layers;
    c.n_head = o.heads;
    c.n_kv_head = o.kv_heads > 0 ? o.kv_heads : o.heads;
    c.n_embd = o.embd;
    c.ffn_multiple_of = o.embd >= 256 ? 256 : 32;
    c.where.device = device;
    c.seed = o.seed;
    return std::make_unique<mpt::nn::Llama>(c);
  }
  MPT_CHECK(o.model == "gpt", "[{}] unknown --model '{}': expected gpt or llama", o.program, o.model);
  MPT_CHECK(o.kv_heads == 0 || o.kv_heads == o.heads, "[{}] --kv-heads {} is for --model llama (GPT-2 has one "
            "key/value head per query head)", o.program, o.kv_heads);
  return std::make_unique<mpt::nn::GPT>(gpt_config(o, vocab, device));
}

}  // namespace mpt_examples
