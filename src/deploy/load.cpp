// src/deploy/load.cpp: a GPT or Llama rebuilt from a training checkpoint's config.json and weights.
#include <fstream>
#include <sstream>

#include "mpt/core/error.h"
#include "mpt/deploy/export.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/hf_gpt2.h"
#include "mpt/nn/hf_llama.h"
#include "mpt/nn/llama.h"
#include "mpt/nn/quantize.h"
#include "mpt/train/checkpoint.h"

namespace mpt::deploy {

std::unique_ptr<nn::LanguageModel> load_checkpoint_model(const std::filesystem::path& checkpoint, Device device) {
  const std::filesystem::path dir = train::resolve_checkpoint(checkpoint);
  const train::CheckpointInfo info = train::read_checkpoint_info(dir);
  const std::filesystem::path config_path = dir / "config.json";
  std::ifstream in(config_path, std::ios::binary);
  MPT_CHECK(in, "[export] cannot read '{}' (a checkpoint of train_gpt has one)", config_path.string());
  std::stringstream text;
  text << in.rdbuf();
  std::unique_ptr<nn::LanguageModel> model;
  if (info.model_type == "gpt2") {
    nn::GPTConfig c = nn::parse_hf_gpt2_config(text.str(), config_path.string());
    c.where.device = device;
    model = std::make_unique<nn::GPT>(c);
  } else if (info.model_type == "llama") {
    nn::LlamaConfig c = nn::parse_hf_llama_config(text.str(), config_path.string());
    c.where.device = device;
    model = std::make_unique<nn::Llama>(c);
  } else {
    MPT_THROW("[export] the checkpoint {} holds a '{}' model: the exporters know gpt2 and llama", dir.string(),
              info.model_type);
  }
  // A run that learned its weight scales (train_gpt --qat-lsq) saved them as parameters: the model learns them too,
  // so that the checkpoint's tensors have their slots (and the exporters and quantized inference use them).
  if (const auto recorded = amp::QatScheme::from_precision(info.precision); recorded && recorded->learned_scales)
    nn::learn_quantization_scales(*model, amp::QatPolicy::linears_but_head(recorded->scheme));
  train::TrainingState state{.model = model.get(), .precision = info.precision};
  train::load_checkpoint(dir, state);
  return model;
}

}  // namespace mpt::deploy
