// src/deploy/apply_quantization.cpp: a model's Linear weights replaced by the values an export's consumer dequantizes from them.
#include <fmt/format.h>

#include "deploy/quantized_tensor.h"
#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/deploy/quantize.h"
#include "mpt/io/gguf.h"
#include "mpt/nn/layers.h"

namespace mpt::deploy {

namespace {

struct Target {
  nn::Linear* linear;
  const ops::QuantSpec* spec;
  detail::WeightCoding coding;
  Tensor learned;  // the learned scales (LSQ) the file's codes are on, or undefined
};

// The weight's values as the file holds them, dequantized.
Tensor exported_values(const Tensor& weight, const Target& t) {
  if (t.coding == detail::WeightCoding::Scheme && t.learned.defined())
    return ops::dequantize_groups(ops::quantize_groups(weight, *t.spec, t.learned.to(Device::cpu())));
  if (t.coding == detail::WeightCoding::Scheme) return ops::fake_quantize(weight, *t.spec);
  const std::vector<float> w = weight.to_vector<float>();  // row-major: each row is whole Q4_K blocks
  const std::string blocks = io::quantize_q4_k(w);
  return Tensor::from_vector(io::dequantize_gguf(io::GgufType::Q4_K, blocks, static_cast<int64_t>(w.size())),
                             weight.shape());
}

}  // namespace

std::vector<std::string> apply_export_quantization(nn::Module& model, const ExportOptions& options) {
  const std::optional<amp::QatPolicy> policy = detail::weight_policy(options);
  if (!policy) return {};
  std::vector<Target> targets;  // every check first: a refusal changes nothing
  std::vector<std::string> paths;
  for (const auto& [name, module] : model.named_modules()) {
    auto* linear = dynamic_cast<nn::Linear*>(module);
    const amp::QatScheme* s = linear != nullptr ? policy->at(module->path()) : nullptr;
    if (s == nullptr || !s->weight) continue;
    paths.push_back(module->path().empty() ? std::string("weight") : module->path() + ".weight");
    const std::string what = fmt::format("{} ({})", paths.back(), linear->weight().meta_str());
    targets.push_back({linear, &*s->weight,
                       detail::weight_coding(options, *s->weight, linear->weight().shape().back(), what),
                       detail::learned_scales(linear->weight_scale(), linear->weight_scale_spec(), *s->weight, options,
                                              what)});
  }
  autograd::NoGradGuard no_grad;
  for (const Target& t : targets) {
    Tensor w = t.linear->weight();  // a handle on the parameter's storage
    const Tensor host = w.to(Device::cpu()).contiguous();
    w.copy_(exported_values(host, t));
    amp::invalidate_compute_copies(w);  // a cached BF16/FP16/FP8 copy held the old values
  }
  return paths;
}

}  // namespace mpt::deploy
