// src/nn/autocast_gemm.h: y = x W^T + b in the precision the current policy gives a module (shared by Linear and GPT's LM head).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/ops/layernorm.h"

namespace mpt::nn::detail {

// x: [N, K]; weight [M, K]; bias [M] or undefined. Outside Autocast x must have the weight's dtype. Under Autocast:
// FP32 casts x to the weight's dtype; FP16/BF16 cast x (a recorded cast) and use the cached compute copies of the
// FP32 master weight and bias (amp::compute_copy), the result in the low dtype; FP8 runs fp8::fp8_linear with the
// policy's recipe and this layer's scaling metas (registered under `path`), the result in BF16. `layer` names the
// caller in errors. out_padded (no bias): ops::LinearOptions::out_padded, in every precision but FP8 (whose result
// keeps M columns).
// weight_scale: the Linear's learned QAT scale (LSQ), used when the policy gives `path` a QAT weight scheme.
Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view path,
                       const char* layer, int64_t out_padded = 0, const Tensor& weight_scale = {});

// How a producer (a norm) may store the x of dtype `x` that autocast_linear(x, weight, ..., path) reads, bit for bit
// what autocast_linear would otherwise make of it: f16 or bf16 for an f32 x whose GEMM runs in FP16/BF16 (the cast);
// for an f32 x under FP8 delayed scaling, E4M3 codes with the layer's input scale and amax slot (the quantization;
// not while that meta collects telemetry); under current scaling, E4M3 codes whose scale the norm finds (a first pass
// for the amax) and writes into new scale and scale_inv tensors that the layer's input meta holds from then on (asked
// right before the norm runs, so that its reader takes them). Under block scaling (whose scales come from x's
// blocks) bf16 for an f32 x: not what autocast_linear makes of an f32 x but a rounding before it, as the BF16 layers
// read and TransformerEngine's block-scaled ln_out is. `x` itself otherwise: no policy, an f32 GEMM and QAT.
// autocast_linear and autocast_mlp take such codes.
ops::NormOutput autocast_input_format(DType x, const Tensor& weight, std::string_view path);

// One layer reading an input: its weight and policy path.
struct InputReader {
  const Tensor* weight;
  std::string_view path;
};

// autocast_input_format for several FP8 layers reading one tensor (q, k, v of one norm; Llama's gate and up): E4M3
// codes with the first reader's input scale when autocast_input_format gives it codes and every other reader runs
// FP8 too (no QAT, its weight on the scaling state's device). The others' input metas then resolve to the first's
// (Fp8ScalingState::share_tensor): under delayed scaling their histories were copies of it, each folding the amax of
// the same tensor, so every scale and bit is the separate quantizations'. When the first reader is given no codes,
// its plain format (block scaling's BF16), which each reader quantizes itself. Undefined when not all run FP8.
std::optional<ops::NormOutput> autocast_shared_fp8_input(DType x, const std::vector<InputReader>& readers);

// The bias-free projections `readers` of one x [N, K] (Llama's gate and up, or q, k and v) as one GEMM,
// ops::packed_linear: y [N, sum M_i], each layer's output in its columns, when every layer runs in one precision other
// than FP8, without QAT: under BF16/FP16 Autocast from the packed compute copy of their FP32 masters
// (amp::packed_compute_copy, made once per optimizer step, whose rows are each master's compute copy), with no policy
// when x has the weights' dtype. f32_grad: x is a norm's f16/bf16 cast of the f32 stream, and its gradient comes back
// in f32 from the one input-gradient GEMM (what ops::fan_out made of the layers' separate ones). Undefined otherwise
// (FP8, QAT, mixed precisions or dtypes): the caller runs the layers one by one.
Tensor autocast_packed_linear(const Tensor& x, const std::vector<InputReader>& readers, bool f32_grad);

// The MLP x [N, C] -> gelu(x W1^T + b1) W2^T + b2 as one fused op (the GELU in the GEMMs' epilogues) when both layers
// run in one GEMM precision: ops::mlp with no policy (x in the weights' dtype) and under FP32, BF16 or FP16 Autocast
// (with the cached compute copies of FP32 masters); fp8::fp8_mlp under FP8 (each layer's metas registered under its
// path, the cached FP8 weight copies). Undefined otherwise (mixed precisions, non-FP32 masters under a low policy):
// the caller then runs the layers one by one.
Tensor autocast_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, std::string_view path1, const Tensor& w2,
                    const Tensor& b2, std::string_view path2);

}  // namespace mpt::nn::detail
