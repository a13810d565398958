// src/train/init_from.cpp: init_from: weights only, from a Hugging Face directory or a checkpoint (nn::Exportable).
#include "mpt/train/init_from.h"

#include <fstream>
#include <sstream>
#include <string>

#include "io/json_object.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"
#include "mpt/nn/exportable.h"
#include "mpt/train/checkpoint.h"

namespace mpt::train {
namespace {

namespace fs = std::filesystem;

// The weights of `dir` as its file stores them, and the type of model they are for ("module": state-dict names).
struct Source {
  StateDict tensors;
  std::string model_type;
  std::string what;  // for messages: "the Hugging Face directory '...'", "the checkpoint '...'"
  fs::path file;     // the weights' file
};

bool is_checkpoint(const fs::path& dir) {
  std::error_code ec;
  if (fs::exists(dir / "state.json", ec) || fs::exists(dir / "latest", ec)) return true;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec))
    if (e.path().filename().string().starts_with("step-") && e.is_directory(ec)) return true;
  return false;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[init_from] cannot open '{}'", path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

Source read_source(const fs::path& dir) {
  std::error_code ec;
  MPT_CHECK(fs::is_directory(dir, ec), "[init_from] '{}' is not a directory: expected a Hugging Face model directory "
            "(config.json and model.safetensors) or a checkpoint (state.json, or a save directory with latest)",
            dir.string());
  if (is_checkpoint(dir)) {
    CheckpointInfo info;
    StateDict tensors = read_checkpoint_weights(dir, &info);
    return {std::move(tensors), info.model_type, fmt::format("the checkpoint '{}'", info.path.string()),
            info.path / "model.safetensors"};
  }
  const bool has_config = fs::exists(dir / "config.json", ec), has_weights = fs::exists(dir / "model.safetensors", ec);
  MPT_CHECK(has_config && has_weights, "[init_from] '{}' holds no model: expected a Hugging Face model directory "
            "(config.json and model.safetensors; {}) or a checkpoint (state.json, or a save directory with latest or "
            "step-* directories)", dir.string(), has_config ? "no model.safetensors" : has_weights ? "no config.json"
                                                                                    : "neither is there");
  const std::string where = (dir / "config.json").string();
  const nlohmann::json config = io::detail::parse_json_object(read_text(dir / "config.json"), "init_from", where);
  const auto type = config.find("model_type");
  MPT_CHECK(type != config.end() && type->is_string(), "[init_from] {}: no \"model_type\" string: expected a Hugging "
            "Face config.json (\"gpt2\", \"llama\")", where);
  return {io::load_safetensors(dir / "model.safetensors"), type->get<std::string>(),
          fmt::format("the Hugging Face directory '{}'", dir.string()), dir / "model.safetensors"};
}

// Every tensor of `file` whose name `model` also has must have the model's shape.
void check_shapes(const StateDict& model, const StateDict& file, const fs::path& dir) {
  for (const auto& [name, t] : file) {
    const auto it = model.find(name);
    MPT_CHECK(it == model.end() || it->second.shape() == t.shape(), "[init_from] {}: the model has {}, {} has {}",
              name, shape_str(it->second.shape()), dir.string(), shape_str(t.shape()));
  }
}

}  // namespace

void init_from(nn::Module& model, const fs::path& dir) {
  autograd::NoGradGuard no_grad;
  const Source source = read_source(dir);
  const auto* published = dynamic_cast<const nn::Exportable*>(&model);
  const std::string ours = published != nullptr ? published->model_type() : "module";
  MPT_CHECK(source.model_type == ours, "[init_from] {} holds a \"{}\" model, but the model is an nn::{} (\"{}\")",
            source.what, source.model_type, model.type_name(), ours);
  StateDict weights;
  try {
    if (published != nullptr) {
      check_shapes(published->export_state_dict(), source.tensors, dir);
      weights = published->import_state_dict(source.tensors, source.file.string());
    } else {
      check_shapes(model.state_dict(), source.tensors, dir);
      weights = source.tensors;
    }
    model.load_state_dict(weights, /*strict=*/true);
  } catch (const Error& e) {
    const std::string_view msg = e.what();
    if (msg.starts_with("[init_from]")) throw;
    MPT_THROW("[init_from] {}", msg);
  }
}

}  // namespace mpt::train
