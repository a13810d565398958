// mpt/ops/optim.h: fused multi-tensor optimizer steps (AdamW with f32 / bf16 / 8-bit moments, SGD with momentum)
// and the AMP unscale + inf/NaN check, the multi-tensor scale and add, on lists of tensors.
#pragma once

#include <span>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// ---- AdamW (torch.optim.AdamW semantics, amsgrad=False, maximize=False) ----

// How the two moments of a parameter are stored.
//  F32, BF16: tensors of the parameter's shape (BF16: rounded to nearest even after each update; math in f32).
//  Int8: bitsandbytes blockwise dynamic quantization: U8 codes of the parameter's shape (m with the signed map,
//        v with the unsigned map) and one F32 absmax per block of 256 elements, shape [ceil(n / 256)].
enum class MomentStorage { F32, BF16, Int8 };

struct AdamWState {
  Tensor exp_avg;            // m
  Tensor exp_avg_sq;         // v
  Tensor exp_avg_absmax;     // Int8 only
  Tensor exp_avg_sq_absmax;  // Int8 only
};

// Zero-initialised state for `param` (Int8: codes 0 and absmax 0, which decode to zeros, as bitsandbytes starts).
// F64 parameters (the CPU reference path) get F64 moments and accept only F32 storage.
AdamWState adamw_state(const Tensor& param, MomentStorage storage = MomentStorage::F32);
MomentStorage moment_storage(const AdamWState& state);

struct AdamWParams {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  int64_t step = 1;  // the step being taken, counting from 1 (bias corrections 1 - beta^step); see AdamWSlot::step
  // CUDA: {lr, weight_decay} read from this device memory instead of the two fields above (a captured step: the
  // graph refreshes it before each replay; mpt/core/cuda_graph.h).
  const double* lr_wd_device = nullptr;
};

// One parameter: its F32 master (F64 on the CPU reference path), its gradient (F32, BF16 or F16, converted on
// load; F64 with F64 params) and its state. All slots of one call share the device, the gradient dtype and the
// moment storage.
struct AdamWSlot {
  Tensor param;
  Tensor grad;
  AdamWState state;
  // Optional (all slots or none): a 0-d i64 on the parameter's device counting the steps this parameter took.
  // The step then reads it (step + 1; params.step is ignored) and advances it on the device, unless found_inf
  // skips the step: the host never needs to know whether a step was skipped (torch's capturable/fused state_steps).
  Tensor step{};
  // Optional: the F32 parameter's BF16/F16 compute copy (contiguous, on its device, at least param.numel() elements):
  // its first param.numel() elements are rewritten with the updated parameter rounded to the copy's dtype, bit for
  // bit the cast of the new parameter (amp's cached copies, refreshed by the step instead of remade by the next
  // forward: llm.c's AdamW writes its BF16 parameters likewise). A step skipped by found_inf leaves it as it was.
  Tensor compute_copy{};
  // Optional: the F32 parameter's FP8 weight codes under delayed scaling, rewritten by the step as it updates the
  // parameter (TransformerEngine's FP8 parameters; amp's cached FP8 copies, amp::refreshable_fp8_copy): see Fp8Codes.
  struct Fp8Codes {
    Tensor codes;      // f8e4m3, contiguous, param.numel() elements: e4m3(p * scale), saturating, for every element
                       // (bit for bit ops::quantize_fp8 of the updated parameter with that scale)
    Tensor scale;      // f32, one element: the delayed-scaling scale the codes are made with
    Tensor amax;       // f32, one element holding a non-negative float: max |p| (NaN ignored) folded in (fmax)
    Tensor scale_inv;  // f32, one element: set to 1 / scale (the codes' scale_inv)
  } fp8{};
  // Unlike the compute copy, the codes are written on a step found_inf skips too (from the unchanged parameter),
  // since their scale may have changed since they were last made.
};

// What a GradScaler hands a step; both optional, F32 with one element, on the parameters' device (nothing is
// read back to the host). grad_scale_inv: every gradient is multiplied by it before use. found_inf: when it
// holds a non-zero value the step changes nothing (parameters and states keep their bits).
struct GradScaling {
  Tensor grad_scale_inv{};
  Tensor found_inf{};
};

// Per parameter, in place: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). With Int8 storage each block of 256 is
// dequantized, updated in f32 and requantized (new absmax = max |m|, max |v| of the block); an element whose
// gradient is inf or NaN then gets m = v = 0 and keeps its parameter (bitsandbytes' rule). One kernel launch
// covers many small parameters on CUDA.
void adamw_step(std::span<const AdamWSlot> slots, const AdamWParams& params, const GradScaling& scaling = {});

// ---- SGD (torch.optim.SGD semantics, maximize=False) ----

struct SgdParams {
  double lr = 1e-2;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // the momentum buffers are set to the gradient instead of updated (PyTorch: None)
};

// momentum_buffer: same shape and dtype as param, required when momentum != 0 (otherwise ignored).
struct SgdSlot {
  Tensor param;
  Tensor grad;
  Tensor momentum_buffer;
  Tensor step{};  // optional, as AdamWSlot::step: a count of 0 also makes it the first step (as params.first_step)
};

// g += wd p; buf = first_step ? g : momentum buf + (1 - dampening) g; g = nesterov ? g + momentum buf : buf;
// p -= lr g. Parameters F32 (F64 on the CPU), gradients F32/BF16/F16 (F64 with F64), buffers like params.
void sgd_step(std::span<const SgdSlot> slots, const SgdParams& params, const GradScaling& scaling = {});

// ---- AMP ----

// PyTorch's _amp_foreach_non_finite_check_and_unscale_: for every gradient (F32, BF16, F16; F64 on the CPU),
// found_inf = 1 if any element is inf or NaN (tested before the multiply; set, never cleared), and g *= inv_scale
// in place unless inv_scale == 1 (then the gradients keep their exact bits). found_inf and inv_scale: F32 with one
// element on the gradients' device. Gradients must be contiguous.
void non_finite_check_and_unscale_(std::span<const Tensor> grads, const Tensor& found_inf, const Tensor& inv_scale);

// torch's _amp_update_scale_ with hysteresis and a floor (kernels/math/optim.h grad_scaler_update), on the
// state's device without a host read: scale and inv (f32, one element), trackers (i32 [3]: growth tracker,
// overflows left before a backoff, backoffs that ended at the floor), updated in place from the sum of found_infs
// (f32, one element each, on the same device; at most 8).
struct ScaleUpdateParams {
  double growth_factor = 2.0, backoff_factor = 0.5, min_scale = 0.0;
  int64_t growth_interval = 2000, hysteresis = 1;
};
void amp_update_scale_(const Tensor& scale, const Tensor& inv, const Tensor& trackers,
                       std::span<const Tensor> found_infs, const ScaleUpdateParams& params);

// Gradient clipping's coefficient on the tensors' device, without a host read: min(max_norm / (total + 1e-6), 1)
// in f32 as torch computes it from an f32 norm (NaN stays NaN); f64 for an f64 total (the CPU reference path).
Tensor clip_coefficient(const Tensor& total_norm, double max_norm);
// Every tensor (contiguous, one device and dtype) multiplied in place by the 0-d `factor` on their device (f32;
// f64 for f64 tensors), one multi-tensor launch; a factor of exactly 1 keeps their bits.
void mul_(std::span<const Tensor> tensors, const Tensor& factor);

// PyTorch's torch._foreach_add_: dst[k] += src[k] for every pair, each what ops::add_(dst[k], src[k]) computes, bit
// for bit, in one multi-tensor launch per dtype on CUDA (backward's small gradient adds: src/autograd/leaf_adds.h).
// Pairs share a device; within a pair the dtype (F32, BF16, F16; F64 on the CPU) and shape match and dst is
// contiguous; no dst overlaps memory that another tensor of the call reads or writes (disjoint views of one buffer
// are fine, and a src may serve several pairs); no tensor may require grad.
void add_(std::span<const Tensor> dst, std::span<const Tensor> src);

// The bitsandbytes dynamic quantization map (256 sorted F32 values on the CPU): signed for m, unsigned for v.
Tensor dynamic_quantization_map(bool is_signed);

}  // namespace mpt::ops
