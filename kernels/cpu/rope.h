// kernels/cpu/rope.h: rotary position embedding over (B, T, H, D) rows on the CPU.
#pragma once

#include "kernels/math/rope.h"

namespace mpt::kernels::cpu {

using math::RopeShape;

// y = rope(x) (or its inverse) with cos / sin tables of (positions, D / 2) f32 rows, row t + position0 for sequence
// position t. y may be x. T: float, double, mpt::f16, mpt::bf16 (double tables for double).
template <class T, class F>
void rope(const T* x, T* y, const F* cos, const F* sin, const RopeShape& shape);

}  // namespace mpt::kernels::cpu
