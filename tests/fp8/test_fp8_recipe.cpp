// tests/fp8/test_fp8_recipe.cpp: FP8 scaling recipes against scaling-spec tables B1-B10 (delayed), C1-C8 (current) and
// D1-D6 (block), plus the scaling state's reduction hook, state dicts and telemetry.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <vector>

#include "mpt/fp8/scaling.h"
#include "mpt/ops/cast.h"
#include "test_util.h"
#include "op_test.h"

namespace mpt {
namespace {

using fp8::AmaxAlgo;
using fp8::Fp8Format;
using fp8::Fp8Role;
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

fp8::Fp8ScalingState delayed_state(int64_t len, AmaxAlgo algo = AmaxAlgo::Max, int margin = 0,
                                   Fp8Format format = Fp8Format::E4M3) {
  return fp8::Fp8ScalingState(fp8::DelayedScaling{len, algo, margin, format});
}

std::vector<float> history(const fp8::Fp8TensorMeta& m) { return m.amax_history.to_vector<float>(); }
float scale(const fp8::Fp8TensorMeta& m) { return m.scale.item<float>(); }

// One training step's worth: the tensor was quantized with this amax, then the optimizer step updates the scales.
void step(fp8::Fp8ScalingState& state, fp8::Fp8TensorMeta& m, float amax) {
  m.record_amax(amax);
  state.update();
}

using mpt::testing::same_bits;

// ---- B: delayed scaling (E4M3, L = 4, max algorithm, one tensor unless stated)

TEST(Fp8Delayed, B1_FirstStepRunsWithScaleOneThenRecordsAmax) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  EXPECT_EQ(scale(*m), 1.0f);
  EXPECT_EQ(history(*m), (std::vector<float>{0, 0, 0, 0}));
  step(state, *m, 2.0f);
  EXPECT_EQ(scale(*m), 224.0f);
  EXPECT_EQ(m->scale_inv.item<float>(), 1.0f / 224.0f);
  EXPECT_EQ(history(*m), (std::vector<float>{0, 0, 0, 2}));
}

TEST(Fp8Delayed, B2_B3_MaxOverHistoryThenAgesOut) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 2.0f);
  const std::vector<std::vector<float>> expected = {{0, 0, 2, 1}, {0, 2, 1, 0.5f}, {0, 1, 0.5f, 0.25f}};
  const float amaxes[] = {1.0f, 0.5f, 0.25f};
  for (int i = 0; i < 3; ++i) {
    step(state, *m, amaxes[i]);
    EXPECT_EQ(scale(*m), 224.0f) << "update " << i;
    EXPECT_EQ(history(*m), expected[static_cast<size_t>(i)]) << "update " << i;
  }
  step(state, *m, 0.1f);  // B3: the 2 is the oldest entry, dropped before it can count again
  EXPECT_EQ(scale(*m), 448.0f);
  EXPECT_EQ(history(*m), (std::vector<float>{0, 0.5f, 0.25f, 0.1f}));
}

TEST(Fp8Delayed, B4_MostRecent) {
  auto state = delayed_state(4, AmaxAlgo::MostRecent);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 2.0f);
  EXPECT_EQ(scale(*m), 224.0f);
  step(state, *m, 1.0f);
  EXPECT_EQ(scale(*m), 448.0f);
}

TEST(Fp8Delayed, B5_Margin) {
  auto state = delayed_state(4, AmaxAlgo::Max, 1);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 2.0f);
  EXPECT_EQ(scale(*m), 112.0f);
}

TEST(Fp8Delayed, B6_ZeroAmaxLeavesHistoryAndScaleUntouched) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  auto idle = state.register_tensor("idle", Fp8Role::Input);  // never quantized
  step(state, *m, 2.0f);
  state.update();  // m not quantized this step either
  EXPECT_EQ(scale(*m), 224.0f);
  EXPECT_EQ(history(*m), (std::vector<float>{0, 0, 0, 2}));
  EXPECT_EQ(scale(*idle), 1.0f);
  EXPECT_EQ(history(*idle), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(state.num_updates(), 2);
}

TEST(Fp8Delayed, B7_InfEntersHistoryAndFreezesScaleForThreeUpdates) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 2.0f);
  step(state, *m, kInf);
  EXPECT_EQ(scale(*m), 224.0f);
  EXPECT_EQ(history(*m), (std::vector<float>{0, 0, 2, kInf}));
  for (int i = 0; i < 3; ++i) {
    step(state, *m, 1.0f);
    EXPECT_EQ(scale(*m), 224.0f) << "update " << i;
  }
  step(state, *m, 1.0f);  // the inf has aged out
  EXPECT_EQ(scale(*m), 448.0f);
}

TEST(Fp8Delayed, B8_TinyAmaxGivesFltMax) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 1e-40f);
  EXPECT_EQ(scale(*m), 3.4028235e38f);
  EXPECT_EQ(scale(*m), FLT_MAX);
}

TEST(Fp8Delayed, B9_HybridGradientIsE5M2) {
  auto state = delayed_state(4, AmaxAlgo::Max, 0, Fp8Format::Hybrid);
  auto g = state.register_tensor("g", Fp8Role::GradOutput);
  auto x = state.register_tensor("x", Fp8Role::Input);
  EXPECT_EQ(g->dtype, DType::F8E5M2);
  EXPECT_EQ(x->dtype, DType::F8E4M3);
  g->record_amax(2.0f);
  x->record_amax(2.0f);
  state.update();
  EXPECT_EQ(scale(*g), 28672.0f);
  EXPECT_EQ(scale(*x), 224.0f);
}

TEST(Fp8Delayed, B10_HistoryOfOne) {
  auto state = delayed_state(1);
  auto m = state.register_tensor("t", Fp8Role::Input);
  step(state, *m, 3.0f);
  EXPECT_EQ(scale(*m), 448.0f / 3.0f);
  EXPECT_FLOAT_EQ(scale(*m), 149.33333f);
  EXPECT_EQ(history(*m), (std::vector<float>{0}));
  step(state, *m, 1.0f);  // nothing remembered
  EXPECT_EQ(scale(*m), 448.0f);
}

TEST(Fp8Delayed, RecordAmaxKeepsTheMaxOfTheStepAndIgnoresNaN) {
  auto state = delayed_state(4);
  auto m = state.register_tensor("t", Fp8Role::Input);
  m->record_amax(1.0f);
  m->record_amax(3.0f);
  m->record_amax(kNaN);
  m->record_amax(2.0f);
  EXPECT_EQ(m->current_amax(), 3.0f);
  EXPECT_EQ(fp8::amax_ignore_nan(Tensor::from_vector<float>({kNaN, -2.0f, 1.0f}, {3})), 2.0f);
  EXPECT_EQ(fp8::amax_ignore_nan(Tensor::from_vector<float>({kNaN, -kInf}, {2})), kInf);
}

TEST(Fp8Delayed, ReductionHookSeesEveryAmaxAndItsMaxSetsTheScales) {
  auto state = delayed_state(4);
  auto a = state.register_tensor("a", Fp8Role::Input);
  auto b = state.register_tensor("b", Fp8Role::Weight);
  auto c = state.register_tensor("c", Fp8Role::GradOutput);  // not run on this rank
  std::vector<float> seen;
  const std::vector<float> other_rank = {1.0f, 8.0f, 4.0f};
  state.set_amax_reduction([&](Tensor& amaxes) {
    seen = amaxes.to_vector<float>();
    std::vector<float> reduced(seen.size());
    for (size_t i = 0; i < seen.size(); ++i) reduced[i] = std::fmax(seen[i], other_rank[i]);  // a MAX with one rank
    amaxes.copy_(Tensor::from_vector(reduced, {static_cast<int64_t>(reduced.size())}));
  });
  a->record_amax(2.0f);
  b->record_amax(0.5f);
  state.update();
  EXPECT_EQ(seen, (std::vector<float>{2.0f, 0.5f, 0.0f}));
  EXPECT_EQ(scale(*a), 224.0f);  // own amax was the larger
  EXPECT_EQ(scale(*b), 56.0f);   // 448 / 8 from the other rank
  EXPECT_EQ(scale(*c), 112.0f);  // quantized only elsewhere: the reduced amax still rolls in
  EXPECT_EQ(history(*c), (std::vector<float>{0, 0, 0, 4}));
  state.set_amax_reduction([](Tensor& amaxes) { amaxes = amaxes.slice(0, 0, 2); });
  EXPECT_MPT_ERROR(state.update(), "the amax reduction must leave the amaxes a contiguous f32 [3] on cpu, got");
  state.set_amax_reduction([](Tensor& amaxes) { amaxes = amaxes.to(DType::BF16); });
  EXPECT_MPT_ERROR(state.update(), "the amax reduction must leave the amaxes a contiguous f32 [3]");
}

TEST(Fp8State, RegistrationAndErrors) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas l = state.register_linear("h.0.fc");
  EXPECT_EQ(l.input->name, "h.0.fc.input");
  EXPECT_EQ(l.weight->dtype, DType::F8E4M3);
  EXPECT_EQ(l.grad_output->dtype, DType::F8E5M2);
  EXPECT_EQ(l.grad_output->amax_history.numel(), 1024);
  EXPECT_EQ(state.register_tensor("h.0.fc.weight", Fp8Role::Weight), l.weight);
  EXPECT_EQ(state.meta("h.0.fc.grad_output"), l.grad_output);
  EXPECT_EQ(state.metas().size(), 3u);
  EXPECT_MPT_ERROR(state.register_tensor("h.0.fc.weight", Fp8Role::Input), "registered as weight");
  EXPECT_MPT_ERROR(state.meta("nope"), "no FP8 tensor named 'nope'");
  EXPECT_MPT_ERROR(fp8::Fp8ScalingState(fp8::DelayedScaling{0}), "amax_history_len");
  EXPECT_MPT_ERROR(fp8::Fp8ScalingState(fp8::DelayedScaling{4, AmaxAlgo::Max, 65}), "margin");
  EXPECT_MPT_ERROR(fp8::Fp8ScalingState(fp8::CurrentScaling{Fp8Format::Hybrid, false, -1.0f}), "amax_epsilon");
  fp8::Fp8ScalingState block(fp8::BlockScaling{});
  EXPECT_EQ(block.register_tensor("g", Fp8Role::GradOutput)->dtype, DType::F8E4M3);
  block.update();  // no state across steps
  EXPECT_EQ(block.num_updates(), 0);
  EXPECT_TRUE(block.state_dict().empty());
}

TEST(Fp8State, StateDictRoundTripIsBitExactAndContinuesIdentically) {
  auto make = [] {
    auto s = std::make_unique<fp8::Fp8ScalingState>(fp8::DelayedScaling{8, AmaxAlgo::Max, 1, Fp8Format::Hybrid});
    s->register_linear("l0");
    s->register_linear("l1");
    return s;
  };
  auto a = make();
  Generator gen(7);
  const std::vector<float> amaxes =
      Tensor::uniform({5, 6}, 0.01, 30, DType::F32, Device::cpu(), gen).to_vector<float>();
  for (int s = 0; s < 3; ++s) {
    for (size_t j = 0; j < 6; ++j) a->metas()[j]->record_amax(amaxes[static_cast<size_t>(s) * 6 + j]);
    a->update();
  }
  a->metas()[2]->record_amax(0.3f);  // a pending amax mid-step is part of the state too
  const std::map<std::string, Tensor> dict = a->state_dict();
  EXPECT_EQ(dict.size(), 18u);
  EXPECT_TRUE(dict.count("l1.grad_output.amax_history"));
  auto b = make();
  b->load_state_dict(dict);
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_TRUE(same_bits(a->metas()[j]->scale, b->metas()[j]->scale));
    EXPECT_TRUE(same_bits(a->metas()[j]->scale_inv, b->metas()[j]->scale_inv));
    EXPECT_TRUE(same_bits(a->metas()[j]->amax_history, b->metas()[j]->amax_history));
  }
  a->update();  // the snapshot is a copy: later updates do not reach it
  EXPECT_FALSE(same_bits(dict.at("l0.grad_output.amax_history"), a->metas()[2]->amax_history));
  b->update();
  for (int s = 3; s < 5; ++s) {
    for (size_t j = 0; j < 6; ++j) {
      a->metas()[j]->record_amax(amaxes[static_cast<size_t>(s) * 6 + j]);
      b->metas()[j]->record_amax(amaxes[static_cast<size_t>(s) * 6 + j]);
    }
    a->update();
    b->update();
  }
  for (size_t j = 0; j < 6; ++j) {
    EXPECT_TRUE(same_bits(a->metas()[j]->scale, b->metas()[j]->scale));
    EXPECT_TRUE(same_bits(a->metas()[j]->amax_history, b->metas()[j]->amax_history));
  }

  std::map<std::string, Tensor> bad = dict;
  bad.erase("l0.input.scale");
  EXPECT_MPT_ERROR(b->load_state_dict(bad), "missing key 'l0.input.scale'");
  bad = dict;
  bad["l9.input.scale"] = Tensor::ones({});
  EXPECT_MPT_ERROR(b->load_state_dict(bad), "unexpected key 'l9.input.scale'");
  b->load_state_dict(bad, /*strict=*/false);
  bad = dict;
  bad["l0.input.scale"] = Tensor::full({}, 999.0);
  bad["l1.weight.amax_history"] = Tensor::zeros({16});  // another history length: another recipe
  EXPECT_MPT_ERROR(b->load_state_dict(bad), "must be f32 with shape [8]");
  EXPECT_NE(b->metas()[0]->scale.item<float>(), 999.0f);  // nothing copied
}

// Readers of one tensor share its meta: one scale, one amax, one entry in the state; a meta registered on its own
// before (a checkpoint from before the sharing) is dropped, and its keys still load, agreeing with the shared one's.
TEST(Fp8State, SharedNamesResolveToOneMeta) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{4});
  const fp8::Fp8LinearMetas q = state.register_linear("q");
  EXPECT_EQ(state.share_tensor("k.input", "q.input", Fp8Role::Input), q.input);
  const fp8::Fp8LinearMetas k = state.register_linear("k");
  EXPECT_EQ(k.input, q.input);
  EXPECT_EQ(state.meta("k.input"), q.input);
  EXPECT_EQ(state.metas().size(), 5u);  // q's three, k's weight and grad_output
  k.input->record_amax(3.0f);
  state.update();
  EXPECT_EQ(q.input->scale.item<float>(), 448.0f / 3.0f);
  const std::map<std::string, Tensor> dict = state.state_dict();
  EXPECT_EQ(dict.size(), 15u);
  EXPECT_EQ(dict.count("k.input.scale"), 0u);
  EXPECT_EQ(state.shared_names(), (std::map<std::string, std::string>{{"k.input", "q.input"}}));

  // Registered on their own first (as a resume registers a checkpoint's names), then shared: v's meta goes.
  fp8::Fp8ScalingState old(fp8::DelayedScaling{4});
  old.register_linear("q");
  old.register_linear("v");
  old.meta("q.input")->record_amax(2.0f);
  old.meta("v.input")->record_amax(2.0f);
  old.update();
  const std::map<std::string, Tensor> before = old.state_dict();  // v.input's keys equal q.input's
  EXPECT_EQ(before.size(), 18u);
  fp8::Fp8ScalingState resumed(fp8::DelayedScaling{4});
  resumed.register_linear("q");
  resumed.register_linear("v");
  resumed.load_state_dict(before);
  resumed.share_tensor("v.input", "q.input", Fp8Role::Input);
  EXPECT_EQ(resumed.metas().size(), 5u);
  EXPECT_EQ(resumed.metas()[3]->name, "v.weight");  // the others keep their order
  EXPECT_EQ(resumed.meta("v.input"), resumed.meta("q.input"));
  EXPECT_EQ(resumed.meta("v.input")->scale.item<float>(), 224.0f);
  resumed.load_state_dict(before);  // v.input's keys load into q.input's meta
  std::map<std::string, Tensor> differing = before;
  differing["v.input.amax_history"] = Tensor::from_vector(std::vector<float>{0, 5, 0, 0}, {4});
  EXPECT_MPT_ERROR(resumed.load_state_dict(differing),
                   "'v.input' shares the meta of 'q.input' (one tensor's quantization), but the dict holds different "
                   "values for 'v.input.amax_history' and 'q.input.amax_history'");
  EXPECT_EQ(resumed.meta("q.input")->amax_history.to_vector<float>(), before.at("q.input.amax_history").to_vector<float>());

  EXPECT_MPT_ERROR(state.share_tensor("q.input", "q.input", Fp8Role::Input), "cannot share the meta of 'q.input'");
  EXPECT_MPT_ERROR(state.share_tensor("k.input", "q.weight", Fp8Role::Weight), "already shares the meta of 'q.input'");
  EXPECT_MPT_ERROR(state.share_tensor("x.input", "k.input", Fp8Role::Input), "'k.input' itself shares the meta of");
  EXPECT_MPT_ERROR(state.share_tensor("q.input", "z.input", Fp8Role::Input), "'k.input' shares the meta of 'q.input'");
  EXPECT_MPT_ERROR(state.share_tensor("w.input", "q.weight", Fp8Role::Input), "registered as weight");
}

// ---- C: current scaling (compute_scale_from_amax)

TEST(Fp8Current, C1_C8_ScaleFromAmax) {
  EXPECT_EQ(fp8::compute_scale_from_amax(2.0f, 448.0f), 224.0f);                  // C1
  EXPECT_EQ(fp8::compute_scale_from_amax(3.0f, 448.0f), 448.0f / 3.0f);           // C2
  EXPECT_FLOAT_EQ(fp8::compute_scale_from_amax(3.0f, 448.0f), 149.33333f);
  EXPECT_EQ(fp8::compute_scale_from_amax(3.0f, 448.0f, true), 128.0f);
  EXPECT_EQ(fp8::compute_scale_from_amax(0.0f, 448.0f), 1.0f);                    // C3
  EXPECT_EQ(fp8::compute_scale_from_amax(kInf, 448.0f), 1.0f);                    // C4
  EXPECT_EQ(fp8::compute_scale_from_amax(kNaN, 448.0f), 1.0f);
  EXPECT_EQ(fp8::compute_scale_from_amax(1e-6f, 448.0f, false, 1e-4f), 448.0f / 1e-4f);  // C6
  EXPECT_FLOAT_EQ(fp8::compute_scale_from_amax(1e-6f, 448.0f, false, 1e-4f), 4.48e6f);
  EXPECT_EQ(fp8::compute_scale_from_amax(0.0f, 448.0f, false, 1e-4f), 448.0f / 1e-4f);  // eps clamps before the 0 test
  EXPECT_EQ(fp8::compute_scale_from_amax(1e-40f, 448.0f), FLT_MAX);               // C7
  EXPECT_EQ(fp8::compute_scale_from_amax(1e-40f, 448.0f, true), std::ldexp(1.0f, 127));
  EXPECT_EQ(fp8::compute_scale_from_amax(2.0f, fp8::fp8_max(DType::F8E5M2)), 28672.0f);  // C8
}

TEST(Fp8Current, C5_NaNElementsAreIgnored) {
  const Tensor x = Tensor::from_vector<float>({kNaN, 2.0f}, {2});
  const float amax = fp8::amax_ignore_nan(x);
  EXPECT_EQ(amax, 2.0f);
  const float s = fp8::compute_scale_from_amax(amax, 448.0f);
  EXPECT_EQ(s, 224.0f);
  ops::QuantizeOptions o;
  o.scale = Tensor::full({}, s);
  const ops::Quantized q = ops::quantize_fp8(x, DType::F8E4M3, o);
  const std::vector<float> v = q.data.to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 448.0f);
}

// ops::quantize_fp8's built-in current scaling agrees with compute_scale_from_amax wherever it can (no epsilon, no
// NaN element): C1-C4, C7, C8. It differs on C5 (a NaN element makes its amax NaN, so scale 1) and has no C6.
TEST(Fp8Current, OpsQuantizeCurrentScalingAgreesWithoutNaNOrEpsilon) {
  struct Case {
    float amax;
    DType fmt;
    bool pow2;
  };
  const Case cases[] = {{2.0f, DType::F8E4M3, false}, {3.0f, DType::F8E4M3, false}, {3.0f, DType::F8E4M3, true},
                        {0.0f, DType::F8E4M3, false}, {kInf, DType::F8E4M3, false}, {1e-40f, DType::F8E4M3, false},
                        {1e-40f, DType::F8E4M3, true}, {2.0f, DType::F8E5M2, false}};
  for (const Case& c : cases) {
    const Tensor x = Tensor::from_vector<float>({c.amax, -c.amax / 2}, {2});
    ops::QuantizeOptions o;
    o.power_of_2 = c.pow2;
    const float got = ops::quantize_fp8(x, c.fmt, o).scale_inv.item<float>();
    const float want = 1.0f / fp8::compute_scale_from_amax(fp8::amax_ignore_nan(x), fp8::fp8_max(c.fmt), c.pow2);
    EXPECT_EQ(got, want) << "amax " << c.amax << " pow2 " << c.pow2;
  }
}

// ---- D: block scaling (ops::quantize_blockwise, which fp8_linear's block recipe uses)

TEST(Fp8Block, D1_D2_PowerOfTwoAndFp32Scales) {
  std::vector<float> v(256, 0.0f);
  for (int i = 0; i < 128; ++i) v[static_cast<size_t>(i)] = 1.0f;
  v[5] = 4.0f;
  const Tensor x = Tensor::from_vector(v, {1, 256}).to(DType::BF16);
  const ops::Quantized q = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, {true});
  EXPECT_EQ(q.scale_inv.to_vector<float>(), (std::vector<float>{1.0f / 64, 1.0f}));
  const std::vector<float> codes = q.data.to_vector<float>();
  EXPECT_EQ(codes[5], 256.0f);
  EXPECT_EQ(codes[0], 64.0f);
  EXPECT_EQ(codes[200], 0.0f);
  const ops::Quantized f = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, {false});
  EXPECT_EQ(f.scale_inv.to_vector<float>()[0], 1.0f / 112.0f);
  EXPECT_EQ(f.data.to_vector<float>()[5], 448.0f);
}

TEST(Fp8Block, D3_TinyAmaxInfValueOfTheInputDtype) {
  // TE clamps an overflowing block scale to the input dtype's max: 65504 for fp16, 2^15 with pow2.
  EXPECT_EQ(fp8::compute_scale_from_amax(1e-40f, 448.0f, false, 0.0f, 65504.0f), 65504.0f);
  EXPECT_EQ(fp8::compute_scale_from_amax(1e-40f, 448.0f, true, 0.0f, 65504.0f), 32768.0f);
  // An fp16 tile cannot hold 1e-40 (it rounds to 0), so through quantize_blockwise the tile is all zero: scale 1.
  const Tensor x = Tensor::full({1, 128}, 1e-40, DType::F16);
  EXPECT_EQ(ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, {true}).scale_inv.item<float>(),
            1.0f);
}

TEST(Fp8Block, D4_D5_ScaleShapes) {
  // Ours are compact and row-major (ops/cast.h); TE's GEMM_READY shapes (D4: (2,4) and (3,4); D5: (2,4)) transpose
  // and pad the same values to 4 for cuBLASLt, which kernels/cuda/gemm_scales does at the GEMM.
  const Tensor w = Tensor::ones({130, 260});
  const ops::Quantized q2 = ops::quantize_blockwise(w, DType::F8E4M3, ops::ScaleLayout::Block128x128);
  EXPECT_EQ(q2.scale_inv.shape(), (Shape{2, 3}));
  EXPECT_EQ(q2.scale_inv.t().contiguous().shape(), (Shape{3, 2}));  // the transpose's tiles (fp8_linear's dgrad)
  const ops::Quantized q1 = ops::quantize_blockwise(Tensor::ones({3, 256}), DType::F8E4M3,
                                                    ops::ScaleLayout::Block1x128);
  EXPECT_EQ(q1.scale_inv.shape(), (Shape{3, 2}));
}

TEST(Fp8Block, D6_AllZeroTile) {
  const ops::Quantized q = ops::quantize_blockwise(Tensor::zeros({128, 128}), DType::F8E4M3,
                                                   ops::ScaleLayout::Block128x128);
  EXPECT_EQ(q.scale_inv.item<float>(), 1.0f);
  for (float c : q.data.to_vector<float>()) ASSERT_EQ(c, 0.0f);
}

// ---- telemetry

TEST(Fp8Telemetry, CountsSaturatedAndFlushedElements) {
  // scale 1, E4M3: |x| > 448 saturates; |x| < 2^-10 (half the smallest subnormal) flushes to 0.
  const Tensor x = Tensor::from_vector<float>({500.0f, -1000.0f, 1.0f, 1e-4f, 0.0f, kNaN, 2e-3f, -5e-4f}, {2, 4});
  ops::QuantizeOptions o;
  o.scale = Tensor::ones({});
  const ops::Quantized q = ops::quantize_fp8(x, DType::F8E4M3, o);
  const fp8::Fp8TensorStats s = fp8::measure_quantization(x, q, 1.0f);
  EXPECT_EQ(s.amax, 1000.0f);
  EXPECT_EQ(s.scale, 1.0f);
  EXPECT_EQ(s.numel, 8);
  EXPECT_EQ(s.saturated, 2.0 / 8);
  EXPECT_EQ(s.flushed, 2.0 / 8);
  // Blocks: each block's own scale; block 1 of row 0 ([4, 1e-3, ...]) cannot saturate, 1e-9 flushes.
  std::vector<float> v(2 * 256, 1.0f);
  v[128] = 4.0f;
  v[129] = 1e-9f;
  const Tensor xb = Tensor::from_vector(v, {2, 256});
  const ops::Quantized qb = ops::quantize_blockwise(xb, DType::F8E4M3, ops::ScaleLayout::Block1x128, {true});
  const fp8::Fp8TensorStats sb = fp8::measure_quantization(xb, qb, 0.0f);
  EXPECT_EQ(sb.amax, 4.0f);
  EXPECT_EQ(sb.scale, 64.0f);  // the smallest block scale
  EXPECT_EQ(sb.saturated, 0.0);
  EXPECT_EQ(sb.flushed, 1.0 / 512);
}

}  // namespace
}  // namespace mpt
