// src/optim/sgd.cpp: SGD over the fused ops::sgd_step kernel.
#include "mpt/optim/sgd.h"

#include "mpt/core/cuda_graph.h"

#include <cmath>

#include "optim/batches.h"

namespace mpt::optim {

namespace {

std::map<std::string, double> sgd_defaults(const SgdOptions& o) {
  return {{"lr", o.lr}, {"weight_decay", o.weight_decay}, {"momentum", o.momentum}, {"dampening", o.dampening},
          {"nesterov", o.nesterov ? 1.0 : 0.0}};
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

struct SgdKey {
  Device device;
  DType param, grad;
  bool new_buffer;
  bool operator==(const SgdKey&) const = default;
};

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, const SgdOptions& options) : Optimizer("SGD", sgd_defaults(options)) {
  init_groups(std::move(groups));
}

SGD::SGD(std::vector<Tensor> params, const SgdOptions& options) : SGD(one_group(std::move(params)), options) {}

void SGD::check_hyperparameters(const ParamGroup& group, size_t g) const {
  const double lr = *group.lr, wd = *group.weight_decay;
  const double momentum = group.options.at("momentum"), dampening = group.options.at("dampening");
  const double nesterov = group.options.at("nesterov");
  MPT_CHECK(lr >= 0 && std::isfinite(lr), "[SGD] group {}: Invalid learning rate: {}", g, lr);
  MPT_CHECK(momentum >= 0 && std::isfinite(momentum), "[SGD] group {}: Invalid momentum value: {}", g, momentum);
  MPT_CHECK(std::isfinite(dampening), "[SGD] group {}: Invalid dampening value: {}", g, dampening);
  MPT_CHECK(wd >= 0 && std::isfinite(wd), "[SGD] group {}: Invalid weight_decay value: {}", g, wd);
  MPT_CHECK(nesterov == 0 || nesterov == 1, "[SGD] group {}: nesterov must be 0 or 1, got {}", g, nesterov);
  MPT_CHECK(nesterov == 0 || (momentum > 0 && dampening == 0),
            "[SGD] group {}: Nesterov momentum requires a momentum and zero dampening (momentum {}, dampening {})",
            g, momentum, dampening);
}

std::vector<Optimizer::StateSpec> SGD::state_spec(const Tensor& param, const ParamGroup&) const {
  return {{"momentum_buffer", param.shape(), param.dtype(), false}};
}

std::map<std::string, Tensor> SGD::init_state(const Tensor&, const ParamGroup&) const { return {}; }

void SGD::step_group(const ParamGroup& group, std::span<Ready> ready, const ops::GradScaling& scaling) {
  const double momentum = group.options.at("momentum");
  detail::Batches<SgdKey> batches;
  for (size_t i = 0; i < ready.size(); ++i) {
    Ready& r = ready[i];
    bool created = false;
    if (momentum != 0 && !r.state->tensors.count("momentum_buffer")) {
      // Zeros, not empty: the step kernel loads the buffer before the first step selects the gradient (torch:
      // buf = clone(g)). That happens for a new buffer and at a count of 0 (a first step skipped on the device).
      r.state->tensors.emplace("momentum_buffer", Tensor::zeros(r.param.shape(), r.param.dtype(), r.param.device()));
      created = true;
    }
    batches.add({r.param.device(), r.param.dtype(), r.grad.dtype(), created}, i);
  }
  for (size_t b = 0; b < batches.size(); ++b) {
    std::vector<ops::SgdSlot> slots;
    for (size_t i : batches.members(b)) {
      const auto buf = ready[i].state->tensors.find("momentum_buffer");
      slots.push_back({ready[i].param, ready[i].grad, buf == ready[i].state->tensors.end() ? Tensor{} : buf->second,
                       ready[i].state->step});
    }
    const ops::SgdParams hp{.lr = *group.lr,
                            .momentum = momentum,
                            .dampening = group.options.at("dampening"),
                            .weight_decay = *group.weight_decay,
                            .nesterov = group.options.at("nesterov") != 0,
                            .first_step = batches.key(b).new_buffer};  // or a slot's count of 0
    // SGD's coefficients are host values baked into a captured step: a replay refuses hyperparameters changed since.
    if (CudaGraph* graph = CudaGraph::capturing(batches.key(b).device)) {
      const size_t gi = static_cast<size_t>(&group - param_groups().data());
      graph->before_replay([this, gi, lr = hp.lr, wd = hp.weight_decay] {
        const ParamGroup& g = param_groups().at(gi);
        MPT_CHECK(*g.lr == lr && *g.weight_decay == wd,
                  "[SGD] group {}: the captured CUDA graph step uses lr {} and weight_decay {}, now {} and {}: SGD's "
                  "coefficients are fixed at capture (capture again, or use AdamW, whose graph reads them each replay)",
                  gi, lr, wd, *g.lr, *g.weight_decay);
      });
    }
    ops::sgd_step(slots, hp, scaling);
  }
}

}  // namespace mpt::optim
