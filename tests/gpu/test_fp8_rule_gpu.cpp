// tests/gpu/test_fp8_rule_gpu.cpp: the per-shape FP8 rule on cuda:0, where it judges layers by default: a GPT whose
// small layers it turns to BF16 registers FP8 metas for the others only and computes what BF16 overrides compute.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/amp/fp8_rule.h"
#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using mpt::testing::same_bits;

struct Out {
  Tensor loss;
  std::vector<Tensor> grads;
  std::vector<std::string> metas;
};

// One forward + backward of a 4-block GPT (64 wide: c_attn [64 -> 192], c_proj [64 -> 64], the MLP [64 -> 256] and
// [256 -> 64]) on cuda:0 under `policy`.
Out step(const amp::Policy& policy) {
  nn::GPTConfig c;
  c.vocab_size = 37, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 64;
  c.where.device = Device::cuda(0);
  nn::GPT model(c);
  std::vector<int64_t> tokens(64);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int64_t>((i * 7) % 37);
  const Tensor ids = Tensor::from_vector(tokens, {4, 16}, Device::cuda(0));
  Out o;
  {
    amp::Autocast autocast(policy);
    o.loss = model.loss(ids, ids);
  }
  o.loss.backward();
  for (const auto& p : model.named_parameters()) o.grads.push_back(p.tensor.grad());
  for (const auto& m : policy.fp8_state->metas()) o.metas.push_back(m->name);
  return o;
}

TEST(GpuFp8Rule, JudgesCudaLayersAndTheBf16OnesComputeAsOverridesToBf16) {
  MPT_REQUIRE_GPU(9);
  // The H200's rule at 64 tokens: FP8 loses at every one of these shapes (the weights' quantization dominates).
  amp::Policy ruled = amp::Policy::named("fp8-delayed", 4, Device::cuda(0));
  ruled.fp8_rule = std::make_shared<const amp::Fp8GemmRule>(amp::Fp8Calibration::h200(), 64);
  EXPECT_EQ(ruled.at("h.1.mlp.c_fc", 2048, 8192, Device::cuda(0)), amp::Precision::BF16);  // 64 tokens: too few
  const Out a = step(ruled);
  const std::vector<amp::Fp8GemmRule::Decision> d = ruled.fp8_rule->decisions();
  ASSERT_EQ(d.size(), 8u);  // blocks 1 and 2's four layers (blocks 0 and 3 and the head are BF16 by the policy)
  for (const auto& x : d) EXPECT_FALSE(x.estimate.fp8()) << x.path;
  EXPECT_TRUE(a.metas.empty());

  amp::Policy overridden = amp::Policy::named("fp8-delayed", 4, Device::cuda(0));
  for (const char* b : {"h.1", "h.2"}) overridden.override_module(b, amp::Precision::BF16);
  const Out b = step(overridden);
  EXPECT_TRUE(same_bits(a.loss, b.loss));
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) EXPECT_TRUE(same_bits(a.grads[i], b.grads[i])) << "gradient " << i;

  // At 1.3B's tokens per micro-batch the MLP's shape gains: the rule keeps FP8 there.
  amp::Policy large = amp::Policy::named("fp8-delayed", 4, Device::cuda(0));
  large.fp8_rule = std::make_shared<const amp::Fp8GemmRule>(amp::Fp8Calibration::h200(), 8192);
  EXPECT_EQ(large.at("h.1.mlp.c_fc", 2048, 8192, Device::cuda(0)), amp::Precision::FP8);
}

}  // namespace
}  // namespace mpt
