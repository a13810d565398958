// src/train/checkpoint_manifest.h: state.json of a training-state checkpoint: its fields, writer and validating parser.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "mpt/core/dtype.h"
#include "mpt/core/shape.h"

namespace mpt::train::detail {

inline constexpr int64_t kCheckpointFormat = 1;  // the newest format this build writes and reads
inline constexpr uint64_t kMaxManifestBytes = 256ull << 20;
inline constexpr int64_t kMaxJsonTensorElements = int64_t{1} << 24;

// A small tensor kept in state.json (the scaler, the schedule, FP8 scaling): dtype, shape and its bytes. On disk:
// {"dtype": "F32", "shape": [...], "values": [...]}, values as JSON numbers (exact: F32 and F64 round-trip through
// the shortest decimal form) or, for non-finite floats, the strings "inf", "-inf", "nan". F32, F64, I32, I64 only.
struct JsonTensor {
  DType dtype = DType::F32;
  Shape shape;
  std::vector<unsigned char> bytes;
};
using JsonTensorDict = std::map<std::string, JsonTensor>;

struct FileRecord {
  uint64_t bytes = 0;
  std::string xxh3;  // 16 hex digits
};

struct Manifest {
  int64_t format_version = kCheckpointFormat;
  std::string library_version;
  int64_t step = 0;        // optimizer steps completed
  int64_t micro_step = 0;  // micro-batches into the next step: always 0 (saved at step boundaries only)
  int64_t world_size = 1, rank = 0;
  std::string precision;   // the run's precision name ("" when the application named none)
  // An nn::Exportable's model_type() ("gpt2", "llama": model.safetensors and config.json in its published layout) or
  // "module" (model.safetensors by state_dict names).
  std::string model_type;
  nlohmann::json model_config = nullptr;  // an Exportable's config_json() (an object); module: null
  nlohmann::json run_config = nlohmann::json::object();  // the application's configuration
  nlohmann::json data = nlohmann::json::object();        // the application's data position and sampler state
  uint64_t dropout_seed = 0, dropout_offset = 0;         // the Philox stream dropout draws from
  std::optional<JsonTensorDict> lr_schedule, grad_scaler, fp8;  // absent: not part of the run
  nlohmann::json fp8_recipe = nullptr;                          // object when fp8 is present
  std::vector<std::pair<std::string, std::string>> fp8_metas;   // (name, role) in registration order
  // TrainingState::parts by name: state.json's "parts" object (absent when a run has none, as in every checkpoint
  // written before parts existed).
  std::map<std::string, JsonTensorDict> parts;
  // model.safetensors, config.json, and optimizer.safetensors or one optimizer shard per rank of world_size
  std::map<std::string, FileRecord> files;
};

// "module" or a model's type: 1 to 64 of [a-z0-9_-].
bool is_model_type_name(std::string_view name);

// The optimizer shard of rank r of an n-rank ZeRO run: "optimizer-rank00003-of-00004.safetensors".
std::string optimizer_shard_name(int64_t rank, int64_t world_size);

// Pretty-printed JSON (sorted keys) ending with its "checksum": the XXH3-64 of the compact dump of every other field.
std::string write_manifest(const Manifest& m);
// Validates every field (types, ranges, sizes; an unknown newer format_version first) and, when verify_checksum,
// the checksum. Throws mpt::Error "[checkpoint] <where>: key "<key>": expected ..., got ..." on the first problem.
Manifest parse_manifest(std::string_view text, const std::string& where, bool verify_checksum = true);


}  // namespace mpt::train::detail
