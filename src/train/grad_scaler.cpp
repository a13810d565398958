// src/train/grad_scaler.cpp: GradScaler: loss scaling, unscale + inf/NaN check per optimizer, the scale update.
#include "mpt/train/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "kernels/math/optim.h"
#include "mpt/core/profile.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/optim.h"

namespace mpt::train {

namespace {

namespace km = kernels::math;

void check_growth_factor(double v) {
  MPT_CHECK(std::isfinite(v) && v > 1.0, "[GradScaler] growth_factor must be > 1, got {}", v);
}
void check_backoff_factor(double v) {
  MPT_CHECK(v > 0.0 && v < 1.0, "[GradScaler] backoff_factor must be in (0, 1), got {}", v);
}
void check_growth_interval(int64_t v) {
  MPT_CHECK(v >= 1 && v <= std::numeric_limits<int32_t>::max(),
            "[GradScaler] growth_interval must be in [1, 2^31 - 1] (the tracker is i32), got {}", v);
}
void check_hysteresis(int64_t v) {
  MPT_CHECK(v >= 1 && v <= std::numeric_limits<int32_t>::max(),
            "[GradScaler] hysteresis must be in [1, 2^31 - 1], got {}", v);
}
void check_min_scale(double v) {
  MPT_CHECK(std::isfinite(v) && v >= 0.0, "[GradScaler] min_scale must be finite and >= 0, got {}", v);
}

// dict[key] as a 0-d tensor of `dtype`, its value as T.
template <class T>
T entry(const nn::StateDict& dict, const std::string& key, DType dtype) {
  const auto it = dict.find(key);
  MPT_CHECK(it != dict.end(), "[GradScaler.load_state_dict] missing key '{}' (a 0-d {} tensor)", key, dtype);
  const Tensor& t = it->second;
  MPT_CHECK(t.defined() && t.dtype() == dtype && t.dim() == 0,
            "[GradScaler.load_state_dict] key '{}': expected a 0-d {} tensor, got {}", key, dtype,
            t.defined() ? t.meta_str() : "an undefined tensor");
  return t.item<T>();
}

// Gradients of one device, by dtype, in first-seen order.
struct DeviceGrads {
  Device device;
  std::vector<std::pair<DType, std::vector<Tensor>>> by_dtype;
};

}  // namespace

StepResult::operator bool() const {
  if (known_) return stepped_;
  return found_.item<float>() == 0.0f;  // the host read (waits for the device on CUDA)
}

StepResult StepResult::snapshot() const { return known_ ? *this : StepResult(found_.clone()); }

GradScaler::GradScaler(Device device, const GradScalerOptions& options) : GradScaler(options, device) {}

GradScaler::GradScaler(const GradScalerOptions& o, Device device)
    : device_(device),
      enabled_(o.enabled),
      growth_factor_(o.growth_factor),
      backoff_factor_(o.backoff_factor),
      growth_interval_(o.growth_interval),
      hysteresis_(o.hysteresis),
      min_scale_(o.min_scale) {
  check_growth_factor(o.growth_factor);
  check_backoff_factor(o.backoff_factor);
  check_growth_interval(o.growth_interval);
  check_hysteresis(o.hysteresis);
  check_min_scale(o.min_scale);
  const auto scale = static_cast<float>(o.init_scale);
  MPT_CHECK(std::isfinite(scale) && scale > 0.0f, "[GradScaler] init_scale must be finite and > 0 in f32, got {}",
            o.init_scale);
  MPT_CHECK(scale >= static_cast<float>(o.min_scale), "[GradScaler] init_scale {} is below min_scale {}",
            o.init_scale, o.min_scale);
  if (!enabled_) return;
  scale_t_ = Tensor::empty({}, DType::F32, device_);
  inv_t_ = Tensor::empty({}, DType::F32, device_);
  set_scale(scale);
  trackers_t_ = Tensor::from_vector(std::vector<int32_t>{0, static_cast<int32_t>(o.hysteresis), 0}, {3}, device_);
}

void GradScaler::set_scale(float s) {
  scale_t_.fill_(s);
  inv_t_.fill_(static_cast<float>(1.0 / static_cast<double>(s)));  // torch: reciprocal in f64, then narrowed
}

GradScaler::HostState GradScaler::read() const {
  const float scale = scale_t_.item<float>();
  const std::vector<int32_t> t = trackers_t_.to_vector<int32_t>();
  const HostState h{scale, t[0], t[1], t[2]};
  if (h.collapses > 0 && !warned_) {
    warned_ = true;
    std::fprintf(stderr,
                 "[GradScaler] warning: the loss scale collapsed to %g (min_scale %g): gradients overflow at every "
                 "scale, so every step is being skipped. Look for inf/NaN in the forward pass or the loss, lower the "
                 "learning rate, or train in BF16. (Printed once; see GradScaler::collapse_count().)\n",
                 static_cast<double>(h.scale), min_scale_);
  }
  return h;
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!enabled_) return loss;
  MPT_CHECK(loss.defined(), "[GradScaler] scale() got an undefined loss");
  MPT_CHECK(loss.dtype() == DType::F32 || loss.dtype() == DType::F64 || loss.dtype() == DType::F16 ||
                loss.dtype() == DType::BF16,
            "[GradScaler] scale() expects a floating loss, got {}", loss.meta_str());
  const DType dt = loss.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor x = loss.to(dt);  // recorded: the gradient flows back in the loss's own dtype
  return ops::mul(x, scale_t_.to(x.device(), dt));
}

OptStage GradScaler::stage(const optim::Optimizer& optimizer) const {
  const auto it = states_.find(&optimizer);
  return it == states_.end() ? OptStage::Ready : it->second.stage;
}

void GradScaler::unscale_(optim::Optimizer& optimizer) {
  if (!enabled_) return;
  const profile::Range range("optimizer/unscale");
  OptState& st = states_[&optimizer];
  MPT_CHECK(st.stage != OptStage::Unscaled,
            "[GradScaler] unscale_() has already been called on this optimizer since the last update().");
  MPT_CHECK(st.stage != OptStage::Stepped, "[GradScaler] unscale_() is being called after step().");
  // Collect and check every gradient first, so an error leaves every gradient untouched.
  std::vector<DeviceGrads> devices;
  for (const optim::ParamGroup& group : optimizer.param_groups()) {
    for (const Tensor& p : group.params) {
      const Tensor g = p.grad();
      if (!g.defined()) continue;
      MPT_CHECK(g.dtype() != DType::F16,
                "[GradScaler] Attempting to unscale FP16 gradients ({} of parameter {}): the optimizer's "
                "parameters must be f32 masters holding f32 gradients",
                g.meta_str(), p.meta_str());
      MPT_CHECK(g.dtype() == DType::F32 || g.dtype() == DType::BF16 || g.dtype() == DType::F64,
                "[GradScaler] cannot unscale a {} gradient", g.meta_str());
      MPT_CHECK(g.is_contiguous(), "[GradScaler] gradients are unscaled in place and must be contiguous, got {}",
                g.meta_str());
      auto dev = std::find_if(devices.begin(), devices.end(),
                              [&](const DeviceGrads& d) { return d.device == g.device(); });
      if (dev == devices.end()) dev = devices.insert(devices.end(), DeviceGrads{g.device(), {}});
      auto bucket = std::find_if(dev->by_dtype.begin(), dev->by_dtype.end(),
                                 [&](const auto& b) { return b.first == g.dtype(); });
      if (bucket == dev->by_dtype.end()) bucket = dev->by_dtype.insert(dev->by_dtype.end(), {g.dtype(), {}});
      bucket->second.push_back(g);
    }
  }
  std::vector<Tensor> found;
  for (const DeviceGrads& d : devices) {
    // torch: a fresh found_inf per device for every unscale_, shared by the dtype buckets (set, never cleared).
    Tensor f = Tensor::zeros({}, DType::F32, d.device);
    const Tensor inv = d.device == device_ ? inv_t_ : inv_t_.to(d.device);
    for (const auto& [dtype, grads] : d.by_dtype) ops::non_finite_check_and_unscale_(grads, f, inv);
    found.push_back(std::move(f));
  }
  st.found_inf = std::move(found);
  st.reduced = false;
  st.stage = OptStage::Unscaled;
}

const std::vector<Tensor>& GradScaler::found_inf(OptState& st) const {
  if (!st.reduced) {
    if (found_inf_reduction_) found_inf_reduction_(st.found_inf);
    st.reduced = true;
  }
  return st.found_inf;
}

StepResult GradScaler::step(optim::Optimizer& optimizer, const Tensor& grad_multiplier) {
  if (!enabled_) {
    optimizer.step(ops::GradScaling{grad_multiplier, {}});
    return true;
  }
  OptState& st = states_[&optimizer];
  MPT_CHECK(st.stage != OptStage::Stepped, "[GradScaler] step() has already been called since the last update().");
  if (st.stage == OptStage::Ready) unscale_(optimizer);
  MPT_CHECK(!st.found_inf.empty(), "[GradScaler] No inf checks were recorded for this optimizer (it has no "
            "gradient: did backward reach its parameters?).");
  const std::vector<Tensor>& found = found_inf(st);
  st.stage = OptStage::Stepped;
  // The gradients are already unscaled: the optimizer gets found_inf only, and its kernels skip on the device.
  if (found.size() == 1) {
    optimizer.step(ops::GradScaling{grad_multiplier, found[0]});
    return StepResult(found[0]);
  }
  float sum = 0.0f;  // gradients on several devices: one host read per device
  for (const Tensor& f : found) sum += f.item<float>();
  if (sum == 0.0f) optimizer.step(ops::GradScaling{grad_multiplier, {}});
  return sum == 0.0f;
}

bool GradScaler::scale_collapsed() const { return enabled_ && km::scale_at_floor(read().scale, min_scale_); }

void GradScaler::update() {
  if (!enabled_) return;
  const profile::Range range("optimizer/scale_update");
  std::vector<Tensor> flags;  // every optimizer's found_inf, on the scaler's device
  for (auto& [opt, st] : states_) {
    if (st.found_inf.empty()) continue;
    for (const Tensor& f : found_inf(st)) flags.push_back(f.device() == device_ ? f : f.to(device_));
  }
  MPT_CHECK(!flags.empty(), "[GradScaler] No inf checks were recorded prior to update().");
  while (flags.size() > 8) {  // the update kernel sums up to 8 flags; fold the rest on the device first
    flags[flags.size() - 2] = ops::add(flags[flags.size() - 2], flags.back());
    flags.pop_back();
  }
  ops::amp_update_scale_(scale_t_, inv_t_, trackers_t_, flags,
                         {growth_factor_, backoff_factor_, min_scale_, growth_interval_, hysteresis_});
  states_.clear();
  if (device_.is_cpu()) read();  // the collapse warning at once where reading costs nothing
}

void GradScaler::update(double new_scale) {
  if (!enabled_) return;
  const float s = static_cast<float>(new_scale);
  MPT_CHECK(std::isfinite(s) && s > 0.0f && s >= static_cast<float>(min_scale_),
            "[GradScaler] update(new_scale): expected a finite scale > 0 (in f32) and >= min_scale {}, got {}",
            min_scale_, new_scale);
  set_scale(s);
  states_.clear();
}

double GradScaler::get_scale() const { return enabled_ ? static_cast<double>(read().scale) : 1.0; }
int32_t GradScaler::growth_tracker() const { return enabled_ ? read().tracker : 0; }
int32_t GradScaler::hysteresis_tracker() const {
  return enabled_ ? read().hysteresis_left : static_cast<int32_t>(hysteresis_);
}
int64_t GradScaler::collapse_count() const { return enabled_ ? read().collapses : 0; }

void GradScaler::set_growth_factor(double v) {
  check_growth_factor(v);
  growth_factor_ = v;
}
void GradScaler::set_backoff_factor(double v) {
  check_backoff_factor(v);
  backoff_factor_ = v;
}
void GradScaler::set_growth_interval(int64_t v) {
  check_growth_interval(v);
  growth_interval_ = v;
}
void GradScaler::set_hysteresis(int64_t v) {
  check_hysteresis(v);
  hysteresis_ = v;
  if (!enabled_) return;
  const HostState h = read();  // a rare host read-modify-write of the count
  if (h.hysteresis_left > v) {
    trackers_t_.copy_(Tensor::from_vector(std::vector<int32_t>{h.tracker, static_cast<int32_t>(v), h.collapses}, {3}));
  }
}
void GradScaler::set_min_scale(double v) {
  check_min_scale(v);
  min_scale_ = v;
}

nn::StateDict GradScaler::state_dict() const {
  if (!enabled_) return {};
  nn::StateDict d;
  const HostState h = read();
  d["scale"] = Tensor::full({}, h.scale, DType::F32);
  d["growth_tracker"] = Tensor::full({}, h.tracker, DType::I32);
  d["hysteresis_tracker"] = Tensor::full({}, h.hysteresis_left, DType::I32);
  d["growth_factor"] = Tensor::full({}, growth_factor_, DType::F64);
  d["backoff_factor"] = Tensor::full({}, backoff_factor_, DType::F64);
  d["min_scale"] = Tensor::full({}, min_scale_, DType::F64);
  d["growth_interval"] = Tensor::full({}, static_cast<double>(growth_interval_), DType::I64);
  d["hysteresis"] = Tensor::full({}, static_cast<double>(hysteresis_), DType::I64);
  return d;
}

void GradScaler::load_state_dict(const nn::StateDict& dict) {
  if (!enabled_) return;
  MPT_CHECK(!dict.empty(), "[GradScaler.load_state_dict] The source state dict is empty, possibly because it was "
            "saved from a disabled instance of GradScaler.");
  const std::set<std::string> keys = {"scale",         "growth_tracker", "hysteresis_tracker", "growth_factor",
                                      "backoff_factor", "min_scale",      "growth_interval",    "hysteresis"};
  for (const auto& [k, t] : dict) {
    MPT_CHECK(keys.count(k), "[GradScaler.load_state_dict] unexpected key '{}' ({})", k,
              t.defined() ? t.meta_str() : "undefined");
  }
  const auto scale = entry<float>(dict, "scale", DType::F32);
  const auto tracker = entry<int32_t>(dict, "growth_tracker", DType::I32);
  const auto hyst_left = entry<int32_t>(dict, "hysteresis_tracker", DType::I32);
  const auto growth = entry<double>(dict, "growth_factor", DType::F64);
  const auto backoff = entry<double>(dict, "backoff_factor", DType::F64);
  const auto min_scale = entry<double>(dict, "min_scale", DType::F64);
  const auto interval = entry<int64_t>(dict, "growth_interval", DType::I64);
  const auto hysteresis = entry<int64_t>(dict, "hysteresis", DType::I64);
  check_growth_factor(growth);
  check_backoff_factor(backoff);
  check_growth_interval(interval);
  check_hysteresis(hysteresis);
  check_min_scale(min_scale);
  // 0 is reachable (166 backoffs from 2^16 without a floor); below min_scale is not.
  MPT_CHECK(std::isfinite(scale) && scale >= 0.0f && scale >= static_cast<float>(min_scale),
            "[GradScaler.load_state_dict] key 'scale': expected a finite value >= 0 and >= min_scale {}, got {}",
            min_scale, scale);
  MPT_CHECK(tracker >= 0, "[GradScaler.load_state_dict] key 'growth_tracker': expected >= 0, got {}", tracker);
  MPT_CHECK(hyst_left >= 1 && hyst_left <= hysteresis,
            "[GradScaler.load_state_dict] key 'hysteresis_tracker': expected a value in [1, hysteresis = {}], got {}",
            hysteresis, hyst_left);
  growth_factor_ = growth;
  backoff_factor_ = backoff;
  growth_interval_ = interval;
  hysteresis_ = hysteresis;
  min_scale_ = min_scale;
  const int32_t collapses = read().collapses;  // not part of the state dict: kept
  trackers_t_.copy_(Tensor::from_vector(std::vector<int32_t>{tracker, hyst_left, collapses}, {3}));
  set_scale(scale);
}

}  // namespace mpt::train
