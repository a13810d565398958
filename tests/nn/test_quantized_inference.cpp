// tests/nn/test_quantized_inference.cpp: a GPT and a Llama whose Linear layers hold codes + scales (nn::quantize_for_inference) compute what the same model computes under its QAT policy, with and without the KV cache; refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "mpt/mpt.h"
#include "test_util.h"

namespace mpt {
namespace {

double max_rel(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to(DType::F32).to_vector<float>(), y = b.to(DType::F32).to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, static_cast<double>(std::fabs(x[i] - y[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(y[i])));
  }
  return err / scale;
}

Tensor ids(int64_t b, int64_t t, int64_t vocab) {
  std::vector<int64_t> v(static_cast<size_t>(b * t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % static_cast<size_t>(vocab));
  return Tensor::from_vector(v, {b, t});
}

// The model's forward under an FP32 policy with `policy`'s QAT: what its quantized deployment must compute.
Tensor qat_forward(const nn::LanguageModel& model, const amp::QatPolicy& policy, const Tensor& x) {
  autograd::NoGradGuard ng;
  amp::Policy p = amp::Policy::fp32();
  p.qat = std::make_shared<const amp::QatPolicy>(policy);
  amp::Autocast ac(p);
  return model.forward(x);
}

nn::GPTConfig gpt_config() {
  nn::GPTConfig c;
  c.vocab_size = 50, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.seed = 11;
  return c;
}

TEST(QuantizedInference, GptComputesItsQatForward) {
  for (const char* name : {"int8", "int4", "fp8"}) {
    const amp::QatPolicy policy = amp::QatPolicy::linears_but_head(amp::QatScheme::named(name));
    nn::GPT reference(gpt_config()), packed(gpt_config());
    const Tensor x = ids(2, 20, 50);
    const Tensor want = qat_forward(reference, policy, x);
    const std::vector<std::string> done = nn::quantize_for_inference(packed, policy);
    EXPECT_EQ(done.size(), 8u) << name;
    autograd::NoGradGuard ng;
    const Tensor got = packed.forward(x);
    EXPECT_LT(max_rel(got, want), 1e-5) << name;
    // Decoding with the KV cache: a prompt of 12, then 8 single tokens, each matching the full forward's position.
    nn::KvCache cache;
    Tensor step = packed.forward_cached(x.slice(1, 0, 12).slice(0, 0, 1), cache);
    EXPECT_LT(max_rel(step, got.slice(0, 0, 1).select(1, 11)), 1e-5) << name;
    for (int64_t t = 12; t < 20; ++t) {
      step = packed.forward_cached(x.slice(0, 0, 1).slice(1, t, t + 1), cache);
      EXPECT_LT(max_rel(step, got.slice(0, 0, 1).select(1, t)), 1e-5) << name << " position " << t;
    }
  }
}

TEST(QuantizedInference, LlamaComputesItsQatForward) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 40, c.block_size = 16;
  const amp::QatPolicy policy = amp::QatPolicy::linears_but_head(amp::QatScheme::named("int4"));
  nn::Llama reference(c), packed(c);
  const Tensor x = ids(1, 16, 40);
  const Tensor want = qat_forward(reference, policy, x);
  EXPECT_EQ(nn::quantize_for_inference(packed, policy).size(), 14u);  // 2 layers x (q, k, v, o, gate, up, down)
  autograd::NoGradGuard ng;
  EXPECT_LT(max_rel(packed.forward(x), want), 1e-5);
}

TEST(QuantizedInference, APackedLinearHasNoBackward) {
  nn::GPT model(gpt_config());
  nn::quantize_for_inference(model, amp::QatPolicy::linears_but_head(amp::QatScheme::named("int8")));
  EXPECT_MPT_ERROR(model.loss(ids(1, 8, 50), ids(1, 8, 50)), "holds quantized weights for inference");
}

}  // namespace
}  // namespace mpt
