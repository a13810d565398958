// src/fp8/gemm.h: the "TN" GEMM on FP8 codes that fp8_linear and fp8_mlp run for fprop, dgrad and wgrad.
#pragma once

#include <memory>

#include "mpt/fp8/scaling.h"
#include "mpt/ops/cast.h"
#include "mpt/fp8/linear.h"
#include "mpt/ops/matmul.h"

namespace mpt::fp8::detail {

// C = A B^T with both operands' codes stored K-major (the TN layout FP8 tensor cores take), dequantized by their
// scales, FP32 accumulation, rounded once to `out` ([rows of A, rows of B]). `epilogue` may carry MatmulOptions'
// bias, gelu_aux, dgelu_aux, aux_bias_grad and fp8_fast_accum (its other fields are ignored), for A's rows as given.
// On CUDA, cuBLASLt's FP8 rules (vendor-semantics R2.2, R4.3) constrain dimensions that follow the batch: K must be a
// multiple of 16 (wgrad's K is the token count) and, under block scaling, A's rows (fprop's and dgrad's tokens) a
// multiple of 4. Those are padded with zero codes, which add exactly nothing, and the padded rows of C (and of a GELU
// aux) are dropped. (Found by the emulated cuBLASLt: an odd token count worked on the CPU and failed on CUDA.)
// `add_into`: a weight's gradient the engine offered (autograd::Node::apply_partial, a later micro-batch): when it can
// take C (ops::detail::adds_into) and A's rows need no padding, C is added into it by the GEMM (beta = 1; cuBLASLt's
// FP8 GEMMs take an FP32 C, TransformerEngine's fuse_wgrad_accumulation) and it is returned; else C is a new tensor.
// A leaf's fresh destination (autograd::is_fresh_offer) is overwritten instead (beta = 0).
Tensor gemm_tn(const ops::Quantized& qa, const ops::Quantized& qb, DType out, const ops::MatmulOptions& epilogue = {},
               const Tensor& add_into = {});

// Whether the forward GEMM accumulates fast (MatmulOptions::fp8_fast_accum) under `recipe`: TransformerEngine's
// defaults, fast for the per-tensor recipes' fprop (use_split_accumulator=False), promoted for block scaling's and
// for every dgrad and wgrad (whose sums run over the tokens).
bool fast_accum_fprop(const fp8::Fp8Recipe& recipe);

// The checks of one FP8 layer y = x W^T + b whose input x has `in_features` columns on `dev`: the weight (M, K), its
// bias, the recipe's metas and cached codes (Fp8LinearConfig's fields). `layer` names it in errors ("weight" or
// "w1"); bias, metas and weight_fp8 follow the caller's names ("bias"/"b1", "metas"/"metas1", ...).
struct Fp8LayerNames {
  const char *weight = "weight", *bias = "bias", *metas = "metas", *weight_fp8 = "weight_fp8";
};
void check_fp8_layer(const char* op, const Fp8LayerNames& names, Device dev, int64_t in_features, const Tensor& weight,
                     const Tensor& bias, const fp8::Fp8Recipe& recipe, const fp8::Fp8LinearMetas& metas,
                     const std::shared_ptr<const Fp8Weight>& weight_fp8);

}  // namespace mpt::fp8::detail
