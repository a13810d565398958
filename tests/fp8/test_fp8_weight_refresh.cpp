// tests/fp8/test_fp8_weight_refresh.cpp: delayed scaling's FP8 weight copies rewritten by AdamW as it updates the
// masters (amp::refreshable_fp8_copy, fp8_copies_rewritten): the codes of quantizing the new master, reused by the next
// forward; the Trainer's steps keep the bits of steps that quantize every master in the forward.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mpt/amp/master_weights.h"
#include "mpt/fp8/linear.h"
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::random_tensor;
using testing::same_bits;

// A master W (48, 40), its delayed-scaling meta and a first copy made under scale version 0.
struct Weight {
  fp8::Fp8ScalingState state{fp8::DelayedScaling{.amax_history_len = 4}};
  std::shared_ptr<fp8::Fp8TensorMeta> meta = state.register_tensor("w", fp8::Fp8Role::Weight);
  Tensor w = random_tensor({48, 40}, DType::F32, 41, 0.1).requires_grad_();
  optim::AdamW opt{{w}, {.lr = 1e-2}};

  Weight() {
    amp::invalidate_compute_copies();
    amp::reset_cast_cache_stats();
  }
  std::shared_ptr<const fp8::Fp8Weight> copy(bool transpose = true) {
    return amp::fp8_weight_copy(w, state.recipe(), meta, transpose);
  }
  void step(uint64_t seed) {
    w.set_grad(random_tensor({48, 40}, DType::F32, seed));
    opt.step();
  }
};

// What quantizing the master afresh gives (fp8_linear's own path), under the meta's scale now, and the amax it
// records into a copy of the meta.
struct Fresh {
  fp8::Fp8Weight q;
  Tensor amax;
};
Fresh fresh(const Weight& x) {
  auto meta = std::make_shared<fp8::Fp8TensorMeta>(*x.meta);
  meta->scale = x.meta->scale.clone();
  meta->scale_inv = x.meta->scale_inv.clone();
  meta->amax_history = Tensor::zeros({4}, DType::F32);
  return {fp8::quantize_fp8_weight(x.w.detach(), x.state.recipe(), meta, true), meta->amax_history.slice(0, 0, 1)};
}

void expect_same_copy(const fp8::Fp8Weight& got, const fp8::Fp8Weight& want, const std::string& what) {
  EXPECT_TRUE(same_bits(got.rowwise.data, want.rowwise.data)) << what << " W codes";
  EXPECT_TRUE(same_bits(got.rowwise.scale_inv, want.rowwise.scale_inv)) << what << " scale_inv";
  ASSERT_TRUE(got.has_transpose()) << what;
  EXPECT_TRUE(same_bits(got.columnwise.data, want.columnwise.data)) << what << " W^T codes";
  EXPECT_TRUE(same_bits(got.columnwise.scale_inv, want.columnwise.scale_inv)) << what << " W^T scale_inv";
}

// update() then the step: AdamW rewrites the copy in place (same tensors), the next request is a hit, and the copy,
// W^T's codes and the amax recorded are those of quantizing the new master afresh.
TEST(Fp8WeightRefresh, AdamWRewritesTheCopyAfterAnUpdate) {
  Weight x;
  const auto first = x.copy();
  const void* codes = first->rowwise.data.data_ptr();
  for (int s = 0; s < 3; ++s) {
    x.state.update();  // the scale the next forward uses is known now; the history's current slot starts afresh
    EXPECT_TRUE(amp::refreshable_fp8_copy(x.w).codes.defined()) << s;
    x.step(50 + s);
    EXPECT_FALSE(amp::refreshable_fp8_copy(x.w).codes.defined()) << "current again after step " << s;
    const amp::CastCacheStats before = amp::cast_cache_stats();
    const auto reused = x.copy();
    EXPECT_EQ(amp::cast_cache_stats().fp8_hits, before.fp8_hits + 1) << s;
    EXPECT_EQ(amp::cast_cache_stats().fp8_casts, before.fp8_casts) << s;
    EXPECT_EQ(reused->rowwise.data.data_ptr(), codes) << "the copy keeps its tensors";
    const Fresh want = fresh(x);
    expect_same_copy(*reused, want.q, "step " + std::to_string(s));
    EXPECT_TRUE(same_bits(x.meta->amax_history.slice(0, 0, 1), want.amax)) << "max |W| of the new master, step " << s;
  }
}

// The program's own order (the step before update()): the copy is current at the step, so the step drops it and
// the next forward remakes it, as before.
TEST(Fp8WeightRefresh, AStepBeforeTheUpdateDropsTheCopy) {
  Weight x;
  x.copy();
  EXPECT_FALSE(amp::refreshable_fp8_copy(x.w).codes.defined());
  x.step(60);
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
  x.state.update();
  x.copy();
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 2);
  // SGD writes no codes either: its step drops a refreshable copy.
  x.state.update();
  optim::SGD sgd({x.w}, {.lr = 0.1});
  sgd.step();
  EXPECT_EQ(amp::cast_cache_stats().fp8_live, 0);
}

// A rewritten copy that goes stale (update() without a step) or meets a step that collects telemetry (a rewritten
// copy measured nothing) is requantized into the tensors it has: a CUDA graph that read them reads current codes.
TEST(Fp8WeightRefresh, AStaleRewrittenCopyIsRequantizedInPlace) {
  Weight x;
  const auto first = x.copy();
  x.state.update();
  x.step(70);
  x.state.update();  // stale again, no step
  const auto remade = x.copy();
  EXPECT_EQ(amp::cast_cache_stats().fp8_casts, 2);
  EXPECT_EQ(remade->rowwise.data.data_ptr(), first->rowwise.data.data_ptr());
  EXPECT_EQ(remade->columnwise.data.data_ptr(), first->columnwise.data.data_ptr());
  expect_same_copy(*remade, fresh(x).q, "after a second update");
  x.meta->collect_telemetry = true;
  x.copy();  // made with telemetry on: measured
  EXPECT_EQ(x.meta->stats.count, 1);
  x.copy();  // a hit
  EXPECT_EQ(x.meta->stats.count, 1);
  x.meta->collect_telemetry = false;
  x.state.update();
  x.step(71);
  x.meta->collect_telemetry = true;
  const auto measured = x.copy();
  EXPECT_EQ(x.meta->stats.count, 2) << "the rewritten copy was measured";
  EXPECT_EQ(measured->rowwise.data.data_ptr(), first->rowwise.data.data_ptr());
  EXPECT_EQ(x.meta->stats.amax, fp8::amax_ignore_nan(x.w));
  expect_same_copy(*measured, fresh(x).q, "telemetry");
}

// A GPT under fp8-delayed through the Trainer (AdamW, clipping, two micro-batches; f32 and 8-bit moments): the FP8
// weight copies are made once, in the first step, and rewritten by the optimizer after; every loss, parameter,
// optimizer state and FP8 meta has the bits of the same run whose forwards quantize every master afresh (its cached
// copies dropped before each step).
TEST(Fp8WeightRefresh, TrainerStepsKeepTheBitsOfQuantizingInTheForward) {
  nn::GPTConfig c;
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 4, c.n_head = 2, c.n_embd = 32;
  struct Run {
    nn::GPT model;
    train::Trainer trainer;
    Run(const nn::GPTConfig& c, ops::MomentStorage m)
        : model(c),
          trainer(model, train::adamw({.lr = 3e-3, .betas = {0.9, 0.95}, .moments = m}),
                  {.policy = amp::Policy::named("fp8-delayed", c.n_layer, Device::cpu()),
                   .precision_name = "fp8-delayed",
                   .grad_accum = 2,
                   .weight_decay = 0.1}) {}
    train::StepMetrics step(const std::vector<train::Batch>& batches) {
      return trainer.step(batches, [this](int64_t, const train::Batch& in) { return model.loss(in[0], in[1]); });
    }
  };
  for (const auto moments : {ops::MomentStorage::F32, ops::MomentStorage::Int8}) {
    const std::string name = moments == ops::MomentStorage::F32 ? "f32 moments" : "8-bit moments";
    amp::invalidate_compute_copies();
    Run reused(c, moments), remade(c, moments);
    Generator data(3);
    for (int s = 0; s < 4; ++s) {
      std::vector<train::Batch> batches;
      for (int m = 0; m < 2; ++m) {
        const Tensor ids = Tensor::uniform({2, 17}, 0, 40, DType::F32, Device::cpu(), data).to(DType::I64);
        batches.push_back({ids.slice(1, 0, 16).contiguous(), ids.slice(1, 1, 17).contiguous()});
      }
      for (const Tensor& p : remade.model.parameters()) amp::invalidate_compute_copies(p);
      const train::StepMetrics b = remade.step(batches);
      const amp::CastCacheStats before = amp::cast_cache_stats();
      const train::StepMetrics a = reused.step(batches);
      const amp::CastCacheStats after = amp::cast_cache_stats();
      const std::string at = name + " step " + std::to_string(s);
      EXPECT_TRUE(same_bits(a.loss, b.loss)) << at;
      EXPECT_TRUE(same_bits(a.grad_norm, b.grad_norm)) << at;
      if (s == 0) {
        EXPECT_EQ(after.fp8_casts - before.fp8_casts, 8)
            << at << ": the four Linears of blocks 1 and 2 (FP8 under Policy::named)";
      } else {
        EXPECT_EQ(after.fp8_casts, before.fp8_casts) << at << ": every copy was rewritten by the last step";
        EXPECT_EQ(after.fp8_hits - before.fp8_hits, 16) << at << ": eight weights, two micro-batches";
      }
    }
    const StateDict ma = reused.model.state_dict(), mb = remade.model.state_dict();
    for (const auto& [key, t] : mb) EXPECT_TRUE(same_bits(ma.at(key), t)) << name << " " << key;
    const StateDict oa = reused.trainer.optimizer().state_dict(), ob = remade.trainer.optimizer().state_dict();
    for (const auto& [key, t] : ob) EXPECT_TRUE(same_bits(oa.at(key), t)) << name << " " << key;
    const auto fa = reused.trainer.fp8_state()->state_dict(), fb = remade.trainer.fp8_state()->state_dict();
    ASSERT_FALSE(fb.empty());
    for (const auto& [key, t] : fb) EXPECT_TRUE(same_bits(fa.at(key), t)) << name << " " << key;
  }
}

}  // namespace
}  // namespace mpt
