// mpt/train/grad_scaler.h: dynamic loss scaling for FP16 training (torch.amp.GradScaler), with optional hysteresis,
// a scale floor and a warning when the scale collapses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/nn/module.h"
#include "mpt/optim/optimizer.h"

namespace mpt::train {

struct GradScalerOptions {
  double init_scale = 65536.0;  // 2^16, stored as f32
  double growth_factor = 2.0;   // > 1
  double backoff_factor = 0.5;  // in (0, 1)
  int64_t growth_interval = 2000;  // >= 1: finite updates in a row before the scale grows
  // Overflowing updates needed for one backoff (>= 1). The count starts at `hysteresis`, drops by one at every
  // update that saw an inf/NaN, and is reset to `hysteresis` by a backoff and at the end of every growth
  // interval; finite updates in between leave it alone (overflows accumulate, Megatron-LM's rule, except that
  // Megatron does not reset it at a backoff). 1 = torch: every overflow backs off.
  int64_t hysteresis = 1;
  // 0 = torch: no floor. Otherwise a backoff never goes below it (the scale is clamped to min_scale).
  double min_scale = 0.0;
  // false: every method is a no-op (scale(loss) returns loss, step(opt) is opt.step()). Use it for BF16 and FP32
  // training, whose gradients do not underflow; FP16 needs the scaler.
  bool enabled = true;
};

// Per optimizer, between two update() calls: READY -> (unscale_) UNSCALED -> (step) STEPPED.
enum class OptStage : uint8_t { Ready, Unscaled, Stepped };

// What GradScaler::step returns: whether the optimizer stepped. The skip itself happens on the device; only
// converting this to bool reads found_inf on the host (on CUDA: waits for the device). Ignore it to keep the step
// free of host round trips.
class StepResult {
 public:
  StepResult(bool stepped) : known_(true), stepped_(stepped) {}  // NOLINT: implicit, like the bool it was
  explicit StepResult(Tensor found_inf) : found_(std::move(found_inf)) {}
  operator bool() const;  // NOLINT: implicit, so `if (scaler.step(opt))` and vector<bool> keep working
  // A copy that keeps this verdict when its device flag is later overwritten (a CUDA graph's replay rewrites the
  // captured step's found_inf): the flag is copied on the device, nothing is read.
  StepResult snapshot() const;

 private:
  Tensor found_;
  bool known_ = false;
  bool stepped_ = true;
};

// torch.amp.GradScaler. Usage per iteration:
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                      // optional: clip or inspect the true gradients here
//   scaler.step(opt);                          // skipped when a gradient holds an inf or NaN
//   scaler.update();
// The scale, its inverse (f32) and the trackers (i32) live in tensors on the scaler's device, as torch keeps them.
// unscale_, step and update() run there without a host round trip: the optimizer's kernels skip a step whose
// found_inf is set (and do not count it), and update() is one kernel (torch's _amp_update_scale_). Reading the
// state on the host (get_scale, the trackers, scale_collapsed, collapse_count, state_dict, a StepResult as bool)
// waits for the device. Exception: an optimizer whose gradients span several devices is stepped or skipped by a
// host read of found_inf.
class GradScaler {
 public:
  GradScaler() : GradScaler(GradScalerOptions{}) {}
  explicit GradScaler(const GradScalerOptions& options, Device device = Device::cpu());
  explicit GradScaler(Device device, const GradScalerOptions& options = {});

  // loss * scale, recorded by autograd (backward then produces scaled gradients). An f32 (f64 on the CPU) loss
  // keeps its dtype; an f16/bf16 loss is converted to f32 first (compute losses in f32: 65536 overflows f16).
  // Disabled: returns loss itself.
  Tensor scale(const Tensor& loss) const;

  // Divides the gradients of `optimizer`'s parameters in place by the scale (multiplies them by
  // inv = float(1 / double(scale)); inv == 1 keeps their bits) and records whether any element was inf or NaN
  // (checked before the multiply). Throws if already called for this optimizer since the last update() or after
  // step(), or for an f16 gradient (master weights: the optimizer's parameters hold f32 gradients).
  void unscale_(optim::Optimizer& optimizer);
  // unscale_ unless already done; then optimizer.step() with found_inf, which skips the step on the device when an
  // inf/NaN was found. Returns whether it stepped (lazily: see StepResult). Throws if called twice for one
  // optimizer before update(), or when the optimizer has no gradient at all. `grad_multiplier` (0-d f32 on the
  // gradients' device, e.g. optim::clip_coefficient's): the optimizer multiplies every gradient by it as it reads
  // them (ops::GradScaling::grad_scale_inv), enabled or not.
  StepResult step(optim::Optimizer& optimizer, const Tensor& grad_multiplier = {});
  // Sums found_inf over every optimizer unscaled since the last update: non-zero backs the scale off
  // (scale = float(scale * backoff), growth tracker 0; see hysteresis and min_scale); zero increments the growth
  // tracker and, when tracker + 1 == growth_interval, sets scale = float(scale * growth) unless that is inf and
  // resets the tracker (even when the growth was refused). Then forgets every optimizer's stage.
  // Throws when no optimizer was unscaled since the last update.
  void update();
  // Sets the scale (narrowed to f32; finite, > 0 and >= min_scale); the trackers keep their values.
  void update(double new_scale);

  // Called before step() or update() first reads an optimizer's found_inf (one 0-d f32 per device): a data-parallel
  // run whose ranks unscale different gradients (ZeRO) MAX-reduces them in place, so every rank skips the same steps.
  void set_found_inf_reduction(std::function<void(std::vector<Tensor>& found_inf)> hook) {
    found_inf_reduction_ = std::move(hook);
  }

  double get_scale() const;  // 1 when disabled
  int32_t growth_tracker() const;
  int32_t hysteresis_tracker() const;  // overflows left before the next backoff
  OptStage stage(const optim::Optimizer& optimizer) const;
  const Tensor& scale_tensor() const { return scale_t_; }  // 0-d f32 on device()
  Device device() const { return device_; }
  bool is_enabled() const { return enabled_; }

  double get_growth_factor() const { return growth_factor_; }
  double get_backoff_factor() const { return backoff_factor_; }
  int64_t get_growth_interval() const { return growth_interval_; }
  int64_t get_hysteresis() const { return hysteresis_; }
  double get_min_scale() const { return min_scale_; }
  // Checked like the constructor's options. set_hysteresis and set_min_scale take effect from the next backoff
  // (the hysteresis count is clamped to the new value; the scale is not moved).
  void set_growth_factor(double v);
  void set_backoff_factor(double v);
  void set_growth_interval(int64_t v);
  void set_hysteresis(int64_t v);
  void set_min_scale(double v);

  // The scale is at its floor: below 2^-24 (the smallest f16 subnormal; 0 included) or, with min_scale > 0, at
  // most min_scale. Every overflow then leaves the scale where it is and every such step is skipped.
  bool scale_collapsed() const;
  // Updates whose backoff ended at the floor, since construction. The first one prints a warning on stderr (on
  // the CPU at that update; on CUDA at the next host read of the scaler's state).
  int64_t collapse_count() const;

  // "scale" (0-d f32), "growth_tracker", "hysteresis_tracker" (0-d i32), "growth_factor", "backoff_factor",
  // "min_scale" (0-d f64), "growth_interval", "hysteresis" (0-d i64). Empty when disabled (like torch).
  nn::StateDict state_dict() const;
  // Restores a state_dict: every key present with its dtype and a 0-d shape, no other key, valid values;
  // checked before anything changes. A disabled scaler ignores it; an enabled one rejects an empty dict (saved
  // from a disabled scaler). Per-optimizer stages are left alone.
  void load_state_dict(const nn::StateDict& dict);
  // Forgets every optimizer's stage without an update: for a step that was abandoned half way (a CUDA-graph capture
  // that failed records work without running it, so the device state is as before the step).
  void forget_stages() { states_.clear(); }

 private:
  struct OptState {
    OptStage stage = OptStage::Ready;
    std::vector<Tensor> found_inf;  // one 0-d f32 per device holding gradients
    bool reduced = false;           // the found_inf reduction hook has run over found_inf
  };
  // The host's view of the device state (one read; prints the collapse warning once).
  struct HostState {
    float scale;
    int32_t tracker, hysteresis_left, collapses;
  };
  HostState read() const;
  const std::vector<Tensor>& found_inf(OptState& st) const;  // after the reduction hook
  void set_scale(float s);

  Device device_;
  bool enabled_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t hysteresis_;
  double min_scale_;
  mutable bool warned_ = false;
  std::function<void(std::vector<Tensor>&)> found_inf_reduction_;
  Tensor scale_t_;     // 0-d f32 on device_
  Tensor inv_t_;       // 0-d f32: float(1 / double(scale))
  Tensor trackers_t_;  // i32 [3]: growth tracker, overflows left before a backoff, backoffs that hit the floor
  std::map<const optim::Optimizer*, OptState> states_;
};

}  // namespace mpt::train
