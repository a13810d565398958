// src/nn/quantize.cpp: post-training quantization of Linear weights in place.
#include "mpt/nn/quantize.h"

#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::nn {

std::vector<std::string> quantize_weights(Module& model, const amp::QatPolicy& policy) {
  std::vector<std::string> done;
  autograd::NoGradGuard no_grad;
  for (const auto& [name, module] : model.named_modules()) {
    const auto* linear = dynamic_cast<const Linear*>(module);
    if (linear == nullptr) continue;
    const amp::QatScheme* scheme = policy.at(module->path());
    if (scheme == nullptr || !scheme->weight) continue;
    Tensor w = linear->weight();  // a handle on the parameter's storage
    w.copy_(ops::fake_quantize(w, *scheme->weight));
    amp::invalidate_compute_copies(w);  // a cached BF16/FP16/FP8 copy held the old values
    done.push_back(module->path().empty() ? std::string("weight") : module->path() + ".weight");
  }
  return done;
}

}  // namespace mpt::nn
