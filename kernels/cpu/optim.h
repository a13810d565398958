// kernels/cpu/optim.h: multi-tensor AdamW (f32 / bf16 / 8-bit moments), SGD with momentum, the fused AMP
// unscale + inf/NaN check and the multi-tensor gradient add on the CPU.
#pragma once

#include <cstdint>

#include "kernels/math/optim.h"

namespace mpt::kernels::cpu {

// One AdamW step over `count` tensors (math in float; in double for P = double): tensor k takes step
// math::step_of(tensors[k], step) and its step count, when it has one, advances unless the guards skip the step.
// Instantiated for P = float with G in {float, bf16, f16} and M in {float, bf16, uint8_t}, and for P = G = M = double.
template <class P, class G, class M>
void adamw_step(const math::AdamWTensor<P, G, M>* tensors, int64_t count, const math::AdamWHyper& h, int64_t step,
                math::StepGuards guards);

// One SGD step over `count` tensors (a tensor with a step count takes its first step when it is 0, and advances
// it unless skipped). P = float with G in {float, bf16, f16}; P = G = double.
template <class P, class G>
void sgd_step(const math::SgdTensor<P, G>* tensors, int64_t count, const math::SgdCoefficients<double>& c,
              math::StepGuards guards);

// For each of `count` gradient arrays (grads[i], sizes[i] elements): *found_inf = 1 if any element is inf or
// NaN (never cleared), and g *= *inv_scale in place unless *inv_scale == 1. G: float, double, bf16, f16.
template <class G>
void unscale_check(G* const* grads, const int64_t* sizes, int64_t count, const float* inv_scale, float* found_inf);

// dst[k][i] += src[k][i] for each of `count` pairs of arrays of sizes[k] elements (math::AddOp in opmath: what
// ops::add_ computes, bit for bit). G: float, double, bf16, f16.
template <class G>
void add_multi(G* const* dst, const G* const* src, const int64_t* sizes, int64_t count);

// math::grad_scaler_update of the scaler state from the sum of `count` found_inf flags.
void grad_scaler_update(const math::ScalerUpdate& u, const float* const* found_inf, int64_t count, float* scale,
                        float* inv, int32_t* trackers);

}  // namespace mpt::kernels::cpu
