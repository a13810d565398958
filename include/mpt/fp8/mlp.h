// mpt/fp8/mlp.h: the transformer MLP y = gelu(x W1^T + b1) W2^T + b2 with its four GEMMs in FP8 and the GELU fused.
#pragma once

#include <memory>
#include <optional>

#include "mpt/fp8/scaling.h"
#include "mpt/core/tensor.h"
#include "mpt/fp8/linear.h"

namespace mpt::fp8 {

struct Fp8MlpConfig {
  fp8::Fp8Recipe recipe = fp8::DelayedScaling{};
  // Each layer's metas (fp8::Fp8ScalingState::register_linear), as fp8_linear takes them: delayed scaling needs both.
  fp8::Fp8LinearMetas metas1{}, metas2{};
  // The hidden activation's and y's dtype: f32, bf16 or f16; default x's (f32 for codes).
  std::optional<DType> out_dtype{};
  // Optional: w1 / w2 already quantized under this recipe (amp::fp8_weight_copy), as Fp8LinearConfig::weight_fp8;
  // with W^T's codes when the backward needs them (w1: x requires grad; w2: any gradient below it).
  std::shared_ptr<const Fp8Weight> weight1_fp8{}, weight2_fp8{};
  // Optional: b1 / b2 as the GEMMs' epilogues read them (Fp8LinearConfig::compute_bias).
  Tensor compute_b1{}, compute_b2{};
  std::optional<DType> codes_grad_dtype{};  // codes only: dx's dtype (Fp8LinearConfig::codes_grad_dtype)
};

// x [N, C] f32, bf16 or f16 (or its f8e4m3 codes under delayed or current scaling, as fp8_linear takes them);
// w1 [H, C], b1 [H] or undefined; w2 [C', H], b2 [C'] or undefined (f32 masters, bf16 or f16). y [N, C'] in out_dtype. The same
// computation, scales and amax bookkeeping (metas1 then metas2, forward and backward) as fp8_linear(gelu(fp8_linear(x, w1, b1, {metas1, out})), w2, b2, {metas2, out}), with the GELU in the
// GEMMs:
//   forward    the first FP8 GEMM's epilogue adds b1 and applies the GELU (cuBLASLt GELU_AUX_BIAS: h and the
//              pre-activation, both in out_dtype, from one pass), then h is quantized for the second GEMM;
//   backward   dh = dy W2 in FP8 with the GELU's derivative and b1's gradient in its epilogue (DGELU_BGRAD), then
//              dpre is quantized for dx and dW1.
// Where cuBLASLt refuses one of those FP8 epilogues (block scaling; FP8 DGELU on some GPUs) and on the CPU, the
// GEMM runs plain with the GELU kernels after it (ops::matmul's GELU options). Numerics: as the unfused layers,
// except that on CUDA the GELU and its derivative see the FP32 GEMM result before its rounding, and b1's gradient is
// rounded once to out_dtype (the epilogue's output type) before it reaches an f32 bias.
// Saved for backward: the FP8 codes fp8_linear saves for each layer (x^T, W1^T, h^T, W2^T) and the pre-activation
// (N*H in out_dtype, what the unfused GELU saves).
Tensor fp8_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
               const Fp8MlpConfig& config);

}  // namespace mpt::fp8
