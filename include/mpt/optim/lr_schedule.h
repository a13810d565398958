// mpt/optim/lr_schedule.h: learning-rate schedules that set every group's lr: constant, linear warmup + cosine.
#pragma once

#include <cstdint>

#include "mpt/core/state_dict.h"
#include "mpt/optim/optimizer.h"

namespace mpt::optim {

// A schedule bound to an optimizer (which must outlive it). Construction sets every group's lr to lr_at(0), for
// the optimizer's first step; step(), called after each optimizer step, advances the counter and sets lr_at(it)
// (torch's order: opt.step(); sched.step()). Every group gets the same lr: use one optimizer per schedule where
// groups need different rates.
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  LrSchedule(const LrSchedule&) = delete;
  LrSchedule& operator=(const LrSchedule&) = delete;

  // The learning rate of optimizer step `step` (counting from 0); pure.
  virtual double lr_at(int64_t step) const = 0;
  void step();
  int64_t current_step() const { return step_; }  // the step whose lr the groups hold
  double current_lr() const { return lr_at(step_); }

  // {"step": 0-d i64}. Loading sets the counter and applies its lr to the groups.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& dict);

 protected:
  explicit LrSchedule(Optimizer& optimizer) : optimizer_(optimizer) {}
  void apply();  // derived constructors call it once lr_at works

 private:
  Optimizer& optimizer_;
  int64_t step_ = 0;
};

// lr_at(it) = lr.
class ConstantLr : public LrSchedule {
 public:
  ConstantLr(Optimizer& optimizer, double lr);
  double lr_at(int64_t step) const override;

 private:
  double lr_;
};

struct WarmupCosineOptions {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;  // the first step at min_lr
};

// Linear warmup, then cosine decay to min_lr (Karpathy's build-nanogpt / llm.c):
//   it < warmup:          lr = max_lr * (it + 1) / warmup
//   warmup <= it < total: r = (it - warmup) / (total - warmup); lr = min_lr + 0.5 (1 + cos(pi r)) (max_lr - min_lr)
//   it >= total:          lr = min_lr
// Requires 0 <= warmup <= total, 0 <= min_lr <= max_lr, finite.
class WarmupCosineLr : public LrSchedule {
 public:
  WarmupCosineLr(Optimizer& optimizer, const WarmupCosineOptions& options);
  double lr_at(int64_t step) const override;

 private:
  WarmupCosineOptions o_;
};

}  // namespace mpt::optim
