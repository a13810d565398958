// mpt/train/checkpoint.h: training-state checkpoints: one call saves a run, one call restores it bit for bit.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/fp8/scaling.h"
#include "mpt/train/grad_scaler.h"
#include "mpt/core/generator.h"
#include "mpt/nn/module.h"
#include "mpt/optim/lr_schedule.h"
#include "mpt/optim/optimizer.h"

namespace mpt::dist {
class Communicator;
}

namespace mpt::train {

// A part of a run whose state a checkpoint keeps, by name: small tensors (counters, scales, an EMA's few values) that
// state.json stores exactly as JSON values. state_dict() is read at save and, for the layout check, at load.
struct StatefulPart {
  std::string name{};  // unique within a TrainingState: 1 to 64 of [a-z0-9_-]
  std::function<StateDict()> state_dict{};
  std::function<void(const StateDict&)> load_state_dict{};
};

// The parts of a training run. save_checkpoint writes every part that is set; load_checkpoint restores every part
// that is set and requires the checkpoint to hold it (docs/checkpoints.md lists the files and fields).
struct TrainingState {
  // Required. A model that implements nn::Exportable (nn::GPT, nn::Llama) is stored in its published layout (Hugging
  // Face's) with its config.json; other modules by their state-dict names.
  nn::Module* model = nullptr;
  optim::Optimizer* optimizer = nullptr;
  optim::LrSchedule* schedule = nullptr;
  train::GradScaler* scaler = nullptr;          // its state is saved when enabled
  fp8::Fp8ScalingState* fp8 = nullptr;        // amax histories, scales and the recipe
  Generator* dropout_generator = nullptr;     // the Philox stream dropout draws from (default_generator() if null)
  int64_t step = 0;                           // optimizer steps completed (the next step's index)
  int64_t micro_step = 0;                     // must be 0: checkpoints are taken at step boundaries
  std::string precision{};                    // e.g. "bf16": a run of another precision refuses the checkpoint
  std::string run_config_json = "{}";         // the application's configuration (a JSON object), returned by load
  std::string data_json = "{}";               // its data position and sampler state (a JSON object), returned by load
  // Data parallel: the job's communicator (null or size 1: one process). Every rank calls save and load together.
  // Rank 0 writes the model and the state the ranks share; with optimizer_sharded (DataParallel's ZeRO-1: each
  // rank's optimizer holds only its own parameters, in groups of named parameters) every rank writes its shard
  // optimizer-rank<r>-of-<N>.safetensors. Any number of ranks loads any checkpoint: the shards are merged and each
  // rank keeps the state of the parameters its optimizer holds (re-sharding).
  dist::Communicator* comm = nullptr;
  bool optimizer_sharded = false;
  // Further named parts of the run, saved under state.json's "parts"; a part set here must be in the checkpoint, and
  // its tensors' names, dtypes and shapes must match before anything is restored.
  std::vector<StatefulPart> parts{};
};

struct SaveOptions {
  int64_t keep = 0;  // after a save, delete all but the newest `keep` checkpoints of the directory (0: keep all)
};

// Writes a checkpoint of `state` as `dir`/step-<8-digit step>/ {model.safetensors, optimizer.safetensors, state.json}
// and points `dir`/latest at it. Crash-safe: the files go into a temporary sibling directory, each is fsynced, the
// directory is fsynced and renamed into place, and only then is `latest` replaced (written to a temporary, fsynced,
// renamed): a process killed at any point leaves the previous checkpoint intact and `latest` naming a complete one.
// Temporary directories of earlier killed saves are removed. Returns the checkpoint's directory.
std::filesystem::path save_checkpoint(const std::filesystem::path& dir, const TrainingState& state,
                                      const SaveOptions& options = {});

// `path` as a checkpoint directory: a directory holding state.json is one; a save directory resolves to the
// checkpoint its `latest` names (or, without `latest`, its highest step-* directory). Throws when neither exists.
std::filesystem::path resolve_checkpoint(const std::filesystem::path& path);

// What a checkpoint says about itself: read from state.json (checksum verified) without loading any tensor.
struct CheckpointInfo {
  std::filesystem::path path;  // the checkpoint directory
  int64_t step = 0;
  std::string precision;
  std::string library_version;
  int64_t format_version = 0;
  std::string model_type;       // the model's nn::Exportable::model_type() ("gpt2", "llama"), or "module"
  std::string run_config_json;  // as saved
  std::string data_json;
};
CheckpointInfo read_checkpoint_info(const std::filesystem::path& path);

// Restores `state` from the checkpoint `path` resolves to. Verifies every file's size and checksum (naming the file
// that fails), the format version, world size and rank, precision, the model's type, config and tensor shapes, and
// that every part set in `state` is in the checkpoint, all before modifying anything; then loads the optimizer,
// schedule, scaler, FP8 state, the model (its cached low-precision copies are dropped) and the dropout generator.
// state.step, micro_step, run_config_json and data_json are set from the checkpoint.
CheckpointInfo load_checkpoint(const std::filesystem::path& path, TrainingState& state);

// The model's tensors of the checkpoint `path` resolves to, as model.safetensors stores them (info.model_type's
// published layout, or state-dict names for "module"), its size and checksum verified: the weights alone, for
// starting another run from them (train::init_from). `info`, when given, receives what state.json says.
StateDict read_checkpoint_weights(const std::filesystem::path& path, CheckpointInfo* info = nullptr);

namespace testing {
// Test hook: called at every point of a save where a crash could land (each 1 MiB written, each fsync, rename and
// unlink) with a short label; tests kill the process from it. Empty to remove.
void set_save_hook(std::function<void(std::string_view point)> hook);
}  // namespace testing

}  // namespace mpt::train
