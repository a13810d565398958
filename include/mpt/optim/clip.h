// mpt/optim/clip.h: gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_).
#pragma once

#include <functional>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::optim {

// total = ops::global_l2_norm of every defined gradient of `params` (parameters without one are ignored);
// coef = min(max_norm / (total + 1e-6), 1) in f32 on the gradients' device (ops::clip_coefficient: nothing is read
// back to the host); every gradient is multiplied by it in place (a coefficient of 1 keeps their bits). Returns total
// (0-d, f32, or f64 for f64 gradients, on the gradients' device; a 0-d f32 zero on the CPU when there are none).
// A non-finite total is not an error (torch's error_if_nonfinite=False): inf gives coef 0 (finite gradients
// become zeros, infinite ones NaN) and NaN makes every gradient NaN, so check the returned norm and skip the step.
// max_norm must be >= 0 (torch does not check).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm);

// clip_grad_norm_ without touching the gradients: the total norm and the coefficient (0-d f32 on the gradients'
// device; undefined tensors when there are no gradients). An optimizer step given the coefficient as its gradient
// multiplier (ops::GradScaling::grad_scale_inv) computes what clip_grad_norm_ then step() would, bit for bit for
// f32 gradients, without the pass that rewrites every gradient (llm.c and PyTorch's fused AdamW fold it the same way).
struct ClipCoefficient {
  Tensor total_norm;
  Tensor coefficient;
};
ClipCoefficient clip_coefficient(const std::vector<Tensor>& params, double max_norm);
// The same over gradients sharded across processes (ZeRO): `combine` maps this process's sum of squares to the
// global one (a SUM all-reduce); every process then scales its own gradients by the same coef (computed in double on
// the host: this overload reads the local norm, one synchronisation).
Tensor clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       const std::function<double(double local_sum_of_squares)>& combine);
// That overload without touching the gradients: the total norm and min(coef, 1) as 0-d tensors on `device` (f64 for
// f64 gradients, else f32), for an optimizer's gradient multiplier (a coefficient of 1 when the total is within
// max_norm, which keeps the bits). `combine` runs on every process, with or without gradients of its own.
ClipCoefficient clip_coefficient(const std::vector<Tensor>& params, double max_norm, Device device,
                                 const std::function<double(double local_sum_of_squares)>& combine);
// The same with the sums of squares combined on the device, nothing read back to the host: `combine` gets this
// process's sum of squares as a [1] f32 tensor on `device` (0 without gradients of its own) and leaves the global one
// in it (a SUM all-reduce: DataParallel's ZeRO-1). The square, the sum and the square root are f32, so the total
// differs from the host overload's double arithmetic by f32 roundings. f32, bf16 and f16 gradients.
ClipCoefficient clip_coefficient_on_device(const std::vector<Tensor>& params, double max_norm, Device device,
                                           const std::function<void(Tensor& sum_of_squares)>& combine);

}  // namespace mpt::optim
