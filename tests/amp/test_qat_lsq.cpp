// tests/amp/test_qat_lsq.cpp: QAT with learned weight scales (LSQ): the Linear's log-scale parameter, its forward and gradients against the op composed by hand, a GPT whose scales train and checkpoint, and PTQ / quantized inference on the learned grid.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>

#include "mpt/mpt.h"
#include "mpt/nn/quantize.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using amp::QatPolicy;
using amp::QatScheme;
using testing::random_tensor;

amp::Policy with_qat(amp::Policy p, const QatScheme& s) {
  p.qat = std::make_shared<const QatPolicy>(QatPolicy::linears_but_head(s));
  return p;
}

ops::QuantSpec trained(ops::QuantSpec s) {
  s.f16_scale = false;
  return s;
}

// The scale is a parameter "weight_log_scale" (its logarithm) without weight decay, started at the log of the weight's
// absmax scales; learning it twice with the same spec is a no-op, with another spec an error; FP8 and per-token specs
// are refused.
TEST(QatLsq, TheScaleIsAParameterStartedAtTheAbsmaxScale) {
  nn::Linear lin(64, 16, true);
  const ops::QuantSpec spec = *QatScheme::named("int4").weight;
  lin.learn_weight_scale(spec);
  lin.learn_weight_scale(spec);
  int found = 0;
  for (const NamedParameter& p : lin.named_parameters()) {
    if (p.name != "weight_log_scale") continue;
    ++found;
    EXPECT_FALSE(p.weight_decay);
    EXPECT_TRUE(p.tensor.requires_grad());
    EXPECT_EQ(p.tensor.shape(), (Shape{16, 2}));
    const std::vector<float> got = lin.weight_scale().to_vector<float>(),
                             want = ops::quantize_groups(lin.weight(), trained(spec)).scales.to_vector<float>();
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], 4e-7 * want[i]) << i;  // exp(log(s))
  }
  EXPECT_EQ(found, 1);
  EXPECT_MPT_ERROR(lin.learn_weight_scale(*QatScheme::named("int4", 64).weight), "already learns");
  nn::Linear other(64, 16, true);
  EXPECT_MPT_ERROR(other.learn_weight_scale(*QatScheme::named("fp8").weight), "learned scales (LSQ)");
}

// Under QAT with a learned scale the Linear computes linear(fq(x), fake_quantize_learned(W, s)) + b; the gradients of
// x, W, b and s are that composition's (FP32 and BF16 policies).
TEST(QatLsq, LinearForwardAndGradientsAreTheLearnedQuantization) {
  for (const char* name : {"int8", "int4"}) {
    for (const bool bf16 : {false, true}) {
      nn::Linear lin(64, 48, true);
      const QatScheme scheme = QatScheme::named(name);
      lin.learn_weight_scale(*scheme.weight);
      {  // move the scale off the absmax one, so that the clamp matters
        autograd::NoGradGuard no_grad;
        Tensor(lin.weight_log_scale()).copy_(lin.weight_log_scale() + std::log(0.7));
      }
      Tensor x = random_tensor({5, 64}, DType::F32, 3, 1.0).requires_grad_();
      const Tensor dy = random_tensor({5, 48}, DType::F32, 4, 1.0);
      Tensor y;
      {
        amp::Autocast ac(with_qat(bf16 ? amp::Policy::bf16() : amp::Policy::fp32(), scheme));
        y = lin(x);
      }
      y.backward(dy.to(y.dtype()));
      const DType dt = bf16 ? DType::BF16 : DType::F32;
      Tensor xr = x.detach().clone().requires_grad_(), wr = lin.weight().detach().clone().requires_grad_();
      Tensor br = lin.bias().detach().clone().requires_grad_();
      Tensor sr = lin.weight_log_scale().detach().clone().requires_grad_();
      const Tensor xq = scheme.input ? ops::fake_quantize(xr, *scheme.input) : xr;
      const Tensor wq = ops::fake_quantize_learned(wr, ops::exp(sr), trained(*scheme.weight));
      const Tensor yr = ops::linear(xq.to(dt), wq.to(dt), br);
      yr.backward(dy.to(dt));
      const std::string what = std::string(name) + (bf16 ? " bf16" : " fp32");
      EXPECT_EQ(y.to(DType::F32).to_vector<float>(), yr.to(DType::F32).to_vector<float>()) << what;
      for (const auto& [got, want] : {std::pair{lin.weight_log_scale().grad(), sr.grad()},
                                      std::pair{lin.weight().grad(), wr.grad()}, std::pair{x.grad(), xr.grad()},
                                      std::pair{lin.bias().grad(), br.grad()}}) {
        ASSERT_TRUE(got.defined()) << what;
        EXPECT_EQ(got.to(DType::F32).to_vector<float>(), want.to(DType::F32).to_vector<float>()) << what;
      }
    }
  }
}

// A GPT trains with learned scales (they move, the loss falls), its checkpoint holds them, and a model that learns
// the same scales loads it; PTQ and quantized inference then quantize on the learned grid (the scales rounded to
// FP16 as the scheme stores them), equal to each other up to float summation.
TEST(QatLsq, GptTrainsItsScalesAndQuantizesOnThem) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = 9;
  const QatScheme scheme = QatScheme::named("int4");
  nn::GPT model(c);
  const auto scales = nn::learn_quantization_scales(model, QatPolicy::linears_but_head(scheme));
  ASSERT_EQ(scales.size(), 8u);  // 4 Linear layers per block, the tied head excluded
  EXPECT_EQ(scales[0], "h.0.attn.c_attn.weight_log_scale");
  std::vector<float> s0;
  for (const NamedParameter& p : model.named_parameters())
    if (p.name == "h.0.attn.c_attn.weight_log_scale") s0 = p.tensor.to_vector<float>();
  ASSERT_FALSE(s0.empty());
  const train::TrainerOptions options{.policy = with_qat(amp::Policy::fp32(), scheme),
                                      .precision_name = "fp32+qat-int4-g32+lsq"};
  train::Trainer trainer(model, train::adamw({.lr = 1e-2}), options);
  std::vector<int64_t> xs(64), ys(64);
  for (int64_t i = 0; i < 64; ++i) xs[i] = (i * 5) % 32, ys[i] = (xs[i] * 7 + 1) % 32;
  const Tensor x = Tensor::from_vector(xs, {4, 16}), y = Tensor::from_vector(ys, {4, 16});
  double first_loss = 0, last_loss = 0;
  for (int s = 0; s < 30; ++s) {
    const train::StepMetrics m = trainer.step([&](int64_t) { return model.loss(x, y); });
    (s == 0 ? first_loss : last_loss) = m.loss.item<float>();
  }
  EXPECT_LT(last_loss, 0.5 * first_loss);
  std::vector<float> s1;
  for (const NamedParameter& p : model.named_parameters())
    if (p.name == "h.0.attn.c_attn.weight_log_scale") s1 = p.tensor.to_vector<float>();
  EXPECT_NE(s1, s0) << "the scales did not train";

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("mpt_lsq_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  trainer.save(dir);
  nn::GPT loaded(c);
  nn::learn_quantization_scales(loaded, QatPolicy::linears_but_head(scheme));
  train::Trainer again(loaded, train::adamw({.lr = 1e-2}), options);
  again.load(dir);
  for (const NamedParameter& p : loaded.named_parameters()) {
    if (p.name == "h.0.attn.c_attn.weight_log_scale") {
      EXPECT_EQ(p.tensor.to_vector<float>(), s1);
    }
  }
  std::filesystem::remove_all(dir);

  // Quantized inference against PTQ in place, both on the learned (FP16-rounded) grid.
  nn::quantize_for_inference(loaded, QatPolicy::linears_but_head(scheme));
  nn::GPT ptq(c);
  nn::learn_quantization_scales(ptq, QatPolicy::linears_but_head(scheme));
  {
    autograd::NoGradGuard no_grad;
    const auto src = loaded.named_parameters();
    const auto dst = ptq.named_parameters();
    for (size_t i = 0; i < src.size(); ++i) Tensor(dst[i].tensor).copy_(src[i].tensor);
  }
  nn::quantize_weights(ptq, QatPolicy::linears_but_head(scheme));
  autograd::NoGradGuard no_grad;
  const Tensor a = loaded.forward(x), b = ptq.forward(x);
  EXPECT_LT(testing::max_abs_error(a, b), 1e-4);
  // The learned grid is not the absmax one: the PTQ'd weight differs from fake_quantize's.
  for (const auto& [name, module] : ptq.named_modules())
    if (name == "h.0.attn.c_attn") {
      const auto* lin = dynamic_cast<const nn::Linear*>(module);
      const Tensor w = lin->weight();
      EXPECT_EQ(ops::dequantize_groups(ops::quantize_groups(w, *scheme.weight, lin->weight_scale())).to_vector<float>(),
                w.to_vector<float>())
          << "PTQ in place leaves the weight on its learned grid";
    }
}

}  // namespace
}  // namespace mpt
