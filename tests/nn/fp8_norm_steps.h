// tests/nn/fp8_norm_steps.h: three FP8 training steps of a language model on fixed tokens, recorded for the tests
// that compare the norms' FP8 input codes with the layers' own quantizations (GPT, Llama).
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <vector>

#include "mpt/mpt.h"

namespace mpt::testing {

struct Fp8NormSteps {
  std::vector<float> losses;
  std::vector<std::vector<float>> grads;  // every parameter's, step after step
  std::vector<float> scales;              // every meta's after each update
};

// 3 steps on 3 sequences of 16 tokens below 37 (the model's vocabulary at least that), each forward under `policy`'s
// Autocast after `check()` (the input formats the norms are asked for), then backward, the gradients recorded and
// cleared, and the scaling state updated.
inline Fp8NormSteps run_fp8_norm_steps(const nn::LanguageModel& model, const amp::Policy& policy,
                                       const std::function<void()>& check) {
  Generator data(5);
  const Tensor ids = Tensor::uniform({3, 17}, 0, 37, DType::F32, Device::cpu(), data).to(DType::I64);
  Fp8NormSteps s;
  for (int step = 0; step < 3; ++step) {
    Tensor loss;
    {
      amp::Autocast autocast(policy);
      check();
      loss = model.loss(ids.slice(1, 0, 16).contiguous(), ids.slice(1, 1, 17).contiguous());
    }
    loss.backward();
    s.losses.push_back(loss.item<float>());
    for (const auto& p : model.named_parameters()) {
      s.grads.push_back(p.tensor.grad().to_vector<float>());
      p.tensor.set_grad(Tensor());
    }
    policy.fp8_state->update();
    for (const auto& m : policy.fp8_state->metas()) s.scales.push_back(m->scale.item<float>());
  }
  return s;
}

// The two runs' losses and every gradient, bit for bit.
inline void expect_same_losses_and_grads(const Fp8NormSteps& a, const Fp8NormSteps& b) {
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)), 0);
  ASSERT_EQ(a.grads.size(), b.grads.size());
  for (size_t i = 0; i < a.grads.size(); ++i) {
    ASSERT_EQ(a.grads[i].size(), b.grads[i].size());
    EXPECT_EQ(std::memcmp(a.grads[i].data(), b.grads[i].data(), a.grads[i].size() * sizeof(float)), 0)
        << "gradient " << i;
  }
}

}  // namespace mpt::testing
