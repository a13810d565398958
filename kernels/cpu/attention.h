// kernels/cpu/attention.h: causal attention on the CPU (blocked, online softmax) and the causal softmax rows.
#pragma once

#include <cstdint>

#include "kernels/math/attention.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

// Where the rows of one (B, H, T, D) tensor live, in elements: row i of head h of sample b starts at
// b * batch + h * head + i * row, and its D values are contiguous. All zero (the default): contiguous (B*H, T, D).
// A fused QKV projection's output (B, T, 3, H, D) holds q, k and v at {T * 3HD, D, 3HD} from three base pointers,
// and an output stored (B, T, H, D) sits at {T * HD, D, HD}: attention reads and writes them without head copies.
struct RowStrides {
  int64_t batch = 0, head = 0, row = 0;
};

// q, o: (B*H, T, D), `batch_heads` = B*H independent query heads; scale > 0 (usually 1/sqrt(D)). `qkv` places q (and
// backward's dq; k, v, dk, dv too unless `kv` is given), `out` places o (and backward's do_), `heads` = H splits a head
// index into (b, h) for them. Grouped-query attention: k and v have `kv_heads` = H_kv heads per sample (0: H; H_kv
// divides H), query head h reading kv head h / (H / H_kv), placed by `kv` (all zero: contiguous (B*H_kv, T, D), or
// with H_kv = H wherever `qkv` says). `padding` (optional): per-sample key lengths (math::KeyPadding, host memory
// here); query i of sample b then attends keys j <= i with j < lengths[b], and the kernels skip the key blocks past
// lengths[b]. lse is always contiguous (B*H, T).
struct AttentionShape {
  int64_t batch_heads = 0;
  int64_t seq = 0;
  int64_t head_dim = 0;
  double scale = 0;
  math::KeyPadding padding{};
  int64_t heads = 1;
  RowStrides qkv{}, out{};
  int64_t kv_heads = 0;
  RowStrides kv{};
};

// o_i = sum_{j <= i} softmax_j(scale * q_i . k_j) v_j for every head and query i, and lse_i = the logsumexp
// of row i's scaled scores ((B*H, T); float, double for double). Flash-attention style: blocks of 64 query
// rows against blocks of 64 keys up to the diagonal with an online softmax, so no T x T matrix exists (the
// scratch per thread is one head's K and V as float plus O(64 * (64 + D)), i.e. O(T * D)). Computed in float
// (double for double) from converted inputs, the output rounded once to T. Tasks (head, query block) run on
// OpenMP threads; each row's arithmetic is the same whatever the thread count, so results are bit-identical
// across runs and threads. T: float, double, mpt::f16, mpt::bf16.
template <class T>
void attention_forward(const AttentionShape& s, const T* q, const T* k, const T* v, T* o, math::opmath_t<T>* lse);

// Inputs and outputs of attention_backward: the forward's inputs, its output o and lse, the output gradient
// do_ (o's layout), and the gradients dq, dk, dv (q's layout).
template <class T>
struct AttentionBackwardArgs {
  const T* q;
  const T* k;
  const T* v;
  const T* o;
  const math::opmath_t<T>* lse;
  const T* do_;
  T* dq;
  T* dk;
  T* dv;
  bool accumulate = false;  // dq/dk/dv += the gradients (backward accumulates), else overwritten
};

// Flash-attention-2 backward: D_i = rowsum(do_i * o_i); per block pair P = exp(scale * S - lse) is
// recomputed, dV += P^T dO, dP = dO V^T, dS = P * (dP - D), dQ += scale dS K, dK += scale dS^T Q, all in
// float (double) with per-head accumulators of O(T * D), never T x T. A kv head's dK and dV sum its query heads'
// contributions in those accumulators (query head by query head, in order) and are rounded once. kv heads run on
// OpenMP threads, each owned by one thread, so results are deterministic and race-free.
template <class T>
void attention_backward(const AttentionShape& s, const AttentionBackwardArgs<T>& a);

// attention_forward and attention_backward run an AVX-512 build of their loops when the CPU has AVX-512F/BW/VL
// and FMA, else a generic build (no FMA contraction, so last-bit differences). false forces the generic build
// (for tests); true (the default) restores the choice by CPU.
void set_attention_avx512(bool enabled);

// The causal softmax of the CUDA fallback path (GEMMs + fused softmax), on the CPU as its reference.
// x: `rows` rows of t scores, rows laid out [B*H, t, t] so row r is query r % t: y_j = softmax_j(scale * x)
// over j <= r % t and y_j = 0 beyond; lse[r] (when not null) = the row's logsumexp of scale * x. Computed in
// float (double for double), sums left to right. With `padding`, the row's keys are math::causal_keys(r, t, padding).
// T: float, double, mpt::f16, mpt::bf16.
template <class T>
void causal_softmax_forward(const T* x, T* y, math::opmath_t<T>* lse, int64_t rows, int64_t t, double scale,
                            math::KeyPadding padding = {});

// dx_j = scale * y_j * (dy_j - sum_{k <= i} dy_k y_k) for j <= i = r % t (the row's keys), 0 beyond (the gradient with
// respect to the unscaled scores). Same types as causal_softmax_forward.
template <class T>
void causal_softmax_backward(const T* dy, const T* y, T* dx, int64_t rows, int64_t t, double scale,
                             math::KeyPadding padding = {});

}  // namespace mpt::kernels::cpu
