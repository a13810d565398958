// mpt/ops/layernorm.h: LayerNorm over the last dim, forward beside backward, and fused residual add + LayerNorm.
#pragma once

#include <optional>
#include <utility>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Per-row statistics saved for backward: f32 [rows] (f64 for f64 inputs), rows = numel / C.
struct LayerNormSaved {
  Tensor mean;
  Tensor rstd;  // 1 / sqrt(var + eps), var the biased variance (RMSNorm: 1 / sqrt(mean(x^2) + eps))
  bool rms = false;  // saved by rms_norm: mean is 0, and backward drops the mean terms
};

struct LayerNormResult {
  Tensor y;  // x's shape, in x's dtype or the output dtype asked for
  LayerNormSaved saved;
};

// How a norm stores y: its dtype (x's when unset) and, for f8e4m3, the FP8 GEMM's per-tensor quantization.
// - f16 / bf16 beside an f32 x: the f32 result rounded once as it is stored, bit for bit layer_norm(x, ...).y.to(dtype)
//   without the cast's pass over memory (the norm written for the low-precision GEMM that reads it, as under
//   Autocast).
// - f8e4m3 beside an f32 x (fp8(scale, amax)): y = e4m3(norm * scale) (saturating) and max |norm| (NaN skipped) folded
//   into `amax` (amax = max(amax, ...), no pass of its own), bit for bit ops::quantize_fp8 of the f32 norm with that
//   scale and amax_accumulate: delayed scaling's input quantization (TransformerEngine's LayerNorm + cast) with no
//   f32 y written and read back. The codes' scale_inv is 1 / scale (the scaling meta's).
// - f8e4m3 under current scaling (fp8_current(scale, scale_inv, ...)): scale and scale_inv are outputs. A first pass
//   finds max |norm| (NaN skipped; nothing of y written), the scale follows from it as ops::quantize_fp8's current
//   scaling makes it (E4M3's max / amax, amax_epsilon and power_of_2 as given; rounded into scale and 1 / scale into
//   scale_inv, on the device), and a second pass writes e4m3(norm * scale): bit for bit quantize_fp8 of the f32 norm
//   with current scaling and amax_ignore_nan (TransformerEngine's current-scaling quantizer), again without the f32
//   y written and read back. With a residual, the second pass reads the sum the first one wrote.
// The backward reads dy in y's dtype (f16/bf16 widened exactly); for FP8 y in f32 (what an FP8 layer's dgrad returns
// for codes), bf16 or f16.
struct NormOutput {
  std::optional<DType> dtype;
  Tensor scale;  // f8e4m3: f32, one element on x's device
  Tensor amax;   // f8e4m3 (delayed): f32, one element on x's device, a non-negative float
  Tensor scale_inv;           // f8e4m3 (current): f32, one element on x's device, written
  bool current = false;       // current scaling: scale and scale_inv are written, not read
  bool power_of_2 = false;    // current: the scale rounded down to a power of two
  float amax_epsilon = 0.0f;  // current: an amax below it counts as it
  NormOutput(std::optional<DType> d = std::nullopt) {  // NOLINT(google-explicit-constructor)
    if (d) dtype = *d;  // not dtype(d): GCC flags the copy of an empty optional's payload as uninitialised
  }
  NormOutput(DType d) : dtype(d) {}                                // NOLINT(google-explicit-constructor)
  static NormOutput fp8(Tensor scale, Tensor amax) {
    NormOutput o(DType::F8E4M3);
    o.scale = std::move(scale);
    o.amax = std::move(amax);
    return o;
  }
  static NormOutput fp8_current(Tensor scale, Tensor scale_inv, bool power_of_2 = false, float amax_epsilon = 0.0f) {
    NormOutput o(DType::F8E4M3);
    o.scale = std::move(scale);
    o.scale_inv = std::move(scale_inv);
    o.current = true;
    o.power_of_2 = power_of_2;
    o.amax_epsilon = amax_epsilon;
    return o;
  }
};

// y = (x - mean) * rstd * weight + bias over the last dimension C of x (any leading shape), statistics in
// f32 (f64 for f64). x: f32, f16, bf16 (f64 on the CPU); weight and bias: [C], of x's dtype or f32 (f32
// masters with f16/bf16 activations); bias may be undefined (no bias).
// out: how y is stored (NormOutput: x's dtype by default).
LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps = 1e-5,
                           const NormOutput& out = {});

struct ResidualLayerNormResult {
  Tensor sum;  // x + residual in x's dtype: the new residual stream, and the input backward needs
  Tensor y;    // layer_norm(sum), stored as `out` says
  LayerNormSaved saved;
};

// sum = x + residual (rounded to x's dtype) and y = layer_norm(sum) in one pass over memory. The statistics
// come from the rounded sum, so backward is layer_norm_backward(dy, result.sum, weight, result.saved);
// the residual branch's gradient is dsum itself (d(x + residual) / dx = 1).
ResidualLayerNormResult residual_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                            const Tensor& bias, double eps = 1e-5, const NormOutput& out = {});

// RMSNorm (Llama's): y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) over the last dimension, no mean
// subtraction and no bias, statistics in f32 (f64 for f64): the LayerNorm kernels with the mean fixed at 0, so the
// same fused row pass on CPU and CUDA. saved.mean is zeros and saved.rms is true; layer_norm_backward handles it.
LayerNormResult rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6, const NormOutput& out = {});
// sum = x + residual and y = rms_norm(sum) in one pass (the pre-norm residual stream of a Llama block).
ResidualLayerNormResult residual_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                          double eps = 1e-6, const NormOutput& out = {});

struct LayerNormGrads {
  Tensor dx;       // shape and dtype of x
  Tensor dweight;  // shape and dtype of weight
  Tensor dbias;    // shape and dtype of bias (undefined when the forward had no bias)
};

// Gradients of layer_norm(x, weight, bias) given dy (x's dtype, or the forward's f16/bf16 output dtype) and the saved
// statistics. Each member of `into` that is defined is accumulated into (+=) and returned; the others are new
// tensors. dweight and dbias are reduced over rows in a fixed order: the same inputs give the same bits on every
// run. `has_bias` says whether to produce dbias.
LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const LayerNormSaved& saved,
                                   bool has_bias = true, LayerNormGrads into = {});

}  // namespace mpt::ops
