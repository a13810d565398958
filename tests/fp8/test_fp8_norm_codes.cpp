// tests/fp8/test_fp8_norm_codes.cpp: a norm's FP8 output (ops::NormOutput::fp8 under delayed scaling, fp8_current
// under current scaling) feeding fp8_linear and fp8_mlp gives the bits of the layers quantizing the f32 norm
// themselves: outputs, every gradient, the amax histories and the next steps' scales (delayed), the scale found from
// the f32 norm's amax (current); and what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <utility>
#include <variant>
#include <vector>

#include "device_test.h"
#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/fp8/linear.h"
#include "mpt/fp8/mlp.h"
#include "mpt/fp8/scaling.h"
#include "mpt/ops/layernorm.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using mpt::testing::random_tensor;
using mpt::testing::same_bits;

struct StepRun {
  std::vector<Tensor> out;
  std::vector<float> amax, scale;
  std::vector<float> norm_scale;  // current scaling: the input scale each step, as the norm wrote it or as computed
};

// The codes format a norm is given for the layer with input meta `in` under `recipe` (nn::autocast_input_format's).
ops::NormOutput codes_format(const fp8::Fp8Recipe& recipe, fp8::Fp8TensorMeta& in) {
  if (const auto* c = std::get_if<fp8::CurrentScaling>(&recipe)) {
    in.scale = Tensor::empty({}, DType::F32);
    in.scale_inv = Tensor::empty({}, DType::F32);
    return ops::NormOutput::fp8_current(in.scale, in.scale_inv, c->power_2_scale, c->amax_epsilon);
  }
  return ops::NormOutput::fp8(in.scale, in.amax_history.slice(0, 0, 1));
}

// Three steps of norm -> FP8 layer (fp8_linear, or fp8_mlp), the norm storing f32 or the layer's input codes;
// the scaling state updated after each, so later steps quantize with scales other than 1 (delayed scaling). x and
// the residual hold a NaN in one row when `special`.
StepRun run(const fp8::Fp8Recipe& recipe, bool codes, bool mlp, bool residual, bool special = false) {
  fp8::Fp8ScalingState state(recipe);
  const fp8::Fp8LinearMetas m1 = state.register_linear("fc"), m2 = state.register_linear("proj");
  const Tensor x = random_tensor({24, 32}, DType::BF16, 1, 2.0).requires_grad_();
  const Tensor r = random_tensor({24, 32}, DType::F32, 2, 2.0).requires_grad_();
  const Tensor lnw = random_tensor({32}, DType::F32, 3).requires_grad_();
  const Tensor lnb = random_tensor({32}, DType::F32, 4).requires_grad_();
  const Tensor w1 = random_tensor({64, 32}, DType::F32, 5, 0.2).requires_grad_();
  const Tensor b1 = random_tensor({64}, DType::F32, 6).requires_grad_();
  const Tensor w2 = random_tensor({32, 64}, DType::F32, 7, 0.1).requires_grad_();
  const Tensor b2 = random_tensor({32}, DType::F32, 8).requires_grad_();
  const std::vector<const Tensor*> leaves{&x, &r, &lnw, &lnb, &w1, &b1, &w2, &b2};
  if (special) {  // row 5 of the norm's input holds a NaN: that row of the norm is NaN, the amax skips it
    autograd::NoGradGuard no_grad;
    Tensor(residual ? x : r).select(0, 5).slice(0, 3, 4).fill_(std::numeric_limits<double>::quiet_NaN());
  }
  StepRun out;
  for (int step = 0; step < 3; ++step) {
    const ops::NormOutput fmt = codes ? codes_format(recipe, *m1.input) : ops::NormOutput();
    Tensor h, sum;
    if (residual) {
      const ops::ResidualLayerNormResult n = ops::residual_layer_norm(x, r, lnw, lnb, 1e-5, fmt);
      h = n.y, sum = n.sum;
    } else {
      h = ops::layer_norm(r, lnw, lnb, 1e-5, fmt).y;
    }
    EXPECT_EQ(h.dtype(), codes ? DType::F8E4M3 : DType::F32);
    if (const auto* c = std::get_if<fp8::CurrentScaling>(&recipe)) {
      if (codes) {
        out.norm_scale.push_back(m1.input->scale.item<float>());
        EXPECT_EQ(m1.input->scale_inv.item<float>(), 1.0f / out.norm_scale.back());
      } else {  // the scale current scaling takes for the f32 norm, from its amax (NaN skipped)
        out.norm_scale.push_back(fp8::compute_scale_from_amax(fp8::amax_ignore_nan(h.detach()), 448.0f,
                                                              c->power_2_scale, c->amax_epsilon));
      }
    }
    const Tensor y = mlp ? fp8::fp8_mlp(h, w1, b1, w2, b2,
                                        {.recipe = recipe, .metas1 = m1, .metas2 = m2, .out_dtype = DType::BF16})
                         : fp8::fp8_linear(h, w1, b1, {recipe, m1, DType::BF16});
    const Tensor dy = random_tensor(y.shape(), DType::BF16, 10 + static_cast<uint64_t>(step));
    if (residual) autograd::backward({y, sum}, {dy, random_tensor(sum.shape(), DType::F32, 20)});
    else y.backward(dy);
    out.out.push_back(y.detach());
    for (const Tensor* p : leaves) {
      if (p->grad().defined()) out.out.push_back(p->grad());
      p->set_grad(Tensor());
    }
    for (const auto& m : state.metas()) out.amax.push_back(m->current_amax());
    state.update();
    for (const auto& m : state.metas()) out.scale.push_back(m->scale.item<float>());
  }
  return out;
}

TEST(Fp8NormCodes, LayersTakeANormsCodesWithTheBitsOfQuantizingItsF32Output) {
  for (const bool mlp : {false, true}) {
    for (const bool residual : {false, true}) {
      SCOPED_TRACE(::testing::Message() << (mlp ? "fp8_mlp" : "fp8_linear") << (residual ? " residual norm" : ""));
      const StepRun f = run(fp8::DelayedScaling{}, true, mlp, residual),
                    u = run(fp8::DelayedScaling{}, false, mlp, residual);
      ASSERT_EQ(f.out.size(), u.out.size());
      for (size_t i = 0; i < f.out.size(); ++i) EXPECT_TRUE(same_bits(f.out[i], u.out[i])) << "tensor " << i;
      EXPECT_EQ(f.amax, u.amax);
      EXPECT_EQ(f.scale, u.scale);
      for (float s : u.scale) EXPECT_GT(s, 0.0f);
      EXPECT_NE(u.scale[0], 1.0f) << "the later steps quantize the input with a scale other than 1";
    }
  }
}

// Current scaling: the norm's two passes (its amax, then the codes with the scale from it) give the codes, outputs
// and gradients of the layers' own current-scaling quantization of the f32 norm, and the scale that quantization
// takes (power-of-two scales and an amax epsilon that binds too; a NaN row in the norm).
TEST(Fp8NormCodes, CurrentScalingNormsFindTheScaleOfTheLayersQuantization) {
  const fp8::CurrentScaling plain{}, pow2{.power_2_scale = true}, eps{.amax_epsilon = 1e4f};
  for (const auto& [recipe, name] : {std::pair{plain, "plain"}, std::pair{pow2, "power of 2"}, std::pair{eps, "eps"}}) {
    for (const bool mlp : {false, true}) {
      for (const bool residual : {false, true}) {
        for (const bool special : {false, true}) {
          SCOPED_TRACE(::testing::Message() << name << (mlp ? " fp8_mlp" : " fp8_linear")
                                            << (residual ? " residual norm" : "") << (special ? " NaN row" : ""));
          const StepRun f = run(recipe, true, mlp, residual, special), u = run(recipe, false, mlp, residual, special);
          ASSERT_EQ(f.out.size(), u.out.size());
          for (size_t i = 0; i < f.out.size(); ++i) EXPECT_TRUE(same_bits(f.out[i], u.out[i])) << "tensor " << i;
          ASSERT_EQ(f.norm_scale.size(), 3u);
          EXPECT_EQ(f.norm_scale, u.norm_scale);
          for (float s : f.norm_scale) {
            EXPECT_TRUE(std::isfinite(s) && s > 0.0f && s != 1.0f) << s;
            if (recipe.power_2_scale) {
              EXPECT_EQ(s, std::exp2(std::round(std::log2(s)))) << s;
            }
            if (recipe.amax_epsilon > 0) {
              EXPECT_EQ(s, 448.0f / 1e4f) << "the epsilon binds";
            }
          }
        }
      }
    }
  }
}

TEST(Fp8NormCodes, Refusals) {
  const Tensor codes = Tensor::zeros({4, 16}).to(DType::F8E4M3), w = Tensor::ones({8, 16});
  EXPECT_MPT_ERROR(fp8::fp8_linear(codes, w, Tensor(), {fp8::BlockScaling{}, {}, std::nullopt}),
                   "[fp8_linear] x f8e4m3[4, 16] cpu is FP8 codes, which only per-tensor scaling takes");
  EXPECT_MPT_ERROR(fp8::fp8_linear(codes, w, Tensor(), {fp8::CurrentScaling{}, {}, std::nullopt}),
                   "[fp8_linear] x f8e4m3[4, 16] cpu is FP8 codes, which need the input meta whose scale made them");
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas m = state.register_linear("fc");
  state.set_collect_telemetry(true);
  EXPECT_MPT_ERROR(fp8::fp8_linear(codes, w, Tensor(), {fp8::DelayedScaling{}, m, std::nullopt}),
                   "but the input meta collects telemetry");
  EXPECT_MPT_ERROR(fp8::fp8_linear(codes.to(DType::F8E5M2), w, Tensor(), {fp8::DelayedScaling{}, m, std::nullopt}),
                   "[fp8_linear] x must be a non-empty f32, bf16 or f16 tensor (or f8e4m3 codes)");
}

}  // namespace
}  // namespace mpt
