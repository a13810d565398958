// mpt/fp8/linear.h: y = x W^T + b with the three GEMMs (forward, dgrad, wgrad) in FP8 under an fp8::Fp8Recipe.
#pragma once

#include <memory>
#include <optional>

#include "mpt/fp8/scaling.h"
#include "mpt/core/tensor.h"
#include "mpt/ops/cast.h"

namespace mpt::fp8 {

// A weight W (M, K) quantized for fp8_linear under one recipe: E4M3 codes of W (fprop) and, when made, of W^T
// (dgrad). amp::fp8_weight_copy caches one per master parameter, made once per optimizer step.
struct Fp8Weight {
  ops::Quantized rowwise;     // (M, K) codes; per tensor: 0-d scale_inv; block: 128x128 tile scale_invs
  ops::Quantized columnwise;  // (K, M) codes of W^T (same scale; block: the byte transpose, tile scales transposed);
                         // data undefined when made without the transpose
  size_t recipe_index = 0;  // fp8::Fp8Recipe::index() it was made under
  uint64_t scale_version = 0;  // delayed: the weight meta's scale_version when the codes were made (max |W| went
                               // into the meta's amax_history[0] as they were made)
  bool has_transpose() const { return columnwise.data.defined(); }
};

// Quantizes `weight` (2-d, f32, bf16 or f16) exactly as fp8_linear does on its own: delayed scaling with
// weight_meta's scale, recording max |W| into it; current scaling with the scale of W's amax; block 128x128.
// transpose: also make W^T's codes (needed when fp8_linear's x requires grad). Telemetry is measured into
// weight_meta when it collects it.
Fp8Weight quantize_fp8_weight(const Tensor& weight, const fp8::Fp8Recipe& recipe,
                              const std::shared_ptr<fp8::Fp8TensorMeta>& weight_meta, bool transpose);

struct Fp8LinearConfig {
  fp8::Fp8Recipe recipe = fp8::DelayedScaling{};
  // From fp8::Fp8ScalingState::register_linear. Delayed scaling needs all three (it quantizes with their scales
  // and records its amaxes there); the other recipes use them for telemetry only and accept none.
  fp8::Fp8LinearMetas metas{};
  std::optional<DType> out_dtype{};  // y's dtype: f32, bf16 or f16; default x's dtype (f32 for codes)
  // Optional: `weight` already quantized (quantize_fp8_weight under this recipe, or amp::fp8_weight_copy's cached
  // copy): used instead of quantizing `weight`, which still gives the shape, dW's dtype and the autograd edge (dW
  // goes to `weight`). It must have W's shape, this recipe, and W^T's codes when x requires grad. Nothing is
  // recorded into metas.weight (the copy recorded W's amax when it was made).
  std::shared_ptr<const Fp8Weight> weight_fp8{};
  // Optional: the bias as the GEMM's epilogue reads it (ops::LinearOptions::compute_bias; cuBLASLt's FP8 GEMMs add a
  // BF16 bias for BF16 and F32 outputs). Not differentiated: db goes to `bias`.
  Tensor compute_bias{};
  // Codes only: the dtype of their gradient (dx), f32 by default, or f16/bf16 for codes a norm made from a half
  // residual stream (amp::Policy::residual), whose backward reads its gradient in the stream's dtype.
  std::optional<DType> codes_grad_dtype{};
};

// x: (..., K) f32, bf16 or f16; weight: (M, K) f32 (master), bf16 or f16; bias: (M) or undefined. Returns y (..., M).
// Under delayed or current scaling x may also be its f8e4m3 codes, quantized by the op before with metas.input's scale
// (delayed: its amax folded into that meta; current: the scale and scale_inv it wrote into that meta's tensors) (a
// norm's FP8 output: ops::NormOutput::fp8 / fp8_current, TransformerEngine's LayerNormLinear): no
// quantization of x here (its transpose for dW is a copy of the codes), and dx comes back in f32, the dtype of the
// norm output the codes stand for. Not while metas.input collects telemetry (an error: that needs the values).
// On CUDA, M and K must meet cuBLASLt's FP8 rules (multiples of 16; an error says so otherwise); any number of tokens
// works (the GEMMs pad the token axis with zero codes where cuBLASLt needs it).
// Forward: x and W quantized to E4M3 and multiplied in FP8 with FP32 accumulation; the bias is added in FP32 and y
// rounded once. Backward (recorded when an input requires grad): dy is quantized to the recipe's gradient format
// (E5M2 under HYBRID, else E4M3) and
//   dx = dy W    in FP8, in x's dtype                 (only when x requires grad)
//   dW = dy^T x  in FP8, in weight's dtype (FP32 accumulation, so it adds into an f32 master gradient)
//   db = column sums of dy in FP32, in bias's dtype
// Per recipe (all GEMMs in the "TN" layout FP8 tensor cores take, every operand K-major):
//   delayed / current  per-tensor scales; x, W and dy each quantized once with their transposes in the same pass
//                      (ops::quantize_fp8_transpose). Delayed uses the metas' scales and records each amax into
//                      the meta's current slot; current computes each scale from that tensor's amax
//                      (fp8::compute_scale_from_amax, NaN ignored, one host read per tensor).
//   block              1x128 scales for x and dy along K, quantized again from the high-precision tensor along the
//                      other axis for wgrad (x^T, dy^T, 1x128 along N); 128x128 for W, whose code transpose shares
//                      the tile scales (transposed) in dgrad.
// Saved for backward (FP8 only, nothing in high precision): x's transposed / columnwise codes (N*K bytes) when W
// requires grad and W's transposed codes (M*K bytes) when x does, with their scales (per block: 4 bytes per 128
// elements of x, per 16384 of W).
Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8LinearConfig& config);

}  // namespace mpt::fp8
