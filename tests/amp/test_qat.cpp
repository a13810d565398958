// tests/amp/test_qat.cpp: QAT as a policy: scheme names, per-module lookup, a Linear's fake-quantized GEMM and its straight-through gradients, GPT under QAT equals its PTQ-rounded twin, and refusals.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <memory>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using amp::QatPolicy;
using amp::QatScheme;
using ops::QuantFormat;
using ops::QuantGranularity;
using testing::random_tensor;

using mpt::testing::same_bits;

amp::Policy with_qat(amp::Policy p, const QatScheme& s) {
  p.qat = std::make_shared<const QatPolicy>(QatPolicy::linears_but_head(s));
  return p;
}

TEST(Qat, NamedSchemes) {
  const QatScheme i8 = QatScheme::named("int8");
  EXPECT_EQ(i8.name, "int8");
  EXPECT_EQ(i8.weight->str(), "int8-channel-f16scale");
  EXPECT_EQ(i8.input->str(), "int8-token");
  const QatScheme i4 = QatScheme::named("int4", 128);
  EXPECT_EQ(i4.name, "int4-g128");
  EXPECT_EQ(i4.weight->str(), "int4-g128-f16scale");
  EXPECT_FALSE(i4.input.has_value());
  EXPECT_EQ(QatScheme::named("fp8").weight->str(), "fp8-channel");
  EXPECT_EQ(QatScheme::named("fp8").input->str(), "fp8-token");
  EXPECT_MPT_ERROR(QatScheme::named("int2"), "unknown scheme 'int2'");
  EXPECT_MPT_ERROR(QatScheme::named("int4", 0), "positive group size");
}

TEST(Qat, PolicyLeavesTheHeadAndOverridesByWholeComponents) {
  QatPolicy p = QatPolicy::linears_but_head(QatScheme::named("int4"));
  p.overrides["h.1"] = QatScheme::named("int8");
  p.overrides["h.1.mlp"] = std::nullopt;
  EXPECT_EQ(p.at("h.0.attn.c_attn")->name, "int4-g32");
  EXPECT_EQ(p.at("lm_head"), nullptr);
  EXPECT_EQ(p.at("h.1.attn.c_proj")->name, "int8");
  EXPECT_EQ(p.at("h.1.mlp.c_fc"), nullptr);
  EXPECT_EQ(p.at("h.10.mlp.c_fc")->name, "int4-g32");  // "h.1" is not a component prefix of "h.10"
}

// Under QAT a Linear computes linear(fq(x), fq(W)) + b, and the straight-through gradients are those of that linear:
// dW and dx as if the quantized operands were the real ones.
TEST(Qat, LinearComputesTheFakeQuantizedGemmWithStraightThroughGradients) {
  for (const char* name : {"int8", "int4", "fp8"}) {
    nn::Linear lin(64, 48, true);
    const QatScheme scheme = QatScheme::named(name);
    Tensor x = random_tensor({5, 64}, DType::F32, 3, 1.0).requires_grad_();
    const Tensor dy = random_tensor({5, 48}, DType::F32, 4, 1.0);
    Tensor y;
    {
      amp::Autocast ac(with_qat(amp::Policy::fp32(), scheme));
      y = lin(x);
    }
    y.backward(dy);
    // The reference: the same ops composed by hand, on detached copies.
    const Tensor xq = scheme.input ? ops::fake_quantize(x.detach(), *scheme.input) : x.detach();
    Tensor wq = ops::fake_quantize(lin.weight().detach(), *scheme.weight).requires_grad_();
    Tensor xr = xq.clone().requires_grad_();
    Tensor b = lin.bias().detach().clone().requires_grad_();
    const Tensor yr = ops::linear(xr, wq, b);
    yr.backward(dy);
    EXPECT_TRUE(same_bits(y.detach(), yr.detach())) << name;
    EXPECT_TRUE(same_bits(x.grad(), xr.grad())) << name;
    EXPECT_TRUE(same_bits(lin.weight().grad(), wq.grad())) << name;
    EXPECT_TRUE(same_bits(lin.bias().grad(), b.grad())) << name;
    // The quantization changed something (the test would pass vacuously otherwise).
    EXPECT_FALSE(same_bits(wq.detach(), lin.weight().detach())) << name;
  }
}

// A GPT under weight-only QAT computes exactly what the same GPT computes without QAT once its Linear weights are
// rounded in place (nn::quantize_weights: post-training quantization), the fused MLP path included.
TEST(Qat, GptUnderQatEqualsItsPtqRoundedTwin) {
  nn::GPTConfig c;
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.seed = 5;
  const QatPolicy policy = QatPolicy::linears_but_head(QatScheme::named("int4"));
  nn::GPT a(c), b(c);
  std::vector<int64_t> ids(32);
  for (int64_t i = 0; i < 32; ++i) ids[i] = (i * 7 + 3) % 40;
  const Tensor x = Tensor::from_vector(ids, {2, 16});
  Tensor qat_logits;
  {
    autograd::NoGradGuard ng;
    amp::Policy p = amp::Policy::fp32();
    p.qat = std::make_shared<const QatPolicy>(policy);
    amp::Autocast ac(p);
    qat_logits = a.forward(x);
  }
  const std::vector<std::string> done = nn::quantize_weights(b, policy);
  EXPECT_EQ(done.size(), 8u);  // 2 blocks x (c_attn, c_proj, c_fc, c_proj)
  EXPECT_EQ(done.front(), "h.0.attn.c_attn.weight");
  Tensor ptq_logits;
  {
    autograd::NoGradGuard ng;
    ptq_logits = b.forward(x);
  }
  EXPECT_TRUE(same_bits(qat_logits, ptq_logits));
  // The embeddings (and so the tied head) were left alone.
  EXPECT_TRUE(same_bits(a.named_parameters().front().tensor, b.named_parameters().front().tensor));
}

TEST(Qat, Bf16QatReachesTheFp32MasterAndFp8IsRefused) {
  nn::Linear lin(32, 16, true);
  Tensor x = random_tensor({3, 32}, DType::F32, 5, 1.0);
  {
    amp::Autocast ac(with_qat(amp::Policy::bf16(), QatScheme::named("int8")));
    const Tensor y = lin(x);
    EXPECT_EQ(y.dtype(), DType::BF16);
    ops::sum(y.to(DType::F32)).backward();
  }
  ASSERT_TRUE(lin.weight().grad().defined());
  EXPECT_EQ(lin.weight().grad().dtype(), DType::F32);
  amp::Policy fp8 = amp::Policy::named("fp8-current", 0, Device::cpu());
  fp8.override_module("lm_head", amp::Precision::FP8);
  amp::Autocast ac(with_qat(fp8, QatScheme::named("int4")));
  EXPECT_MPT_ERROR(lin(x), "QAT (int4-g32) fake-quantizes weights for an FP32, BF16 or FP16 GEMM");
}

// The Trainer applies the QAT policy like any other: a few steps lower the loss, and a checkpoint records the scheme
// so that resuming without it is refused.
TEST(Qat, TrainerTrainsUnderQatAndCheckpointsTheScheme) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = 9;
  nn::GPT model(c);
  const train::TrainerOptions options{.policy = with_qat(amp::Policy::fp32(), QatScheme::named("int4")),
                                      .precision_name = "fp32+qat-int4-g32"};
  train::Trainer trainer(model, train::adamw({.lr = 1e-2}), options);
  std::vector<int64_t> xs(64), ys(64);
  for (int64_t i = 0; i < 64; ++i) xs[i] = (i * 5) % 32, ys[i] = (xs[i] * 7 + 1) % 32;
  const Tensor x = Tensor::from_vector(xs, {4, 16}), y = Tensor::from_vector(ys, {4, 16});
  double first = 0, last = 0;
  for (int s = 0; s < 30; ++s) {
    const train::StepMetrics m = trainer.step([&](int64_t) { return model.loss(x, y); });
    (s == 0 ? first : last) = m.loss.item<float>();
  }
  EXPECT_LT(last, 0.5 * first);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("mpt_qat_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  trainer.save(dir);
  nn::GPT other(c);
  train::Trainer plain(other, train::adamw({.lr = 1e-2}), {.policy = amp::Policy::fp32()});
  EXPECT_MPT_ERROR(plain.load(dir), "fp32+qat-int4-g32");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mpt
