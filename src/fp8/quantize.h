// src/fp8/quantize.h: recipe-driven FP8 quantization for the FP8 GEMMs (fp8_linear, quantize_fp8_weight,
// amp::fp8_weight_copy): which layout, scale and amax bookkeeping each recipe and role takes, in one place. The
// element kernels are cast.h's primitives.
#pragma once

#include <memory>
#include <optional>

#include "mpt/fp8/scaling.h"
#include "mpt/ops/cast.h"

namespace mpt::fp8::detail {

// One 2-d tensor quantized for the GEMMs that read it. rowwise: K along its columns, as stored (x and dy in the
// GEMM that contracts their last dim, W in fprop). columnwise: its transpose (rows become K: x and dy in wgrad, W in
// dgrad). Only the usages asked for are defined. Under delayed scaling every role's amax is folded into the meta's
// amax_history[0] by the quantizing pass itself.
struct Fp8Pair {
  ops::Quantized rowwise, columnwise;
};

// t (2-d) quantized under `recipe` as a tensor of `role`: rowwise and/or columnwise codes (block scaling: weights
// 128x128 with the transposed codes sharing the tile scales, activations and gradients 1x128 quantized along each
// axis; per tensor: one pass for both, with the meta's scale (delayed, its amax folded into the history) or the
// tensor's own (current)). Telemetry is measured into the meta when it collects it.
// dbias (optional, a [cols] f32/bf16/f16 tensor): receives t's column sums, a gradient's bias gradient: fused into the
// pass that makes the columnwise codes (the per-tensor cast + transpose, TE's cast_transpose_dbias, or block
// scaling's transposed 1x128 quantization), else a column reduction of its own; the same bits either way.
// An input t may come quantized already: f8e4m3 codes made by the op before (a norm's FP8 output) with the meta's
// scale: under delayed scaling its amax folded into the history (ops::NormOutput::fp8), under current scaling the
// scale and scale_inv written into the meta's tensors (ops::NormOutput::fp8_current, nn::autocast_input_format). They
// are used as they are, with the meta's scale_inv, and the columnwise copy is their transpose (a byte copy, no second
// rounding).
// gelu_of_t: quantize gelu(t) (ops::QuantizeOptions::gelu, BlockQuantizeOptions::gelu) instead of t: an input whose
// meta collects no telemetry (which would measure t); the FP8 MLP's hidden codes from its pre-activation.
Fp8Pair quantize_for_gemm(const Tensor& t, const fp8::Fp8Recipe& recipe, fp8::Fp8Role role,
                          const std::shared_ptr<fp8::Fp8TensorMeta>& meta, bool rowwise, bool columnwise,
                          const Tensor& dbias = {}, bool gelu_of_t = false);

// Block scaling's dpre = dh * gelu'(pre) (rounded to dh's dtype, the DGELU kernel's bits) quantized as a gradient,
// rowwise and columnwise, from one pass that reads dh and pre (ops::BlockQuantizeOptions::dgelu_aux): the FP8 MLP's
// dpre is never written (cuBLASLt has no DGELU epilogue with block scales). dbias (optional, [cols] f32, bf16 or
// f16): dpre's column sums from the same pass. For a gradient meta that collects no telemetry.
Fp8Pair quantize_dgelu_for_gemm(const Tensor& dh, const Tensor& pre, const fp8::BlockScaling& recipe,
                                const Tensor& dbias = {});

bool is_wide_dtype(DType t);  // f32, bf16 or f16: what FP8 quantization reads

// An FP8 layer's input x [N, K]: a non-empty f32, bf16 or f16 tensor, or f8e4m3 codes (quantize_for_gemm) when the
// recipe scales per tensor (delayed or current), whose input meta is then not collecting telemetry (that needs the
// unquantized values).
void check_fp8_input(const char* op, const Tensor& x, const fp8::Fp8Recipe& recipe,
                     const std::shared_ptr<fp8::Fp8TensorMeta>& input_meta);

// The dtype an FP8 layer returns x's gradient in: x's, or f32 for codes (the f32 output of the norm they stand for).
inline DType input_grad_dtype(DType x) { return x == DType::F8E4M3 ? DType::F32 : x; }
// x's gradient dtype: input_grad_dtype, or for codes the config's codes_grad_dtype (f32, bf16 or f16), checked.
DType input_grad_dtype(const char* op, DType x, const std::optional<DType>& codes_grad);

// A meta given for `slot` (its name in errors: "metas.input") fits the recipe and role (delayed scaling needs one, on
// the operands' device).
void check_fp8_meta(const char* op, const std::shared_ptr<fp8::Fp8TensorMeta>& meta, const char* slot,
                    fp8::Fp8Role role, const fp8::Fp8Recipe& recipe, Device dev);

}  // namespace mpt::fp8::detail
