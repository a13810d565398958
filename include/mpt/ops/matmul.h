// mpt/ops/matmul.h: GEMM on tensors, C = alpha * op(A) op(B) + beta * C, with FP8 scaling, and its backward.
#pragma once

#include <optional>
#include <utility>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// How an FP8 operand's codes are dequantized: value = code * scale_inv (scale_inv: f32, on the operand's device).
// Block scales are indexed by (row of the operand's non-K dimension, 128-long block of K), whatever the
// operand's transposition: rows = m for A (op(A) is m x k) and rows = n for B (op(B) is k x n); KB = ceil(k/128).
//   PerTensor     one element
//   Block1x128    [rows, KB]              one scale per row and K block (activations and gradients)
//   Block128x128  [ceil(rows/128), KB]    one scale per 128 x 128 tile (weights)
// A 3-d (batched) operand takes a leading batch dimension on block scales: [batch, ...].
// Example: a weight W (N, K) with 128x128 scales s [ceil(N/128), ceil(K/128)] is B with trans_b in the forward
// (y = x W^T: rows = N) and plain B in the input gradient (dx = dy W: rows = K, K blocks along N), where the
// scales are s.t().
struct Fp8Scaling {
  enum class Kind : uint8_t { PerTensor, Block1x128, Block128x128 };
  Kind kind = Kind::PerTensor;
  Tensor scale_inv{};

  static Fp8Scaling per_tensor(Tensor s) { return {Kind::PerTensor, std::move(s)}; }
  static Fp8Scaling block_1x128(Tensor s) { return {Kind::Block1x128, std::move(s)}; }
  static Fp8Scaling block_128x128(Tensor s) { return {Kind::Block128x128, std::move(s)}; }
};

struct MatmulOptions {
  bool trans_a = false;  // use a's transpose (its last two dims swapped)
  bool trans_b = false;
  float alpha = 1.0f;
  // Output dtype. Default: the inputs' dtype for f32, f16, bf16 and f64; f32 for FP8 inputs.
  // Allowed: f32 -> f32; f64 -> f64; f16 -> f16 | f32; bf16 -> bf16 | f32; FP8 -> f32 | bf16 | f16 | f8e4m3 | f8e5m2.
  std::optional<DType> out_dtype{};
  Fp8Scaling scale_a{}, scale_b{};  // required for FP8 operands, and only for them
  Tensor out_scale{};           // FP8 output: f32 scalar; stored codes = saturate(D * out_scale)
  Tensor out_amax{};            // FP8 output, optional: an f32 scalar that receives max |D| (D before out_scale)
  // Optional [n] bias (any float dtype, read as f32) added to every row in FP32 before the one rounding to the
  // output: C = op(a) op(b) + bias + beta C (FP8: after the dequantization scales). Needs alpha == 1, and is not
  // differentiable here (ops::linear records its gradient). CPU: in the GEMM's epilogue (oneDNN's bias argument, or
  // the FP8 kernels' store); CUDA: cuBLASLt's BIAS epilogue, the bias read in the output's dtype (bf16 for FP8
  // inputs with an f32 output), as torch's cuBLASLt addmm does; f64 and FP8 outputs: the product in f32 (f64), the
  // bias added, one rounding.
  Tensor bias{};
  // Optional [m] output beside a 2-d, non-FP8 GEMM with alpha 1 and no bias: receives the row sums of op(a) (the
  // bias gradient of a weight-gradient GEMM dW = dy^T x: db = column sums of dy), in c's dtype. CUDA: cuBLASLt's
  // BGRADA epilogue (no pass of its own); CPU: summed in f32 (f64) beside the GEMM. Not recorded by autograd.
  Tensor bias_grad{};
  // The MLP's GELU fused into its GEMMs (ops::mlp, fp8::fp8_mlp; 2-d, a non-FP8 output, alpha 1, beta 0, not
  // recorded by autograd; FP8 operands too). CUDA: cuBLASLt's GELU_AUX(_BIAS) and DGELU(_BGRAD) epilogues; where
  // cuBLASLt has no algorithm for one (FP8 block scaling, and FP8 DGELU on some GPUs: outside its documented tables)
  // the GEMM runs plain with the GELU kernels after it, as on the CPU, and that kind is not asked again. tanh GELU.
  //  gelu_aux: [m, n], c's dtype, contiguous: receives the pre-activation op(a) op(b) + bias; c = gelu(it).
  //  dgelu_aux: [m, n] pre-activations (c's dtype, contiguous): c = (op(a) op(b)) * gelu'(dgelu_aux) (from the FP32
  //  product on CUDA; from the product rounded to c's dtype on the CPU), and aux_bias_grad, when given ([n], c's
  //  dtype), receives c's column sums: the gradient of the bias that produced the pre-activations.
  Tensor gelu_aux{};
  Tensor dgelu_aux{};
  Tensor aux_bias_grad{};
  // FP8 operands on CUDA: cuBLASLt's FAST_ACCUM (Ada and Hopper accumulate the FP8 products without promoting them to
  // FP32 every few K steps: faster, less exact; TransformerEngine's default for the forward GEMM, with promotion kept
  // for dgrad and wgrad). No effect on other GPUs, on the CPU (its FP8 GEMMs accumulate in FP32) or for other dtypes.
  bool fp8_fast_accum = false;
};

// a: (m, k) or (batch, m, k) (with trans_a: (k, m) or (batch, k, m)); b: (k, n) or (batch, k, n) (trans_b: (n, k)).
// A 2-d operand (or a batch of 1) is broadcast over the other's batch; the result is (m, n) or (batch, m, n).
// More batch dimensions ((..., m, k) x (..., k, n), e.g. attention's (B, H, T, D)) broadcast NumPy-style and are
// flattened onto the 3-d GEMM through recorded views (no FP8 scales, bias or epilogues there); the result is
// (broadcast batch..., m, n).
// Products accumulate in FP32 (f64 in f64) and the result is rounded once to the output dtype. Strided inputs
// are read in place when one of their last two strides is 1 (a transposed view costs nothing); other layouts
// are copied first. CUDA tensors run on cuBLASLt (kernels/cuda/lib; not yet run on a GPU: see docs/design.md).
Tensor matmul(const Tensor& a, const Tensor& b, const MatmulOptions& opt = {});

// c = alpha * op(a) op(b) + beta * c in place (c's dtype is the output dtype; opt.out_dtype, if set, must match).
// beta == 0 never reads c. FP8 outputs need beta == 0.
void matmul_out(const Tensor& a, const Tensor& b, const Tensor& c, float beta = 0.0f, const MatmulOptions& opt = {});

// Gradients of c = alpha * op(a) op(b) for f32, f16, bf16 and f64 operands (opt.out_dtype is ignored; dc is
// converted to the operands' dtype when it differs):
//   dop(a) = alpha * dc op(b)^T,   dop(b) = alpha * op(a)^T dc,
// and the gradient of a broadcast operand is summed over the batch. When `da` (or `db`) is given it must have
// a's (b's) shape and a's dtype or f32, and the gradient is accumulated into it (da += ...) and da returned;
// otherwise a new tensor in a's dtype is returned. FP8 backward GEMMs are plain matmul calls on FP8 operands
// (the recipe quantizes dc).
Tensor matmul_grad_a(const Tensor& dc, const Tensor& a, const Tensor& b, const MatmulOptions& opt = {},
                     Tensor da = {});
Tensor matmul_grad_b(const Tensor& dc, const Tensor& a, const Tensor& b, const MatmulOptions& opt = {},
                     Tensor db = {});

struct MatmulGrads {
  Tensor da, db;
};
MatmulGrads matmul_backward(const Tensor& dc, const Tensor& a, const Tensor& b, const MatmulOptions& opt = {});

}  // namespace mpt::ops
