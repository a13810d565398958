// mpt/ops/fp8_wire.h: the per-parameter scales of the FP8 gradient all-reduce (MS-AMP's, scaling-spec.md), made on the device.
#pragma once

#include <cstdint>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// In place, before the ranks' MAX all-reduce of a contiguous f32 vector of amaxes: every NaN becomes +inf, so that
// every rank sees that parameter as non-finite.
void fp8_wire_amax_(const Tensor& amax);

struct Fp8WireScales {
  Tensor scale;  // f32 [n]: the codes of parameter i are saturate(g * scale[i]) in E4M3
  Tensor inv;    // f32 [n]: the codes' sum over the ranks times inv[i] is the average; NaN for a non-finite amax
};
// From the MAX-reduced amaxes (contiguous f32 [n]) of `world` ranks: scale = float(pow2(448 / amax) / sqrt(world)),
// inv = float(1 / (that product in double x world)) (kernels/math/fp8_wire.h). On the amaxes' device, no host read.
Fp8WireScales fp8_wire_scales(const Tensor& shared_amax, int world);

// A bucket's passes over all of its parameters at once (one kernel each on CUDA, instead of one per parameter).
// `flat` is a contiguous 1-d f32, bf16 or f16 gradient buffer and `bounds` (segments + 1 non-decreasing offsets from
// 0 to flat.numel()) splits it into parameters: parameter i is elements [bounds[i], bounds[i + 1]). The per-parameter
// vectors are contiguous 1-d f32 [segments], the codes a contiguous 1-d E4M3 [flat.numel()], all on flat's device.
//
// amax[i] = max |flat| over parameter i, a NaN in it giving +inf (ops::amax, then fp8_wire_amax_), 0 when empty:
// the vector the ranks MAX-reduce.
void fp8_wire_amaxes(const Tensor& flat, const std::vector<int64_t>& bounds, const Tensor& amax);
// codes = saturate(flat * scale[i]) in E4M3 over parameter i (ops::quantize_fp8 of its slice with that scale).
void fp8_wire_quantize(const Tensor& flat, const std::vector<int64_t>& bounds, const Tensor& scale,
                       const Tensor& codes);
// flat = float(codes) * inv[i] over parameter i, rounded once to flat's dtype (ops::dequantize of its slice, then
// the cast): the ranks' summed codes back as their average.
void fp8_wire_dequantize(const Tensor& codes, const std::vector<int64_t>& bounds, const Tensor& inv,
                         const Tensor& flat);

}  // namespace mpt::ops
