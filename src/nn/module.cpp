// src/nn/module.cpp: Module's registries, traversal, train/eval, freezing, state dicts and conversions.
#include "mpt/nn/module.h"

#include <set>

#include <fmt/ranges.h>

#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"

namespace mpt::nn {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}
// A fresh leaf holding `value`'s data, flagged as the old parameter was.
Tensor as_leaf(Tensor value, bool requires_grad) {
  Tensor leaf = value.detach();
  if (requires_grad) leaf.requires_grad_(true);
  return leaf;
}
}  // namespace

void Module::check_new_name(const std::string& name) const {
  MPT_CHECK(!name.empty() && name.find('.') == std::string::npos,
            "[{}] invalid member name '{}': must be non-empty and contain no '.'", type_name_, name);
  for (const Slot& s : params_) MPT_CHECK(s.name != name, "[{}] '{}' is already a parameter", type_name_, name);
  for (const Slot& s : buffers_) MPT_CHECK(s.name != name, "[{}] '{}' is already a buffer", type_name_, name);
  for (const auto& c : children_) MPT_CHECK(c.first != name, "[{}] '{}' is already a child module", type_name_, name);
}

Tensor& Module::register_parameter(std::string name, Tensor value, bool weight_decay) {
  check_new_name(name);
  MPT_CHECK(value.defined() && is_floating(value.dtype()), "[{}] parameter '{}' must be a defined floating tensor",
            type_name_, name);
  params_.push_back({std::move(name), as_leaf(std::move(value), true), weight_decay});
  return params_.back().tensor;
}

Tensor& Module::register_buffer(std::string name, Tensor value) {
  check_new_name(name);
  MPT_CHECK(value.defined(), "[{}] buffer '{}' is undefined", type_name_, name);
  buffers_.push_back({std::move(name), value.detach(), false});
  return buffers_.back().tensor;
}

void Module::add_child(std::string name, std::shared_ptr<Module> child) {
  check_new_name(name);
  MPT_CHECK(child != nullptr, "[{}] child module '{}' is null", type_name_, name);
  child->set_path(join(path_, name));
  children_.emplace_back(std::move(name), std::move(child));
}

void Module::set_path(std::string path) {
  path_ = std::move(path);
  for (auto& [name, child] : children_) child->set_path(join(path_, name));
}

template <class F>
void Module::visit_slots(const std::string& prefix, bool recurse, bool params, F&& f) const {
  for (const Slot& s : params ? params_ : buffers_) f(join(prefix, s.name), s);
  if (!recurse) return;
  for (const auto& [name, child] : children_) child->visit_slots(join(prefix, name), true, params, f);
}

std::vector<NamedParameter> Module::named_parameters(bool recurse) const {
  std::vector<NamedParameter> out;
  std::set<const autograd::AutogradMeta*> seen;
  visit_slots("", recurse, true, [&](const std::string& name, const Slot& s) {
    const autograd::AutogradMeta* id = s.tensor.autograd_meta().get();
    if (id != nullptr && !seen.insert(id).second) return;  // a shared (tied) parameter: reported once
    out.push_back({name, s.tensor, s.weight_decay});
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (NamedParameter& p : named_parameters(recurse)) out.push_back(std::move(p.tensor));
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers(bool recurse) const {
  std::vector<std::pair<std::string, Tensor>> out;
  visit_slots("", recurse, false, [&](const std::string& name, const Slot& s) { out.emplace_back(name, s.tensor); });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_children() const {
  std::vector<std::pair<std::string, Module*>> out;
  for (const auto& [name, child] : children_) out.emplace_back(name, child.get());
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out{{"", this}};
  for (size_t i = 0; i < out.size(); ++i)  // breadth first, iteratively
    for (const auto& [name, child] : out[i].second->children_) out.emplace_back(join(out[i].first, name), child.get());
  return out;
}

std::vector<std::pair<std::string, const Module*>> Module::named_modules() const {
  std::vector<std::pair<std::string, const Module*>> out;
  for (const auto& [name, m] : const_cast<Module*>(this)->named_modules()) out.emplace_back(name, m);
  return out;
}

int64_t Module::num_parameters(bool trainable_only) const {
  int64_t n = 0;
  for (const NamedParameter& p : named_parameters())
    if (!trainable_only || p.tensor.requires_grad()) n += p.tensor.numel();
  return n;
}

Module& Module::train(bool on) {
  for (auto& [name, m] : named_modules()) m->training_ = on;
  return *this;
}

Module& Module::requires_grad_(bool on) {
  for (auto& [name, m] : named_modules())
    for (Slot& s : m->params_) s.tensor.requires_grad_(on);
  return *this;
}

void Module::zero_grad(bool set_to_none) {
  for (const NamedParameter& p : named_parameters()) {
    const Tensor g = p.tensor.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.tensor.set_grad(Tensor{});
    } else {
      g.detach().zero_();
    }
  }
}

StateDict Module::state_dict() const {
  StateDict out;
  visit_slots("", true, true, [&](const std::string& name, const Slot& s) { out.emplace(name, s.tensor.detach()); });
  visit_slots("", true, false, [&](const std::string& name, const Slot& s) { out.emplace(name, s.tensor.detach()); });
  return out;
}

void Module::load_state_dict(const StateDict& dict, bool strict) {
  const StateDict own = state_dict();
  std::vector<std::string> missing, unexpected;
  for (const auto& [name, t] : own)
    if (!dict.contains(name)) missing.push_back(name);
  for (const auto& [name, t] : dict)
    if (!own.contains(name)) unexpected.push_back(name);
  if (strict && (!missing.empty() || !unexpected.empty()))
    MPT_THROW("[{}.load_state_dict] missing keys [{}], unexpected keys [{}]", type_name_, fmt::join(missing, ", "),
              fmt::join(unexpected, ", "));
  for (const auto& [name, t] : dict) {
    auto it = own.find(name);
    if (it == own.end()) continue;
    MPT_CHECK(t.defined() && t.shape() == it->second.shape(), "[{}.load_state_dict] '{}': expected shape {}, got {}",
              type_name_, name, it->second.meta_str(), t.defined() ? t.meta_str() : std::string("undefined"));
    MPT_CHECK(is_floating(t.dtype()) == is_floating(it->second.dtype()),
              "[{}.load_state_dict] '{}': cannot load {} into {}", type_name_, name, t.meta_str(),
              it->second.meta_str());
  }
  autograd::NoGradGuard no_grad;
  for (const auto& [name, t] : dict) {
    auto it = own.find(name);
    if (it != own.end()) Tensor(it->second).copy_(t);
  }
  amp::invalidate_compute_copies();
}

Module& Module::to(DType dtype) {
  MPT_CHECK(is_floating(dtype), "[{}.to] modules convert to floating dtypes only, got {}", type_name_, dtype);
  amp::invalidate_compute_copies();
  for (auto& [name, m] : named_modules()) {
    for (Slot& s : m->params_) s.tensor = as_leaf(s.tensor.detach().to(dtype), s.tensor.requires_grad());
    for (Slot& s : m->buffers_)
      if (is_floating(s.tensor.dtype())) s.tensor = s.tensor.to(dtype);
  }
  return *this;
}

Module& Module::to(Device device) {
  amp::invalidate_compute_copies();
  for (auto& [name, m] : named_modules()) {
    for (Slot& s : m->params_) s.tensor = as_leaf(s.tensor.detach().to(device), s.tensor.requires_grad());
    for (Slot& s : m->buffers_) s.tensor = s.tensor.to(device);
  }
  return *this;
}

}  // namespace mpt::nn
