// mpt/optim/adamw.h: AdamW (decoupled weight decay, bias correction) with f32, bf16 or 8-bit blockwise moments.
#pragma once

#include <utility>

#include "mpt/optim/optimizer.h"

namespace mpt::optim {

// Defaults for the groups (torch's). Per group they are ParamGroup::lr, ::weight_decay and the options "beta1",
// "beta2", "eps". `moments` is one choice for the whole optimizer.
struct AdamWOptions {
  double lr = 1e-3;
  std::pair<double, double> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = 1e-2;
  ops::MomentStorage moments = ops::MomentStorage::F32;
};

// torch.optim.AdamW (amsgrad=False, maximize=False): per parameter, with t its own step count (from 1),
// p *= 1 - lr wd; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) m / (sqrt(v / (1 - b2^t)) + eps)
// (as sqrt(v) / sqrt(1 - b2^t) + eps). State: "exp_avg", "exp_avg_sq" (f32, f64 for f64 parameters, or bf16), and
// for 8-bit moments u8 codes plus "exp_avg_absmax", "exp_avg_sq_absmax" (f32, one per block of 256; see
// ops::MomentStorage). One ops::adamw_step call per (device, parameter dtype, gradient dtype, step count) within a
// group.
class AdamW : public Optimizer {
 public:
  explicit AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options = {});
  explicit AdamW(std::vector<Tensor> params, const AdamWOptions& options = {});

  ops::MomentStorage moment_storage() const { return moments_; }

 protected:
  void check_hyperparameters(const ParamGroup& group, size_t g) const override;
  std::vector<StateSpec> state_spec(const Tensor& param, const ParamGroup& group) const override;
  std::map<std::string, Tensor> init_state(const Tensor& param, const ParamGroup& group) const override;
  void step_group(const ParamGroup& group, std::span<Ready> ready, const ops::GradScaling& scaling) override;

 private:
  ops::MomentStorage moments_;
};

}  // namespace mpt::optim
