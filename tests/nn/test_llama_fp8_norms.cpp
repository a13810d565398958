// tests/nn/test_llama_fp8_norms.cpp: Llama under FP8 delayed scaling: each RMSNorm stores the E4M3 input codes its
// readers share (q, k, v; gate, up) with the first reader's input meta, with the bits and scaling state of the run
// whose layers each quantize the f32 norm (telemetry on, which needs the unquantized inputs), step after step.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "mpt/nn/llama.h"
#include "fp8_norm_steps.h"
#include "op_test.h"

namespace mpt {
namespace {

struct Steps {
  testing::Fp8NormSteps steps;
  std::map<std::string, Tensor> fp8_state;  // after the last update
  std::map<std::string, std::string> shared;
};

// 4 layers (the FP8 policy keeps the first and last in BF16), 4 heads over 2 kv heads of 8, SwiGLU 48.
nn::LlamaConfig small_llama() {
  nn::LlamaConfig c;
  c.vocab_size = 37;
  c.block_size = 16;
  c.n_layer = 4;
  c.n_head = 4;
  c.n_kv_head = 2;
  c.n_embd = 32;
  c.intermediate_size = 48;
  return c;
}

Steps run(bool telemetry, const char* precision = "fp8-delayed") {
  const nn::LlamaConfig c = small_llama();
  nn::Llama model(c);
  const amp::Policy policy = amp::Policy::named(precision, c.n_layer, Device::cpu(), "model.layers");
  policy.fp8_state->set_collect_telemetry(telemetry);
  Steps s;
  s.steps = testing::run_fp8_norm_steps(model, policy, [&] {
    for (size_t b = 0; b < 4; ++b) {  // E4M3 codes for the FP8 blocks unless telemetry; BF16 casts otherwise
      const DType want = b == 0 || b == 3 ? DType::BF16 : telemetry ? DType::F32 : DType::F8E4M3;
      EXPECT_EQ(model.block(b).self_attn().input_format(DType::F32).dtype, want) << "block " << b;
    }
  });
  s.fp8_state = policy.fp8_state->state_dict();
  s.shared = policy.fp8_state->shared_names();
  return s;
}

using mpt::testing::same_bits;

// Under block scaling the readers quantize the norm's output themselves: a shared BF16 output (as before BF16 layers).
TEST(LlamaFp8Norms, BlockScalingNormsWriteTheirReadersBf16) {
  const nn::LlamaConfig c = small_llama();
  nn::Llama model(c);
  const amp::Policy policy = amp::Policy::named("fp8-block", c.n_layer, Device::cpu(), "model.layers");
  amp::Autocast autocast(policy);
  for (size_t b = 0; b < 4; ++b)
    EXPECT_EQ(model.block(b).self_attn().input_format(DType::F32).dtype, DType::BF16) << "block " << b;
}

TEST(LlamaFp8Norms, NormsStoreTheSharedInputCodesWithTheBitsOfEachLayersQuantization) {
  const Steps fused = run(false), plain = run(true);
  const testing::Fp8NormSteps &f = fused.steps, &p = plain.steps;
  testing::expect_same_losses_and_grads(f, p);
  // k_proj, v_proj and up_proj read their block's shared codes: their input metas are q_proj's and gate_proj's.
  std::map<std::string, std::string> want_shared;
  for (const std::string b : {"model.layers.1", "model.layers.2"}) {
    for (const char* p : {"k_proj", "v_proj"})
      want_shared[b + ".self_attn." + p + ".input"] = b + ".self_attn.q_proj.input";
    want_shared[b + ".mlp.up_proj.input"] = b + ".mlp.gate_proj.input";
  }
  EXPECT_EQ(fused.shared, want_shared);
  EXPECT_TRUE(plain.shared.empty());
  // The separate metas the plain run kept for them held the shared one's state, bit for bit; every other meta is
  // the same in both.
  EXPECT_EQ(plain.fp8_state.size(), fused.fp8_state.size() + 3 * want_shared.size());
  for (const auto& [key, value] : plain.fp8_state) {
    const std::string name = key.substr(0, key.rfind('.')), field = key.substr(key.rfind('.'));
    const auto alias = want_shared.find(name);
    const std::string source = alias != want_shared.end() ? alias->second + field : key;
    ASSERT_EQ(fused.fp8_state.count(source), 1u) << key;
    EXPECT_TRUE(same_bits(value, fused.fp8_state.at(source))) << key;
  }
  // The scales moved off 1: the test compares real delayed-scaling states.
  EXPECT_NE(fused.fp8_state.at("model.layers.1.self_attn.q_proj.input.scale").item<float>(), 1.0f);
}

// Current scaling: the norms write the shared codes with the scale they find (their first pass's amax), with the bits
// of each layer quantizing the f32 norm with its own current scale.
TEST(LlamaFp8Norms, CurrentScalingNormsStoreTheSharedCodesWithTheBitsOfEachLayersQuantization) {
  const Steps fused = run(false, "fp8-current"), plain = run(true, "fp8-current");
  const testing::Fp8NormSteps &f = fused.steps, &p = plain.steps;
  testing::expect_same_losses_and_grads(f, p);
  EXPECT_EQ(fused.shared.size(), 6u);  // k, v and up read q's and gate's codes in both FP8 blocks
  EXPECT_TRUE(plain.shared.empty());
  EXPECT_TRUE(fused.fp8_state.empty());  // current scaling carries nothing over between steps
  EXPECT_NE(f.scales, p.scales) << "the fused run's input metas hold the scales the norms found";
}

// A state registered from a checkpoint of separate metas (written before the sharing) drops them at its first
// forward and continues with the bits of the run that shared from the start (the weights stay put: no optimizer, so
// only the scales move the losses).
TEST(LlamaFp8Norms, ResumesFromSeparateMetasWithTheSameBits) {
  const nn::LlamaConfig c = small_llama();
  Generator data(9);
  const Tensor ids = Tensor::uniform({2, 17}, 0, 37, DType::F32, Device::cpu(), data).to(DType::I64);
  auto steps = [&](const nn::Llama& model, const amp::Policy& policy, int n) {
    std::vector<float> losses;
    for (int step = 0; step < n; ++step) {
      Tensor loss;
      {
        amp::Autocast autocast(policy);
        loss = model.loss(ids.slice(1, 0, 16).contiguous(), ids.slice(1, 1, 17).contiguous());
      }
      loss.backward();
      losses.push_back(loss.item<float>());
      for (const auto& p : model.named_parameters()) p.tensor.set_grad(Tensor());
      policy.fp8_state->update();
    }
    return losses;
  };
  const nn::Llama model(c);
  auto policy = [&] { return amp::Policy::named("fp8-delayed", c.n_layer, Device::cpu(), "model.layers"); };
  const amp::Policy separate = policy(), shared = policy(), resumed = policy();
  separate.fp8_state->set_collect_telemetry(true);  // each layer quantizes for itself: separate metas
  steps(model, separate, 2);
  steps(model, shared, 2);
  for (const auto& m : separate.fp8_state->metas()) resumed.fp8_state->register_tensor(m->name, m->role);
  resumed.fp8_state->load_state_dict(separate.fp8_state->state_dict());
  ASSERT_EQ(resumed.fp8_state->metas().size(), shared.fp8_state->metas().size() + 6);
  const std::vector<float> want = steps(model, shared, 2), got = steps(model, resumed, 2);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0);
  EXPECT_EQ(resumed.fp8_state->shared_names(), shared.fp8_state->shared_names());
  const std::map<std::string, Tensor> a = shared.fp8_state->state_dict(), b = resumed.fp8_state->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : a) {
    ASSERT_EQ(b.count(key), 1u) << key;
    EXPECT_TRUE(same_bits(value, b.at(key))) << key;
  }
  EXPECT_NE(a.at("model.layers.2.mlp.gate_proj.input.scale").item<float>(), 1.0f);
}

}  // namespace
}  // namespace mpt
