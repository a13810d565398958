// tests/nn/test_gpt_fp8_norms.cpp: GPT under FP8 delayed scaling: ln_1 and ln_2 store their GEMM's E4M3 input codes
// (the FP8 layer's input quantization folded into the norm), with the bits of the run whose layers quantize the
// f32 norms themselves (telemetry on, which needs the unquantized inputs), step after step.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "fp8_norm_steps.h"

namespace mpt {
namespace {

// A small GPT: 37 tokens, context 16, 2 heads of 16. The FP8 policy keeps its first and last blocks in BF16.
nn::GPTConfig small_gpt(int64_t n_layer, bool bias = true) {
  nn::GPTConfig c;
  c.vocab_size = 37;
  c.block_size = 16;
  c.n_layer = n_layer;
  c.n_head = 2;
  c.n_embd = 32;
  c.bias = bias;
  return c;
}

testing::Fp8NormSteps run(bool telemetry, bool llama_like_bias) {
  const nn::GPTConfig c = small_gpt(4, !llama_like_bias);
  nn::GPT model(c);
  const amp::Policy policy = amp::Policy::named("fp8-delayed", c.n_layer, Device::cpu());
  policy.fp8_state->set_collect_telemetry(telemetry);
  return testing::run_fp8_norm_steps(model, policy, [&] {
    for (size_t b = 0; b < 4; ++b) {  // the norms before c_attn and the MLP store E4M3 codes unless telemetry
      const nn::Block& blk = model.block(b);
      const DType want = b == 0 || b == 3 ? DType::BF16 : telemetry ? DType::F32 : DType::F8E4M3;
      EXPECT_EQ(blk.attn().c_attn().input_format(DType::F32).dtype, want);
      EXPECT_EQ(blk.mlp().c_fc().input_format(DType::F32).dtype, want);
    }
  });
}

// The layers register their FP8 metas in the order they run (a checkpoint's state.json lists them so), also when a
// norm asks its layer for the input format before the layer runs.
TEST(GptFp8Norms, MetasRegisterInTheLayersOrder) {
  const nn::GPTConfig c = small_gpt(3);
  nn::GPT model(c);
  const amp::Policy policy = amp::Policy::named("fp8-delayed", c.n_layer, Device::cpu());
  const Tensor ids = Tensor::zeros({1, 16}, DType::I64);
  {
    amp::Autocast autocast(policy);
    (void)model.loss(ids, ids);
  }
  std::vector<std::string> names;
  for (const auto& m : policy.fp8_state->metas()) {
    if (m->role == fp8::Fp8Role::Input) names.push_back(m->name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"h.1.attn.c_attn.input", "h.1.attn.c_proj.input", "h.1.mlp.c_fc.input",
                                              "h.1.mlp.c_proj.input"}));
}

TEST(GptFp8Norms, NormsStoreTheFp8InputCodesWithTheBitsOfTheLayersQuantization) {
  for (const bool no_bias : {false, true}) {
    SCOPED_TRACE(no_bias ? "no bias" : "bias");
    const testing::Fp8NormSteps fused = run(false, no_bias), plain = run(true, no_bias);
    ASSERT_EQ(fused.losses.size(), plain.losses.size());
    EXPECT_EQ(std::memcmp(fused.losses.data(), plain.losses.data(), fused.losses.size() * sizeof(float)), 0);
    EXPECT_EQ(fused.scales, plain.scales);
    ASSERT_EQ(fused.grads.size(), plain.grads.size());
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      ASSERT_EQ(fused.grads[i].size(), plain.grads[i].size());
      EXPECT_EQ(std::memcmp(fused.grads[i].data(), plain.grads[i].data(), fused.grads[i].size() * sizeof(float)), 0)
          << "gradient " << i;
    }
  }
}

}  // namespace
}  // namespace mpt
