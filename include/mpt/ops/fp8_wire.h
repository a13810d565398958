// mpt/ops/fp8_wire.h: the per-parameter scales of the FP8 gradient all-reduce (MS-AMP's, scaling-spec.md), made on the device.
#pragma once

#include <cstdint>

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

}  // namespace mpt::ops
