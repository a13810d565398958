// kernels/cpu/optim.h: multi-tensor AdamW (f32 / bf16 / 8-bit moments), SGD with momentum and the fused AMP
// unscale + inf/NaN check on the CPU.
#pragma once

#include <cstdint>

#include "kernels/math/optim.h"

namespace mpt::kernels::cpu {

// One AdamW step over `count` tensors (math in float; in double for P = double). Instantiated for P = float
// with G in {float, bf16, f16} and M in {float, bf16, uint8_t}, and for P = G = M = double.
template <class P, class G, class M>
void adamw_step(const math::AdamWTensor<P, G, M>* tensors, int64_t count, const math::AdamWCoefficients<double>& c,
                math::StepGuards guards);

// One SGD step over `count` tensors. P = float with G in {float, bf16, f16}; P = G = double.
template <class P, class G>
void sgd_step(const math::SgdTensor<P, G>* tensors, int64_t count, const math::SgdCoefficients<double>& c,
              math::StepGuards guards);

// For each of `count` gradient arrays (grads[i], sizes[i] elements): *found_inf = 1 if any element is inf or
// NaN (never cleared), and g *= *inv_scale in place unless *inv_scale == 1. G: float, double, bf16, f16.
template <class G>
void unscale_check(G* const* grads, const int64_t* sizes, int64_t count, const float* inv_scale, float* found_inf);

}  // namespace mpt::kernels::cpu
