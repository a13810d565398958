// tests/tools/hf_test_model.h: the GPT whose Hugging Face export the goldens hold (tests/goldens/hf_gpt2/ours).
#pragma once

#include <memory>

#include "mpt/autograd/grad_mode.h"
#include "mpt/core/generator.h"
#include "mpt/nn/gpt.h"

namespace mpt::testing {

// vocab 67, context 24, 2 layers, 4 heads, 32 wide (the size of tools/make_hf_goldens.py's model), GPT-2 initialised
// from seed 1234; then every bias and LayerNorm parameter is drawn (biases and LayerNorm shifts N(0, 0.02), LayerNorm
// gains 1 + N(0, 0.1)) so that the export of every tensor is checked, not only of the weights.
inline std::unique_ptr<nn::GPT> make_hf_test_model() {
  nn::GPTConfig c;
  c.vocab_size = 67;
  c.block_size = 24;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 32;
  c.seed = 1234;
  auto model = std::make_unique<nn::GPT>(c);
  autograd::NoGradGuard no_grad;
  Generator gen(4321);
  for (const mpt::NamedParameter& p : model->named_parameters()) {
    Tensor t = p.tensor.detach();
    const bool ln = p.name.find("ln_") != std::string::npos;
    if (p.name.ends_with(".bias")) t.normal_(0, 0.02, gen);
    if (ln && p.name.ends_with(".weight")) t.normal_(1, 0.1, gen);
  }
  return model;
}

}  // namespace mpt::testing
