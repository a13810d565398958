// src/amp/policy.cpp: precision names, per-module policy lookup and the thread-local Autocast stack.
#include "mpt/amp/policy.h"

#include "amp/module_path.h"

#include <variant>

#include "mpt/amp/fp8_rule.h"

#include "mpt/fp8/scaling.h"
#include "mpt/core/error.h"

namespace mpt::amp {

namespace {
thread_local const Policy* g_current = nullptr;
using detail::component_prefix;
}  // namespace

std::string_view to_string(Precision p) {
  switch (p) {
    case Precision::FP32: return "fp32";
    case Precision::FP16: return "fp16";
    case Precision::BF16: return "bf16";
    case Precision::FP8: return "fp8";
  }
  return "?";
}

Precision parse_precision(std::string_view s) {
  for (Precision p : {Precision::FP32, Precision::FP16, Precision::BF16, Precision::FP8})
    if (s == to_string(p)) return p;
  MPT_THROW("[amp] unknown precision '{}': expected fp32, fp16, bf16 or fp8", s);
}

DType output_dtype(Precision p) {
  switch (p) {
    case Precision::FP32: return DType::F32;
    case Precision::FP16: return DType::F16;
    case Precision::BF16:
    case Precision::FP8: return DType::BF16;
  }
  return DType::F32;
}

Precision Policy::at(std::string_view path) const {
  Precision best = compute;
  size_t best_len = 0;
  bool found = false;
  for (const auto& [prefix, p] : overrides)
    if (component_prefix(prefix, path) && (!found || prefix.size() >= best_len)) best = p, best_len = prefix.size(), found = true;
  return best;
}

Precision Policy::at(std::string_view path, int64_t in, int64_t out, Device device) const {
  const Precision p = at(path);
  if (p != Precision::FP8 || fp8_rule == nullptr || fp8_state == nullptr) return p;
  static_assert(std::variant_size_v<mpt::fp8::Fp8Recipe> == 3, "a recipe the FP8 rule has no rates for");
  const auto recipe = static_cast<Fp8RecipeKind>(fp8_state->recipe().index());  // Delayed, Current, Block
  return fp8_rule->use_fp8(path, recipe, in, out, device) ? p : Precision::BF16;
}

Policy Policy::fp8(int64_t n_layer, std::shared_ptr<mpt::fp8::Fp8ScalingState> state, std::string_view block_prefix) {
  MPT_CHECK(state != nullptr, "[amp] an FP8 policy needs an mpt::fp8::Fp8ScalingState (the recipe and its scales)");
  Policy p = with_compute(Precision::FP8);
  p.fp8_state = std::move(state);
  p.override_module("lm_head", Precision::BF16);
  if (n_layer > 0) {
    const std::string prefix(block_prefix);
    p.override_module(prefix + ".0", Precision::BF16);
    p.override_module(prefix + "." + std::to_string(n_layer - 1), Precision::BF16);
  }
  return p;
}

Policy Policy::named(std::string_view name, int64_t n_layer, Device device, std::string_view block_prefix) {
  if (name == "fp32") return fp32();
  if (name == "bf16") return bf16();
  if (name == "fp16") return fp16();
  using State = mpt::fp8::Fp8ScalingState;
  if (name == "fp8-delayed") return fp8(n_layer, std::make_shared<State>(mpt::fp8::DelayedScaling{}, device), block_prefix);
  if (name == "fp8-current") return fp8(n_layer, std::make_shared<State>(mpt::fp8::CurrentScaling{}, device), block_prefix);
  if (name == "fp8-block") return fp8(n_layer, std::make_shared<State>(mpt::fp8::BlockScaling{}, device), block_prefix);
  MPT_THROW("[amp] unknown precision '{}': expected fp32, bf16, fp16, fp8-delayed, fp8-current or fp8-block", name);
}

DType parse_residual_dtype(std::string_view name) {
  for (DType d : {DType::F32, DType::BF16, DType::F16})
    if (name == dtype_name(d)) return d;
  MPT_THROW("[amp] unknown residual stream dtype '{}': expected f32, bf16 or f16", name);
}

DType parse_grad_dtype(std::string_view name) {
  for (DType d : {DType::F32, DType::BF16})
    if (name == dtype_name(d)) return d;
  MPT_THROW("[amp] unknown gradient dtype '{}': expected f32 or bf16", name);
}

std::string precision_name(std::string base, const Policy& policy) {
  if (policy.residual && *policy.residual != DType::F32) base += fmt::format("+residual-{}", *policy.residual);
  if (policy.grads && *policy.grads != DType::F32) base += fmt::format("+grads-{}", *policy.grads);
  return base;
}

DType residual_dtype(DType params, std::string_view model) {
  if (g_current == nullptr || !g_current->residual) return params;
  const DType d = *g_current->residual;
  MPT_CHECK(d == DType::F32 || d == DType::BF16 || d == DType::F16,
            "[{}] the policy's residual stream dtype must be f32, bf16 or f16, got {}", model, d);
  return d;
}

Autocast::Autocast(Policy policy) : policy_(std::move(policy)), previous_(g_current) { g_current = &policy_; }
Autocast::~Autocast() { g_current = previous_; }

const Policy* current_policy() { return g_current; }

Precision current_precision(std::string_view path) {
  return g_current != nullptr ? g_current->at(path) : Precision::FP32;
}

}  // namespace mpt::amp
