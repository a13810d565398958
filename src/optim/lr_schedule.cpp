// src/optim/lr_schedule.cpp: the learning-rate schedules.
#include "mpt/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

namespace mpt::optim {

void LrSchedule::apply() {
  const double lr = lr_at(step_);
  for (ParamGroup& g : optimizer_.param_groups()) g.lr = lr;
}

void LrSchedule::step() {
  ++step_;
  apply();
}

StateDict LrSchedule::state_dict() const {
  return {{"step", Tensor::full({}, static_cast<double>(step_), DType::I64)}};
}

void LrSchedule::load_state_dict(const StateDict& dict) {
  const auto it = dict.find("step");
  MPT_CHECK(it != dict.end(), "[LrSchedule.load_state_dict] missing key 'step' (a 0-d i64 tensor)");
  for (const auto& [key, t] : dict) {
    MPT_CHECK(key == "step", "[LrSchedule.load_state_dict] unexpected key '{}' (expected only 'step')", key);
  }
  const Tensor& t = it->second;
  MPT_CHECK(t.defined() && t.dtype() == DType::I64 && t.dim() == 0,
            "[LrSchedule.load_state_dict] key 'step': expected a 0-d i64 tensor, got {}",
            t.defined() ? t.meta_str() : "an undefined tensor");
  const auto step = t.item<int64_t>();
  MPT_CHECK(step >= 0, "[LrSchedule.load_state_dict] key 'step': expected a count >= 0, got {}", step);
  step_ = step;
  apply();
}

ConstantLr::ConstantLr(Optimizer& optimizer, double lr) : LrSchedule(optimizer), lr_(lr) {
  MPT_CHECK(lr >= 0 && std::isfinite(lr), "[ConstantLr] invalid learning rate: {}", lr);
  apply();
}

double ConstantLr::lr_at(int64_t) const { return lr_; }

WarmupCosineLr::WarmupCosineLr(Optimizer& optimizer, const WarmupCosineOptions& o) : LrSchedule(optimizer), o_(o) {
  MPT_CHECK(std::isfinite(o.max_lr) && std::isfinite(o.min_lr) && o.min_lr >= 0 && o.min_lr <= o.max_lr,
            "[WarmupCosineLr] expected 0 <= min_lr <= max_lr, got min_lr {} and max_lr {}", o.min_lr, o.max_lr);
  MPT_CHECK(o.warmup_steps >= 0 && o.warmup_steps <= o.total_steps,
            "[WarmupCosineLr] expected 0 <= warmup_steps <= total_steps, got {} and {}", o.warmup_steps,
            o.total_steps);
  apply();
}

double WarmupCosineLr::lr_at(int64_t it) const {
  MPT_CHECK(it >= 0, "[WarmupCosineLr] step must be >= 0, got {}", it);
  if (it < o_.warmup_steps) {
    return o_.max_lr * static_cast<double>(it + 1) / static_cast<double>(o_.warmup_steps);
  }
  if (it >= o_.total_steps) return o_.min_lr;
  const double ratio =
      static_cast<double>(it - o_.warmup_steps) / static_cast<double>(o_.total_steps - o_.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return o_.min_lr + coeff * (o_.max_lr - o_.min_lr);
}

}  // namespace mpt::optim
