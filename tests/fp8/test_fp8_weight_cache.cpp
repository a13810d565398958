// tests/fp8/test_fp8_weight_cache.cpp: the FP8 weight copy of amp's cast cache (amp::fp8_weight_copy): bit-identical
// to fp8_linear quantizing the weight itself, made once per optimizer step and reused across micro-batches,
// invalidated by the step (and remade when delayed scaling's scale moves without one), frozen weights.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <variant>
#include <vector>

#include "mpt/fp8/scaling.h"
#include "mpt/amp/master_weights.h"
#include "mpt/amp/policy.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/mpt.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/elementwise.h"
#include "mpt/fp8/linear.h"
#include "mpt/ops/reduction.h"
#include "mpt/optim/sgd.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using amp::Precision;
using mpt::testing::random_tensor;

using mpt::testing::same_bits;

// Every Linear in FP8 under `state` (no BF16 overrides, unlike amp::Policy::fp8).
amp::Policy fp8_policy(std::shared_ptr<fp8::Fp8ScalingState> state) {
  amp::Policy p = amp::Policy::with_compute(Precision::FP8);
  p.fp8_state = std::move(state);
  return p;
}

bool is_delayed(const fp8::Fp8Recipe& r) { return std::holds_alternative<fp8::DelayedScaling>(r); }

struct Case {
  std::string name;
  fp8::Fp8Recipe recipe;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

std::vector<Case> recipes() {
  using fp8::Fp8Format;
  return {{"DelayedHybrid", fp8::DelayedScaling{16, fp8::AmaxAlgo::Max, 0, Fp8Format::Hybrid}},
          {"DelayedE4M3", fp8::DelayedScaling{16, fp8::AmaxAlgo::MostRecent, 1, Fp8Format::E4M3}},
          {"Current", fp8::CurrentScaling{}},
          {"CurrentPow2Eps", fp8::CurrentScaling{Fp8Format::E4M3, true, 1e-3f}},
          {"Block", fp8::BlockScaling{}},
          {"BlockFp32Scales", fp8::BlockScaling{false}}};
}

// What one run of the layer leaves behind.
struct Result {
  Tensor y, dx, dw, db;
  std::vector<Tensor> metas;  // every meta's scale, scale_inv and amax history (clones)
  amp::CastCacheStats stats;
};

// `calls` forward/backward passes of fp8_linear on fresh copies of fixed operands (x (2, 19, 200), W (136, 200):
// partial 128-blocks both ways), W quantized by fp8_linear itself (cached = false) or taken from amp::fp8_weight_copy.
// Delayed scaling starts from non-unit scales, and the scales move between passes when `update` (no optimizer step:
// the copy outlives the update and must be remade with the new scale).
Result run(const fp8::Fp8Recipe& recipe, bool cached, bool x_grad, int calls, DType out, bool update = false) {
  Tensor x = random_tensor({2, 19, 200}, DType::F32, 21);
  if (x_grad) x.requires_grad_();
  const Tensor w = random_tensor({136, 200}, DType::F32, 22, 0.05).requires_grad_();
  const Tensor b = random_tensor({136}, DType::F32, 23, 0.1).requires_grad_();
  const Tensor dy = random_tensor({2, 19, 136}, out, 24, 1e-2);
  fp8::Fp8ScalingState state(recipe);
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  if (is_delayed(recipe)) {
    using MetaScale = std::pair<std::shared_ptr<fp8::Fp8TensorMeta>, float>;
    for (const auto& [m, s] : std::vector<MetaScale>{{metas.input, 4.0f}, {metas.weight, 2048.0f},
                                                     {metas.grad_output, 8192.0f}}) {
      m->scale.fill_(s);
      m->scale_inv.fill_(1.0f / s);
    }
  }
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  Result r;
  for (int i = 0; i < calls; ++i) {
    fp8::Fp8LinearConfig cfg{recipe, metas, out};
    if (cached) cfg.weight_fp8 = amp::fp8_weight_copy(w, recipe, metas.weight, x_grad);
    r.y = fp8::fp8_linear(x, w, b, cfg);
    r.y.backward(dy);
    if (update) state.update();
  }
  r.stats = amp::cast_cache_stats();
  r.dx = x_grad ? x.grad() : Tensor();
  r.dw = w.grad();
  r.db = b.grad();
  for (const auto& m : state.metas()) {
    for (const Tensor& t : {m->scale, m->scale_inv, m->amax_history}) r.metas.push_back(t.clone());
  }
  return r;
}

void expect_same(const Result& a, const Result& b, const std::string& label) {
  EXPECT_TRUE(same_bits(a.y, b.y)) << label << " y";
  EXPECT_TRUE(same_bits(a.dx, b.dx)) << label << " dx";
  EXPECT_TRUE(same_bits(a.dw, b.dw)) << label << " dW";
  EXPECT_TRUE(same_bits(a.db, b.db)) << label << " db";
  ASSERT_EQ(a.metas.size(), b.metas.size()) << label;
  for (size_t i = 0; i < a.metas.size(); ++i) EXPECT_TRUE(same_bits(a.metas[i], b.metas[i])) << label << " meta " << i;
}

class Fp8WeightCache : public ::testing::TestWithParam<Case> {};

// Same inputs through the cached and the uncached weight: y, dx, dW, db and every meta (delayed: W's amax recorded
// once per copy and again on each reuse) bit for bit; three calls accumulate the gradients; one copy, two hits.
TEST_P(Fp8WeightCache, CachedWeightIsBitIdenticalToQuantizingPerCall) {
  const Case& c = GetParam();
  for (const DType out : {DType::BF16, DType::F32}) {
    const std::string label = c.name + (out == DType::BF16 ? " bf16" : " f32");
    const Result ref = run(c.recipe, false, true, 3, out);
    const Result got = run(c.recipe, true, true, 3, out);
    expect_same(ref, got, label);
    EXPECT_EQ(ref.stats.fp8_casts, 0) << label;
    EXPECT_EQ(got.stats.fp8_casts, 1) << label;
    EXPECT_EQ(got.stats.fp8_hits, 2) << label;
    EXPECT_EQ(got.stats.fp8_live, 1) << label;
  }
  // x without grad: no W^T needed (quantize_fp8 instead of quantize_fp8_transpose on the uncached side).
  expect_same(run(c.recipe, false, false, 2, DType::BF16), run(c.recipe, true, false, 2, DType::BF16),
              c.name + " no dx");
}

// Delayed scaling's update() between calls with no optimizer step (a skipped step, a frozen weight): the scale the
// copy was made with goes stale, so the copy is remade; each update counts the weight's amax as uncached calls do.
TEST_P(Fp8WeightCache, UpdateWithoutAnOptimizerStepMatchesUncached) {
  const Case& c = GetParam();
  const Result ref = run(c.recipe, false, true, 3, DType::BF16, /*update=*/true);
  const Result got = run(c.recipe, true, true, 3, DType::BF16, /*update=*/true);
  expect_same(ref, got, c.name);
  if (is_delayed(c.recipe)) {
    EXPECT_EQ(got.stats.fp8_casts + got.stats.fp8_hits, 3);
    EXPECT_GE(got.stats.fp8_casts, 2) << "the first update moves the weight's scale (from 2048)";
  } else {
    EXPECT_EQ(got.stats.fp8_casts, 1);  // no scaling state: update() is a no-op
    EXPECT_EQ(got.stats.fp8_hits, 2);
  }
}

INSTANTIATE_TEST_SUITE_P(Recipes, Fp8WeightCache, ::testing::ValuesIn(recipes()),
                         [](const auto& info) { return info.param.name; });

// A delayed copy is reused until the next update() (which may move the scale: the cache compares the meta's
// scale_version on the host instead of reading the scale back from the device; TransformerEngine re-casts its weights
// every step too). The miss records W's amax into the step's history slot.
TEST(Fp8WeightCacheDelayed, UpdateInvalidatesTheCopyAndTheMissRecordsTheAmax) {
  amp::invalidate_compute_copies();
  amp::reset_cast_cache_stats();
  fp8::Fp8ScalingState state(fp8::DelayedScaling{.amax_history_len = 4, .algo = fp8::AmaxAlgo::MostRecent});
  const auto meta = state.register_tensor("w", fp8::Fp8Role::Weight);
  const Tensor w = random_tensor({8, 16}, DType::F32, 31).requires_grad_();
  const float amax = fp8::amax_ignore_nan(w);
  amp::fp8_weight_copy(w, state.recipe(), meta);
  EXPECT_EQ(meta->current_amax(), amax);
  state.update();  // scale 448 / amax
  EXPECT_EQ(meta->current_amax(), 0.0f);
  amp::fp8_weight_copy(w, state.recipe(), meta);  // miss: scale 1 -> 448 / amax
  EXPECT_EQ(meta->current_amax(), amax);
  amp::fp8_weight_copy(w, state.recipe(), meta);  // hit: same scale version
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 2);
  EXPECT_EQ(amp::cast_cache_stats().fp8_hits, 1);
  state.update();  // MostRecent, same amax: the same scale, but the copy is stale by version
  amp::fp8_weight_copy(w, state.recipe(), meta);  // miss
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 3);
  EXPECT_EQ(meta->current_amax(), amax);
  // Another meta, another recipe's parameters, W^T asked of a copy without it: misses.
  const auto other = state.register_tensor("w2", fp8::Fp8Role::Weight);
  amp::fp8_weight_copy(w, state.recipe(), other);
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 4);
  amp::fp8_weight_copy(w, fp8::CurrentScaling{}, nullptr, false);
  amp::fp8_weight_copy(w, fp8::CurrentScaling{.power_2_scale = true}, nullptr, false);
  amp::fp8_weight_copy(w, fp8::CurrentScaling{.power_2_scale = true}, nullptr, true);
  amp::fp8_weight_copy(w, fp8::CurrentScaling{.power_2_scale = true}, nullptr, false);  // has W^T: a hit
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 7);
  EXPECT_EQ(amp::cast_cache_stats().fp8_hits, 2);
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 2);  // one per (master, recipe kind)
  amp::invalidate_compute_copies(w);
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
  // Not an F32 leaf: quantized afresh, uncached and uncounted.
  amp::fp8_weight_copy(w.to(DType::BF16), fp8::BlockScaling{}, nullptr);
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 7);
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
  EXPECT_MPT_ERROR(amp::fp8_weight_copy(w, state.recipe(), nullptr), "delayed scaling needs metas.weight");
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);  // a failed quantization leaves no entry
}

// nn::Linear under an FP8 policy: k = 3 micro-batches make one FP8 weight copy per optimizer step and hit for the
// others; SGD's step drops it and the next forward re-quantizes. The run (two steps, scales updated after each)
// matches the same layer driven through fp8_linear without the cache bit for bit.
TEST(Fp8WeightCacheLinear, OneCopyPerOptimizerStepAcrossMicroBatches) {
  for (const Case& c : recipes()) {
    Generator g1(5), g2(5);
    nn::Linear lin(200, 136, true, {}, g1), ref(200, 136, true, {}, g2);
    auto state = std::make_shared<fp8::Fp8ScalingState>(c.recipe);
    fp8::Fp8ScalingState ref_state(c.recipe);
    const fp8::Fp8LinearMetas ref_metas = ref_state.register_linear("ref");
    optim::SGD opt(lin.parameters(), {.lr = 0.5}), ref_opt(ref.parameters(), {.lr = 0.5});
    amp::invalidate_compute_copies();
    amp::reset_cast_cache_stats();
    constexpr int k = 3;
    for (int step = 0; step < 2; ++step) {
      for (int micro = 0; micro < k; ++micro) {
        const Tensor x = random_tensor({2, 19, 200}, DType::F32, 40 + micro).requires_grad_();
        const Tensor dy = random_tensor({2, 19, 136}, DType::BF16, 50 + micro, 1e-2);
        Tensor y;
        {
          amp::Autocast ac(fp8_policy(state));
          y = lin(x);
        }
        y.backward(dy);
        const Tensor xr = x.detach().requires_grad_();
        const Tensor yr = fp8::fp8_linear(xr, ref.weight(), ref.bias(), {c.recipe, ref_metas, DType::BF16});
        yr.backward(dy);
        EXPECT_TRUE(same_bits(y, yr)) << c.name << " step " << step << " micro " << micro;
        EXPECT_TRUE(same_bits(x.grad(), xr.grad())) << c.name;
      }
      const amp::CastCacheStats s = amp::cast_cache_stats();
      EXPECT_EQ(s.fp8_casts, step + 1) << c.name;
      EXPECT_EQ(s.fp8_hits, (k - 1) * (step + 1)) << c.name;
      EXPECT_EQ(s.casts, s.fp8_casts) << c.name;  // the FP32 bias goes in as is: no BF16 copies
      EXPECT_EQ(s.fp8_live, 1) << c.name;
      EXPECT_EQ(lin.weight().grad().dtype(), DType::F32);
      EXPECT_TRUE(same_bits(lin.weight().grad(), ref.weight().grad())) << c.name << " dW step " << step;
      EXPECT_TRUE(same_bits(lin.bias().grad(), ref.bias().grad())) << c.name << " db step " << step;
      opt.step();
      ref_opt.step();
      opt.zero_grad();
      ref_opt.zero_grad();
      EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0) << c.name;  // the step dropped the copy
      state->update();
      ref_state.update();
    }
    EXPECT_TRUE(same_bits(lin.weight(), ref.weight())) << c.name;
    for (size_t i = 0; i < state->metas().size(); ++i) {
      EXPECT_TRUE(same_bits(state->metas()[i]->amax_history, ref_state.metas()[i]->amax_history)) << c.name;
      EXPECT_TRUE(same_bits(state->metas()[i]->scale, ref_state.metas()[i]->scale)) << c.name;
    }
  }
}

// A frozen weight (requires_grad false) is never stepped, so its copy lives across optimizer steps: reused while
// delayed scaling's scale stays, remade when update() moves it; dx still flows, W gets no gradient.
TEST(Fp8WeightCacheLinear, FrozenWeight) {
  for (const Case& c : recipes()) {
    Generator g1(6), g2(6);
    nn::Linear lin(200, 136, false, {}, g1), ref(200, 136, false, {}, g2);
    lin.requires_grad_(false);
    ref.requires_grad_(false);
    auto state = std::make_shared<fp8::Fp8ScalingState>(c.recipe);
    fp8::Fp8ScalingState ref_state(c.recipe);
    const fp8::Fp8LinearMetas ref_metas = ref_state.register_linear("ref");
    amp::invalidate_compute_copies();
    amp::reset_cast_cache_stats();
    for (int step = 0; step < 3; ++step) {
      for (int micro = 0; micro < 2; ++micro) {
        const Tensor x = random_tensor({19, 200}, DType::F32, 60 + micro).requires_grad_();
        const Tensor dy = random_tensor({19, 136}, DType::BF16, 70 + micro, 1e-2);
        Tensor y;
        {
          amp::Autocast ac(fp8_policy(state));
          y = lin(x);
        }
        y.backward(dy);
        const Tensor xr = x.detach().requires_grad_();
        const Tensor yr = fp8::fp8_linear(xr, ref.weight(), Tensor(), {c.recipe, ref_metas, DType::BF16});
        yr.backward(dy);
        EXPECT_TRUE(same_bits(y, yr)) << c.name << " step " << step;
        EXPECT_TRUE(same_bits(x.grad(), xr.grad())) << c.name << " step " << step;
      }
      EXPECT_FALSE(lin.weight().grad().defined());
      state->update();
      ref_state.update();
    }
    for (size_t i = 0; i < state->metas().size(); ++i) {  // each step's copy recorded W's amax
      EXPECT_TRUE(same_bits(state->metas()[i]->amax_history, ref_state.metas()[i]->amax_history)) << c.name;
      EXPECT_TRUE(same_bits(state->metas()[i]->scale, ref_state.metas()[i]->scale)) << c.name;
    }
    const amp::CastCacheStats s = amp::cast_cache_stats();
    EXPECT_EQ(s.fp8_casts + s.fp8_hits, 6) << c.name;
    // Current and block: one copy for the whole run. Delayed: one per step (each update() may move the scale).
    EXPECT_EQ(s.fp8_casts, is_delayed(c.recipe) ? 3 : 1) << c.name;
    // Without grad (evaluation): no W^T is needed; the cached copy serves, except under delayed scaling, where
    // the last update() made it stale.
    autograd::NoGradGuard no_grad;
    amp::Autocast ac(fp8_policy(state));
    lin(random_tensor({3, 200}, DType::F32, 80));
    EXPECT_EQ(amp::cast_cache_stats().fp8_casts, s.fp8_casts + (is_delayed(c.recipe) ? 1 : 0)) << c.name;
  }
}

// Module::load_state_dict and Module::to drop the FP8 copies as they drop the FP16/BF16 ones.
TEST(Fp8WeightCacheLinear, LoadStateDictAndToInvalidate) {
  Generator gen(7);
  nn::Linear lin(64, 32, true, {}, gen);
  auto state = std::make_shared<fp8::Fp8ScalingState>(fp8::CurrentScaling{});
  amp::invalidate_compute_copies();
  const Tensor x = random_tensor({4, 64}, DType::F32, 81).requires_grad_();
  {
    amp::Autocast ac(fp8_policy(state));
    lin(x);
  }
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 1);
  lin.load_state_dict(lin.state_dict());
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
  {
    amp::Autocast ac(fp8_policy(state));
    lin(x);
  }
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 1);
  lin.to(DType::F32);
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
}

// fp8_linear rejects a pre-quantized weight of another shape or recipe, or one without W^T when x needs it.
TEST(Fp8WeightCacheErrors, Fp8LinearChecksThePrequantizedWeight) {
  const Tensor x = random_tensor({4, 64}, DType::F32, 91).requires_grad_();
  const Tensor w = random_tensor({32, 64}, DType::F32, 92).requires_grad_();
  const fp8::Fp8Recipe cur = fp8::CurrentScaling{};
  auto no_t = std::make_shared<const fp8::Fp8Weight>(fp8::quantize_fp8_weight(w, cur, nullptr, false));
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {cur, {}, std::nullopt, no_t}), "without W^T");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {fp8::BlockScaling{}, {}, std::nullopt, no_t}), "recipe");
  const Tensor w2 = random_tensor({16, 64}, DType::F32, 93);
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w2, Tensor(), {cur, {}, std::nullopt, no_t}), "weight_fp8 holds codes");
  EXPECT_NO_THROW(fp8::fp8_linear(x.detach(), w, Tensor(), {cur, {}, std::nullopt, no_t}));
}

}  // namespace
}  // namespace mpt
