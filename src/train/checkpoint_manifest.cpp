// src/train/checkpoint_manifest.cpp: state.json written with a self-checksum and parsed with every field validated.
#include "train/checkpoint_manifest.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "io/checksum.h"
#include "io/json_object.h"
#include "mpt/core/error.h"

// Checkpoints are written with io's durable files, checksums and safetensors.
using namespace mpt::io;          // NOLINT(google-build-using-namespace)
using namespace mpt::io::detail;  // NOLINT(google-build-using-namespace)

namespace mpt::train::detail {
namespace {

using json = nlohmann::json;

std::string brief(const json& v) {
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

std::string dtype_code(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    default: return std::string(dtype_name(t));
  }
}

// ---- writing ----

json float_value(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json tensor_json(const JsonTensor& t) {
  json values = json::array();
  const size_t n = t.bytes.size() / dtype_size(t.dtype);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char* p = t.bytes.data() + i * dtype_size(t.dtype);
    switch (t.dtype) {
      case DType::F32: { float v; std::memcpy(&v, p, 4); values.push_back(float_value(v)); break; }
      case DType::F64: { double v; std::memcpy(&v, p, 8); values.push_back(float_value(v)); break; }
      case DType::I32: { int32_t v; std::memcpy(&v, p, 4); values.push_back(v); break; }
      case DType::I64: { int64_t v; std::memcpy(&v, p, 8); values.push_back(v); break; }
      default: MPT_THROW("[checkpoint] state.json holds F32, F64, I32 and I64 tensors, not {}", dtype_code(t.dtype));
    }
  }
  return {{"dtype", dtype_code(t.dtype)}, {"shape", t.shape}, {"values", std::move(values)}};
}

json dict_json(const std::optional<JsonTensorDict>& d) {
  if (!d) return nullptr;
  json out = json::object();
  for (const auto& [k, t] : *d) out[k] = tensor_json(t);
  return out;
}

json metas_json(const std::vector<std::pair<std::string, std::string>>& metas) {
  json out = json::array();
  for (const auto& [name, role] : metas) out.push_back({{"name", name}, {"role", role}});
  return out;
}

// ---- reading: every accessor names the key path and what it expected ----

class Reader {
 public:
  explicit Reader(std::string where) : where_(std::move(where)) {}

  [[noreturn]] void fail(const std::string& key, const std::string& expected, const json& got) const {
    MPT_THROW("[checkpoint] {}: key \"{}\": expected {}, got {} {}", where_, key, expected, got.type_name(),
              brief(got));
  }
  const json& field(const json& obj, const std::string& path, const char* key) const {
    const auto it = obj.find(key);
    MPT_CHECK(it != obj.end(), "[checkpoint] {}: missing key \"{}\"", where_, join(path, key));
    return *it;
  }
  const json& object(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_object()) fail(join(path, key), "an object", v);
    return v;
  }
  int64_t integer(const json& obj, const std::string& path, const char* key, int64_t lo, int64_t hi) const {
    const json& v = field(obj, path, key);
    const std::string k = join(path, key);
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(hi)))
      fail(k, fmt::format("an integer in [{}, {}]", lo, hi), v);
    const auto x = v.get<int64_t>();
    if (x < lo || x > hi) fail(k, fmt::format("an integer in [{}, {}]", lo, hi), v);
    return x;
  }
  uint64_t unsigned64(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (v.is_number_unsigned()) return v.get<uint64_t>();
    if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
    fail(join(path, key), "an integer in [0, 2^64)", v);
  }
  std::string string(const json& obj, const std::string& path, const char* key) const {
    const json& v = field(obj, path, key);
    if (!v.is_string()) fail(join(path, key), "a string", v);
    return v.get<std::string>();
  }
  static std::string join(const std::string& path, const char* key) {
    return path.empty() ? std::string(key) : path + "." + key;
  }

  JsonTensor tensor(const json& v, const std::string& key) const {
    if (!v.is_object()) fail(key, "a tensor {\"dtype\", \"shape\", \"values\"}", v);
    JsonTensor t;
    const std::string code = string(v, key, "dtype");
    if (code == "F32") t.dtype = DType::F32;
    else if (code == "F64") t.dtype = DType::F64;
    else if (code == "I32") t.dtype = DType::I32;
    else if (code == "I64") t.dtype = DType::I64;
    else fail(key + ".dtype", "one of \"F32\", \"F64\", \"I32\", \"I64\"", v.at("dtype"));
    const json& shape = field(v, key, "shape");
    if (!shape.is_array() || shape.size() > 8) fail(key + ".shape", "an array of at most 8 dimensions", shape);
    int64_t numel = 1;
    for (const json& d : shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0 || d.get<int64_t>() > kMaxJsonTensorElements)
        fail(key + ".shape", fmt::format("dimensions in [0, {}]", kMaxJsonTensorElements), shape);
      numel *= d.get<int64_t>();
      if (numel > kMaxJsonTensorElements)
        fail(key + ".shape", fmt::format("at most {} elements", kMaxJsonTensorElements), shape);
      t.shape.push_back(d.get<int64_t>());
    }
    const json& values = field(v, key, "values");
    if (!values.is_array() || static_cast<int64_t>(values.size()) != numel)
      fail(key + ".values", fmt::format("an array of {} values (shape {})", numel, shape_str(t.shape)), values);
    t.bytes.resize(static_cast<size_t>(numel) * dtype_size(t.dtype));
    unsigned char* out = t.bytes.data();
    for (size_t i = 0; i < values.size(); ++i, out += dtype_size(t.dtype)) {
      const json& x = values[i];
      const std::string at = fmt::format("{}.values[{}]", key, i);
      if (t.dtype == DType::F32 || t.dtype == DType::F64) {
        double d = 0;
        if (x.is_number()) d = x.get<double>();
        else if (x == "inf") d = std::numeric_limits<double>::infinity();
        else if (x == "-inf") d = -std::numeric_limits<double>::infinity();
        else if (x == "nan") d = std::numeric_limits<double>::quiet_NaN();
        else fail(at, "a number or \"inf\", \"-inf\", \"nan\"", x);
        if (t.dtype == DType::F64) {
          std::memcpy(out, &d, 8);
        } else {
          if (std::isfinite(d) && std::abs(d) > std::numeric_limits<float>::max()) fail(at, "a float32 value", x);
          const auto f = static_cast<float>(d);
          if (std::isfinite(d) && static_cast<double>(f) != d) fail(at, "a value exactly representable in float32", x);
          std::memcpy(out, &f, 4);
        }
      } else {
        const bool is32 = t.dtype == DType::I32;
        const int64_t lo = is32 ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int64_t>::min();
        const int64_t hi = is32 ? std::numeric_limits<int32_t>::max() : std::numeric_limits<int64_t>::max();
        if (!x.is_number_integer() || (x.is_number_unsigned() && x.get<uint64_t>() > static_cast<uint64_t>(hi)) ||
            x.get<int64_t>() < lo || x.get<int64_t>() > hi)
          fail(at, fmt::format("an integer of {}", code), x);
        const int64_t w = x.get<int64_t>();
        if (is32) {
          const auto n = static_cast<int32_t>(w);
          std::memcpy(out, &n, 4);
        } else {
          std::memcpy(out, &w, 8);
        }
      }
    }
    return t;
  }

  // An object of tensors, or null (nullopt).
  std::optional<JsonTensorDict> dict(const json& v, const std::string& key) const {
    if (v.is_null()) return std::nullopt;
    if (!v.is_object()) fail(key, "an object of tensors, or null", v);
    JsonTensorDict d;
    for (const auto& [name, t] : v.items()) d.emplace(name, tensor(t, key + "." + name));
    return d;
  }

 private:
  std::string where_;
};

}  // namespace

bool is_model_type_name(std::string_view name) {
  return !name.empty() && name.size() <= 64 &&
         name.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789_-") == std::string_view::npos;
}

std::string optimizer_shard_name(int64_t rank, int64_t world_size) {
  return fmt::format("optimizer-rank{:05}-of-{:05}.safetensors", rank, world_size);
}

std::string write_manifest(const Manifest& m) {
  json files = json::object();
  for (const auto& [name, f] : m.files) files[name] = {{"bytes", f.bytes}, {"xxh3", f.xxh3}};
  json j = {
      {"format_version", m.format_version},
      {"library", {{"name", "mptrain"}, {"version", m.library_version}}},
      {"step", m.step},
      {"micro_step", m.micro_step},
      {"world", {{"size", m.world_size}, {"rank", m.rank}}},
      {"precision", m.precision},
      {"model", {{"type", m.model_type}, {"config", m.model_config}}},
      {"run_config", m.run_config},
      {"data", m.data},
      {"rng", {{"dropout", {{"seed", m.dropout_seed}, {"offset", m.dropout_offset}}}}},
      {"lr_schedule", dict_json(m.lr_schedule)},
      {"grad_scaler", dict_json(m.grad_scaler)},
      {"fp8", m.fp8 ? json{{"recipe", m.fp8_recipe}, {"metas", metas_json(m.fp8_metas)}, {"tensors", dict_json(m.fp8)}}
                    : json(nullptr)},
      {"files", files},
  };
  if (!m.parts.empty()) {
    json parts = json::object();
    for (const auto& [name, dict] : m.parts) parts[name] = dict_json(dict);
    j["parts"] = parts;
  }
  const std::string compact = j.dump();
  j["checksum"] = hex64(xxh3_64(compact.data(), compact.size()));
  // Pretty-printed, except that each tensor's values stay on one line (an amax history has 1024).
  std::vector<std::string> arrays;
  auto fold = [&](json& dict) {
    if (!dict.is_object()) return;
    for (auto& [name, t] : dict.items()) {
      arrays.push_back(t.at("values").dump());
      t["values"] = fmt::format("@@values{}@@", arrays.size() - 1);
    }
  };
  fold(j["lr_schedule"]);
  fold(j["grad_scaler"]);
  if (j["fp8"].is_object()) fold(j["fp8"]["tensors"]);
  if (j.contains("parts"))
    for (auto& [name, dict] : j["parts"].items()) fold(dict);
  std::string text = j.dump(1, ' ');
  for (size_t i = 0; i < arrays.size(); ++i) {
    const std::string placeholder = fmt::format("\"@@values{}@@\"", i);
    text.replace(text.find(placeholder), placeholder.size(), arrays[i]);
  }
  return text + "\n";
}

Manifest parse_manifest(std::string_view text, const std::string& where, bool verify_checksum) {
  MPT_CHECK(text.size() <= kMaxManifestBytes, "[checkpoint] {}: {} bytes, more than the {} a state.json may hold",
            where, text.size(), kMaxManifestBytes);
  const json j = parse_json_object(text, "checkpoint", where);
  const Reader r(where);
  Manifest m;
  // The version first: a newer format may have changed anything else.
  m.format_version = r.integer(j, "", "format_version", 1, std::numeric_limits<int64_t>::max());
  MPT_CHECK(m.format_version <= kCheckpointFormat, "[checkpoint] {}: format_version {} was written by a newer "
            "mptrain; this build reads format_version {} and older: upgrade mptrain to load it", where,
            m.format_version, kCheckpointFormat);
  if (verify_checksum) {
    const std::string stored = r.string(j, "", "checksum");
    json rest = j;
    rest.erase("checksum");
    const std::string dump = rest.dump(-1, ' ', false, json::error_handler_t::replace);
    const std::string actual = hex64(xxh3_64(dump.data(), dump.size()));
    MPT_CHECK(stored == actual, "[checkpoint] {}: checksum mismatch (stored {}, computed {}): the file was "
              "modified or damaged after it was written", where, stored, actual);
  }
  const json& library = r.object(j, "", "library");
  m.library_version = r.string(library, "library", "version");
  m.step = r.integer(j, "", "step", 0, std::numeric_limits<int64_t>::max());
  m.micro_step = r.integer(j, "", "micro_step", 0, std::numeric_limits<int64_t>::max());
  MPT_CHECK(m.micro_step == 0, "[checkpoint] {}: micro_step {}: the checkpoint was saved inside a gradient "
            "accumulation window, which mptrain neither writes nor resumes (save at a step boundary)", where,
            m.micro_step);
  const json& world = r.object(j, "", "world");
  m.world_size = r.integer(world, "world", "size", 1, 1 << 24);
  m.rank = r.integer(world, "world", "rank", 0, m.world_size - 1);
  m.precision = r.string(j, "", "precision");
  const json& model = r.object(j, "", "model");
  m.model_type = r.string(model, "model", "type");
  MPT_CHECK(is_model_type_name(m.model_type), "[checkpoint] {}: key \"model.type\": expected \"module\" or a model's "
            "type (up to 64 lower-case letters, digits, '_' and '-', such as \"gpt2\"), got \"{}\"", where,
            m.model_type.substr(0, 80));
  m.model_config = r.field(model, "model", "config");
  if (m.model_type != "module" && !m.model_config.is_object())
    r.fail("model.config", fmt::format("an object (the {} model's config)", m.model_type), m.model_config);
  m.run_config = r.object(j, "", "run_config");
  m.data = r.object(j, "", "data");
  const json& rng = r.object(j, "", "rng");
  const json& dropout = r.object(rng, "rng", "dropout");
  m.dropout_seed = r.unsigned64(dropout, "rng.dropout", "seed");
  m.dropout_offset = r.unsigned64(dropout, "rng.dropout", "offset");
  m.lr_schedule = r.dict(r.field(j, "", "lr_schedule"), "lr_schedule");
  m.grad_scaler = r.dict(r.field(j, "", "grad_scaler"), "grad_scaler");
  const json& fp8 = r.field(j, "", "fp8");
  if (!fp8.is_null()) {
    if (!fp8.is_object()) r.fail("fp8", "an object {\"recipe\", \"tensors\"}, or null", fp8);
    m.fp8_recipe = r.object(fp8, "fp8", "recipe");
    r.string(m.fp8_recipe, "fp8.recipe", "kind");
    const json& metas = r.field(fp8, "fp8", "metas");
    if (!metas.is_array()) r.fail("fp8.metas", "an array of {\"name\", \"role\"}", metas);
    for (size_t i = 0; i < metas.size(); ++i) {
      const std::string key = fmt::format("fp8.metas[{}]", i);
      if (!metas[i].is_object()) r.fail(key, "an object {\"name\", \"role\"}", metas[i]);
      std::string role = r.string(metas[i], key, "role");
      MPT_CHECK(role == "input" || role == "weight" || role == "grad_output", "[checkpoint] {}: key \"{}.role\": "
                "expected \"input\", \"weight\" or \"grad_output\", got \"{}\"", where, key, role);
      m.fp8_metas.emplace_back(r.string(metas[i], key, "name"), std::move(role));
    }
    const json& tensors = r.object(fp8, "fp8", "tensors");
    m.fp8 = r.dict(tensors, "fp8.tensors");
  }
  if (j.contains("parts")) {
    const json& parts = r.object(j, "", "parts");
    for (const auto& [name, dict] : parts.items()) {
      const std::optional<JsonTensorDict> d = r.dict(dict, "parts." + name);
      if (!d) r.fail("parts." + name, "an object of tensors", dict);
      m.parts.emplace(name, *d);
    }
  }
  const json& files = r.object(j, "", "files");
  for (const auto& [name, f] : files.items()) {
    bool shard = false;
    for (int64_t r = 0; r < m.world_size && !shard && name.starts_with("optimizer-rank"); ++r)
      shard = name == optimizer_shard_name(r, m.world_size);
    MPT_CHECK(name == "model.safetensors" || name == "optimizer.safetensors" || name == "config.json" || shard,
              "[checkpoint] {}: key \"files\": unexpected file \"{}\" (a checkpoint holds model.safetensors, "
              "config.json, and optimizer.safetensors or {} for each rank of its {})", where, name,
              optimizer_shard_name(0, m.world_size), m.world_size);
    const std::string key = "files." + name;
    if (!f.is_object()) r.fail(key, "an object {\"bytes\", \"xxh3\"}", f);
    FileRecord rec;
    rec.bytes = r.unsigned64(f, key, "bytes");
    rec.xxh3 = r.string(f, key, "xxh3");
    MPT_CHECK(rec.xxh3.size() == 16 && rec.xxh3.find_first_not_of("0123456789abcdef") == std::string::npos,
              "[checkpoint] {}: key \"{}.xxh3\": expected 16 lower-case hex digits, got \"{}\"", where, key, rec.xxh3);
    m.files.emplace(name, rec);
  }
  int64_t shards = 0;
  for (int64_t r = 0; r < m.world_size; ++r) shards += static_cast<int64_t>(m.files.count(optimizer_shard_name(r, m.world_size)));
  MPT_CHECK(shards == 0 || (shards == m.world_size && m.files.count("optimizer.safetensors") == 0),
            "[checkpoint] {}: key \"files\": {} of {} optimizer shards{}: expected all or none", where, shards,
            m.world_size, m.files.count("optimizer.safetensors") ? " beside optimizer.safetensors" : "");
  MPT_CHECK(m.files.count("model.safetensors") == 1, "[checkpoint] {}: key \"files\": model.safetensors is not "
            "listed", where);
  return m;
}

}  // namespace mpt::train::detail
