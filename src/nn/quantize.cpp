// src/nn/quantize.cpp: post-training quantization of Linear weights in place, and packing them for quantized inference.
#include "mpt/nn/quantize.h"

#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::nn {

namespace {

// f(linear, scheme) for every Linear the policy gives a weight scheme; returns their weights' paths.
template <class F>
std::vector<std::string> for_quantized_linears(Module& model, const amp::QatPolicy& policy, F&& f) {
  std::vector<std::string> done;
  autograd::NoGradGuard no_grad;
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(module);
    if (linear == nullptr) continue;
    const amp::QatScheme* scheme = policy.at(module->path());
    if (scheme == nullptr || !scheme->weight) continue;
    f(*linear, *scheme);
    done.push_back(module->path().empty() ? std::string("weight") : module->path() + ".weight");
  }
  return done;
}

// The weight's codes and scales: on its learned scale's grid when it has one, else the absmax scale's.
ops::GroupQuantized weight_codes(const Linear& linear, const ops::QuantSpec& spec) {
  if (linear.weight_scale().defined()) {
    ops::QuantSpec trained = spec;
    trained.f16_scale = false;
    MPT_CHECK(*linear.weight_scale_spec() == trained, "[quantize] '{}' learned its weight scales for {}, not {}: "
              "quantize it with the scheme it was trained with", linear.path(), linear.weight_scale_spec()->str(),
              trained.str());
    return ops::quantize_groups(linear.weight(), spec, linear.weight_scale());
  }
  return ops::quantize_groups(linear.weight(), spec);
}

}  // namespace

std::vector<std::string> learn_quantization_scales(Module& model, const amp::QatPolicy& policy) {
  std::vector<std::string> done;
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = dynamic_cast<Linear*>(module);
    if (linear == nullptr) continue;
    const amp::QatScheme* scheme = policy.at(module->path());
    if (scheme == nullptr || !scheme->weight) continue;
    linear->learn_weight_scale(*scheme->weight);
    done.push_back(module->path().empty() ? std::string("weight_log_scale") : module->path() + ".weight_log_scale");
  }
  return done;
}

std::vector<std::string> quantize_weights(Module& model, const amp::QatPolicy& policy) {
  return for_quantized_linears(model, policy, [](Linear& linear, const amp::QatScheme& scheme) {
    Tensor w = linear.weight();  // a handle on the parameter's storage
    if (linear.weight_scale().defined()) w.copy_(ops::dequantize_groups(weight_codes(linear, *scheme.weight), w.dtype()));
    else w.copy_(ops::fake_quantize(w, *scheme.weight));
    amp::invalidate_compute_copies(w);  // a cached BF16/FP16/FP8 copy held the old values
  });
}

std::vector<std::string> quantize_for_inference(Module& model, const amp::QatPolicy& policy) {
  return for_quantized_linears(model, policy, [](Linear& linear, const amp::QatScheme& scheme) {
    linear.set_quantized(std::make_shared<const Linear::Quantized>(
        Linear::Quantized{weight_codes(linear, *scheme.weight), scheme.input}));
  });
}

}  // namespace mpt::nn
