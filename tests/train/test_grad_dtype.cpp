// tests/train/test_grad_dtype.cpp: a leaf's gradient dtype (autograd::set_grad_dtype) through the engine, and BF16
// gradients of the FP32 masters through the Trainer (amp::Policy::grads, train_gpt's --grads bf16).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "mpt/mpt.h"
#include "mpt/train/trainer.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::random_tensor;

// `t` rounded to BF16 (round to nearest even, the library's one conversion).
Tensor rounded(const Tensor& t) { return t.to(DType::BF16); }

// An FP32 leaf read by two ops (a product and a sum of squares): backward sums their FP32 gradients and rounds the sum
// once to the leaf's BF16, bit for bit the FP32 leaf's gradient rounded; a second backward adds in BF16 (the rounded
// sum of the BF16 gradient and the new FP32 one).
TEST(GradDtype, ALeafSumsItsGradientsInFp32AndKeepsThemInItsGradDtype) {
  const Tensor w0 = random_tensor({300}, DType::F32, 3), c = random_tensor({300}, DType::F32, 4);
  auto loss = [&](const Tensor& w) { return ops::add(ops::sum(ops::mul(w, c)), ops::sum(ops::mul(w, w))); };
  const Tensor plain = w0.clone().requires_grad_(true);
  loss(plain).backward();
  const Tensor low = w0.clone().requires_grad_(true);
  autograd::set_grad_dtype(low, DType::BF16);
  EXPECT_EQ(autograd::grad_dtype(low), DType::BF16);
  EXPECT_EQ(autograd::grad_dtype(plain), DType::F32);
  loss(low).backward();
  ASSERT_EQ(low.grad().dtype(), DType::BF16);
  EXPECT_TRUE(testing::same_bits(low.grad(), rounded(plain.grad())));
  const Tensor first = low.grad().clone();
  loss(low).backward();  // the second gradient (FP32) is rounded to BF16 and added in BF16 (AccumulateGrad's add)
  ASSERT_EQ(low.grad().dtype(), DType::BF16);
  const Tensor sum = ops::add(first, rounded(plain.grad()));
  EXPECT_TRUE(testing::same_bits(low.grad(), sum));
  // Back to the leaf's own dtype: the existing gradient is converted (exactly: BF16 widens to FP32).
  autograd::set_grad_dtype(low, std::nullopt);
  EXPECT_EQ(autograd::grad_dtype(low), DType::F32);
  ASSERT_EQ(low.grad().dtype(), DType::F32);
  EXPECT_TRUE(testing::same_bits(low.grad(), sum.to(DType::F32)));
}

TEST(GradDtype, RefusesWhatCannotHoldAGradient) {
  const Tensor no_grad = random_tensor({4}, DType::F32, 1);
  EXPECT_MPT_ERROR(autograd::set_grad_dtype(no_grad, DType::BF16),
                   "[set_grad_dtype] expected a leaf tensor that requires grad, got f32[4] cpu (requires_grad_() it "
                   "first)");
  const Tensor leaf = random_tensor({4}, DType::F32, 2).requires_grad_(true);
  const Tensor out = ops::mul(leaf, leaf);
  EXPECT_MPT_ERROR(autograd::set_grad_dtype(out, DType::BF16), "(the output of an op)");
  EXPECT_MPT_ERROR(autograd::set_grad_dtype(Tensor{}, DType::BF16), "got an undefined tensor");
  EXPECT_MPT_ERROR(autograd::set_grad_dtype(leaf, DType::F8E4M3),
                   "a gradient dtype must be the leaf's own or, for an f32/bf16/f16 leaf, f32, bf16 or f16: got f8e4m3");
  const Tensor f64 = random_tensor({4}, DType::F64, 3).requires_grad_(true);
  EXPECT_MPT_ERROR(autograd::set_grad_dtype(f64, DType::BF16), "got bf16 for f64[4] cpu");
  autograd::set_grad_dtype(f64, DType::F64);  // its own: allowed
  EXPECT_EQ(amp::parse_grad_dtype("bf16"), DType::BF16);
  EXPECT_EQ(amp::parse_grad_dtype("f32"), DType::F32);
  EXPECT_MPT_ERROR((void)amp::parse_grad_dtype("f16"), "unknown gradient dtype 'f16': expected f32 or bf16");
  nn::GPTConfig c;
  c.vocab_size = 16, c.block_size = 8, c.n_layer = 1, c.n_head = 1, c.n_embd = 16;
  nn::GPT model(c);
  amp::Policy policy = amp::Policy::bf16();
  policy.grads_in(DType::F16);
  EXPECT_MPT_ERROR(train::Trainer(model, train::adamw({.lr = 1e-3}), {.policy = policy}),
                   "[Trainer] the policy's gradient dtype must be f32 or bf16, got f16");
}

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 64;
  c.block_size = 16;
  c.n_layer = 3;  // the FP8 policy keeps the first and last blocks in BF16: h.1 runs FP8
  c.n_head = 2;
  c.n_embd = 64;
  c.seed = 11;
  return c;
}

std::pair<Tensor, Tensor> batch(int64_t step, int64_t micro) {
  std::vector<int64_t> x(64), y(64);
  for (int64_t i = 0; i < 64; ++i) {
    x[static_cast<size_t>(i)] = (i * 5 + step * 3 + micro * 11) % 64;
    y[static_cast<size_t>(i)] = (x[static_cast<size_t>(i)] * 7 + 1) % 64;
  }
  return {Tensor::from_vector(x, {4, 16}), Tensor::from_vector(y, {4, 16})};
}

// The Trainer with the policy's `grads` BF16, under BF16 and FP8 delayed scaling (h.1 runs FP8: its weight-gradient
// GEMMs write BF16 from FP8 operands): every trainable parameter's gradient is BF16 (half the bytes of the FP32 run's),
// the step-0 loss is the FP32-gradient run's bit for bit (the forward does not depend on them), the checkpoints'
// precision name says so, and training follows the FP32-gradient run: AdamW's first update is
// lr m / (sqrt(v) + eps) = lr sign(g) wherever |g| >> eps, which BF16 rounding keeps, so the two runs' losses after 3
// steps differ by far less (here under 1%) than the 3 steps moved them (measured: 1.3e-4 and 6e-4 of 0.67 under BF16 and FP8).
TEST(GradDtype, TheTrainerKeepsTheMastersGradientsInBf16AndTrainsAsWithFp32Ones) {
  for (const char* precision : {"bf16", "fp8-delayed"}) {
    SCOPED_TRACE(precision);
    std::vector<double> losses[2];
    int64_t grad_bytes[2] = {0, 0}, numel = 0;
    for (int low = 0; low < 2; ++low) {
      nn::GPT model(tiny());
      amp::Policy policy = amp::Policy::named(precision, tiny().n_layer, Device::cpu());
      if (low) policy.grads_in(DType::BF16);
      train::Trainer trainer(model, train::adamw({.lr = 3e-3}),
                             {.policy = policy, .grad_accum = 2, .clip = 1.0, .weight_decay = 0.1});
      EXPECT_EQ(trainer.precision_name(), std::string(amp::to_string(policy.compute)) + (low ? "+grads-bf16" : ""));
      for (int64_t step = 0; step < 4; ++step) {
        const train::StepMetrics m = trainer.step([&](int64_t micro) {
          const auto [x, y] = batch(step, micro);
          return model.loss(x, y);
        });
        losses[low].push_back(m.loss.item<double>());
      }
      numel = 0;
      for (const auto& p : model.named_parameters()) {
        ASSERT_TRUE(p.tensor.grad().defined()) << p.name;
        EXPECT_EQ(p.tensor.grad().dtype(), low ? DType::BF16 : DType::F32) << p.name;
        EXPECT_EQ(p.tensor.dtype(), DType::F32) << p.name << ": the masters stay FP32";
        grad_bytes[low] += static_cast<int64_t>(p.tensor.grad().nbytes());
        numel += p.tensor.numel();
      }
    }
    EXPECT_EQ(grad_bytes[0], 4 * numel);
    EXPECT_EQ(grad_bytes[1], 2 * numel);
    EXPECT_EQ(losses[0][0], losses[1][0]) << "the first forward reads the same weights";
    const double moved = std::abs(losses[0].back() - losses[0].front());
    std::printf("%s losses: fp32 gradients %.6f -> %.6f, bf16 gradients %.6f -> %.6f\n", precision,
                losses[0].front(), losses[0].back(), losses[1].front(), losses[1].back());
    EXPECT_GT(moved, 0.05) << "the runs train";
    EXPECT_LT(std::abs(losses[1].back() - losses[0].back()), 0.01 * moved);
  }
}

}  // namespace
}  // namespace mpt
