// mpt/train/init_from.h: starting a run from pretrained weights (Hugging Face GPT-2 or Llama, or a checkpoint).
#pragma once

#include <filesystem>

#include "mpt/nn/module.h"

namespace mpt::train {

// Copies the weights of `dir` into `model`, and nothing else (no optimizer, schedule, scaler or step). `dir` is
//   - a Hugging Face directory: config.json (its "model_type" must be the model's nn::Exportable::model_type(),
//     "gpt2" for GPT2LMHeadModel, "llama" for LlamaForCausalLM) and model.safetensors in that layout;
//   - a checkpoint of save_checkpoint (a step-* directory with state.json, or a save directory: resolve_checkpoint),
//     of a model of the same type (its model.safetensors's checksum verified).
// Every name and shape is checked before anything is copied: a tensor of another shape throws mpt::Error
// "[init_from] NAME: the model has [..], DIR has [..]" (shapes in the file's layout). Settings that do not change a
// shape (rope_theta, norm epsilon, activation) are the model's own: it is the caller's to build the model alike. A
// directory that is neither throws naming what it expected.
void init_from(nn::Module& model, const std::filesystem::path& dir);

}  // namespace mpt::train
