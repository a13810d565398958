// mpt/ops/fake_quant.h: quantize-dequantize with a straight-through gradient (QAT), and the codes and scales of a quantized tensor (PTQ, export).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Code formats: symmetric integers on the restricted grid [-127, 127] (INT8) and [-7, 7] (INT4), or FP8 E4M3.
enum class QuantFormat : uint8_t { Int8, Int4, FP8 };
// Which elements share a scale. Groups always run along the last dimension:
//   PerTensor   one scale for the whole tensor (scales 0-d)
//   PerChannel  one per row of the last dimension: a Linear weight [out, in] gets one per output channel
//   PerToken    the same arithmetic for activations [..., C]: one per token (dynamic: recomputed on every call)
//   PerGroup    one per `group_size` consecutive elements of a row (group_size divides the last dimension)
// scales: x.shape[:-1] + [last / group size] f32 (0-d for PerTensor).
enum class QuantGranularity : uint8_t { PerTensor, PerChannel, PerToken, PerGroup };

struct QuantSpec {
  QuantFormat format = QuantFormat::Int8;
  QuantGranularity granularity = QuantGranularity::PerChannel;
  int64_t group_size = 0;  // PerGroup only: 32, 128, ...
  // The scale is rounded to FP16 before use (what GGUF blocks and FP16 scale tensors store), so a model quantized
  // with it exports exactly.
  bool f16_scale = false;

  // "int8-channel", "int4-g128", "int8-token", "fp8-tensor", "fp8-channel" (+ "-f16scale").
  std::string str() const;
  // The number of elements that share one scale in a tensor whose last dimension is `last` (numel for
  // PerTensor). Throws, naming `op` and the shape, when group_size does not divide `last` or is not positive.
  int64_t group_elements(const Tensor& x, const char* op) const;
  // The shape of x's scales: x.shape[:-1] + [last / group size] (0-d for PerTensor); throws like group_elements.
  Shape scales_shape(const Tensor& x, const char* op) const;
  bool operator==(const QuantSpec&) const = default;
};

// Per group: s = amax / qmax (qmax 127, 7 or 448; FP16-rounded when f16_scale; 1 for an all-zero group), then
// value = clamp(rint(x / s), -qmax, qmax) * s for the integers (round half to even), e4m3(x / s) * s for FP8
// (saturating), in float, rounded to x's dtype (kernels/math/fake_quant.h). x: f32, bf16 or f16 on any device, any
// strides. Backward: the straight-through estimator, dx = dy (with absmax scales no element lies beyond the grid,
// so PyTorch's clamp mask would pass everything too).
Tensor fake_quantize(const Tensor& x, const QuantSpec& spec);

// LSQ (learned step size, Esser et al. 2020): fake quantization with a given, trainable scale instead of the absmax
// one: value = clamp(rint(x / s), -qmax, qmax) * s per group (kernels/math/fake_quant.h, LearnedQuant). scale: f32 of
// spec.scales_shape(x), positive, on x's device; quantize_groups(x, spec).scales is the usual start (LSQ then starts
// at PTQ). spec: Int8 or Int4 per tensor, channel or group (a learned scale is never per token, whose tokens change
// every call), without f16_scale. Backward, for x and scale:
//   dx = dy inside the grid (-qmax <= x / s <= qmax), 0 outside (the clamp's mask);
//   dscale = grad_scale * sum over the group of dy * (clamp(rint(x / s)) - x / s inside, -qmax / qmax outside),
// grad_scale by default LSQ's 1 / sqrt(group elements * qmax). x: f32, bf16 or f16; dx in x's dtype, dscale f32.
Tensor fake_quantize_learned(const Tensor& x, const Tensor& scale, const QuantSpec& spec,
                             std::optional<float> grad_scale = std::nullopt);

// The same quantization as codes and scales (no autograd): codes is an i8 tensor of x's shape (the integer, or the
// E4M3 bit pattern), scales as above. fake_quantize(x) equals codes * scales rounded to x's dtype.
struct GroupQuantized {
  Tensor codes;
  Tensor scales;
  QuantSpec spec;
};
GroupQuantized quantize_groups(const Tensor& x, const QuantSpec& spec);

// The codes of x on the grid of given scales (a learned scale's, ops::fake_quantize_learned's forward as codes; no
// autograd): integer formats per tensor, channel or group; scales f32 of spec.scales_shape(x), rounded to FP16 first
// when spec.f16_scale (what a GGUF block stores: the codes then follow the rounded scale, which the result holds).
GroupQuantized quantize_groups(const Tensor& x, const QuantSpec& spec, const Tensor& scales);

// value = code * scale in f32 (an E4M3 code's value times the scale), as `dtype` (f32, bf16 or f16).
Tensor dequantize_groups(const GroupQuantized& q, DType dtype = DType::F32);

}  // namespace mpt::ops
