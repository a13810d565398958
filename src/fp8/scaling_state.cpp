// src/fp8/scaling_state.cpp: Fp8ScalingState: registration, the delayed-scaling update, state dicts, telemetry.
#include <cfloat>
#include <cmath>
#include <utility>

#include "mpt/fp8/scaling.h"
#include "mpt/ops/cast.h"
#include "mpt/ops/optim.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8 {
namespace {

Tensor host_snapshot(const Tensor& t) { return t.device().is_cpu() ? t.clone() : t.to(Device::cpu()); }

}  // namespace

const char* to_string(Fp8Role r) {
  switch (r) {
    case Fp8Role::Input: return "input";
    case Fp8Role::Weight: return "weight";
    case Fp8Role::GradOutput: return "grad_output";
  }
  return "?";
}

Fp8ScalingState::Fp8ScalingState(Fp8Recipe recipe, Device device) : recipe_(std::move(recipe)), device_(device) {
  if (const auto* d = std::get_if<DelayedScaling>(&recipe_)) {
    MPT_CHECK(d->amax_history_len >= 1, "[fp8] amax_history_len must be at least 1, got {}", d->amax_history_len);
    MPT_CHECK(d->margin >= 0 && d->margin <= 64, "[fp8] margin must be in [0, 64], got {}", d->margin);
  }
  if (const auto* c = std::get_if<CurrentScaling>(&recipe_)) {
    MPT_CHECK(std::isfinite(c->amax_epsilon) && c->amax_epsilon >= 0.0f,
              "[fp8] amax_epsilon must be finite and >= 0, got {}", c->amax_epsilon);
  }
}

std::shared_ptr<Fp8TensorMeta> Fp8ScalingState::register_tensor(const std::string& name, Fp8Role role) {
  MPT_CHECK(!name.empty(), "[fp8] an FP8 tensor needs a name");
  const auto alias = shared_.find(name);
  if (auto it = index_.find(alias != shared_.end() ? alias->second : name); it != index_.end()) {
    const std::shared_ptr<Fp8TensorMeta>& m = metas_[it->second];
    MPT_CHECK(m->role == role, "[fp8] '{}' is registered as {}, not {}", name, to_string(m->role), to_string(role));
    return m;
  }
  const auto* delayed = std::get_if<DelayedScaling>(&recipe_);
  auto m = std::make_shared<Fp8TensorMeta>();
  m->name = name;
  m->role = role;
  m->dtype = fp8_dtype(recipe_, role);
  m->scale = Tensor::ones({}, DType::F32, device_);
  m->scale_inv = Tensor::ones({}, DType::F32, device_);
  m->amax_history = Tensor::zeros({delayed ? delayed->amax_history_len : 1}, DType::F32, device_);
  m->collect_telemetry = collect_telemetry_;
  index_.emplace(name, metas_.size());
  metas_.push_back(m);
  return m;
}

Fp8LinearMetas Fp8ScalingState::register_linear(const std::string& prefix) {
  return {register_tensor(prefix + ".input", Fp8Role::Input), register_tensor(prefix + ".weight", Fp8Role::Weight),
          register_tensor(prefix + ".grad_output", Fp8Role::GradOutput)};
}

std::shared_ptr<Fp8TensorMeta> Fp8ScalingState::share_tensor(const std::string& name, const std::string& with,
                                                             Fp8Role role) {
  MPT_CHECK(!name.empty() && name != with, "[fp8] share_tensor: '{}' cannot share the meta of '{}'", name, with);
  if (const auto it = shared_.find(with); it != shared_.end())
    MPT_THROW("[fp8] share_tensor: '{}' itself shares the meta of '{}': share that one", with, it->second);
  if (const auto it = shared_.find(name); it != shared_.end()) {
    MPT_CHECK(it->second == with, "[fp8] share_tensor: '{}' already shares the meta of '{}', not '{}'", name,
              it->second, with);
    return register_tensor(with, role);
  }
  for (const auto& [alias, to] : shared_)
    MPT_CHECK(to != name, "[fp8] share_tensor: '{}' shares the meta of '{}', which cannot share another", alias, name);
  std::shared_ptr<Fp8TensorMeta> target = register_tensor(with, role);
  if (const auto it = index_.find(name); it != index_.end()) {  // registered on its own before: dropped
    MPT_CHECK(metas_[it->second]->role == role, "[fp8] '{}' is registered as {}, not {}", name,
              to_string(metas_[it->second]->role), to_string(role));
    metas_.erase(metas_.begin() + static_cast<std::ptrdiff_t>(it->second));
    index_.clear();
    for (size_t i = 0; i < metas_.size(); ++i) index_.emplace(metas_[i]->name, i);
  }
  shared_.emplace(name, with);
  return target;
}

std::shared_ptr<Fp8TensorMeta> Fp8ScalingState::meta(const std::string& name) const {
  const auto alias = shared_.find(name);
  const auto it = index_.find(alias != shared_.end() ? alias->second : name);
  MPT_CHECK(it != index_.end(), "[fp8] no FP8 tensor named '{}' is registered ({} are)", name, metas_.size());
  return metas_[it->second];
}

void Fp8ScalingState::update() {
  const auto* r = std::get_if<DelayedScaling>(&recipe_);
  if (r == nullptr) return;
  ++num_updates_;
  if (metas_.empty()) return;
  const auto n = static_cast<int64_t>(metas_.size());
  std::vector<Tensor> amaxes;  // this step's amax per meta: the history's current slot, or the reduced vector's
  amaxes.reserve(metas_.size());
  for (const auto& m : metas_) amaxes.push_back(m->amax_history.slice(0, 0, 1));
  if (reduction_) {
    // Every current slot gathered into one vector for the hook, on the device: zeros plus each slot in one
    // multi-tensor add (0 + a is a's bits for the non-negative amaxes, and a NaN stays NaN).
    Tensor packed = Tensor::zeros({n}, DType::F32, device_);
    std::vector<Tensor> into;
    into.reserve(metas_.size());
    for (int64_t j = 0; j < n; ++j) into.push_back(packed.slice(0, j, j + 1));
    ops::add_(into, amaxes);
    reduction_(packed);
    MPT_CHECK(packed.defined() && packed.dtype() == DType::F32 && packed.shape() == Shape{n} &&
                  packed.is_contiguous() && packed.device() == device_,
              "[fp8] the amax reduction must leave the amaxes a contiguous f32 [{}] on {}, got {}", n, device_,
              packed.defined() ? packed.meta_str() : std::string("undefined"));
    for (int64_t j = 0; j < n; ++j) amaxes[static_cast<size_t>(j)] = packed.slice(0, j, j + 1);
  }
  std::vector<ops::DelayedScalingSlot> slots;
  slots.reserve(metas_.size());
  for (size_t j = 0; j < metas_.size(); ++j) {
    Fp8TensorMeta& m = *metas_[j];
    slots.push_back({m.amax_history, amaxes[j], m.scale, m.scale_inv, fp8_max(m.dtype)});
    ++m.scale_version;
  }
  ops::delayed_scaling_update_(slots, r->algo == AmaxAlgo::Max, r->margin);  // one kernel, no host read
}

void Fp8ScalingState::replayed_update() {
  if (std::get_if<DelayedScaling>(&recipe_) == nullptr) return;
  ++num_updates_;
  for (const auto& m : metas_) ++m->scale_version;
}

std::map<std::string, Tensor> Fp8ScalingState::state_dict() const {
  std::map<std::string, Tensor> dict;
  if (!std::holds_alternative<DelayedScaling>(recipe_)) return dict;  // nothing carries over between steps
  for (const auto& m : metas_) {
    dict.emplace(m->name + ".scale", host_snapshot(m->scale));
    dict.emplace(m->name + ".scale_inv", host_snapshot(m->scale_inv));
    dict.emplace(m->name + ".amax_history", host_snapshot(m->amax_history));
  }
  return dict;
}

void Fp8ScalingState::load_state_dict(const std::map<std::string, Tensor>& dict, bool strict) {
  std::map<std::string, Tensor> targets;
  if (std::holds_alternative<DelayedScaling>(recipe_)) {
    for (const auto& m : metas_) {
      targets.emplace(m->name + ".scale", m->scale);
      targets.emplace(m->name + ".scale_inv", m->scale_inv);
      targets.emplace(m->name + ".amax_history", m->amax_history);
    }
  }
  // A shared name's keys (a checkpoint from before it was shared) load into the meta it resolves to; not required.
  std::map<std::string, Tensor> optional;
  if (std::holds_alternative<DelayedScaling>(recipe_)) {
    for (const auto& [name, with] : shared_) {
      const std::shared_ptr<Fp8TensorMeta> m = meta(with);
      optional.emplace(name + ".scale", m->scale);
      optional.emplace(name + ".scale_inv", m->scale_inv);
      optional.emplace(name + ".amax_history", m->amax_history);
    }
  }
  std::vector<std::pair<Tensor, Tensor>> copies;
  for (const auto& [key, value] : dict) {
    const auto it = targets.find(key);
    const auto opt = optional.find(key);
    if (it == targets.end() && opt == optional.end()) {
      MPT_CHECK(!strict, "[fp8] load_state_dict: unexpected key '{}' (no registered delayed-scaling tensor has it)",
                key);
      continue;
    }
    const Tensor& target = it != targets.end() ? it->second : opt->second;
    MPT_CHECK(value.defined() && value.dtype() == DType::F32 && value.shape() == target.shape(),
              "[fp8] load_state_dict: '{}' must be f32 with shape {}, got {}", key, shape_str(target.shape()),
              value.defined() ? value.meta_str() : std::string("undefined"));
    copies.emplace_back(target, value);
  }
  // Two keys loading into one shared meta must agree (they recorded one tensor's amaxes).
  for (const auto& [name, with] : shared_) {
    for (const char* field : {".scale", ".scale_inv", ".amax_history"}) {
      const auto a = dict.find(name + field), b = dict.find(with + field);
      if (a == dict.end() || b == dict.end()) continue;
      const Tensor x = host_snapshot(a->second), y = host_snapshot(b->second);
      MPT_CHECK(x.shape() == y.shape() && x.to_vector<float>() == y.to_vector<float>(),
                "[fp8] load_state_dict: '{}' shares the meta of '{}' (one tensor's quantization), but the dict holds "
                "different values for '{}{}' and '{}{}'", name, with, name, field, with, field);
    }
  }
  if (strict) {
    for (const auto& [key, target] : targets) {
      MPT_CHECK(dict.count(key) == 1, "[fp8] load_state_dict: missing key '{}'", key);
    }
  }
  for (auto& [target, value] : copies) target.copy_(value);
  for (const auto& m : metas_) ++m->scale_version;
}

void Fp8ScalingState::set_collect_telemetry(bool on) {
  collect_telemetry_ = on;
  for (const auto& m : metas_) m->collect_telemetry = on;
}

std::map<std::string, Fp8TensorStats> Fp8ScalingState::telemetry() const {
  std::map<std::string, Fp8TensorStats> out;
  for (const auto& m : metas_) out.emplace(m->name, m->stats);
  return out;
}

}  // namespace mpt::fp8
