// mpt/ops/attention.h: causal scaled-dot-product multi-head attention, forward beside backward.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Layout: q, k, v and the output are (B, H, T, D): batch, head, position, head dimension. Two storage layouts run
// without copies: head-major (contiguous (B, H, T, D)) and token-major (a transpose(1, 2) view of a contiguous
// (B, T, H, D): what a projection's output viewed as (B, T, H, D) and transposed is). A model feeds its projections'
// outputs in token-major and views the output back with transpose(1, 2) and reshape to (B, T, H * D), copying nothing:
// the output (and backward's dq, dk, dv) are token-major when q is, else head-major. Operands in any other strides,
// or in a layout other than q's, are copied to q's.
// Grouped-query attention (Llama 2/3's GQA, MQA when H_kv = 1): k and v may have H_kv heads, H_kv dividing q's H;
// query head h reads kv head h / (H / H_kv), in place (the CPU kernel and cuDNN read the H_kv heads; the CUDA GEMM
// fallback alone repeats them in memory). dk and dv sum their group's gradients in f32 and are rounded once.
struct AttentionOptions {
  double scale = 0;  // multiplies q . k; 0 means 1 / sqrt(D). Must be finite and >= 0.
  // Key padding for a dynamically padded batch (optional): (B,) i32 on the CPU, sample b's real length, 1 <= lengths[b]
  // <= T, its positions [lengths[b], T) being padding. No query attends a padding key: query i of sample b attends
  // keys j <= i with j < lengths[b], what PyTorch's scaled_dot_product_attention computes with the boolean mask
  // tril(T, T) & (j < lengths[b]). A padding query (i >= lengths[b]) thus still attends its sample's real keys (no row
  // is empty, so nothing is NaN); padding keys and values get zero gradients. The CPU kernel skips the key blocks
  // past each length. On CUDA host lengths are copied to the device on each call; cuDNN's fused attention runs them as
  // its padding mask (seq_len_kv = lengths, seq_len_q = T, so padding queries still attend their sample's real keys;
  // the padding keys' dk and dv are zeroed), and the GEMM path masks its softmax rows. Undefined, or every length T:
  // plain causal attention. A model with several attention layers passes what prepare_key_lengths returns instead:
  // on a CUDA q, lengths already on q's device are taken as checked and read there (no copy, no host read).
  Tensor lengths{};
};

// A model's key lengths where each of its attention layers reads them: `lengths` ((B,) i32 on the CPU, each in
// [1, T]) checked once and, for a CUDA `device`, copied there once; undefined when `lengths` is or no sample is
// padded (plain causal attention). Giving the result to every layer as AttentionOptions::lengths saves each call's
// check and its copy to the device (a padded GPT step copied them twice per layer, forward and backward, each a wait
// on pageable host memory). `op` names the caller in errors.
Tensor prepare_key_lengths(const Tensor& lengths, int64_t batch, int64_t seq, Device device, const char* op);

struct AttentionResult {
  Tensor out;  // (B, H, T, D), q's dtype
  Tensor lse;  // (B, H, T) f32 (f64 for f64 inputs): each row's logsumexp of the scaled scores, for backward
};

// out_i = sum_{j <= i} softmax_j(scale * q_i . k_j) v_j per batch and head (f32, f16, bf16; f64 on the CPU),
// computed in f32 (f64 for f64) with the output rounded once. The CPU runs a blocked flash-attention
// (online softmax, no T x T matrix). On CUDA, f16/bf16 run cuDNN's fused flash attention when the device and
// shape qualify (sm_80+, D a multiple of 8 and at most 128 or 256 by GPU and pass: cudnn_attention_unsupported in
// kernels/cuda/lib/attention_cudnn.h) and a cuDNN handle can be made; otherwise (and for f32) batched cuBLASLt
// GEMMs around a fused causal-softmax kernel run, materialising the f32 scores (B*H, T, T). Both round the
// probabilities to the inputs' dtype for the second GEMM (f16/bf16 results differ from the CPU's within that
// rounding). Key padding (options.lengths) is described above. The environment variable MPT_ATTENTION=auto|cudnn|gemm
// (default auto) forces a path; cudnn where cuDNN cannot run the call throws mpt::Error saying why.
AttentionResult causal_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                 const AttentionOptions& options = {});

struct AttentionGrads {
  Tensor dq, dk, dv;
};

// The gradients of causal_attention from the output gradient dout (the output's shape and dtype), the
// forward's inputs, its output and lse (the probabilities are recomputed blockwise, never stored). When
// `grads` holds dq, dk and dv (q's and k's shapes, q's dtype; all three or none), the gradients are accumulated
// into them (+=) and they are returned; otherwise new tensors (in q's layout) are returned. Given gradients in the
// kernels' layout (q's) are accumulated into in place; others get fresh gradients added. (cuDNN writes fresh
// gradients: with `grads` given it computes into temporaries that are then added, costing 3 extra (B,H,T,D)
// buffers. Its backward accumulates dq in an f32 buffer, reportedly with atomics: expect run-to-run differences in
// the last bits, unlike the CPU and GEMM paths.)
AttentionGrads causal_attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                                         const Tensor& out, const Tensor& lse, const AttentionOptions& options = {},
                                         AttentionGrads grads = {});

// Causal attention straight from a fused QKV projection's output, in the layout of the GEMMs around it (llm.c's):
// qkv (B, T, 3 * H * D) laid out [q | k | v] with the heads inside each (what split_qkv_heads reads), and out
// (B, T, H * D), the heads side by side, what the output projection reads; lse (B, H, T) as causal_attention's. The
// values of causal_attention on split_qkv_heads(qkv) with its output transposed to (B, T, H, D), bit for bit on the
// CPU, without their head copies: the CPU kernel and cuDNN read q, k, v and write out at their strides, and the
// backward reads dout and writes d(qkv), one (B, T, 3 * H * D) tensor, likewise. (The CUDA GEMM fallback copies to
// head-major and back.) Options as causal_attention's, key padding included.
AttentionResult causal_attention_qkv(const Tensor& qkv, int64_t n_head, const AttentionOptions& options = {});

// Grouped-query form (Llama's: ops::rope_qkv's packed output viewed (B, T, (H + 2 H_kv) * D)): each token row holds
// q's H heads, then k's H_kv, then v's H_kv (n_kv_head dividing n_head); the values of causal_attention on those
// heads, read in place (cuDNN and the CPU kernel; the CUDA GEMM fallback copies them to head-major), out (B, T, H * D)
// and d(qkv) one tensor of qkv's shape. n_kv_head = n_head is the form above.
AttentionResult causal_attention_qkv(const Tensor& qkv, int64_t n_head, int64_t n_kv_head,
                                     const AttentionOptions& options = {});

// Their gradient: d(qkv) (qkv's shape) from dout (B, T, H * D), the forward's qkv, out and lse.
Tensor causal_attention_qkv_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     int64_t n_head, const AttentionOptions& options = {});
Tensor causal_attention_qkv_backward(const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                     int64_t n_head, int64_t n_kv_head, const AttentionOptions& options = {});

struct QkvHeads {
  Tensor q, k, v;  // (B, H, T, D) each, contiguous
};

// A fused QKV projection's output qkv (B, T, 3 * H * D), laid out [q | k | v] with heads inside each, as the
// head-major q, k, v causal_attention reads without copying: one copy forward, and in backward one pass that writes
// dq, dk, dv into the (B, T, 3 * H * D) gradient (the select/transpose views it replaces cost three zero-filled
// buffers and two full-size adds in backward).
QkvHeads split_qkv_heads(const Tensor& qkv, int64_t n_head);

}  // namespace mpt::ops
