// src/nn/gpt_memory.cpp: a GPT's parameter count and training-memory estimate, computed from its config alone.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "mpt/core/error.h"
#include "mpt/nn/gpt.h"

namespace mpt::nn {

namespace {

// long double holds every realistic product exactly enough and cannot overflow; results saturate at INT64_MAX.
int64_t saturate(long double bytes) {
  constexpr auto kMax = static_cast<long double>(std::numeric_limits<int64_t>::max());
  return bytes >= kMax ? std::numeric_limits<int64_t>::max() : static_cast<int64_t>(bytes);
}

long double parameter_count(const GPTConfig& c) {
  const long double C = static_cast<long double>(c.n_embd), b = c.bias ? 1 : 0;
  const long double ln = C + b * C;                                   // LayerNorm weight (+ bias)
  const long double block = 2 * ln + (C * 3 * C + b * 3 * C) + (C * C + b * C)  // ln_1, ln_2, c_attn, attn.c_proj
                            + (C * 4 * C + b * 4 * C) + (4 * C * C + b * C);    // mlp.c_fc, mlp.c_proj
  return static_cast<long double>(c.vocab_size + c.block_size) * C + static_cast<long double>(c.n_layer) * block + ln;
}

}  // namespace

int64_t TrainingMemory::total() const {
  return saturate(static_cast<long double>(weights) + gradients + optimizer + activations);
}

int64_t gpt_parameter_count(const GPTConfig& config) { return saturate(parameter_count(config)); }

TrainingMemory estimate_training_memory(const GPTConfig& c, const TrainingMemoryOptions& o) {
  MPT_CHECK(o.batch > 0 && o.seq > 0 && o.optimizer_bytes_per_parameter >= 0 &&
                o.compute_copy_bytes_per_parameter >= 0,
            "[estimate_training_memory] expected batch, seq > 0 and non-negative byte counts, got batch {} seq {} "
            "optimizer {} compute copy {}", o.batch, o.seq, o.optimizer_bytes_per_parameter,
            o.compute_copy_bytes_per_parameter);
  const long double P = parameter_count(c);
  const long double tokens = static_cast<long double>(o.batch) * static_cast<long double>(o.seq);
  const long double C = static_cast<long double>(c.n_embd), V = static_cast<long double>(c.vocab_size);
  const long double L = static_cast<long double>(c.n_layer), H = static_cast<long double>(c.n_head);
  // Saved for backward per token and block, in floats: LayerNorm outputs and statistics, q/k/v in attention's
  // layout, the attention output and its log-sum-exp per head, both projections' outputs, the residual sums, and
  // the MLP's 4C pre- and post-GELU activations; backward's transient 4C gradients ride on top.
  // tests/nn/test_gpt_memory.cpp holds this against measured peaks.
  const long double per_block = 18 * C + 2 * H;
  const long double blocks = o.activation_checkpointing ? L * C + per_block : L * per_block;  // inputs + 1 replay
  // Outside the blocks: embedding sum and ln_f (3C), the logits and their gradient (2V; the fused cross-entropy keeps
  // no softmax), ids + targets (i64).
  const long double per_token_bytes = 4 * (blocks + 3 * C + 2 * V) + 16;
  TrainingMemory m;
  m.parameters = saturate(P);
  m.weights = saturate(P * static_cast<long double>(4 + o.compute_copy_bytes_per_parameter));
  m.gradients = saturate(P * 4);
  m.optimizer = saturate(P * static_cast<long double>(o.optimizer_bytes_per_parameter));
  m.activations = saturate(tokens * per_token_bytes);
  return m;
}

}  // namespace mpt::nn
