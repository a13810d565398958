// src/deploy/model_view.h: a GPT or Llama as the exporters see it: architecture settings and every tensor with its published names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/nn/module.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::deploy::detail {

struct ViewTensor {
  std::string gguf_name;  // llama.cpp's: "blk.0.attn_qkv.weight"
  std::string hf_name;    // Hugging Face's: "transformer.h.0.attn.c_attn.weight", "model.layers.0.self_attn.q_proj.weight"
  Tensor value;           // mptrain's layout: a Linear weight [out, in], on the CPU, contiguous
  std::string linear;     // the Linear module's path when this is a Linear's weight (a candidate for quantization)
  // llama.cpp's rotary layout for Llama's q_proj / k_proj weights: the rows of each head reordered from Hugging Face's
  // rotate_half halves to interleaved pairs (convert_hf_to_gguf.py's permute); 0: none, else the head count.
  int64_t rope_heads = 0;
  bool hf_transposed = false;  // GPT-2's Conv1D weights are stored [in, out] by Hugging Face
  // A Linear that learned its weight scales (LSQ, Linear::learn_weight_scale): them (on the CPU, contiguous, our row
  // order) and the spec they were learned for; undefined / none otherwise.
  Tensor weight_scale{};
  std::optional<ops::QuantSpec> weight_scale_spec{};
};

struct ModelView {
  std::string arch;  // "gpt2" or "llama"
  int64_t vocab = 0, context = 0, layers = 0, heads = 0, kv_heads = 0, embd = 0, ffn = 0;
  double norm_eps = 0, rope_theta = 0;
  bool tied_head = false;
  std::vector<ViewTensor> tensors;  // in GGUF's conventional order
};

// Throws naming the model's type when it is neither an nn::GPT nor an nn::Llama.
ModelView view_of(const nn::Module& model);

// Llama's rotary reordering of a [heads * head_dim, in] weight: within each head, row (half h, index i) moves to
// 2 i + h (convert_hf_to_gguf.py: reshape(heads, 2, head_dim / 2, in).swapaxes(1, 2)).
Tensor rope_interleave(const Tensor& w, int64_t heads);

}  // namespace mpt::deploy::detail
