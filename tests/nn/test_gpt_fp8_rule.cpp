// tests/nn/test_gpt_fp8_rule.cpp: GPT under FP8 with the per-shape rule: the layers it turns to BF16 train with the
// bits of a policy that overrides exactly those layers to BF16 (norms, weights, FP8 metas and all), step after step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "mpt/amp/fp8_rule.h"
#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "fp8_norm_steps.h"

namespace mpt {
namespace {

// A calibration whose fit gives BF16 1 TFLOP/s, FP8 2 TFLOP/s, a free weight cast and quantization at 2000 / T GB/s:
// with 48 tokens per micro-batch a layer runs FP8 where its flops per quantized byte, 6NKM / (4NK + 4NM + 6KM),
// exceed T. The small GPT's layers: attn.c_proj [32 -> 32] 16.0, attn.c_attn [32 -> 96] 20.57, the MLP's 21.33.
amp::Fp8Calibration threshold(double t) {
  amp::Fp8Calibration c;
  c.device = "test";
  c.tokens = 48, c.in = 32, c.out = 128;                  // the MLP's c_fc: 1,179,648 flops, 55,296 quantized bytes
  const double f = 6.0 * 48 * 32 * 128, bytes = 4.0 * 48 * 32 + 4.0 * 48 * 128 + 6.0 * 32 * 128;
  c.elementwise_gbps = 1e9;                                // the cast of W: 24,576 bytes in 2.5e-14 ms
  c.bf16_layer_ms = f / 1e12 * 1e3 + 6.0 * 32 * 128 / (c.elementwise_gbps * 1e9) * 1e3;
  c.fp8_fprop_tflops = c.fp8_tflops = c.block_tflops = 2;
  for (double& ms : c.fp8_layer_ms) ms = f / 2e12 * 1e3 + bytes * t / 2000e9 * 1e3;
  c.fp8_layer_ms[1] = f / 2e12 * 1e3 + (6.0 * 48 * 32 + 6.0 * 48 * 128 + 10.0 * 32 * 128) * t / 2000e9 * 1e3;
  return c;
}

struct RuleRun {
  testing::Fp8NormSteps steps;
  std::vector<std::string> metas;
};

RuleRun run(const amp::Policy& policy, const std::vector<std::string>& bf16_layers) {
  nn::GPTConfig c;
  c.vocab_size = 37, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 32;
  nn::GPT model(c);
  RuleRun r;
  r.steps = testing::run_fp8_norm_steps(model, policy, [&] {
    for (size_t b = 1; b < 3; ++b) {  // blocks 1 and 2 are FP8 (the policy keeps 0 and 3 in BF16)
      const nn::Block& blk = model.block(b);
      const std::string at = "h." + std::to_string(b) + ".attn.c_attn";
      const bool bf16 = std::find(bf16_layers.begin(), bf16_layers.end(), "attn.c_attn") != bf16_layers.end();
      EXPECT_EQ(blk.attn().c_attn().input_format(DType::F32).dtype, bf16 ? DType::BF16 : DType::F8E4M3) << at;
      EXPECT_EQ(blk.mlp().c_fc().input_format(DType::F32).dtype, DType::F8E4M3);
    }
  });
  for (const auto& m : policy.fp8_state->metas()) r.metas.push_back(m->name);
  return r;
}

amp::Policy fp8_policy() { return amp::Policy::named("fp8-delayed", 4, Device::cpu()); }

TEST(GptFp8Rule, LayersTheRuleTurnsToBf16TrainAsAnOverrideToBf16Would) {
  for (const double t : {18.0, 21.0}) {
    SCOPED_TRACE(t);
    const std::vector<std::string> bf16 =
        t < 20 ? std::vector<std::string>{"attn.c_proj"} : std::vector<std::string>{"attn.c_attn", "attn.c_proj"};
    amp::Policy ruled = fp8_policy();
    ruled.fp8_rule = std::make_shared<const amp::Fp8GemmRule>(threshold(t), 48, /*on_cpu_too=*/true);
    amp::Policy overridden = fp8_policy();
    for (const char* b : {"h.1.", "h.2."})
      for (const std::string& l : bf16) overridden.override_module(b + l, amp::Precision::BF16);
    const RuleRun a = run(ruled, bf16), b = run(overridden, bf16);

    // The rule's decisions: blocks 1 and 2's four layers, those in `bf16` judged slower in FP8.
    const std::vector<amp::Fp8GemmRule::Decision> d = ruled.fp8_rule->decisions();
    ASSERT_EQ(d.size(), 8u);
    for (const auto& x : d) {
      const bool want_bf16 = std::any_of(bf16.begin(), bf16.end(), [&](const std::string& l) {
        return x.path.size() > l.size() && x.path.compare(x.path.size() - l.size(), l.size(), l) == 0;
      });
      EXPECT_EQ(x.estimate.fp8(), !want_bf16) << x.path;
    }
    EXPECT_EQ(a.metas, b.metas);
    EXPECT_EQ(a.metas.size(), 3u * 2 * (4 - bf16.size()));  // input, weight, grad_output per FP8 layer
    ASSERT_EQ(a.steps.losses.size(), b.steps.losses.size());
    EXPECT_EQ(std::memcmp(a.steps.losses.data(), b.steps.losses.data(), a.steps.losses.size() * sizeof(float)), 0);
    EXPECT_EQ(a.steps.scales, b.steps.scales);
    ASSERT_EQ(a.steps.grads.size(), b.steps.grads.size());
    for (size_t i = 0; i < a.steps.grads.size(); ++i)
      EXPECT_EQ(a.steps.grads[i], b.steps.grads[i]) << "gradient " << i;
    // And the rule did change the run: the all-FP8 run's losses differ.
    const RuleRun all = run(fp8_policy(), {});
    EXPECT_NE(all.steps.losses, a.steps.losses);
  }
}

}  // namespace
}  // namespace mpt
