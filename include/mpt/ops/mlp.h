// mpt/ops/mlp.h: the transformer MLP y = gelu(x W1^T + b1) W2^T + b2 with the GELU fused into its GEMMs.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

struct MlpOptions {
  // The copies of w1 / w2 the GEMMs read, in x's dtype (amp::compute_copy of FP32 masters); undefined: the weights
  // themselves. Not differentiated: the weight gradients go to w1 / w2 in their dtype (as ops::linear's).
  Tensor compute_w1{}, compute_w2{};
  // The biases as the GEMMs' epilogues read them (LinearOptions::compute_bias); undefined: b1 / b2.
  Tensor compute_b1{}, compute_b2{};
};

// x [N, C]; w1 [H, C], b1 [H] or undefined; w2 [C', H], b2 [C'] or undefined (any float dtype but FP8; f64 on the
// CPU). y [N, C'] in x's dtype; tanh GELU. The hidden activation's pre-activation (x W1^T + b1, rounded to x's dtype)
// and its GELU are saved for backward, as the unfused ops save them. On CUDA the GELU is cuBLASLt's GELU_AUX_BIAS
// epilogue of the first GEMM, and in backward its derivative and b1's gradient are the DGELU_BGRAD epilogue of the
// GEMM dh = dy W2 (no GELU kernels, no pass over the [N, H] activations of their own: llm.c's fusion); on the CPU the
// same GEMMs run with the GELU kernels beside them. Bias gradients come out of the weight-gradient GEMMs (db1 in x's
// dtype, as PyTorch's autocast gives it). Numerics: as linear -> gelu -> linear, except that on CUDA the GELU and
// its derivative see the FP32 GEMM result before its rounding (one rounding fewer).
Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
           const MlpOptions& options = {});

}  // namespace mpt::ops
