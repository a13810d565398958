// tests/nn/test_residual_stream.cpp: amp::Policy::residual: a BF16 residual stream under FP32 masters is the all-BF16
// model's forward bit for bit (GPT and Llama), its gradients that model's before their last rounding, and bad dtypes
// are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/llama.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

nn::GPTConfig gpt_config(DType dtype) {
  nn::GPTConfig c;
  c.vocab_size = 41;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.where.dtype = dtype;
  return c;
}

nn::LlamaConfig llama_config(DType dtype) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 41;
  c.block_size = 16;
  c.where.dtype = dtype;
  return c;
}

// The model's parameters rounded to BF16 (kept in FP32): the masters whose BF16 copies are exact, so that FP32 masters
// under BF16 autocast and a BF16 model hold the same values.
template <class Model>
void round_to_bf16(Model& model) {
  autograd::NoGradGuard no_grad;
  for (const auto& p : model.named_parameters()) p.tensor.detach().copy_(p.tensor.to(DType::BF16).to(DType::F32));
}

struct Run {
  Tensor logits;
  float loss = 0;
  std::vector<Tensor> grads;  // in the parameters' order
};

template <class Model>
Run run(Model& model, const Tensor& ids, const Tensor& targets, const amp::Policy* policy) {
  Run r;
  Tensor loss;
  {
    std::unique_ptr<amp::Autocast> autocast;
    if (policy != nullptr) autocast = std::make_unique<amp::Autocast>(*policy);
    r.logits = model.forward(ids);
    loss = nn::cross_entropy(r.logits, targets);
  }
  loss.backward();
  r.loss = loss.item<float>();
  for (const Tensor& p : model.parameters()) r.grads.push_back(p.grad());
  return r;
}

// FP32 masters under BF16 autocast with a BF16 stream against the same weights as a BF16 model (no autocast: every
// activation BF16, the regime of PyTorch's BF16 GPT golden). Forward: the same operations on the same values (the
// masters' BF16 copies are the BF16 weights, the norms read either weight as float, the embeddings enter the stream
// rounded to BF16 once), so the logits and the loss agree bit for bit. GPT's embeddings are wte + wpe, summed in FP32
// before the cast but in BF16 by the BF16 model: one rounding either way when the FP32 sum is exact, which the test
// checks for the sums it uses. Backward: the same BF16 gradients flow through the stream and the activations; a
// master's gradient is the FP32 result of the GEMM or reduction whose BF16 rounding the BF16 model keeps: the same
// CPU kernels accumulate both in FP32 in one order, so the two differ by that one rounding, half an ulp (at most 2^-8
// of the magnitude). A tied embedding (`tied`, GPT's wte) is the exception: its
// gradient is the LM head's plus the lookup's, which the BF16 model rounds each and then their sum. The parts are not
// exposed, so it is held normwise to three roundings of its largest element.
template <class Model>
void expect_the_bf16_models_run(Model& master, Model& low, const Tensor& ids, const Tensor& targets,
                                const std::string& tied = "") {
  round_to_bf16(master);
  low.load_state_dict(master.state_dict());
  amp::Policy policy = amp::Policy::bf16();
  policy.residual_in(DType::BF16);
  const Run got = run(master, ids, targets, &policy), want = run(low, ids, targets, nullptr);
  ASSERT_EQ(got.logits.dtype(), DType::BF16);
  EXPECT_TRUE(testing::same_bits(got.logits, want.logits)) << "logits";
  EXPECT_EQ(got.loss, want.loss);
  const auto names = master.named_parameters();
  ASSERT_EQ(got.grads.size(), want.grads.size());
  for (size_t i = 0; i < got.grads.size(); ++i) {
    ASSERT_EQ(got.grads[i].dtype(), DType::F32) << names[i].name;
    ASSERT_EQ(want.grads[i].dtype(), DType::BF16) << names[i].name;
    const std::vector<double> g = got.grads[i].template to_vector<double>(),
                              w = want.grads[i].template to_vector<double>();
    double worst = 0, gmax = 0, dmax = 0;
    for (size_t k = 0; k < g.size(); ++k) {
      worst = std::max(worst, std::abs(g[k] - w[k]) / (std::ldexp(std::abs(g[k]), -8) + 1e-30));
      gmax = std::max(gmax, std::abs(g[k])), dmax = std::max(dmax, std::abs(g[k] - w[k]));
    }
    if (names[i].name == tied) {
      EXPECT_LE(dmax, 3 * std::ldexp(gmax, -8)) << tied << ": more than three BF16 roundings of its largest element";
    } else {
      EXPECT_LE(worst, 1.0) << names[i].name << ": the BF16 model's gradient is more than one BF16 rounding away";
    }
  }
}

TEST(ResidualStream, Bf16StreamIsTheBf16GptsForward) {
  nn::GPT master(gpt_config(DType::F32)), low(gpt_config(DType::BF16));
  Generator data(3);
  const Tensor all = Tensor::uniform({3, 17}, 0, 41, DType::F32, Device::cpu(), data).to(DType::I64);
  const Tensor ids = all.slice(1, 0, 16).contiguous(), targets = all.slice(1, 1, 17).contiguous();
  round_to_bf16(master);
  {  // the premise: wte[id] + wpe[t] is exact in FP32 for every token used (one rounding to BF16 either way)
    const auto sd = master.state_dict();
    const std::vector<double> wte = sd.at("wte.weight").to_vector<double>(),
                              wpe = sd.at("wpe.weight").to_vector<double>();
    const std::vector<int64_t> tok = ids.to_vector<int64_t>();
    const int64_t C = 32;
    for (size_t n = 0; n < tok.size(); ++n) {
      for (int64_t c = 0; c < C; ++c) {
        const double a = wte[static_cast<size_t>(tok[n] * C + c)], b = wpe[static_cast<size_t>(int64_t(n % 16) * C + c)];
        ASSERT_EQ(static_cast<double>(static_cast<float>(a + b)), a + b) << "token " << n << " channel " << c;
      }
    }
  }
  expect_the_bf16_models_run(master, low, ids, targets, "wte.weight");
}

TEST(ResidualStream, Bf16StreamIsTheBf16LlamasForward) {
  nn::Llama master(llama_config(DType::F32)), low(llama_config(DType::BF16));
  Generator data(4);
  const Tensor all = Tensor::uniform({3, 17}, 0, 41, DType::F32, Device::cpu(), data).to(DType::I64);
  expect_the_bf16_models_run(master, low, all.slice(1, 0, 16).contiguous(), all.slice(1, 1, 17).contiguous());
}

// FP8 with a BF16 stream: the norms before FP8 layers write E4M3 codes from the stream (one rounding of the f32
// norm) where, while telemetry is collected, they write BF16 for the layers to quantize (two roundings). The two
// differ (the codes path is taken) and are equally accurate: against the FP32 model, each gradient of the codes run
// at most twice as far off as the quantizing run's (normwise), the parity the GPU runs are held to.
// Llama's norms write the codes their readers share (q, k, v; gate, up), whose BF16 gradients the engine sums.
void expect_fp8_codes_keep_the_accuracy(nn::LanguageModel& model) {
  Generator data(6);
  const Tensor all = Tensor::uniform({3, 17}, 0, 41, DType::F32, Device::cpu(), data).to(DType::I64);
  const Tensor ids = all.slice(1, 0, 16).contiguous(), targets = all.slice(1, 1, 17).contiguous();
  auto grads = [&](const std::string& precision, bool telemetry) {
    model.zero_grad();
    std::unique_ptr<amp::Autocast> autocast;
    if (!precision.empty()) {
      amp::Policy policy = amp::Policy::named(precision, 0, Device::cpu());  // every layer FP8: both norms feed one
      policy.residual_in(DType::BF16);
      if (telemetry) policy.fp8_state->set_collect_telemetry(true);
      autocast = std::make_unique<amp::Autocast>(policy);
    }
    const Tensor loss = nn::cross_entropy(model.forward(ids), targets);
    autocast.reset();
    loss.backward();
    std::vector<std::vector<double>> g;
    for (const Tensor& p : model.parameters()) g.push_back(p.grad().to_vector<double>());
    return g;
  };
  const auto fp32 = grads("", false);
  for (const std::string recipe : {"fp8-delayed", "fp8-current"}) {
    SCOPED_TRACE(recipe);
    const auto codes = grads(recipe, false), quantized = grads(recipe, true);
    bool differ = false;
    const auto names = model.named_parameters();
    for (size_t i = 0; i < fp32.size(); ++i) {
      double e_codes = 0, e_quantized = 0, m = 0;
      for (size_t k = 0; k < fp32[i].size(); ++k) {
        e_codes = std::max(e_codes, std::abs(codes[i][k] - fp32[i][k]));
        e_quantized = std::max(e_quantized, std::abs(quantized[i][k] - fp32[i][k]));
        m = std::max(m, std::abs(fp32[i][k]));
        differ = differ || codes[i][k] != quantized[i][k];
      }
      EXPECT_LE(e_codes, 2 * e_quantized + 1e-12 * m) << names[i].name;
    }
    EXPECT_TRUE(differ) << "the norms wrote BF16 in both runs";
  }
}

TEST(ResidualStream, Fp8CodesFromABf16StreamKeepTheQuantizedNormsAccuracy) {
  nn::GPT gpt(gpt_config(DType::F32));
  expect_fp8_codes_keep_the_accuracy(gpt);
  nn::Llama llama(llama_config(DType::F32));
  expect_fp8_codes_keep_the_accuracy(llama);
}

TEST(ResidualStream, RefusesADtypeThatIsNotAFloatStream) {
  nn::GPT model(gpt_config(DType::F32));
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 2, 3, 4}, {1, 4});
  amp::Policy policy = amp::Policy::bf16();
  policy.residual_in(DType::F8E4M3);
  amp::Autocast autocast(policy);
  EXPECT_TRUE(testing::contains(testing::error_message([&] { (void)model.forward(ids); }),
                                "[GPT] the policy's residual stream dtype must be f32, bf16 or f16, got f8e4m3"));
  EXPECT_EQ(amp::parse_residual_dtype("bf16"), DType::BF16);
  EXPECT_EQ(amp::parse_residual_dtype("f16"), DType::F16);
  EXPECT_EQ(amp::parse_residual_dtype("f32"), DType::F32);
  EXPECT_TRUE(testing::contains(testing::error_message([] { (void)amp::parse_residual_dtype("fp8"); }),
                                "unknown residual stream dtype 'fp8': expected f32, bf16 or f16"));
}

// The Trainer names the stream in its checkpoints' precision, so a run resumes only with the stream it trained with.
TEST(ResidualStream, TheTrainersPrecisionNameCarriesTheStream) {
  nn::GPT model(gpt_config(DType::F32));
  amp::Policy policy = amp::Policy::bf16();
  policy.residual_in(DType::BF16);
  train::Trainer with(model, train::adamw({.lr = 1e-3}), {.policy = policy});
  EXPECT_EQ(with.precision_name(), "bf16+residual-bf16");
  train::Trainer without(model, train::adamw({.lr = 1e-3}), {.policy = amp::Policy::bf16()});
  EXPECT_EQ(without.precision_name(), "bf16");
  // An FP32 stream named explicitly is the default one: its checkpoints resume without the option and back.
  amp::Policy f32_stream = amp::Policy::bf16();
  f32_stream.residual_in(DType::F32);
  train::Trainer explicit_f32(model, train::adamw({.lr = 1e-3}), {.policy = f32_stream});
  EXPECT_EQ(explicit_f32.precision_name(), "bf16");
  f32_stream.residual_in(DType::F16);
  EXPECT_EQ(amp::precision_name("fp8-delayed", f32_stream), "fp8-delayed+residual-f16");
}

}  // namespace
}  // namespace mpt
