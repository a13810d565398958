// mpt/ops/rope.h: rotary position embeddings (Llama's, Hugging Face's rotate_half convention), forward beside backward.
#pragma once

#include <cstdint>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// cos and sin of pos * theta^(-2i / D) for positions [0, positions) and i in [0, D / 2): (positions, D / 2) each,
// computed in float64 and rounded once to f32 (f64 when dtype is F64), on `device`. Built once per model and sliced
// by rope() for each call.
struct RopeTable {
  Tensor cos;
  Tensor sin;
  int64_t positions() const { return cos.defined() ? cos.size(0) : 0; }
};
RopeTable rope_table(int64_t positions, int64_t head_dim, double theta = 10000.0, Device device = Device::cpu(),
                     DType dtype = DType::F32);

// x (B, T, H, D), D even (queries or keys straight from their projection, before the head transpose), f32, f16, bf16
// (f64 on the CPU, with an f64 table): position t of every sequence is rotated by the table's row position0 + t
// (position0: the generation offset of a KV cache). Computed in f32 (f64) with one rounding; the backward is the
// inverse rotation. position0 + T must not exceed the table's positions.
Tensor rope(const Tensor& x, const RopeTable& table, int64_t position0 = 0);

// Llama's packed projection output qkv (B, T, n_head + 2 n_kv_head, D): q's heads then k's then v's in each token row
// (ops::packed_linear over q_proj, k_proj, v_proj). Returns `packed`, a new tensor of qkv's shape with q's and k's
// heads rotated as rope() rotates them (the same bits) and v's heads copied, made in one pass; q, k and v are its
// (B, T, heads, D) head slices. Give `packed` to causal_attention_qkv (n_head, n_kv_head), which reads the three in
// place and writes d(packed) as one tensor; the backward rotates dq and dk back and copies dv in one pass, so the
// packed projection receives one gradient. (Gradients through the q, k, v slices reach `packed` too, as any view's.)
struct QkvRotated {
  Tensor packed;
  Tensor q, k, v;
};
QkvRotated rope_qkv(const Tensor& qkv, const RopeTable& table, int64_t n_head, int64_t n_kv_head,
                    int64_t position0 = 0);

}  // namespace mpt::ops
