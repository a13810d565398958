// mpt/ops/cast.h: FP8 quantization of tensors: amax, per-tensor quantize (given or current scale), fused cast + transpose, 1x128 / 128x128 block quantize, dequantize.
#pragma once

#include <cstdint>
#include <span>
#include <utility>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Conventions (shared/design/scaling-spec.md): a scale s multiplies on quantize, q = fp8(float(x) * s), rounded
// to nearest even and saturating by default (NaN stays NaN); scale_inv = 1 / s multiplies on dequantize. Inputs
// are f32, f16 or bf16 tensors of any shape and strides (made contiguous first); the FP8 dtype is f8e4m3 or
// f8e5m2. For the 2-d views below, rows = numel / last dim and cols = last dim (a 1-d tensor is one row).

// How codes map back to values: value = code * scale_inv[block]. The block layouts are the ones the FP8 GEMMs
// consume (kernels/cpu/gemm.h ScaleMode; kernels/math/quantize.h BlockScaleLayout):
//   PerTensor     scale_inv is 0-d
//   Block1x128    scale_inv is row-major [rows, ceil(cols / 128)]: one scale per row and 128-wide column group
//   Block128x128  scale_inv is row-major [ceil(rows / 128), ceil(cols / 128)]: one scale per 128 x 128 tile
// Partial blocks at the edges count only their real elements.
enum class ScaleLayout : uint8_t { PerTensor, Block1x128, Block128x128 };

struct Quantized {
  Tensor data;       // f8e4m3 / f8e5m2 codes
  Tensor scale_inv;  // f32 on data's device, shaped as `layout` says
  ScaleLayout layout = ScaleLayout::PerTensor;
};

struct QuantizeOptions {
  // f32 with one element on x's device (FP8 recipes keep their scales on the device): q = fp8(x * scale).
  // Undefined: current scaling, scale = fp8_max * 2^-margin / amax(x), computed on the device in a first pass
  // (amax 0, Inf or NaN gives scale 1; a quotient that overflows gives FLT_MAX).
  Tensor scale{};
  // Optional f32 with one element on x's device: receives amax(x) = max |x| of the input (NaN if x holds a
  // NaN), computed in the same pass as the quantization (TransformerEngine records it for delayed scaling).
  Tensor amax{};
  int margin = 0;           // current scaling only, 0..64
  bool power_of_2 = false;  // current scaling only: round the scale down to a power of two
  float amax_epsilon = 0;   // current scaling only: an amax below it counts as it (TE's amax_epsilon)
  // TransformerEngine's amax semantics (an fmaxf reduction): NaN elements are ignored, Inf kept, for the current
  // scale and the amax output.
  bool amax_ignore_nan = false;
  // The amax output is folded into its current value (fmax; it must hold a non-negative float) instead of being
  // overwritten: TransformerEngine's delayed scaling writes each quantization's amax straight into amax_history[0],
  // with no zeroing or folding pass. Needs `amax` and amax_ignore_nan (so that the fold is NaN-free).
  bool amax_accumulate = false;
  // quantize_fp8_transpose only, optional: a contiguous [cols] f32, bf16 or f16 tensor on x's device that receives
  // the column sums of the 2-d view of x (the bias gradient, when x is a layer's output gradient dy): on CUDA from
  // the quantizing pass itself (TransformerEngine's cast_transpose_dbias), on the CPU a second pass in the same order;
  // summed in FP32 in tiles of 32 rows, then over the tiles in order (kernels/math/quantize.h), rounded once; the
  // same bits on the CPU and CUDA.
  Tensor dbias{};
  Fp8Saturation saturation = Fp8Saturation::Saturate;  // NoSaturate: overflow -> NaN (E4M3) or +-Inf (E5M2)
  // Quantize gelu(x) (tanh GELU, ops::gelu's bits: rounded to x's dtype) instead of x, its amax too: on CUDA in the
  // quantizing pass itself (TransformerEngine's gelu + cast), on the CPU gelu first. For the layer after a GELU: the
  // FP8 MLP quantizes its hidden activation from the pre-activation it keeps anyway. Current scaling's amax pass
  // (no scale given) takes max |gelu(x)| from x likewise. No dbias.
  bool gelu = false;
};

struct BlockQuantizeOptions {
  bool power_of_2 = false;  // round each block's scale down to a power of two (TE's default for block scaling)
  // Quantize the transpose of a 2-d x (1x128 only): bit for bit quantize_blockwise(x.t().contiguous()), without the
  // transposed copy (an FP8 recipe's columnwise operand of the weight-gradient GEMM).
  bool transpose = false;
  // With transpose, optional: a contiguous [cols] f32, bf16 or f16 tensor on x's device that receives x's column sums
  // from the same pass, in QuantizeOptions::dbias's order and bits (the bias gradient of a gradient dy).
  Tensor dbias{};
  // 1x128 only, no dbias: quantize gelu(x) (QuantizeOptions::gelu's: tanh GELU rounded to x's dtype) instead of x,
  // on CUDA in the quantizing pass itself, on the CPU gelu first: block scaling's hidden codes of the FP8 MLP from
  // its pre-activation, each block's scale from gelu(x)'s amax.
  bool gelu = false;
  // quantize_blockwise_transpose only, optional (not with gelu): x's shape and dtype: quantize x * gelu'(dgelu_aux)
  // rounded to x's dtype, gelu_backward(x, dgelu_aux)'s bits, instead of x (dbias its column sums): block scaling's
  // dpre of the FP8 MLP from dh and the pre-activation, which cuBLASLt's block-scaled GEMMs cannot make in an
  // epilogue; on CUDA in the quantizing pass, on the CPU gelu_backward first.
  Tensor dgelu_aux{};
};

// max |x| as a 0-d f32 tensor on x's device; NaN if any element is NaN, 0 for an empty tensor.
Tensor amax(const Tensor& x);
// The same written into `out`, one contiguous f32 element on x's device (e.g. a slot of a vector of amaxes); returns
// out.
Tensor amax(const Tensor& x, const Tensor& out);

// Per-tensor quantization: data has x's shape, scale_inv is 0-d (1 / the scale used).
Quantized quantize_fp8(const Tensor& x, DType fp8, const QuantizeOptions& options = {});

// The quantized [rows, cols] copy and its transpose [cols, rows] (what the backward GEMMs need), both from one
// pass over x with one scale: first.data has x's shape, second.data is [cols, rows], and both share one
// scale_inv tensor. Equal bit for bit to quantize_fp8(x) followed by a transpose.
std::pair<Quantized, Quantized> quantize_fp8_transpose(const Tensor& x, DType fp8, const QuantizeOptions& options = {});

// dst[k] = src[k]^T for every pair: 2-d contiguous tensors of 1-byte codes (f8e4m3, f8e5m2, u8, i8) on one device,
// dst[k] [cols, rows] of src[k]'s dtype, apart from it. Bit for bit dst[k].copy_(src[k].t()); on CUDA the pairs whose
// shapes and alignment allow the vectorised tile (cols % 8 == 0, rows % 16 == 0) take one launch together (W^T's codes
// of several FP8 weights after an optimizer step: amp::fp8_copies_rewritten), the others a strided copy each.
void transpose_codes(std::span<const Tensor> src, std::span<const Tensor> dst);

// Block quantization with `layout` Block1x128 or Block128x128: per block s = fp8_max / amax(block) (amax 0 or
// non-finite: s = 1), q = fp8(x * s) saturating, scale_inv[block] = 1 / s. data has x's shape.
Quantized quantize_blockwise(const Tensor& x, DType fp8, ScaleLayout layout, const BlockQuantizeOptions& options = {});

// A 2-d x's 1x128 codes and its transpose's (an FP8-block recipe's rowwise and columnwise operands), bit for bit
// quantize_blockwise(x, fp8, Block1x128, o) and the same with o.transpose (options.dbias, which needs no transpose
// flag here, filled by that second one), from one read of x on CUDA (TransformerEngine's blockwise quantization
// with both usages). options.transpose must be false. With layout Block128x128 (a weight and W^T, no dbias, gelu or
// dgelu_aux): quantize_blockwise(x, fp8, Block128x128) and the transposes of its codes and scale grid, one launch.
std::pair<Quantized, Quantized> quantize_blockwise_transpose(const Tensor& x, DType fp8,
                                                             const BlockQuantizeOptions& options = {},
                                                             ScaleLayout layout = ScaleLayout::Block1x128);

// into = fmax(into, amax) for one-element f32 tensors on one device (NaN in amax changes nothing), on the device.
void fold_amax_(const Tensor& into, const Tensor& amax);

// Delayed scaling's update (scaling-spec B1; kernels/math/quantize.h delayed_scaling_update) of many tensors on one
// device, without a host round trip: each history (f32 [L]) rolls in place, its scale and scale_inv (f32, one
// element) are rewritten from the history and `amax` (f32, one element: this step's, possibly all-reduced).
struct DelayedScalingSlot {
  Tensor history, amax, scale, scale_inv;
  float fp8_max = 448.0f;
};
void delayed_scaling_update_(std::span<const DelayedScalingSlot> slots, bool algo_max, int margin);

// float(code) * scale_inv, rounded once to `out` (f32, f16 or bf16); the result has q.data's shape.
Tensor dequantize(const Quantized& q, DType out = DType::F32);

}  // namespace mpt::ops
