// tests/fp8/test_fp8_mlp.cpp: fp8::fp8_mlp (both MLP layers in FP8, the GELU in the GEMMs) against the unfused
// fp8_linear -> gelu -> fp8_linear it replaces, per recipe: the same bits on the CPU (b1's gradient rounded once to
// the hidden dtype, as the GEMM epilogue gives it), the same amaxes and scales, the same codes of cached weights; and
// its errors.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "device_test.h"
#include "grad_destinations.h"
#include "mpt/fp8/scaling.h"
#include "mpt/amp/master_weights.h"
#include "mpt/core/memory.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/activation.h"
#include "mpt/fp8/linear.h"
#include "mpt/fp8/mlp.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using mpt::testing::random_tensor;
using mpt::testing::same_bits;

struct Case {
  const char* name;
  fp8::Fp8Recipe recipe;
};

std::vector<Case> cases() {
  return {{"delayed hybrid", fp8::DelayedScaling{4, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::Hybrid}},
          {"delayed e4m3", fp8::DelayedScaling{4, fp8::AmaxAlgo::MostRecent, 0, fp8::Fp8Format::E4M3}},
          {"current", fp8::CurrentScaling{}},
          {"block", fp8::BlockScaling{}}};
}

struct MlpRun {
  std::vector<Tensor> out;  // per step: y, dx, dW1, db1, dW2, db2
  std::vector<float> amax, scale;  // every meta's current amax before each update and scale after it
};

// Two training steps of one MLP (f32 masters, x in `xdt`, hidden and y in `hdt`), fused or as its three ops.
MlpRun run(const fp8::Fp8Recipe& recipe, DType xdt, DType hdt, bool fused, bool cached_weights) {
  const int64_t n = 40, c = 144, h = 272;  // c > 128 and h > 256: more than one 1x128 block along K, ragged tiles
  fp8::Fp8ScalingState state(recipe);
  const fp8::Fp8LinearMetas m1 = state.register_linear("fc"), m2 = state.register_linear("proj");
  Tensor w1 = random_tensor({h, c}, DType::F32, 2, 0.2).requires_grad_(), b1 = random_tensor({h}, DType::F32, 3).requires_grad_();
  Tensor w2 = random_tensor({c, h}, DType::F32, 4, 0.1).requires_grad_(), b2 = random_tensor({c}, DType::F32, 5).requires_grad_();
  MlpRun r;
  for (int step = 0; step < 2; ++step) {
    Tensor x = random_tensor({n, c}, xdt, 10 + static_cast<uint64_t>(step), 2.0).requires_grad_();
    const Tensor dy = random_tensor({n, c}, hdt, 20 + static_cast<uint64_t>(step));
    std::shared_ptr<const fp8::Fp8Weight> q1, q2;
    if (cached_weights) {
      q1 = amp::fp8_weight_copy(w1, recipe, m1.weight, true);
      q2 = amp::fp8_weight_copy(w2, recipe, m2.weight, true);
    }
    Tensor y;
    if (fused) {
      y = fp8::fp8_mlp(x, w1, b1, w2, b2,
                       {.recipe = recipe, .metas1 = m1, .metas2 = m2, .out_dtype = hdt, .weight1_fp8 = q1,
                        .weight2_fp8 = q2});
    } else {
      const Tensor a = ops::gelu(fp8::fp8_linear(x, w1, b1, {recipe, m1, hdt, q1}));
      y = fp8::fp8_linear(a, w2, b2, {recipe, m2, hdt, q2});
    }
    y.backward(dy);
    r.out.insert(r.out.end(), {y.detach(), x.grad(), w1.grad(), b1.grad(), w2.grad(), b2.grad()});
    for (const Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
    for (const auto& m : state.metas()) r.amax.push_back(m->current_amax());
    state.update();
    for (const auto& m : state.metas()) r.scale.push_back(m->scale.item<float>());
    if (cached_weights) amp::invalidate_compute_copies();
  }
  return r;
}

class Fp8MlpRecipes : public ::testing::TestWithParam<Case> {};

TEST_P(Fp8MlpRecipes, SameBitsAsTheUnfusedLayersOnTheCpu) {
  const Case& k = GetParam();
  for (DType xdt : {DType::F32, DType::BF16}) {
    for (DType hdt : {DType::BF16, DType::F32}) {
      for (bool cached : {false, true}) {
        const std::string what = std::string(k.name) + " x " + std::string(dtype_name(xdt)) + " hidden " +
                                 std::string(dtype_name(hdt)) + (cached ? " cached weights" : "");
        const MlpRun f = run(k.recipe, xdt, hdt, true, cached), u = run(k.recipe, xdt, hdt, false, cached);
        const char* names[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
        ASSERT_EQ(f.out.size(), 12u);
        for (size_t i = 0; i < f.out.size(); ++i) {
          Tensor want = u.out[i];
          if (i % 6 == 3 && hdt != DType::F32) want = want.to(hdt).to(want.dtype());  // db1: the epilogue's rounding
          EXPECT_TRUE(same_bits(f.out[i], want)) << what << " step " << i / 6 << " " << names[i % 6];
        }
        EXPECT_EQ(f.amax, u.amax) << what;
        EXPECT_EQ(f.scale, u.scale) << what;
        if (std::holds_alternative<fp8::DelayedScaling>(k.recipe)) {
          for (float a : f.amax) EXPECT_GT(a, 0.0f) << what << ": every meta records an amax";
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8MlpRecipes, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = i.param.name;
                           for (char& ch : s) if (ch == ' ') ch = '_';
                           return s;
                         });

// Gradient accumulation: a later micro-batch's FP8 weight gradients are added into the FP32 master gradients by their
// GEMMs (beta = 1 on the FP8 GEMM, TransformerEngine's fuse_wgrad_accumulation; the engine offers the leaf's .grad),
// for fp8_linear's W and fp8_mlp's W1 and W2: the bits of the separate gradients added (each dW rounded once to FP32
// after its dequantization scales, then the sum rounded once), no [out, in] gradient allocated for the second
// micro-batch, every recipe.
TEST_P(Fp8MlpRecipes, ALaterMicroBatchAddsItsWeightGradientsInTheFp8Gemms) {
  const fp8::Fp8Recipe& recipe = GetParam().recipe;
  const int64_t n = 16, c = 144, h = 272;
  const Tensor w0 = random_tensor({c, c}, DType::F32, 1, 0.2), w1_0 = random_tensor({h, c}, DType::F32, 2, 0.2);
  const Tensor w2_0 = random_tensor({c, h}, DType::F32, 4, 0.1);
  const Tensor x1 = random_tensor({n, c}, DType::BF16, 10, 2.0), x2 = random_tensor({n, c}, DType::BF16, 11, 2.0);
  const Tensor dy1 = random_tensor({n, c}, DType::BF16, 20), dy2 = random_tensor({n, c}, DType::BF16, 21);
  // fp8_linear -> fp8_mlp on one scaling state (delayed scaling's scales hold for the whole step), the weights' codes
  // made once (Autocast's cache), so that a micro-batch allocates activations and gradients only.
  struct Model {
    fp8::Fp8ScalingState state;
    fp8::Fp8LinearMetas fc, up, down;
    Tensor w, w1, w2;
    std::shared_ptr<const fp8::Fp8Weight> q, q1, q2;
  };
  auto model = [&] {
    auto m = std::make_unique<Model>(Model{fp8::Fp8ScalingState(recipe), {}, {}, {}, w0.clone().requires_grad_(),
                                           w1_0.clone().requires_grad_(), w2_0.clone().requires_grad_()});
    m->fc = m->state.register_linear("fc"), m->up = m->state.register_linear("up");
    m->down = m->state.register_linear("down");
    m->q = amp::fp8_weight_copy(m->w, recipe, m->fc.weight, true);
    m->q1 = amp::fp8_weight_copy(m->w1, recipe, m->up.weight, true);
    m->q2 = amp::fp8_weight_copy(m->w2, recipe, m->down.weight, true);
    return m;
  };
  auto micro_batch = [&](const Model& m, const Tensor& x, const Tensor& dy) {
    const Tensor a = fp8::fp8_linear(x, m.w, Tensor(), {recipe, m.fc, DType::BF16, m.q});
    fp8::fp8_mlp(a, m.w1, Tensor(), m.w2, Tensor(),
                 {.recipe = recipe, .metas1 = m.up, .metas2 = m.down, .out_dtype = DType::BF16, .weight1_fp8 = m.q1,
                  .weight2_fp8 = m.q2})
        .backward(dy);
  };
  const auto acc = model();
  micro_batch(*acc, x1, dy1);
  const Tensor first = acc->w1.grad();
  const int64_t before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory_stats(Device::cpu());
  micro_batch(*acc, x2, dy2);
  EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before, h * c * 4) << "a second [out, in] dW was allocated";
  EXPECT_TRUE(acc->w1.grad().shares_storage(first)) << "in place";
  // The reference: each micro-batch on its own leaves (same scales), the gradients added.
  const auto a = model(), b = model();
  micro_batch(*a, x1, dy1);
  micro_batch(*b, x2, dy2);
  EXPECT_TRUE(same_bits(acc->w.grad(), ops::add(a->w.grad(), b->w.grad()))) << "fp8_linear W";
  EXPECT_TRUE(same_bits(acc->w1.grad(), ops::add(a->w1.grad(), b->w1.grad()))) << "fp8_mlp W1";
  EXPECT_TRUE(same_bits(acc->w2.grad(), ops::add(a->w2.grad(), b->w2.grad()))) << "fp8_mlp W2";
  amp::invalidate_compute_copies();
}

// Only some inputs train: the op computes exactly the gradients asked for and the same bits for them.
TEST(Fp8Mlp, FrozenFirstLayerAndNoInputGradient) {
  const fp8::Fp8Recipe recipe = fp8::CurrentScaling{};
  const Tensor x = random_tensor({16, 32}, DType::BF16, 1);
  const Tensor w1 = random_tensor({64, 32}, DType::F32, 2, 0.2), b1 = random_tensor({64}, DType::F32, 3);
  Tensor w2 = random_tensor({32, 64}, DType::F32, 4, 0.1).requires_grad_();
  const Tensor dy = random_tensor({16, 32}, DType::BF16, 5);
  const Tensor y = fp8::fp8_mlp(x, w1, b1, w2, Tensor(), {.recipe = recipe, .out_dtype = DType::BF16});
  y.backward(dy);
  const Tensor dw2 = w2.grad();
  w2.set_grad(Tensor());
  const Tensor a = ops::gelu(fp8::fp8_linear(x, w1, b1, {recipe, {}, DType::BF16}));
  fp8::fp8_linear(a, w2, Tensor(), {recipe, {}, DType::BF16}).backward(dy);
  EXPECT_TRUE(same_bits(dw2, w2.grad()));
  EXPECT_FALSE(w1.grad().defined());
}

// The FP8 layers' gradients made in their destinations (autograd::set_grad_destination: DataParallel's buckets,
// slices of one NaN-filled buffer here): fp8_linear's and fp8_mlp's weight-gradient GEMMs write the fresh ones with
// beta = 0 and add the second micro-batch's with beta = 1, their bias gradients land there too (but b1's, made in the
// hidden dtype: a destination is asked for only in the leaf's gradient dtype); the bits of the same
// passes without destinations, per recipe (delayed: a new scaling state per run, so both runs see the same scales).
TEST(Fp8Mlp, GradientsAreWrittenIntoTheirDestinations) {
  const std::vector<Tensor> init = {random_tensor({64, 32}, DType::F32, 11, 0.2), random_tensor({64}, DType::F32, 12),
                                    random_tensor({32, 64}, DType::F32, 13, 0.1), random_tensor({32}, DType::F32, 14),
                                    random_tensor({24, 32}, DType::F32, 15, 0.2), random_tensor({24}, DType::F32, 16)};
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    mpt::testing::expect_gradients_made_in_destinations(init, [&](const std::vector<Tensor>& p) {
      fp8::Fp8ScalingState state(c.recipe);
      const fp8::Fp8LinearMetas m1 = state.register_linear("fc"), m2 = state.register_linear("proj"),
                                m3 = state.register_linear("head");
      for (uint64_t micro = 0; micro < 2; ++micro) {
        const Tensor x = random_tensor({16, 32}, DType::BF16, 20 + micro);
        const Tensor h = fp8::fp8_mlp(x, p[0], p[1], p[2], p[3],
                                      {.recipe = c.recipe, .metas1 = m1, .metas2 = m2, .out_dtype = DType::BF16});
        const Tensor y = fp8::fp8_linear(h, p[4], p[5], {c.recipe, m3, DType::BF16});
        y.backward(random_tensor({16, 24}, DType::BF16, 30 + micro));
      }
    }, std::nullopt, {1});  // b1's gradient comes out of the DGELU epilogue in BF16, made apart for its f32 leaf
  }
  amp::invalidate_compute_copies();
}

TEST(Fp8Mlp, Errors) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas m1 = state.register_linear("fc"), m2 = state.register_linear("proj");
  const fp8::Fp8MlpConfig cfg{.recipe = fp8::DelayedScaling{}, .metas1 = m1, .metas2 = m2};
  const Tensor x = Tensor::ones({4, 16}), w1 = Tensor::ones({32, 16}), w2 = Tensor::ones({16, 32});
  EXPECT_MPT_ERROR(fp8::fp8_mlp(x, w1, {}, Tensor::ones({16, 31}), {}, cfg),
                   "[fp8_mlp] the input has K = 32 but w2 f32[16, 31]");
  EXPECT_MPT_ERROR(fp8::fp8_mlp(x.reshape({2, 2, 16}), w1, {}, w2, {}, cfg), "[fp8_mlp] expected a non-empty x [N, C]");
  EXPECT_MPT_ERROR(fp8::fp8_mlp(x, w1, Tensor::ones({31}), w2, {}, cfg), "[fp8_mlp] b1 must be f32, bf16 or f16 of shape [32]");
  EXPECT_MPT_ERROR(fp8::fp8_mlp(x, w1, {}, w2, {}, {.recipe = fp8::DelayedScaling{}, .metas1 = m1}),
                   "[fp8_mlp] delayed scaling needs metas2.input");
  EXPECT_MPT_ERROR(fp8::fp8_mlp(x, w1, {}, w2, {}, {.recipe = fp8::DelayedScaling{}, .metas1 = m2, .metas2 = m2,
                                                    .out_dtype = DType::F8E4M3}),
                   "[fp8_mlp] out_dtype must be f32, bf16 or f16");
  const auto no_t = std::make_shared<const fp8::Fp8Weight>(
      fp8::quantize_fp8_weight(w1, fp8::DelayedScaling{}, m1.weight, false));
  EXPECT_MPT_ERROR(fp8::fp8_mlp(Tensor::ones({4, 16}).requires_grad_(), w1, {}, w2, {},
                                {.recipe = fp8::DelayedScaling{}, .metas1 = m1, .metas2 = m2, .weight1_fp8 = no_t}),
                   "[fp8_mlp] the backward needs weight1^T's codes");
}

}  // namespace
}  // namespace mpt
