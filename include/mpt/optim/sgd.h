// mpt/optim/sgd.h: SGD with momentum, dampening, nesterov and (coupled) weight decay, as torch.optim.SGD.
#pragma once

#include "mpt/optim/optimizer.h"

namespace mpt::optim {

// Defaults for the groups (torch's). Per group they are ParamGroup::lr, ::weight_decay and the options
// "momentum", "dampening", "nesterov" (0 or 1).
struct SgdOptions {
  double lr = 1e-3;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

// Per parameter, as torch.optim.SGD (maximize=False): g += wd p; with momentum, buf = g at the parameter's first
// step (no dampening), then buf = momentum buf + (1 - dampening) g, and g = nesterov ? g + momentum buf : buf;
// p -= lr g. State: "momentum_buffer" (the parameter's shape and dtype; only once a step ran with momentum != 0).
// One ops::sgd_step call per (device, parameter dtype, gradient dtype, first momentum step) within a group.
class SGD : public Optimizer {
 public:
  explicit SGD(std::vector<ParamGroup> groups, const SgdOptions& options = {});
  explicit SGD(std::vector<Tensor> params, const SgdOptions& options = {});

 protected:
  void check_hyperparameters(const ParamGroup& group, size_t g) const override;
  std::vector<StateSpec> state_spec(const Tensor& param, const ParamGroup& group) const override;
  std::map<std::string, Tensor> init_state(const Tensor& param, const ParamGroup& group) const override;
  void step_group(const ParamGroup& group, std::span<Ready> ready, const ops::GradScaling& scaling) override;
};

}  // namespace mpt::optim
