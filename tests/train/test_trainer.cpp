// tests/train/test_trainer.cpp: the Trainer's step equals the hand-ordered step it replaces, bit for bit (its optimizer
// state made before the first forward); FP16 gets a loss scaler that skips an overflowing step; FP8 delayed scaling
// updates its scales every step; resume is bit-exact.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <vector>

#include "mpt/mpt.h"
#include "mpt/train/trainer.h"
#include "test_util.h"

namespace mpt {
namespace {

nn::GPTConfig tiny() {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.seed = 7;
  return c;
}

// Batch `i` of micro-batch `m`: deterministic token ids [4, 16] and their next tokens.
std::pair<Tensor, Tensor> batch(int64_t step, int64_t micro) {
  std::vector<int64_t> x(64), y(64);
  for (int64_t i = 0; i < 64; ++i) {
    x[i] = (i * 5 + step * 3 + micro * 11) % 32;
    y[i] = (x[i] * 7 + 1) % 32;
  }
  return {Tensor::from_vector(x, {4, 16}), Tensor::from_vector(y, {4, 16})};
}

std::vector<std::vector<float>> weights(const nn::Module& m) {
  std::vector<std::vector<float>> w;
  for (const auto& p : m.named_parameters()) w.push_back(p.tensor.to_vector<float>());
  return w;
}

// The step every program wrote by hand before the Trainer: zero, k scaled micro-batch backwards, unscale, clip, step.
TEST(Trainer, StepEqualsTheHandOrderedStepBitForBit) {
  for (const char* precision : {"fp32", "bf16"}) {
    SCOPED_TRACE(precision);
    nn::GPT by_hand(tiny()), by_trainer(tiny());
    const amp::Policy policy = amp::Policy::named(precision, 2, Device::cpu());
    const std::vector<optim::ParamGroup> groups = optim::weight_decay_groups(by_hand.named_parameters(), 0.1);
    optim::AdamW opt(groups, {.lr = 1e-2});
    std::vector<Tensor> params;  // in the optimizer's order, as the Trainer clips them (the norm's summation order)
    for (const auto& g : groups) params.insert(params.end(), g.params.begin(), g.params.end());
    train::Trainer trainer(by_trainer, train::adamw({.lr = 1e-2}),
                           {.policy = policy, .grad_accum = 2, .clip = 0.5, .weight_decay = 0.1});
    for (int64_t step = 0; step < 3; ++step) {
      opt.zero_grad();
      double hand_loss = 0;
      for (int64_t m = 0; m < 2; ++m) {
        const auto [x, y] = batch(step, m);
        Tensor loss;
        {
          amp::Autocast autocast(policy);
          loss = by_hand.loss(x, y);
        }
        ops::scale(loss, 0.5).backward();
        hand_loss += loss.item<double>() / 2;
      }
      const double hand_norm = optim::clip_grad_norm_(params, 0.5).item<double>();
      opt.step();
      const train::StepMetrics metrics = trainer.step([&](int64_t m) {
        if (step == 0) {  // the optimizer's state is made before the first forward (Optimizer::materialize_state)
          const optim::ParamState* st = trainer.optimizer().state(0, 0);
          EXPECT_TRUE(st != nullptr && st->steps() == 0) << "micro-batch " << m;
        }
        const auto [x, y] = batch(step, m);
        return by_trainer.loss(x, y);
      });
      EXPECT_EQ(metrics.step, step);
      EXPECT_NEAR(metrics.loss.item<double>(), hand_loss, 1e-6 * std::abs(hand_loss));
      EXPECT_EQ(metrics.grad_norm.item<double>(), hand_norm);
      ASSERT_EQ(weights(by_trainer), weights(by_hand)) << "step " << step;
    }
    EXPECT_EQ(trainer.steps_done(), 3);
    EXPECT_FALSE(trainer.scaler().is_enabled());  // no loss scaler outside FP16
  }
}

TEST(Trainer, Fp16HasALossScalerThatSkipsAnOverflowingStep) {
  nn::GPT model(tiny());
  train::Trainer trainer(model, train::adamw({.lr = 1e-2}),
                         {.policy = amp::Policy::named("fp16", 2, Device::cpu()), .scaler = {.init_scale = 1024.0}});
  ASSERT_TRUE(trainer.scaler().is_enabled());
  EXPECT_EQ(trainer.scaler().get_scale(), 1024.0);
  const auto before = weights(model);
  const train::StepMetrics m = trainer.step([&](int64_t) {
    const auto [x, y] = batch(0, 0);
    return ops::scale(model.loss(x, y), std::numeric_limits<double>::infinity());  // an overflow
  });
  EXPECT_FALSE(static_cast<bool>(m.stepped));
  EXPECT_EQ(weights(model), before);  // skipped: no parameter moved
  EXPECT_EQ(trainer.scaler().get_scale(), 512.0);  // backed off by 0.5
  EXPECT_EQ(trainer.skipped_steps(), 1);
  const train::StepMetrics ok = trainer.step([&](int64_t) {
    const auto [x, y] = batch(1, 0);
    return model.loss(x, y);
  });
  EXPECT_TRUE(static_cast<bool>(ok.stepped));
  EXPECT_NE(weights(model), before);
  EXPECT_EQ(trainer.skipped_steps(), 1);
}

TEST(Trainer, Fp8DelayedScalingUpdatesItsScalesEveryStep) {
  nn::GPTConfig c = tiny();
  c.n_layer = 3;  // the middle block runs in FP8 (the first and last stay in BF16)
  nn::GPT model(c);
  train::Trainer trainer(model, train::adamw({.lr = 1e-2}),
                         {.policy = amp::Policy::named("fp8-delayed", 3, Device::cpu()),
                          .precision_name = "fp8-delayed", .fp8_telemetry_every = 2});
  fp8::Fp8ScalingState* fp8 = trainer.fp8_state();
  ASSERT_NE(fp8, nullptr);
  for (int64_t step = 0; step < 3; ++step) {
    const train::StepMetrics m = trainer.step([&](int64_t) {
      const auto [x, y] = batch(step, 0);
      return model.loss(x, y);
    });
    EXPECT_EQ(fp8->num_updates(), step + 1);
    EXPECT_EQ(m.fp8_telemetry.empty(), step % 2 == 1) << "telemetry every 2 steps, at step " << step;
  }
  ASSERT_FALSE(fp8->metas().empty());
  // After the updates the scale is the recipe's, fp8_max / max(amax history) (margin 0), no longer the initial 1.
  const auto meta = fp8->meta("h.1.attn.c_attn.input");
  const std::vector<float> history = meta->amax_history.to_vector<float>();
  const float amax = *std::max_element(history.begin(), history.end());
  ASSERT_GT(amax, 0.0f);
  EXPECT_FLOAT_EQ(meta->scale.item<float>(), fp8::fp8_max(DType::F8E4M3) / amax);
  EXPECT_FALSE(fp8->collect_telemetry());
}

TEST(Trainer, ResumeIsBitExact) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mpt_trainer_resume_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  const auto run = [&](nn::GPT& model, int64_t steps, train::Trainer& trainer) {
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t step = trainer.steps_done();
      trainer.step([&](int64_t m) {
        const auto [x, y] = batch(step, m);
        return model.loss(x, y);
      });
    }
  };
  const train::TrainerOptions options{.policy = amp::Policy::named("bf16", 2, Device::cpu()), .grad_accum = 2,
                                      .schedule = train::warmup_cosine(
                                          {.max_lr = 1e-2, .min_lr = 1e-3, .warmup_steps = 1, .total_steps = 4})};
  nn::GPT straight(tiny());
  train::Trainer a(straight, train::adamw({.lr = 1e-2}), options);
  run(straight, 4, a);

  nn::GPT first(tiny());
  train::Trainer b(first, train::adamw({.lr = 1e-2}), options);
  run(first, 2, b);
  b.save(dir, {}, "{}", R"({"where": 2})");
  nn::GPT resumed(tiny());
  train::Trainer c(resumed, train::adamw({.lr = 1e-2}), options);
  const train::CheckpointInfo info = c.load(dir);
  EXPECT_EQ(info.step, 2);
  EXPECT_EQ(c.steps_done(), 2);
  EXPECT_NE(info.data_json.find("\"where\":2"), std::string::npos);  // the application's data state comes back
  run(resumed, 2, c);
  EXPECT_EQ(weights(resumed), weights(straight));
  EXPECT_EQ(c.schedule()->current_lr(), a.schedule()->current_lr());
  std::filesystem::remove_all(dir);
}

// A part of the run the application adds (TrainingState::parts) travels with the checkpoint by name.
TEST(Trainer, SavesAndRestoresNamedParts) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mpt_trainer_parts_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  double ema = 0.25;  // the state of the application's part
  const auto part = [&](double& value) {
    return train::StatefulPart{
        .name = "loss-ema",
        .state_dict = [&value] { return StateDict{{"value", Tensor::full({}, value, DType::F64)}}; },
        .load_state_dict = [&value](const StateDict& d) { value = d.at("value").item<double>(); }};
  };
  nn::GPT a(tiny());
  train::Trainer first(a, train::adamw({.lr = 1e-2}));
  first.add_state(part(ema));
  first.step([&](int64_t) {
    const auto [x, y] = batch(0, 0);
    return a.loss(x, y);
  });
  ema = 0.1 + 1.0 / 3;  // a value whose f64 bits must survive the JSON round trip
  first.save(dir);
  double restored = 0;
  nn::GPT b(tiny());
  train::Trainer second(b, train::adamw({.lr = 1e-2}));
  second.add_state(part(restored));
  second.load(dir);
  EXPECT_EQ(restored, 0.1 + 1.0 / 3);
  // A run with a part the checkpoint does not hold is refused before anything changes.
  double other = 7;
  nn::GPT c(tiny());
  train::Trainer third(c, train::adamw({.lr = 1e-2}));
  third.add_state({.name = "other",
                   .state_dict = [&] { return StateDict{{"v", Tensor::full({}, other, DType::F64)}}; },
                   .load_state_dict = [&](const StateDict& d) { other = d.at("v").item<double>(); }});
  try {
    third.load(dir);
    FAIL() << "a missing part was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key \"parts.other\" is missing"), std::string::npos) << e.what();
  }
  EXPECT_EQ(other, 7);
  EXPECT_EQ(third.steps_done(), 0);
  std::filesystem::remove_all(dir);
}

TEST(Trainer, RefusesWhatCannotTrain) {
  nn::GPT model(tiny());
  EXPECT_THROW(train::Trainer(model, nullptr), Error);
  EXPECT_THROW(train::Trainer(model, train::adamw({}), {.grad_accum = 0}), Error);
  model.requires_grad_(false);
  try {
    train::Trainer t(model, train::adamw({}));
    FAIL() << "a model without a trainable parameter was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no trainable parameter"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mpt
