// src/optim/optimizer.cpp: the Optimizer base: group bookkeeping, the step loop, state dicts and their checks.
#include "mpt/optim/optimizer.h"

#include "mpt/amp/master_weights.h"

#include <set>
#include <utility>

#include "mpt/autograd/grad_mode.h"
#include "mpt/core/profile.h"

namespace mpt::optim {

namespace {

Tensor f64_scalar(double v) { return Tensor::full({}, v, DType::F64); }

// The 0-d tensor dict[key], checked; its value as T.
template <class T>
T scalar_entry(const StateDict& dict, const std::string& key, DType dtype, const std::string& op) {
  const auto it = dict.find(key);
  MPT_CHECK(it != dict.end(), "[{}.load_state_dict] missing key '{}' (a 0-d {} tensor)", op, key, dtype);
  const Tensor& t = it->second;
  MPT_CHECK(t.defined() && t.dtype() == dtype && t.dim() == 0,
            "[{}.load_state_dict] key '{}': expected a 0-d {} tensor, got {}", op, key, dtype,
            t.defined() ? t.meta_str() : "an undefined tensor");
  return t.item<T>();
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const std::vector<NamedParameter>& params, double weight_decay) {
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const NamedParameter& p : params) {
    if (!p.tensor.defined() || !p.tensor.requires_grad()) continue;
    ParamGroup& g = groups[p.weight_decay ? 0 : 1];
    g.params.push_back(p.tensor);
    g.names.push_back(p.name);
  }
  return groups;
}

Optimizer::Optimizer(std::string name, std::map<std::string, double> defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

void Optimizer::init_groups(std::vector<ParamGroup> groups) {
  MPT_CHECK(!groups.empty(), "[{}] got an empty list of parameter groups", name_);
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  const size_t g = groups_.size();
  MPT_CHECK(group.names.empty() || group.names.size() == group.params.size(),
            "[{}] group {}: {} names for {} parameters (give none or one per parameter)", name_, g,
            group.names.size(), group.params.size());
  for (const auto& [key, value] : group.options) {
    MPT_CHECK(defaults_.count(key) && key != "lr" && key != "weight_decay",
              "[{}] group {}: unknown option '{}' = {}", name_, g, key, value);
  }
  if (!group.lr) group.lr = defaults_.at("lr");
  if (!group.weight_decay) group.weight_decay = defaults_.at("weight_decay");
  for (const auto& [key, value] : defaults_) {
    if (key != "lr" && key != "weight_decay") group.options.try_emplace(key, value);
  }
  check_hyperparameters(group, g);
  std::set<const void*> seen;
  std::set<std::string> names;
  for (size_t h = 0; h < groups_.size(); ++h) {
    for (const Tensor& p : groups_[h].params) {
      if (p.numel() > 0) seen.insert(p.data_ptr());
    }
    names.insert(groups_[h].names.begin(), groups_[h].names.end());
  }
  for (size_t i = 0; i < group.params.size(); ++i) {
    const Tensor& p = group.params[i];
    const std::string label = group.names.empty() ? fmt::format("{}", i) : fmt::format("'{}'", group.names[i]);
    MPT_CHECK(p.defined(), "[{}] group {}: parameter {} is an undefined tensor", name_, g, label);
    MPT_CHECK(p.is_leaf(), "[{}] group {}: parameter {} is not a leaf tensor ({})", name_, g, label, p.meta_str());
    MPT_CHECK(p.dtype() == DType::F32 || p.dtype() == DType::F64,
              "[{}] group {}: parameter {} must be an f32 master (or f64 on the CPU), got {}", name_, g, label,
              p.meta_str());
    MPT_CHECK(p.numel() == 0 || seen.insert(p.data_ptr()).second,
              "[{}] group {}: parameter {} appears more than once in the parameter groups", name_, g, label);
    if (!group.names.empty()) {
      MPT_CHECK(names.insert(group.names[i]).second, "[{}] group {}: duplicate parameter name '{}'", name_, g,
                group.names[i]);
    }
  }
  states_.emplace_back(group.params.size());
  groups_.push_back(std::move(group));
}

const ParamState* Optimizer::state(size_t group, size_t index) const {
  MPT_CHECK(group < states_.size() && index < states_[group].size(), "[{}] no parameter {} in group {}", name_,
            index, group);
  const auto& s = states_[group][index];
  return s ? &*s : nullptr;
}

void Optimizer::check_group_shape(size_t g) const {
  const ParamGroup& group = groups_[g];
  MPT_CHECK(group.params.size() == states_[g].size() &&
                (group.names.empty() || group.names.size() == group.params.size()),
            "[{}] group {} now has {} parameters and {} names, expected {}: parameter lists may not change after "
            "construction (use add_param_group)", name_, g, group.params.size(), group.names.size(),
            states_[g].size());
  MPT_CHECK(group.lr && group.weight_decay, "[{}] group {}: lr and weight_decay must stay set", name_, g);
}

void Optimizer::step(const ops::GradScaling& scaling) {
  const profile::Range range("optimizer");
  autograd::NoGradGuard no_grad;
  // Everything is checked before the first kernel runs, so a bad gradient leaves every parameter untouched.
  std::vector<std::vector<size_t>> ready_index(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_group_shape(g);
    check_hyperparameters(groups_[g], g);
    const ParamGroup& group = groups_[g];
    for (size_t i = 0; i < group.params.size(); ++i) {
      const Tensor& p = group.params[i];
      if (!p.requires_grad()) continue;  // frozen: never any state
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      MPT_CHECK(grad.device() == p.device(), "[{}] parameter {}: gradient {} is not on the parameter's device {}",
                name_, key_of(g, i), grad.meta_str(), p.device().str());
      const DType gt = grad.dtype();
      const bool low = gt == DType::F32 || gt == DType::BF16 || gt == DType::F16;
      MPT_CHECK(p.dtype() == DType::F64 ? gt == DType::F64 : low,
                "[{}] parameter {} ({}): expected a {} gradient, got {}", name_, key_of(g, i), p.meta_str(),
                p.dtype() == DType::F64 ? "f64" : "f32, bf16 or f16", grad.meta_str());
      ready_index[g].push_back(i);
    }
  }
  std::vector<Tensor> fp8_written;  // parameters whose FP8 copies the step rewrote (W^T's codes made below, at once)
  for (size_t g = 0; g < groups_.size(); ++g) {
    if (ready_index[g].empty()) continue;
    const ParamGroup& group = groups_[g];
    std::vector<Ready> ready;
    for (size_t i : ready_index[g]) {
      const Tensor& p = group.params[i];
      ready.push_back({p, p.grad(), &ensure_state(g, i), amp::refreshable_compute_copy(p), false,
                       amp::refreshable_fp8_copy(p)});
    }
    step_group(group, ready, scaling);
    // A compute copy the step rewrote stays (an FP8 one once W^T's codes are made); every other copy of an updated
    // parameter is stale now.
    for (Ready& r : ready) {
      if (r.fp8_written) fp8_written.push_back(r.param);
      amp::invalidate_compute_copies(r.param, r.copy_written ? r.copy : Tensor(), r.fp8_written);
    }
  }
  if (!fp8_written.empty()) amp::fp8_copies_rewritten(fp8_written);
}

ParamState& Optimizer::ensure_state(size_t g, size_t i) {
  std::optional<ParamState>& st = states_[g][i];
  const Tensor& p = groups_[g].params[i];
  if (!st) st = ParamState{Tensor::zeros({}, DType::I64, p.device()), init_state(p, groups_[g])};
  return *st;
}

void Optimizer::materialize_state() {
  autograd::NoGradGuard no_grad;
  for (size_t g = 0; g < groups_.size(); ++g) {
    check_group_shape(g);
    for (size_t i = 0; i < groups_[g].params.size(); ++i) {
      if (groups_[g].params[i].requires_grad()) ensure_state(g, i);
    }
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  for (const ParamGroup& group : groups_) {
    for (const Tensor& p : group.params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      if (set_to_none) {
        p.set_grad({});
      } else {
        grad.zero_();
      }
    }
  }
}

std::string Optimizer::key_of(size_t g, size_t i) const {
  const ParamGroup& group = groups_[g];
  return group.names.empty() ? fmt::format("group{}.param{}", g, i) : group.names[i];
}

StateDict Optimizer::state_dict() const {
  StateDict dict;
  for (size_t g = 0; g < groups_.size(); ++g) {
    const ParamGroup& group = groups_[g];
    const std::string prefix = fmt::format("group{}.", g);
    dict[prefix + "lr"] = f64_scalar(*group.lr);
    dict[prefix + "weight_decay"] = f64_scalar(*group.weight_decay);
    for (const auto& [key, value] : group.options) dict[prefix + key] = f64_scalar(value);
    for (size_t i = 0; i < states_[g].size(); ++i) {
      const auto& st = states_[g][i];
      if (!st) continue;
      const std::string key = key_of(g, i);
      dict[key + ".step"] = st->step.clone();  // a snapshot, on the parameter's device
      for (const auto& [name, t] : st->tensors) dict[key + "." + name] = t.detach();
    }
  }
  return dict;
}

void Optimizer::load_state_dict(const StateDict& dict) {
  const std::string op = name_;
  std::set<std::string> used;
  // Hyperparameters first: the state spec (SGD's momentum buffer) may depend on them.
  std::vector<ParamGroup> groups = groups_;
  for (size_t g = 0; g < groups.size(); ++g) {
    ParamGroup& group = groups[g];
    const std::string prefix = fmt::format("group{}.", g);
    group.lr = scalar_entry<double>(dict, prefix + "lr", DType::F64, op);
    group.weight_decay = scalar_entry<double>(dict, prefix + "weight_decay", DType::F64, op);
    used.insert({prefix + "lr", prefix + "weight_decay"});
    for (auto& [key, value] : group.options) {
      value = scalar_entry<double>(dict, prefix + key, DType::F64, op);
      used.insert(prefix + key);
    }
    check_hyperparameters(group, g);
  }
  // Then every parameter's state: all of it or none of it, with the expected shapes and dtypes.
  std::vector<std::vector<std::optional<ParamState>>> states(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    states[g].resize(groups[g].params.size());
    for (size_t i = 0; i < groups[g].params.size(); ++i) {
      const Tensor& p = groups[g].params[i];
      const std::string key = key_of(g, i);
      const std::vector<StateSpec> spec = state_spec(p, groups[g]);
      const bool has_step = dict.count(key + ".step") > 0;
      for (const StateSpec& s : spec) {
        const std::string k = key + "." + s.name;
        const auto it = dict.find(k);
        if (it == dict.end()) {
          MPT_CHECK(!has_step || !s.required, "[{}.load_state_dict] missing key '{}' (a {}{} tensor)", op, k,
                    s.dtype, shape_str(s.shape));
          continue;
        }
        MPT_CHECK(has_step, "[{}.load_state_dict] missing key '{}.step' (a 0-d i64 tensor; '{}' is present)", op,
                  key, k);
        const Tensor& t = it->second;
        MPT_CHECK(t.defined() && t.dtype() == s.dtype && t.shape() == s.shape,
                  "[{}.load_state_dict] key '{}': expected a {}{} tensor, got {}", op, k, s.dtype,
                  shape_str(s.shape), t.defined() ? t.meta_str() : "an undefined tensor");
        used.insert(k);
      }
      if (!has_step) continue;
      const auto step = scalar_entry<int64_t>(dict, key + ".step", DType::I64, op);
      MPT_CHECK(step >= 0, "[{}.load_state_dict] key '{}.step': expected a count >= 0, got {}", op, key, step);
      used.insert(key + ".step");
      states[g][i] = ParamState{Tensor::full({}, static_cast<double>(step), DType::I64, p.device()), {}};
      for (const StateSpec& s : spec) {
        const auto it = dict.find(key + "." + s.name);
        if (it != dict.end()) states[g][i]->tensors.emplace(s.name, it->second);  // copied below
      }
    }
  }
  for (const auto& [k, t] : dict) {
    MPT_CHECK(used.count(k), "[{}.load_state_dict] unexpected key '{}' ({}): no parameter or group of this "
              "optimizer has such state", op, k, t.defined() ? t.meta_str() : "undefined");
  }
  // Every check passed: copy the tensors onto the parameters' devices and install everything.
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < states[g].size(); ++i) {
      if (!states[g][i]) continue;
      for (auto& [name, t] : states[g][i]->tensors) {
        Tensor copy = Tensor::empty(t.shape(), t.dtype(), groups[g].params[i].device());
        copy.copy_(t);
        t = std::move(copy);
      }
    }
    groups_[g].lr = groups[g].lr;
    groups_[g].weight_decay = groups[g].weight_decay;
    groups_[g].options = groups[g].options;
  }
  states_ = std::move(states);
}

}  // namespace mpt::optim
