// src/optim/adamw.cpp: AdamW over the fused ops::adamw_step kernel.
#include "mpt/optim/adamw.h"

#include "mpt/core/cuda_graph.h"

#include <cmath>

#include "kernels/math/optim.h"
#include "optim/batches.h"

namespace mpt::optim {

namespace {

std::map<std::string, double> adamw_defaults(const AdamWOptions& o) {
  return {{"lr", o.lr}, {"weight_decay", o.weight_decay}, {"beta1", o.betas.first}, {"beta2", o.betas.second},
          {"eps", o.eps}};
}

std::vector<ParamGroup> one_group(std::vector<Tensor> params) {
  std::vector<ParamGroup> groups(1);
  groups[0].params = std::move(params);
  return groups;
}

struct AdamWKey {
  Device device;
  DType param, grad;
  bool operator==(const AdamWKey&) const = default;
};

}  // namespace

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Optimizer("AdamW", adamw_defaults(options)), moments_(options.moments) {
  init_groups(std::move(groups));
}

AdamW::AdamW(std::vector<Tensor> params, const AdamWOptions& options)
    : AdamW(one_group(std::move(params)), options) {}

void AdamW::check_hyperparameters(const ParamGroup& group, size_t g) const {
  const double lr = *group.lr, wd = *group.weight_decay;
  const double b1 = group.options.at("beta1"), b2 = group.options.at("beta2"), eps = group.options.at("eps");
  MPT_CHECK(lr >= 0 && std::isfinite(lr), "[AdamW] group {}: Invalid learning rate: {}", g, lr);
  MPT_CHECK(eps >= 0 && std::isfinite(eps), "[AdamW] group {}: Invalid epsilon value: {}", g, eps);
  MPT_CHECK(b1 >= 0 && b1 < 1, "[AdamW] group {}: Invalid beta parameter at index 0: {}", g, b1);
  MPT_CHECK(b2 >= 0 && b2 < 1, "[AdamW] group {}: Invalid beta parameter at index 1: {}", g, b2);
  MPT_CHECK(wd >= 0 && std::isfinite(wd), "[AdamW] group {}: Invalid weight_decay value: {}", g, wd);
  for (const Tensor& p : group.params) {
    MPT_CHECK(!p.defined() || p.dtype() == DType::F32 || moments_ == ops::MomentStorage::F32,
              "[AdamW] group {}: bf16 and 8-bit moments need f32 parameters, got {} (f64 parameters keep f64 "
              "moments)", g, p.meta_str());
  }
}

std::vector<Optimizer::StateSpec> AdamW::state_spec(const Tensor& param, const ParamGroup&) const {
  switch (moments_) {
    case ops::MomentStorage::F32:
      return {{"exp_avg", param.shape(), param.dtype(), true}, {"exp_avg_sq", param.shape(), param.dtype(), true}};
    case ops::MomentStorage::BF16:
      return {{"exp_avg", param.shape(), DType::BF16, true}, {"exp_avg_sq", param.shape(), DType::BF16, true}};
    case ops::MomentStorage::Int8: {
      constexpr int64_t block = kernels::math::kQuantBlock;
      const Shape blocks{(param.numel() + block - 1) / block};
      return {{"exp_avg", param.shape(), DType::U8, true},
              {"exp_avg_sq", param.shape(), DType::U8, true},
              {"exp_avg_absmax", blocks, DType::F32, true},
              {"exp_avg_sq_absmax", blocks, DType::F32, true}};
    }
  }
  MPT_THROW("[AdamW] unknown moment storage");
}

std::map<std::string, Tensor> AdamW::init_state(const Tensor& param, const ParamGroup&) const {
  ops::AdamWState s = ops::adamw_state(param, moments_);
  std::map<std::string, Tensor> out{{"exp_avg", s.exp_avg}, {"exp_avg_sq", s.exp_avg_sq}};
  if (moments_ == ops::MomentStorage::Int8) {
    out.emplace("exp_avg_absmax", s.exp_avg_absmax);
    out.emplace("exp_avg_sq_absmax", s.exp_avg_sq_absmax);
  }
  return out;
}

void AdamW::step_group(const ParamGroup& group, std::span<Ready> ready, const ops::GradScaling& scaling) {
  detail::Batches<AdamWKey> batches;
  for (size_t i = 0; i < ready.size(); ++i) {
    batches.add({ready[i].param.device(), ready[i].param.dtype(), ready[i].grad.dtype()}, i);
  }
  const bool int8 = moments_ == ops::MomentStorage::Int8;
  for (size_t b = 0; b < batches.size(); ++b) {
    std::vector<ops::AdamWSlot> slots;
    for (size_t i : batches.members(b)) {
      const std::map<std::string, Tensor>& t = ready[i].state->tensors;
      slots.push_back({ready[i].param, ready[i].grad,
                       {t.at("exp_avg"), t.at("exp_avg_sq"), int8 ? t.at("exp_avg_absmax") : Tensor{},
                        int8 ? t.at("exp_avg_sq_absmax") : Tensor{}},
                       ready[i].state->step, ready[i].copy, ready[i].fp8});
    }
    ops::AdamWParams hp{.lr = *group.lr,
                        .beta1 = group.options.at("beta1"),
                        .beta2 = group.options.at("beta2"),
                        .eps = group.options.at("eps"),
                        .weight_decay = *group.weight_decay};  // the step: each slot's own count
    // A captured step reads the group's learning rate and weight decay on the device, refreshed (and checked)
    // before every replay, so schedules keep working.
    if (CudaGraph* graph = CudaGraph::capturing(batches.key(b).device)) {
      const size_t gi = static_cast<size_t>(&group - param_groups().data());
      hp.lr_wd_device = graph->replay_scalars(2, [this, gi](double* v) {
        const ParamGroup& g = param_groups().at(gi);
        check_hyperparameters(g, gi);
        v[0] = *g.lr, v[1] = *g.weight_decay;
      });
    }
    ops::adamw_step(slots, hp, scaling);
    for (size_t i : batches.members(b)) {  // rewritten by the kernel
      ready[i].copy_written = ready[i].copy.defined();
      ready[i].fp8_written = ready[i].fp8.codes.defined();
    }
  }
}

}  // namespace mpt::optim
