// tests/nn/test_gpt_fp8_norms.cpp: GPT under FP8 delayed and current scaling: ln_1 and ln_2 store their GEMM's E4M3
// input codes (the FP8 layer's input quantization folded into the norm), with the bits of the run whose layers
// quantize the f32 norms themselves (telemetry on, which needs the unquantized inputs), step after step.
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

testing::Fp8NormSteps run(const char* precision, bool telemetry, bool llama_like_bias) {
  const nn::GPTConfig c = small_gpt(4, !llama_like_bias);
  nn::GPT model(c);
  const amp::Policy policy = amp::Policy::named(precision, c.n_layer, Device::cpu());
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

// Block scaling quantizes its layers' inputs itself (1x128 blocks along each axis): the norms before them write BF16,
// as before BF16 layers, so the layers read (and their backward writes) half the bytes of an FP32 output.
TEST(GptFp8Norms, BlockScalingNormsWriteBf16) {
  const nn::GPTConfig c = small_gpt(4);
  nn::GPT model(c);
  const amp::Policy policy = amp::Policy::named("fp8-block", c.n_layer, Device::cpu());
  amp::Autocast autocast(policy);
  for (size_t b = 0; b < 4; ++b) {
    const nn::Block& blk = model.block(b);
    for (const DType stream : {DType::F32, DType::BF16}) {
      const std::string at = "block " + std::to_string(b) + " " + std::string(dtype_name(stream));
      EXPECT_EQ(blk.attn().c_attn().input_format(stream).dtype, DType::BF16) << at;
      EXPECT_EQ(blk.mlp().c_fc().input_format(stream).dtype, DType::BF16) << at;
    }
  }
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
  for (const char* precision : {"fp8-delayed", "fp8-current"}) {
    for (const bool no_bias : {false, true}) {
      SCOPED_TRACE(::testing::Message() << precision << (no_bias ? " no bias" : " bias"));
      const testing::Fp8NormSteps fused = run(precision, false, no_bias), plain = run(precision, true, no_bias);
      testing::expect_same_losses_and_grads(fused, plain);
      // Delayed: every scale after each update. Current: the fused run's input metas hold the scales the norms found
      // (the plain run's stay 1: its quantizations keep theirs to themselves).
      if (std::string(precision) == "fp8-delayed") {
        EXPECT_EQ(fused.scales, plain.scales);
      } else {
        EXPECT_NE(fused.scales, plain.scales);
      }
    }
  }
}

// Current scaling: two forwards before one backward (two losses summed). Each norm's codes keep the scale it found
// for them (new scale tensors each forward), so the first forward's saved codes are not read with the second's.
TEST(GptFp8Norms, CurrentScalingCodesKeepTheirScaleAcrossForwards) {
  const nn::GPTConfig c = small_gpt(4);
  Generator data(11);
  const Tensor ids = Tensor::uniform({2, 17}, 0, 37, DType::F32, Device::cpu(), data).to(DType::I64);
  auto grads = [&](bool telemetry) {
    nn::GPT model(c);
    const amp::Policy policy = amp::Policy::named("fp8-current", c.n_layer, Device::cpu());
    policy.fp8_state->set_collect_telemetry(telemetry);
    Tensor loss;
    {
      amp::Autocast autocast(policy);
      const Tensor a = ids.slice(0, 0, 1), b = ids.slice(0, 1, 2);
      loss = model.loss(a.slice(1, 0, 16).contiguous(), a.slice(1, 1, 17).contiguous()) +
             model.loss(b.slice(1, 0, 16).contiguous(), b.slice(1, 1, 17).contiguous());
    }
    loss.backward();
    std::vector<std::vector<float>> g;
    for (const auto& p : model.named_parameters()) g.push_back(p.tensor.grad().to_vector<float>());
    return g;
  };
  const auto fused = grads(false), plain = grads(true);
  ASSERT_EQ(fused.size(), plain.size());
  for (size_t i = 0; i < fused.size(); ++i) {
    EXPECT_EQ(std::memcmp(fused[i].data(), plain[i].data(), fused[i].size() * sizeof(float)), 0) << "gradient " << i;
  }
}

}  // namespace
}  // namespace mpt
