// tests/amp/test_policy.cpp: precision policy lookup, Autocast, compute copies of FP32 masters and FP32 gradient hand-off.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "mpt/fp8/scaling.h"
#include "mpt/amp/master_weights.h"
#include "mpt/amp/policy.h"
#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/sgd.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using amp::Precision;

using mpt::testing::same_bits;

TEST(Policy, LongestWholeComponentPrefixWins) {
  amp::Policy p = amp::Policy::bf16();
  p.override_module("h.1", Precision::FP32).override_module("h.1.mlp", Precision::FP16);
  EXPECT_EQ(p.at("h.0.attn.c_attn"), Precision::BF16);
  EXPECT_EQ(p.at("h.1.attn.c_attn"), Precision::FP32);
  EXPECT_EQ(p.at("h.1"), Precision::FP32);
  EXPECT_EQ(p.at("h.10.mlp.c_fc"), Precision::BF16);  // "h.1" is not a component prefix of "h.10"
  EXPECT_EQ(p.at("h.1.mlp.c_fc"), Precision::FP16);
  const amp::Policy f = amp::Policy::fp8(12, std::make_shared<fp8::Fp8ScalingState>());
  EXPECT_EQ(f.at("h.0.mlp.c_fc"), Precision::BF16);
  EXPECT_EQ(f.at("h.5.mlp.c_fc"), Precision::FP8);
  EXPECT_EQ(f.at("h.11.attn.c_proj"), Precision::BF16);
  EXPECT_EQ(f.at("lm_head"), Precision::BF16);
  EXPECT_EQ(amp::parse_precision("fp16"), Precision::FP16);
  EXPECT_MPT_ERROR(amp::parse_precision("fp4"), "unknown precision 'fp4'");
  EXPECT_EQ(amp::output_dtype(Precision::FP8), DType::BF16);
}

TEST(Autocast, NestsAndIsPerThread) {
  EXPECT_EQ(amp::current_policy(), nullptr);
  {
    amp::Autocast outer(amp::Policy::bf16());
    EXPECT_EQ(amp::current_precision("x"), Precision::BF16);
    {
      amp::Autocast inner(amp::Policy::fp16());
      EXPECT_EQ(amp::current_precision("x"), Precision::FP16);
      const amp::Policy* other = amp::current_policy();
      std::thread([&] { other = amp::current_policy(); }).join();
      EXPECT_EQ(other, nullptr);
    }
    EXPECT_EQ(amp::current_precision("x"), Precision::BF16);
  }
  EXPECT_EQ(amp::current_precision("x"), Precision::FP32);
}

TEST(Autocast, LinearRunsItsGemmInBf16WithFp32MasterGradients) {
  Generator gen(1);
  nn::Linear lin(24, 16, true, {}, gen);
  const Tensor x = testing::random_tensor({5, 24}, DType::F32, 2);
  const Tensor w_dy = testing::random_tensor({5, 16}, DType::F32, 3);
  Tensor y;
  {
    amp::Autocast ac(amp::Policy::bf16());
    y = lin(x);
  }
  ASSERT_EQ(y.dtype(), DType::BF16);
  // The same computation spelled out: bf16 copies of x and W, the GEMM accumulated in FP32, the FP32 bias added in
  // FP32, one rounding to bf16 (the fused epilogue).
  const Tensor xb = x.to(DType::BF16), wb = lin.weight().detach().to(DType::BF16);
  const Tensor acc = ops::matmul(xb, wb, {.trans_b = true, .out_dtype = DType::F32});
  EXPECT_TRUE(same_bits(y, ops::add(acc, lin.bias().detach()).to(DType::BF16)));
  ops::sum(ops::mul(y, w_dy.to(DType::BF16))).backward();
  // dy = w_dy in bf16. dW = dy^T x from the bf16 GEMM straight into FP32 (never rounded to bf16); db = column sums
  // of dy in FP32.
  const Tensor dy = w_dy.to(DType::BF16);
  ASSERT_EQ(lin.weight().grad().dtype(), DType::F32);  // the master's gradient, in FP32
  EXPECT_TRUE(same_bits(lin.weight().grad(), ops::matmul(dy, xb, {.trans_a = true, .out_dtype = DType::F32})));
  EXPECT_TRUE(same_bits(lin.bias().grad(), ops::sum(dy.to(DType::F32), 0)));
}

TEST(MasterWeights, MicroBatchGradientsAccumulateInFp32) {
  amp::invalidate_compute_copies();
  const Tensor master = testing::random_tensor({64}, DType::F32, 4).requires_grad_();
  const Tensor a = Tensor::full({64}, 1.0 + 1.0 / 128), b = Tensor::full({64}, 1.0 / 1024);
  for (const Tensor& scale : {a, b}) ops::sum(ops::mul(amp::compute_copy(master, DType::BF16), scale.to(DType::BF16))).backward();
  // d/dcopy = scale (exact in bf16); the FP32 sum 1 + 2^-7 + 2^-10 is not representable in bf16 (8 bits).
  const std::vector<float> g = master.grad().to_vector<float>();
  for (float v : g) EXPECT_EQ(v, 1.0f + 1.0f / 128 + 1.0f / 1024);
  EXPECT_EQ(amp::cast_cache_stats().live, 1);
}

TEST(MasterWeights, HooksFireOnTheMasterAndFrozenMastersGetNoCopyGradient) {
  amp::invalidate_compute_copies();
  const Tensor master = testing::random_tensor({8}, DType::F32, 5).requires_grad_();
  int calls = 0;
  master.register_post_accumulate_grad_hook([&](const Tensor& t) {
    ++calls;
    EXPECT_EQ(t.grad().dtype(), DType::F32);
  });
  ops::sum(amp::compute_copy(master, DType::F16)).backward();
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(master.grad().to_vector<float>(), std::vector<float>(8, 1.0f));
  const Tensor frozen = testing::random_tensor({8}, DType::F32, 6);
  EXPECT_FALSE(amp::compute_copy(frozen, DType::BF16).requires_grad());
  EXPECT_EQ(amp::compute_copy(frozen, DType::F32).data_ptr(), frozen.data_ptr());  // same dtype: no copy
}

// k micro-batches reuse one cast per parameter; the optimizer step invalidates, the next forward recasts.
// A 2-block GPT small enough for cast-cache counting.
nn::GPTConfig tiny_config() {
  nn::GPTConfig c;
  c.vocab_size = 17;
  c.block_size = 8;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 16;
  return c;
}

TEST(MasterWeights, CastsOncePerOptimizerStepAcrossMicroBatches) {
  const nn::GPTConfig c = tiny_config();
  nn::GPT model(c);
  optim::SGD opt(model.parameters(), {.lr = 0.1});
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  // Per block: c_attn, attn.c_proj, c_fc, mlp.c_proj weights (4; the FP32 biases go into the GEMM's epilogue
  // uncast); plus the tied LM head (wte).
  const int64_t per_forward = 4 * c.n_layer + 1;
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  amp::Autocast ac(amp::Policy::bf16());
  for (int step = 0; step < 2; ++step) {
    for (int micro = 0; micro < 3; ++micro) model.loss(ids, ids).backward();
    EXPECT_EQ(amp::cast_cache_stats().casts, per_forward * (step + 1));
    EXPECT_EQ(amp::cast_cache_stats().hits, 2 * per_forward * (step + 1));
    const std::vector<float> before = model.block(0).mlp().c_fc().weight().to_vector<float>();
    opt.step();
    opt.zero_grad();
    EXPECT_NE(model.block(0).mlp().c_fc().weight().to_vector<float>(), before);
    EXPECT_EQ(amp::cast_cache_stats().live, 0);  // every updated master's copy was dropped
  }
}

// AdamW rewrites each updated master's BF16 copy in its step (ops::AdamWSlot::compute_copy) instead of dropping it: the
// forwards after the first step cast nothing, and every kept copy has the bits of its new master's cast. (SGD still
// drops them: CastsOncePerOptimizerStepAcrossMicroBatches.)
TEST(MasterWeights, AdamWKeepsTheCopiesItRewritesAsTheNewMastersCast) {
  const nn::GPTConfig c = tiny_config();
  nn::GPT model(c);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  const Tensor ids = Tensor::from_vector<int64_t>({1, 2, 3, 4, 5, 6, 7, 8}, {1, 8});
  const int64_t per_forward = 4 * c.n_layer + 1;  // as CastsOncePerOptimizerStepAcrossMicroBatches
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  for (int step = 0; step < 3; ++step) {
    {
      amp::Autocast ac(amp::Policy::bf16());
      for (int micro = 0; micro < 2; ++micro) model.loss(ids, ids).backward();
    }
    EXPECT_EQ(amp::cast_cache_stats().casts, per_forward) << "step " << step;  // the first forward's only
    EXPECT_EQ(amp::cast_cache_stats().hits, per_forward * (2 * step + 1)) << "step " << step;
    const std::vector<float> before = model.block(0).mlp().c_fc().weight().to_vector<float>();
    opt.step();
    opt.zero_grad();
    EXPECT_NE(model.block(0).mlp().c_fc().weight().to_vector<float>(), before);
    EXPECT_EQ(amp::cast_cache_stats().live, per_forward) << "step " << step;  // kept, rewritten
    for (const Tensor& w : {model.block(0).mlp().c_fc().weight(), model.block(1).attn().c_attn().weight(),
                            model.wte().weight()}) {
      const Tensor copy = amp::refreshable_compute_copy(w);
      ASSERT_TRUE(copy.defined());
      EXPECT_TRUE(testing::same_bits(copy.to(DType::F32).to_vector<float>(),
                                     w.detach().to(DType::BF16).to(DType::F32).to_vector<float>()))
          << "step " << step;
    }
  }
}

// The padded compute copy (GPT's LM head at a padded vocabulary): the BF16 cast in the first rows, zeros after,
// cached until the master changes, and a linear that reads it has the bits of one that pads per call.
TEST(MasterWeights, PaddedCopyIsTheCastWithZeroRowsCachedOncePerStep) {
  const Tensor master = testing::random_tensor({5, 3}, DType::F32, 7).requires_grad_();
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  Tensor padded;
  {
    autograd::NoGradGuard no_grad;
    padded = amp::compute_copy(master, DType::BF16, 8);
    EXPECT_EQ(amp::compute_copy(master, DType::BF16, 8).data_ptr(), padded.data_ptr());
    EXPECT_MPT_ERROR(amp::compute_copy(master, DType::BF16, 5), "padded_rows 5 must exceed the rows of a 2-d master");
  }
  EXPECT_EQ(amp::cast_cache_stats().casts, 1);
  EXPECT_EQ(amp::cast_cache_stats().hits, 1);
  ASSERT_EQ(padded.shape(), (Shape{8, 3}));
  const auto f32 = [](const Tensor& t) { return t.to(DType::F32).to_vector<float>(); };  // bf16 -> f32 is exact
  EXPECT_TRUE(testing::same_bits(f32(padded.slice(0, 0, 5)), f32(master.detach().to(DType::BF16))));
  EXPECT_EQ(padded.slice(0, 5, 8).to(DType::F32).to_vector<float>(), std::vector<float>(9, 0.0f));
  EXPECT_MPT_ERROR(amp::compute_copy(master, DType::BF16, 8), "a padded copy is made with grad mode off");
  amp::invalidate_compute_copies(master);
  {
    autograd::NoGradGuard no_grad;
    EXPECT_NE(amp::compute_copy(master, DType::BF16, 8).data_ptr(), padded.data_ptr());  // made again
  }
  // ops::linear reading the cached padded copy against padding the unpadded copy per call: the same bits.
  const Tensor x = testing::random_tensor({4, 3}, DType::F32, 8).to(DType::BF16);
  std::vector<Tensor> y, dw;
  for (const bool cached : {true, false}) {
    master.set_grad(Tensor{});
    Tensor copy;
    {
      autograd::NoGradGuard no_grad;
      copy = cached ? amp::compute_copy(master, DType::BF16, 8) : amp::compute_copy(master, DType::BF16);
    }
    const Tensor out = ops::linear(x, master, Tensor{}, {.compute_weight = copy, .out_padded = 8});
    ops::sum(out.to(DType::F32)).backward();
    y.push_back(out);
    dw.push_back(master.grad());
  }
  EXPECT_TRUE(testing::same_bits(f32(y[0]), f32(y[1])));
  EXPECT_TRUE(testing::same_bits(f32(dw[0]), f32(dw[1])));
  EXPECT_EQ(dw[0].shape(), (Shape{5, 3}));
}

TEST(Autocast, PerModuleOverrideKeepsABlockInFp32) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 4;
  c.n_layer = 2;
  c.n_head = 1;
  c.n_embd = 8;
  nn::GPT model(c);
  const Tensor x = testing::random_tensor({1, 4, 8}, DType::F32, 7);
  amp::Policy p = amp::Policy::bf16();
  p.override_module("h.1", Precision::FP32);
  amp::Autocast ac(p);
  EXPECT_EQ(model.block(0).mlp().c_fc()(x).dtype(), DType::BF16);
  EXPECT_EQ(model.block(1).mlp().c_fc()(x).dtype(), DType::F32);
  EXPECT_EQ(model.block(1).mlp().c_fc().path(), "h.1.mlp.c_fc");
  EXPECT_EQ(model.forward(Tensor::from_vector<int64_t>({1, 2, 3, 4}, {1, 4})).dtype(), DType::BF16);  // LM head
}

// A GPT under each FP8 recipe: the middle blocks' Linear layers run fp8::fp8_linear with metas registered under
// their paths, the first and last blocks and the LM head stay BF16, the loss stays close to FP32's (3 bits of
// mantissa in E4M3: the derived bound below), master gradients are FP32, and delayed scaling's update moves scales.
TEST(Autocast, GptUnderEachFp8Recipe) {
  nn::GPTConfig c;
  c.vocab_size = 23;
  c.block_size = 16;
  c.n_layer = 3;
  c.n_head = 2;
  c.n_embd = 64;
  nn::GPT model(c);
  Generator gen(8);
  const Tensor ids = Tensor::uniform({2, 17}, 0, 23, DType::F32, Device::cpu(), gen).to(DType::I64);
  const Tensor x = ids.slice(1, 0, 16).contiguous(), y = ids.slice(1, 1, 17).contiguous();
  const double fp32_loss = model.loss(x, y).item<double>();
  for (const fp8::Fp8Recipe& recipe :
       {fp8::Fp8Recipe{fp8::DelayedScaling{.amax_history_len = 4}}, fp8::Fp8Recipe{fp8::CurrentScaling{}},
        fp8::Fp8Recipe{fp8::BlockScaling{}}}) {
    auto state = std::make_shared<fp8::Fp8ScalingState>(recipe);
    model.zero_grad();
    Tensor loss;
    {
      amp::Autocast ac(amp::Policy::fp8(c.n_layer, state));
      loss = model.loss(x, y);
    }
    // GPT-2 init keeps every logit near 0 and the loss near ln 23 for any precision: the FP8 error of the logits
    // (|z| < 0.1, E4M3 relative step 2^-3 through two GEMMs) moves the loss by far less than 0.05.
    EXPECT_NEAR(loss.item<double>(), fp32_loss, 0.05) << recipe.index();
    loss.backward();
    EXPECT_EQ(model.block(1).mlp().c_fc().weight().grad().dtype(), DType::F32);
    EXPECT_NO_THROW(state->meta("h.1.mlp.c_fc.weight"));
    EXPECT_NO_THROW(state->meta("h.1.attn.c_attn.grad_output"));
    EXPECT_MPT_ERROR(state->meta("h.0.mlp.c_fc.weight"), "h.0.mlp.c_fc.weight");  // BF16: never registered
    EXPECT_MPT_ERROR(state->meta("h.2.mlp.c_fc.input"), "h.2.mlp.c_fc.input");
    if (recipe.index() == 0) {
      const auto meta = state->meta("h.1.mlp.c_fc.input");
      EXPECT_EQ(meta->scale.item<float>(), 1.0f);  // step 1 runs with scale 1
      state->update();
      EXPECT_EQ(meta->scale.item<float>(), 448.0f / meta->amax_history.to_vector<float>().back());
    }
  }
}

// The packed copy of several masters (Llama's gate and up, or q, k, v as one GEMM's weight): each master's rows have
// the bits of its cast and are its cached compute copy, reused until a master changes; AdamW rewriting those copies in
// place keeps the packing current (no cast after the first), and dropping one master's copies remakes it.
TEST(MasterWeights, PackedCopyRowsAreEachMastersCastAndStayCurrentThroughAdamW) {
  std::vector<Tensor> masters = {testing::random_tensor({4, 8}, DType::F32, 1),
                                 testing::random_tensor({2, 8}, DType::F32, 2),
                                 testing::random_tensor({3, 8}, DType::F32, 3)};
  for (Tensor& m : masters) m.requires_grad_();
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  const auto f32 = [](const Tensor& t) { return t.to(DType::F32).to_vector<float>(); };  // bf16 -> f32 is exact
  const auto check_rows = [&](const Tensor& packed, const std::string& when) {
    ASSERT_EQ(packed.shape(), (Shape{9, 8})) << when;
    int64_t at = 0;
    for (const Tensor& m : masters) {
      EXPECT_TRUE(same_bits(f32(packed.slice(0, at, at + m.size(0))), f32(m.detach().to(DType::BF16)))) << when;
      const Tensor copy = amp::compute_copy(m, DType::BF16);
      EXPECT_TRUE(copy.shares_storage(packed)) << when;
      EXPECT_EQ(copy.data_ptr(), packed.slice(0, at, at + m.size(0)).data_ptr()) << when;
      at += m.size(0);
    }
  };
  autograd::NoGradGuard no_grad;
  const Tensor packed = amp::packed_compute_copy(masters, DType::BF16);
  check_rows(packed, "made");
  EXPECT_EQ(amp::packed_compute_copy(masters, DType::BF16).data_ptr(), packed.data_ptr());
  EXPECT_EQ(amp::cast_cache_stats().casts, 3);
  optim::AdamW opt(masters, {.lr = 1e-2});
  for (int step = 0; step < 2; ++step) {
    for (size_t i = 0; i < masters.size(); ++i)
      masters[i].set_grad(testing::random_tensor(masters[i].shape(), DType::F32, 10 + 3 * step + i));
    opt.step();
    EXPECT_EQ(amp::packed_compute_copy(masters, DType::BF16).data_ptr(), packed.data_ptr()) << "step " << step;
    check_rows(packed, "after step " + std::to_string(step));
  }
  EXPECT_EQ(amp::cast_cache_stats().casts, 3);  // AdamW rewrote the rows: nothing cast again
  amp::invalidate_compute_copies(masters[1]);
  const Tensor again = amp::packed_compute_copy(masters, DType::BF16);
  EXPECT_NE(again.data_ptr(), packed.data_ptr());
  check_rows(again, "remade");
  EXPECT_EQ(amp::cast_cache_stats().casts, 6);
  {
    autograd::EnableGradGuard grad_on;
    EXPECT_MPT_ERROR(amp::packed_compute_copy(masters, DType::BF16), "made with grad mode off");
  }
  EXPECT_MPT_ERROR(amp::packed_compute_copy({masters[0], testing::random_tensor({2, 7}, DType::F32, 9)}, DType::BF16),
                   "every weight must be [M_i, 8]");
  amp::invalidate_compute_copies();
}

}  // namespace
}  // namespace mpt
