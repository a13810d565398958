// mpt/nn/exportable.h: a model that tells checkpoints its type, its config and its weights in a published layout.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "mpt/core/state_dict.h"

namespace mpt::nn {

// Where a recorded config describes another architecture than a model's: the key and both values as JSON text.
struct ConfigDifference {
  std::string key;
  std::string saved;  // "none" when the recorded config lacks the key
  std::string ours;
};

// Implemented by the models that checkpoints store in a published layout (nn::GPT: Hugging Face GPT-2; nn::Llama:
// LlamaForCausalLM) instead of by state-dict name. train::save_checkpoint, load_checkpoint and init_from reach a
// model's layout only through this interface (a cross-cast from nn::Module), never through its concrete type.
class Exportable {
 public:
  virtual ~Exportable() = default;

  // The type a checkpoint records (state.json's model.type) and config.json's "model_type": "gpt2", "llama".
  virtual std::string model_type() const = 0;
  // The configuration a checkpoint records (state.json's model.config): a JSON object's text.
  virtual std::string config_json() const = 0;
  // The first key in which `saved` (config_json() of the saved model) describes weights of other shapes or another
  // function than this model's; nullopt when they fit. Initialisation seeds and dropout may differ.
  virtual std::optional<ConfigDifference> config_difference(std::string_view saved) const = 0;

  // config.json of the published layout, written beside export_state_dict()'s tensors.
  virtual std::string export_config_json() const = 0;
  // The weights as the published layout stores them (its names, its transposes), bit-identical to the parameters.
  virtual StateDict export_state_dict() const = 0;
  // `tensors` in the published layout (as a file holds them) converted to this model's state_dict() names and layout.
  // Checks every name and shape first and throws naming `where`, the tensor and both shapes; modifies nothing (pass
  // the result to Module::load_state_dict).
  virtual StateDict import_state_dict(const StateDict& tensors, const std::string& where) const = 0;
};

}  // namespace mpt::nn
