// examples/common/models.h: the GPT-2 or Llama a run's options describe, and whether it fits in memory.
#pragma once

#include <cstdint>
#include <memory>

#include "mpt/core/device.h"
#include "mpt/nn/language_model.h"
#include "run_options.h"

namespace mpt_examples {

// Refuses (GPT-2) a configuration whose weights, optimizer state and activations cannot fit in the device's memory,
// before allocating any of it.
void check_memory(const Options& o, int64_t vocab, mpt::Device device);

// The model --model names, on `device`, initialised from --seed (which also seeds the dropout stream).
std::unique_ptr<mpt::nn::LanguageModel> make_model(const Options& o, int64_t vocab, mpt::Device device);

}  // namespace mpt_examples
