// src/train/checkpoint.cpp: save_checkpoint (temporary directory, fsync, rename, `latest`, keep K) and load_checkpoint.
#include "mpt/train/checkpoint.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <vector>

#include "train/checkpoint_manifest.h"
#include "io/checksum.h"
#include "io/durable_file.h"
#include "io/json_object.h"
#include "io/safetensors_format.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"
#include "mpt/core/version.h"
#include "mpt/dist/communicator.h"
#include "mpt/io/safetensors.h"
#include "mpt/nn/exportable.h"

// Checkpoints are written with io's durable files, checksums and safetensors.
using namespace mpt::io;          // NOLINT(google-build-using-namespace)
using namespace mpt::io::detail;  // NOLINT(google-build-using-namespace)
using namespace mpt::train::detail;  // NOLINT(google-build-using-namespace)

namespace mpt::train {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using io::detail::save_point;

using io::detail::errno_text;

void fsync_dir(const fs::path& dir) { io::detail::fsync_dir(dir, "checkpoint"); }

void write_file_durably(const fs::path& path, const std::string& text) {
  io::detail::write_file_durably(path, text, "checkpoint");
}

std::string read_small_file(const fs::path& path, uint64_t limit) {
  std::error_code ec;
  const auto status = fs::status(path, ec);
  MPT_CHECK(fs::exists(status), "[checkpoint] {}: no such file", path.string());
  MPT_CHECK(fs::is_regular_file(status), "[checkpoint] {}: not a regular file", path.string());
  const uintmax_t size = fs::file_size(path, ec);
  MPT_CHECK(!ec && size <= limit, "[checkpoint] {}: {} bytes, more than the {} it may hold", path.string(),
            ec ? 0 : size, limit);
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[checkpoint] {}: cannot open for reading: {}", path.string(), errno_text(errno));
  std::ostringstream s;
  s << in.rdbuf();
  MPT_CHECK(!in.bad(), "[checkpoint] {}: read failed", path.string());
  return s.str();
}

std::string step_dir_name(int64_t step) { return fmt::format("step-{:08}", step); }

// The step of a "step-<digits>" name; nullopt for any other name.
std::optional<int64_t> parse_step_dir(const std::string& name) {
  if (!name.starts_with("step-") || name.size() == 5 || name.size() > 5 + 18) return std::nullopt;
  int64_t step = 0;
  for (char c : name.substr(5)) {
    if (c < '0' || c > '9') return std::nullopt;
    step = step * 10 + (c - '0');
  }
  return step;
}

// Step directories of `dir` (complete checkpoints: only renames create them), sorted by step.
std::vector<std::pair<int64_t, fs::path>> step_dirs(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> out;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const auto step = parse_step_dir(e.path().filename().string());
    if (step && e.is_directory(ec)) out.emplace_back(*step, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// ---- tensors <-> state.json ----

detail::JsonTensor to_json_tensor(const Tensor& t) {
  const Tensor host = t.to(Device::cpu()).contiguous();
  detail::JsonTensor out{host.dtype(), host.shape(), {}};
  out.bytes.resize(host.nbytes());
  if (host.nbytes() > 0) std::memcpy(out.bytes.data(), host.data_ptr(), host.nbytes());
  return out;
}

detail::JsonTensorDict to_json_dict(const std::map<std::string, Tensor>& d) {
  detail::JsonTensorDict out;
  for (const auto& [k, t] : d) out.emplace(k, to_json_tensor(t));
  return out;
}

std::map<std::string, Tensor> to_tensors(const detail::JsonTensorDict& d) {
  std::map<std::string, Tensor> out;
  for (const auto& [k, jt] : d) {
    Tensor t = Tensor::empty(jt.shape, jt.dtype);
    if (!jt.bytes.empty()) std::memcpy(t.data_ptr(), jt.bytes.data(), jt.bytes.size());
    out.emplace(k, t);
  }
  return out;
}

const char* format_name(fp8::Fp8Format f) { return f == fp8::Fp8Format::Hybrid ? "hybrid" : "e4m3"; }

json recipe_json(const fp8::Fp8Recipe& recipe) {
  if (const auto* d = std::get_if<fp8::DelayedScaling>(&recipe))
    return {{"kind", "delayed"}, {"amax_history_len", d->amax_history_len},
            {"amax_algo", d->algo == fp8::AmaxAlgo::Max ? "max" : "most_recent"}, {"margin", d->margin},
            {"format", format_name(d->format)}};
  if (const auto* c = std::get_if<fp8::CurrentScaling>(&recipe))
    return {{"kind", "current"}, {"format", format_name(c->format)}, {"power_2_scale", c->power_2_scale},
            {"amax_epsilon", static_cast<double>(c->amax_epsilon)}};
  const auto& b = std::get<fp8::BlockScaling>(recipe);
  return {{"kind", "block"}, {"power_2_scale", b.power_2_scale}};
}

fp8::Fp8Role parse_role(const std::string& role) {
  if (role == "weight") return fp8::Fp8Role::Weight;
  if (role == "grad_output") return fp8::Fp8Role::GradOutput;
  return fp8::Fp8Role::Input;
}

// The model's view of itself for checkpoints; null for a module saved by its state-dict names.
const nn::Exportable* exportable(const nn::Module* model) { return dynamic_cast<const nn::Exportable*>(model); }

// "an nn::GPT (\"gpt2\")", "an nn::Linear, saved by its state-dict names (\"module\")".
std::string describe_model(const nn::Module& model) {
  const nn::Exportable* e = exportable(&model);
  return e != nullptr ? fmt::format("an nn::{} (\"{}\")", model.type_name(), e->model_type())
                      : fmt::format("an nn::{}, saved by its state-dict names (\"module\")", model.type_name());
}

// Every key of `current` in `saved` with the same shape (dtype converts), and no other key.
void check_same_layout(const std::map<std::string, Tensor>& saved, const std::map<std::string, Tensor>& current,
                       const std::string& where, const std::string& part) {
  for (const auto& [k, t] : current) {
    const auto it = saved.find(k);
    MPT_CHECK(it != saved.end(), "[checkpoint] {}: {} has no \"{}\" (this run's {} expects shape {})", where, part, k,
              part, shape_str(t.shape()));
    MPT_CHECK(it->second.shape() == t.shape(), "[checkpoint] {}: {} \"{}\" has shape {}, but this run's is {}: the "
              "checkpoint is of another model", where, part, k, shape_str(it->second.shape()), shape_str(t.shape()));
  }
  for (const auto& [k, t] : saved)
    MPT_CHECK(current.count(k) == 1, "[checkpoint] {}: {} has \"{}\" (shape {}), which this run does not", where,
              part, k, shape_str(t.shape()));
}

struct Parsed {
  CheckpointInfo info;
  detail::Manifest manifest;
};

Parsed read_manifest(const fs::path& path) {
  Parsed p;
  p.info.path = resolve_checkpoint(path);
  const fs::path file = p.info.path / "state.json";
  p.manifest = detail::parse_manifest(read_small_file(file, detail::kMaxManifestBytes), file.string());
  p.info.step = p.manifest.step;
  p.info.precision = p.manifest.precision;
  p.info.library_version = p.manifest.library_version;
  p.info.format_version = p.manifest.format_version;
  p.info.model_type = p.manifest.model_type;
  p.info.run_config_json = p.manifest.run_config.dump();
  p.info.data_json = p.manifest.data.dump();
  return p;
}

void verify_files(const fs::path& dir, const detail::Manifest& m) {
  for (const auto& [name, rec] : m.files) {
    const fs::path file = dir / name;
    std::error_code ec;
    MPT_CHECK(fs::is_regular_file(file, ec), "[checkpoint] {}: missing (state.json lists it with {} bytes)",
              file.string(), rec.bytes);
    const io::detail::FileDigest d = io::detail::digest_file(file);
    MPT_CHECK(d.bytes == rec.bytes && io::detail::hex64(d.xxh3) == rec.xxh3, "[checkpoint] {}: checksum mismatch: "
              "state.json records {} bytes with xxh3 {}, the file has {} bytes with xxh3 {}: it is damaged or was "
              "replaced", file.string(), rec.bytes, rec.xxh3, d.bytes, io::detail::hex64(d.xxh3));
  }
}

}  // namespace

// Every rank learns whether any rank failed (the first failure's rank is named; one collective per call).
void agree_or_throw(dist::Communicator* comm, const std::string& failure, const char* phase) {
  if (comm == nullptr || comm->size() == 1) {
    if (!failure.empty()) throw Error(failure);
    return;
  }
  Tensor flag = Tensor::full({1}, failure.empty() ? 0.0 : static_cast<double>(comm->rank() + 1), DType::F32);
  comm->all_reduce(flag, dist::ReduceOp::Max)->wait();
  const auto culprit = static_cast<int>(flag.to_vector<float>()[0]) - 1;
  if (!failure.empty()) throw Error(failure);
  MPT_CHECK(culprit < 0, "[checkpoint] {} failed on rank {} (its error names the cause)", phase, culprit);
}

// Tells the other ranks (waiting in agree_or_throw) how rank 0's part of a save ended, also when it throws.
struct Rank0Outcome {
  explicit Rank0Outcome(dist::Communicator* c) : comm(c) {}
  dist::Communicator* comm;
  bool told = false;
  void tell(bool ok) {
    told = true;
    if (comm == nullptr || comm->size() == 1) return;
    Tensor flag = Tensor::full({1}, ok ? 0.0 : 1.0, DType::F32);
    comm->all_reduce(flag, dist::ReduceOp::Max)->wait();
  }
  Rank0Outcome(const Rank0Outcome&) = delete;
  Rank0Outcome& operator=(const Rank0Outcome&) = delete;
  ~Rank0Outcome() {
    if (told) return;
    try {
      tell(false);
    } catch (...) {  // the error in flight is the one to report
    }
  }
};

// The optimizer's state: optimizer.safetensors, or every rank's shard merged. A sharded optimizer keeps the
// hyperparameters of its groups and the state of the parameters it holds (by name), whatever the saving world size.
nn::StateDict load_optimizer_dict(const fs::path& dir, const detail::Manifest& m, const TrainingState& state) {
  nn::StateDict dict;
  if (m.files.count("optimizer.safetensors") == 1) {
    dict = load_safetensors(dir / "optimizer.safetensors");
  } else {
    for (int64_t r = 0; r < m.world_size; ++r)
      for (auto& [k, t] : load_safetensors(dir / detail::optimizer_shard_name(r, m.world_size))) dict.emplace(k, t);
  }
  if (!state.optimizer_sharded) return dict;
  std::set<std::string> mine;
  for (const optim::ParamGroup& g : state.optimizer->param_groups()) {
    MPT_CHECK(g.names.size() == g.params.size(), "[checkpoint] load_checkpoint: a sharded optimizer needs named "
              "parameters: its state is found by name");
    mine.insert(g.names.begin(), g.names.end());
  }
  nn::StateDict kept;
  for (auto& [k, t] : dict) {
    const size_t dot = k.rfind('.');
    if (k.starts_with("group") || (dot != std::string::npos && mine.count(k.substr(0, dot)) == 1)) kept.emplace(k, t);
  }
  return kept;
}

// ---- save ----

fs::path save_checkpoint(const fs::path& dir, const TrainingState& state, const SaveOptions& options) {
  MPT_CHECK(state.model != nullptr, "[checkpoint] save_checkpoint: TrainingState::model is required");
  MPT_CHECK(state.micro_step == 0, "[checkpoint] save_checkpoint: micro_step {}: checkpoints are taken at step "
            "boundaries (after the optimizer step of a gradient-accumulation window), not inside a window",
            state.micro_step);
  MPT_CHECK(state.step >= 0 && options.keep >= 0, "[checkpoint] save_checkpoint: step {} and keep {} must be >= 0",
            state.step, options.keep);
  const int world = state.comm != nullptr ? state.comm->size() : 1;
  const int me = state.comm != nullptr ? state.comm->rank() : 0;
  MPT_CHECK(!state.optimizer_sharded || state.optimizer != nullptr, "[checkpoint] save_checkpoint: "
            "optimizer_sharded without an optimizer");
  if (state.optimizer_sharded)
    for (const optim::ParamGroup& g : state.optimizer->param_groups())
      MPT_CHECK(g.names.size() == g.params.size(), "[checkpoint] save_checkpoint: a sharded optimizer needs named "
                "parameters (optim::weight_decay_groups keeps the names): its state is merged by name on load");
  autograd::NoGradGuard no_grad;
  detail::Manifest m;
  m.library_version = version();
  m.step = state.step;
  m.world_size = world;
  m.rank = 0;  // the writer
  m.precision = state.precision;
  m.run_config = io::detail::parse_json_object(state.run_config_json, "checkpoint", "TrainingState::run_config_json");
  m.data = io::detail::parse_json_object(state.data_json, "checkpoint", "TrainingState::data_json");
  const Generator& gen = state.dropout_generator != nullptr ? *state.dropout_generator : default_generator();
  m.dropout_seed = gen.seed();
  m.dropout_offset = gen.offset();
  if (state.schedule != nullptr) m.lr_schedule = to_json_dict(state.schedule->state_dict());
  if (state.scaler != nullptr && state.scaler->is_enabled()) m.grad_scaler = to_json_dict(state.scaler->state_dict());
  if (state.fp8 != nullptr) {
    m.fp8 = to_json_dict(state.fp8->state_dict());
    m.fp8_recipe = recipe_json(state.fp8->recipe());
    for (const auto& meta : state.fp8->metas()) m.fp8_metas.emplace_back(meta->name, fp8::to_string(meta->role));
  }
  for (const StatefulPart& part : state.parts) {
    MPT_CHECK(part.state_dict && part.load_state_dict && detail::is_model_type_name(part.name) &&
              m.parts.count(part.name) == 0, "[checkpoint] save_checkpoint: TrainingState::parts: a part needs a "
              "unique name of up to 64 of [a-z0-9_-] and both functions, got \"{}\"", part.name);
    m.parts.emplace(part.name, to_json_dict(part.state_dict()));
  }
  const nn::Exportable* published = exportable(state.model);
  if (published != nullptr) {
    const std::string type = published->model_type();
    MPT_CHECK(type != "module" && detail::is_model_type_name(type), "[checkpoint] save_checkpoint: the model's "
              "model_type() \"{}\" is not a type a checkpoint can record (up to 64 of [a-z0-9_-], not \"module\")",
              type);
  }

  std::error_code ec;
  const std::string name = step_dir_name(state.step);
  // Every rank writes into one temporary directory (named alike on every rank, which share the file system).
  const fs::path tmp = dir / (world > 1 ? fmt::format(".tmp-{}-dp{}", name, world)
                                        : fmt::format(".tmp-{}-{}", name, ::getpid()));
  std::string failure;
  if (me == 0) {
    try {
      fs::create_directories(dir, ec);
      MPT_CHECK(!ec, "[checkpoint] cannot create the directory '{}': {}", dir.string(), ec.message());
      std::vector<fs::path> leftovers;  // of killed saves (collected first: no removal while iterating)
      for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
        const std::string n = e.path().filename().string();
        if (n.starts_with(".tmp-step-") || n.starts_with(".trash-step-") || n.starts_with(".latest.tmp-"))
          leftovers.push_back(e.path());
      }
      for (const fs::path& p : leftovers) fs::remove_all(p, ec);
      save_point("create directory");
      MPT_CHECK(fs::create_directory(tmp, ec) && !ec, "[checkpoint] cannot create the directory '{}': {}",
                tmp.string(), ec.message());
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  agree_or_throw(state.comm, failure, "creating the checkpoint directory");
  if (state.optimizer_sharded) {  // every rank's shard (rank 0 hashes them all below)
    try {
      io::detail::save_safetensors_hashed(tmp / detail::optimizer_shard_name(me, world), state.optimizer->state_dict(),
                                      {{"format", "mptrain"}, {"optimizer", state.optimizer->name()}});
    } catch (const Error& e) {
      failure = e.what();
    }
    agree_or_throw(state.comm, failure, "writing the optimizer shards");
  }
  if (me != 0) {  // rank 0 finishes the checkpoint; the others learn whether it succeeded
    agree_or_throw(state.comm, failure, "rank 0 finishing the checkpoint");
    return dir / name;
  }
  Rank0Outcome outcome{state.comm};
  try {
    auto record = [&](const char* file, const io::detail::FileDigest& d) {
      m.files.emplace(file, detail::FileRecord{d.bytes, io::detail::hex64(d.xxh3)});
    };
    if (published != nullptr) {  // the directory loads in Hugging Face transformers as it is
      m.model_type = published->model_type();
      m.model_config = io::detail::parse_json_object(published->config_json(), "checkpoint", "the model's config");
      record("model.safetensors", io::detail::save_safetensors_hashed(tmp / "model.safetensors",
                                                                      published->export_state_dict(),
                                                                      {{"format", "pt"}}));
      const std::string config = published->export_config_json();
      write_file_durably(tmp / "config.json", config);
      record("config.json", {config.size(), io::detail::xxh3_64(config.data(), config.size())});
    } else {
      m.model_type = "module";
      record("model.safetensors", io::detail::save_safetensors_hashed(tmp / "model.safetensors",
                                                                      state.model->state_dict(),
                                                                      {{"format", "mptrain"}}));
    }
    if (state.optimizer_sharded) {
      std::vector<std::string> shards;  // recorded by name (owned strings: record keeps the pointer's text)
      for (int r = 0; r < world; ++r) shards.push_back(detail::optimizer_shard_name(r, world));
      for (const std::string& shard : shards) {
        const io::detail::FileDigest d = io::detail::digest_file(tmp / shard);
        m.files.emplace(shard, detail::FileRecord{d.bytes, io::detail::hex64(d.xxh3)});
      }
    } else if (state.optimizer != nullptr) {
      record("optimizer.safetensors",
             io::detail::save_safetensors_hashed(tmp / "optimizer.safetensors", state.optimizer->state_dict(),
                                             {{"format", "mptrain"}, {"optimizer", state.optimizer->name()}}));
    }
    write_file_durably(tmp / "state.json", detail::write_manifest(m));
    fsync_dir(tmp);
  } catch (...) {
    fs::remove_all(tmp, ec);
    throw;
  }

  // Into place: a new name is a plain rename; an existing checkpoint of the same step is swapped atomically.
  const fs::path final_dir = dir / name;
  save_point("rename directory");
  if (::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_NOREPLACE) != 0) {
    int err = errno;
    if (err == EEXIST &&
        ::renameat2(AT_FDCWD, tmp.c_str(), AT_FDCWD, final_dir.c_str(), RENAME_EXCHANGE) == 0) {
      err = 0;
    } else if (err == EINVAL || (err == EEXIST && errno == EINVAL)) {  // a file system without renameat2 flags
      if (fs::exists(final_dir, ec)) fs::remove_all(final_dir, ec);
      err = ::rename(tmp.c_str(), final_dir.c_str()) == 0 ? 0 : errno;
    } else if (err == EEXIST) {
      err = errno;
    }
    MPT_CHECK(err == 0, "[checkpoint] cannot move '{}' into place as '{}': {}", tmp.string(), final_dir.string(),
              errno_text(err));
  }
  fsync_dir(dir);
  write_file_durably(dir / "latest", name + "\n");
  fs::remove_all(tmp, ec);  // the replaced checkpoint of the same step, if any

  if (options.keep > 0) {
    const auto dirs = step_dirs(dir);
    for (size_t i = 0; i + static_cast<size_t>(options.keep) < dirs.size(); ++i) {
      if (dirs[i].second.filename() == name) continue;
      const fs::path trash = dir / fmt::format(".trash-{}", dirs[i].second.filename().string());
      save_point("delete old checkpoint");
      if (::rename(dirs[i].second.c_str(), trash.c_str()) == 0) fs::remove_all(trash, ec);
    }
  }
  outcome.tell(true);
  return final_dir;
}

// ---- load ----

fs::path resolve_checkpoint(const fs::path& path) {
  std::error_code ec;
  MPT_CHECK(fs::is_directory(path, ec), "[checkpoint] '{}' is not a directory: expected a checkpoint directory "
            "(with state.json) or a save directory (with latest)", path.string());
  if (fs::exists(path / "state.json", ec)) return path;
  if (fs::exists(path / "latest", ec)) {
    std::string name = read_small_file(path / "latest", 4096);
    while (!name.empty() && (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) name.pop_back();
    MPT_CHECK(parse_step_dir(name).has_value(), "[checkpoint] {}: expected the name of a step-<number> directory, "
              "got \"{}\"", (path / "latest").string(), name.substr(0, 80));
    MPT_CHECK(fs::exists(path / name / "state.json", ec), "[checkpoint] {}: names \"{}\", which holds no "
              "state.json", (path / "latest").string(), name);
    return path / name;
  }
  const auto dirs = step_dirs(path);
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it)
    if (fs::exists(it->second / "state.json", ec)) return it->second;
  MPT_THROW("[checkpoint] '{}' holds no checkpoint: no state.json, no latest and no step-* directory", path.string());
}

CheckpointInfo read_checkpoint_info(const fs::path& path) { return read_manifest(path).info; }

CheckpointInfo load_checkpoint(const fs::path& path, TrainingState& state) {
  MPT_CHECK(state.model != nullptr, "[checkpoint] load_checkpoint: TrainingState::model is required");
  autograd::NoGradGuard no_grad;
  const Parsed p = read_manifest(path);
  const detail::Manifest& m = p.manifest;
  const fs::path& dir = p.info.path;
  const std::string where = (dir / "state.json").string();

  MPT_CHECK(m.rank == 0, "[checkpoint] {}: key \"world.rank\": written by rank {}, expected 0", where, m.rank);
  MPT_CHECK(m.precision == state.precision, "[checkpoint] {}: key \"precision\": the checkpoint was trained in \"{}\", "
            "this run uses \"{}\" (resume with the same precision)", where, m.precision, state.precision);
  const nn::Exportable* published = exportable(state.model);
  MPT_CHECK(m.model_type == (published != nullptr ? published->model_type() : "module"), "[checkpoint] {}: key "
            "\"model.type\": the checkpoint holds a \"{}\", this run's model is {}", where, m.model_type,
            describe_model(*state.model));
  if (published != nullptr) {
    const std::optional<nn::ConfigDifference> d = published->config_difference(m.model_config.dump());
    MPT_CHECK(!d, "[checkpoint] {}: key \"model.config.{}\": the checkpoint's {} has {}, this run's {}", where,
              d->key, state.model->type_name(), d->saved, d->ours);
  }
  const bool sharded_file = m.files.count(detail::optimizer_shard_name(0, m.world_size)) == 1;
  MPT_CHECK(state.optimizer == nullptr || m.files.count("optimizer.safetensors") == 1 || sharded_file,
            "[checkpoint] {}: holds no optimizer.safetensors (nor optimizer shards), but this run has an optimizer "
            "to restore", where);
  MPT_CHECK(state.schedule == nullptr || m.lr_schedule.has_value(), "[checkpoint] {}: key \"lr_schedule\" is null, "
            "but this run has a schedule to restore", where);
  const bool scaler_on = state.scaler != nullptr && state.scaler->is_enabled();
  MPT_CHECK(!scaler_on || m.grad_scaler.has_value(), "[checkpoint] {}: key \"grad_scaler\" is null, but this run's "
            "GradScaler is enabled", where);
  MPT_CHECK(state.fp8 == nullptr || m.fp8.has_value(), "[checkpoint] {}: key \"fp8\" is null, but this run has FP8 "
            "scaling state", where);
  if (state.fp8 != nullptr) {
    const json ours = recipe_json(state.fp8->recipe());
    MPT_CHECK(m.fp8_recipe == ours, "[checkpoint] {}: key \"fp8.recipe\" is {}, this run's recipe is {}", where,
              m.fp8_recipe.dump(), ours.dump());
  }
  verify_files(dir, m);

  // Read and check every part against this run before changing any of it.
  const fs::path model_file = dir / "model.safetensors";
  nn::StateDict model_dict;
  try {
    model_dict = load_safetensors(model_file);
    if (published != nullptr) model_dict = published->import_state_dict(model_dict, model_file.string());
  } catch (const Error& e) {
    MPT_THROW("[checkpoint] {}", e.what());
  }
  if (published == nullptr) check_same_layout(model_dict, state.model->state_dict(), model_file.string(), "the model");
  nn::StateDict optimizer_dict;
  if (state.optimizer != nullptr) optimizer_dict = load_optimizer_dict(dir, m, state);
  const auto schedule_dict = m.lr_schedule ? to_tensors(*m.lr_schedule) : nn::StateDict{};
  const auto scaler_dict = m.grad_scaler ? to_tensors(*m.grad_scaler) : nn::StateDict{};
  const auto fp8_dict = m.fp8 ? to_tensors(*m.fp8) : nn::StateDict{};
  if (state.schedule != nullptr)
    check_same_layout(schedule_dict, state.schedule->state_dict(), where, "lr_schedule");
  if (scaler_on) check_same_layout(scaler_dict, state.scaler->state_dict(), where, "grad_scaler");
  std::vector<nn::StateDict> part_dicts;
  for (const StatefulPart& part : state.parts) {
    const auto it = m.parts.find(part.name);
    MPT_CHECK(it != m.parts.end(), "[checkpoint] {}: key \"parts.{}\" is missing, but this run has that part to "
              "restore", where, part.name);
    part_dicts.push_back(to_tensors(it->second));
    check_same_layout(part_dicts.back(), part.state_dict(), where, "parts." + part.name);
  }

  // Restore. Each load below validates its own values before it copies.
  auto in_file = [&](const fs::path& file, auto&& f) {
    try {
      f();
    } catch (const Error& e) {
      MPT_THROW("[checkpoint] {}: {}", file.string(), e.what());
    }
  };
  if (state.optimizer != nullptr)
    in_file(dir / "optimizer.safetensors", [&] { state.optimizer->load_state_dict(optimizer_dict); });
  in_file(where, [&] {
    if (state.fp8 != nullptr) {
      for (const auto& [name, role] : m.fp8_metas) state.fp8->register_tensor(name, parse_role(role));
      state.fp8->load_state_dict(fp8_dict, /*strict=*/true);
    }
    if (scaler_on) state.scaler->load_state_dict(scaler_dict);
    if (state.schedule != nullptr) state.schedule->load_state_dict(schedule_dict);
    for (size_t i = 0; i < state.parts.size(); ++i) state.parts[i].load_state_dict(part_dicts[i]);
  });
  in_file(model_file, [&] { state.model->load_state_dict(model_dict, /*strict=*/true); });
  Generator& gen = state.dropout_generator != nullptr ? *state.dropout_generator : default_generator();
  gen.set_state(m.dropout_seed, m.dropout_offset);
  state.step = m.step;
  state.micro_step = m.micro_step;
  state.run_config_json = p.info.run_config_json;
  state.data_json = p.info.data_json;
  return p.info;
}

StateDict read_checkpoint_weights(const fs::path& path, CheckpointInfo* info) {
  const Parsed p = read_manifest(path);
  const fs::path file = p.info.path / "model.safetensors";
  detail::Manifest only_weights;
  only_weights.files.emplace("model.safetensors", p.manifest.files.at("model.safetensors"));
  verify_files(p.info.path, only_weights);
  if (info != nullptr) *info = p.info;
  try {
    return load_safetensors(file);
  } catch (const Error& e) {
    MPT_THROW("[checkpoint] {}", e.what());
  }
}

void testing::set_save_hook(std::function<void(std::string_view)> hook) { io::detail::save_hook() = std::move(hook); }

}  // namespace mpt::train
