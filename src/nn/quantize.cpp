// src/nn/quantize.cpp: post-training quantization of Linear weights in place, and packing them for quantized inference.
#include "mpt/nn/quantize.h"

#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
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

}  // namespace

std::vector<std::string> quantize_weights(Module& model, const amp::QatPolicy& policy) {
  return for_quantized_linears(model, policy, [](Linear& linear, const amp::QatScheme& scheme) {
    Tensor w = linear.weight();  // a handle on the parameter's storage
    w.copy_(ops::fake_quantize(w, *scheme.weight));
    amp::invalidate_compute_copies(w);  // a cached BF16/FP16/FP8 copy held the old values
  });
}

std::vector<std::string> quantize_for_inference(Module& model, const amp::QatPolicy& policy) {
  return for_quantized_linears(model, policy, [](Linear& linear, const amp::QatScheme& scheme) {
    linear.set_quantized(std::make_shared<const Linear::Quantized>(
        Linear::Quantized{ops::quantize_groups(linear.weight(), *scheme.weight), scheme.input}));
  });
}

}  // namespace mpt::nn
