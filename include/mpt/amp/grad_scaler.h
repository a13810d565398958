// mpt/amp/grad_scaler.h: dynamic loss scaling for FP16 training (torch.amp.GradScaler), with optional hysteresis,
// a scale floor and a warning when the scale collapses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/nn/module.h"
#include "mpt/optim/optimizer.h"

namespace mpt::amp {

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

// torch.amp.GradScaler. Usage per iteration:
//   scaler.scale(loss).backward();
//   scaler.unscale_(opt);                      // optional: clip or inspect the true gradients here
//   scaler.step(opt);                          // skipped when a gradient holds an inf or NaN
//   scaler.update();
// The scale (f32) and the trackers (i32) are host values, exactly what torch keeps in its tensors; the scale and
// its inverse are mirrored into 0-d f32 tensors on the scaler's device, rewritten only when the scale changes.
// unscale_ runs on the gradients' devices without a host sync; step reads found_inf on the host (one sync per
// device, as torch's step does), and update() uses those host values (no further sync).
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
  // unscale_ unless already done; then optimizer.step() unless an inf/NaN was found. Returns whether it stepped.
  // Throws if called twice for one optimizer before update(), or when the optimizer has no gradient at all.
  bool step(optim::Optimizer& optimizer);
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
  int32_t growth_tracker() const { return enabled_ ? tracker_ : 0; }
  int32_t hysteresis_tracker() const { return hysteresis_left_; }  // overflows left before the next backoff
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
  // Updates whose backoff ended at the floor, since construction. The first one prints a warning on stderr.
  int64_t collapse_count() const { return collapse_count_; }

  // "scale" (0-d f32), "growth_tracker", "hysteresis_tracker" (0-d i32), "growth_factor", "backoff_factor",
  // "min_scale" (0-d f64), "growth_interval", "hysteresis" (0-d i64). Empty when disabled (like torch).
  nn::StateDict state_dict() const;
  // Restores a state_dict: every key present with its dtype and a 0-d shape, no other key, valid values;
  // checked before anything changes. A disabled scaler ignores it; an enabled one rejects an empty dict (saved
  // from a disabled scaler). Per-optimizer stages are left alone.
  void load_state_dict(const nn::StateDict& dict);

 private:
  struct OptState {
    OptStage stage = OptStage::Ready;
    std::vector<Tensor> found_inf;  // one 0-d f32 per device holding gradients
    bool found_read = false;        // found_sum holds the host sum of found_inf
    float found_sum = 0.0f;
  };
  float found_sum(OptState& st) const;
  void set_scale(float s);
  bool at_floor(float s) const;

  Device device_;
  bool enabled_;
  float scale_;
  int32_t tracker_ = 0;
  int32_t hysteresis_left_;
  double growth_factor_;
  double backoff_factor_;
  int64_t growth_interval_;
  int64_t hysteresis_;
  double min_scale_;
  int64_t collapse_count_ = 0;
  bool warned_ = false;
  std::function<void(std::vector<Tensor>&)> found_inf_reduction_;
  Tensor scale_t_;  // 0-d f32 mirrors of scale_ and float(1 / double(scale_)) on device_
  Tensor inv_t_;
  std::map<const optim::Optimizer*, OptState> states_;
};

}  // namespace mpt::amp
