// src/io/safetensors_header.cpp: the safetensors header parser: every rule of the format, no file I/O (fuzzed alone).
#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "io/safetensors_format.h"
#include "mpt/core/error.h"

namespace mpt::io::detail {
namespace {

using json = nlohmann::json;

// A JSON value for an error message, cut to a readable length.
std::string brief(const json& v) {
  std::string s = v.dump();
  if (s.size() > 80) s = s.substr(0, 77) + "...";
  return s;
}

// The value of a non-negative JSON integer; nullopt for anything else.
std::optional<uint64_t> as_u64(const json& v) {
  if (v.is_number_unsigned()) return v.get<uint64_t>();
  if (v.is_number_integer() && v.get<int64_t>() >= 0) return static_cast<uint64_t>(v.get<int64_t>());
  return std::nullopt;
}

bool checked_mul(uint64_t a, uint64_t b, uint64_t& out) {
  return !__builtin_mul_overflow(a, b, &out) && out <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
}

// nlohmann's parser silently keeps one of two equal keys; the format forbids them. This parser callback
// records the first duplicate at any depth.
struct DuplicateKeys {
  std::vector<std::set<std::string>> open;  // keys seen so far in each enclosing object
  std::string top_key;                      // the current key of the outermost object
  std::string first;                        // description of the first duplicate; empty when none

  bool operator()(int /*depth*/, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::object_start) open.emplace_back();
    if (event == json::parse_event_t::object_end) open.pop_back();
    if (event == json::parse_event_t::key) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (open.size() == 1) top_key = key;
      if (!open.back().insert(key).second && first.empty())
        first = open.size() == 1 ? fmt::format("tensor name \"{}\" appears twice", key)
                                 : fmt::format("key \"{}\" appears twice in \"{}\"", key, top_key);
    }
    return true;
  }
};

json parse_header(const std::string& text, const std::string& where) {
  DuplicateKeys duplicates;
  json header;
  try {
    header = json::parse(text, [&duplicates](int depth, json::parse_event_t event, json& parsed) {
      return duplicates(depth, event, parsed);
    });
  } catch (const json::exception& e) {
    MPT_THROW("[safetensors] {}: the header is not valid JSON: {}", where, e.what());
  }
  MPT_CHECK(header.is_object(), "[safetensors] {}: expected the header to be a JSON object, got {}", where,
            header.type_name());
  MPT_CHECK(duplicates.first.empty(), "[safetensors] {}: duplicate key in the header: {}", where, duplicates.first);
  return header;
}

std::map<std::string, std::string> parse_metadata(const json& v, const std::string& where) {
  MPT_CHECK(v.is_object(), "[safetensors] {}: expected \"__metadata__\" to be an object of strings, got {}", where,
            v.type_name());
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : v.items()) {
    MPT_CHECK(value.is_string(), "[safetensors] {}: expected a string for \"__metadata__\" key \"{}\", got {} {}",
              where, key, value.type_name(), brief(value));
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

Shape parse_shape(const std::string& name, const json& v, DType dtype, uint64_t& nbytes, const std::string& where) {
  MPT_CHECK(v.is_array(), "[safetensors] {}: tensor \"{}\": expected \"shape\" to be an array of non-negative "
            "integers, got {}", where, name, brief(v));
  Shape shape;
  uint64_t numel = 1;
  for (const json& d : v) {
    const std::optional<uint64_t> size = as_u64(d);
    MPT_CHECK(size || !d.is_number_integer(), "[safetensors] {}: tensor \"{}\": negative dimension {} in shape {}",
              where, name, brief(d), brief(v));
    MPT_CHECK(size.has_value(), "[safetensors] {}: tensor \"{}\": expected \"shape\" to hold non-negative integers, "
              "got {} in {}", where, name, brief(d), brief(v));
    MPT_CHECK(*size <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), "[safetensors] {}: tensor \"{}\": "
              "shape {} overflows: dimension {} is larger than 2^63 - 1", where, name, brief(v), *size);
    MPT_CHECK(checked_mul(numel, *size, numel), "[safetensors] {}: tensor \"{}\": shape {} overflows (more than "
              "2^63 - 1 elements)", where, name, brief(v));
    shape.push_back(static_cast<int64_t>(*size));
  }
  MPT_CHECK(checked_mul(numel, dtype_size(dtype), nbytes), "[safetensors] {}: tensor \"{}\": shape {} of {} overflows "
            "(more than 2^63 - 1 bytes)", where, name, brief(v), dtype_code(dtype).code);
  return shape;
}

SafetensorsEntry parse_entry(const std::string& name, const json& v, uint64_t buffer_size, const std::string& where) {
  MPT_CHECK(v.is_object(), "[safetensors] {}: tensor \"{}\": expected an object with \"dtype\", \"shape\" and "
            "\"data_offsets\", got {}", where, name, v.type_name());
  for (const char* key : {"dtype", "shape", "data_offsets"})
    MPT_CHECK(v.contains(key), "[safetensors] {}: tensor \"{}\": missing \"{}\"", where, name, key);

  const json& code = v.at("dtype");
  MPT_CHECK(code.is_string(), "[safetensors] {}: tensor \"{}\": expected \"dtype\" to be a string, got {}", where,
            name, brief(code));
  const std::optional<DType> dtype = parse_dtype_code(code.get_ref<const std::string&>());
  MPT_CHECK(dtype.has_value(), "[safetensors] {}: tensor \"{}\": unsupported dtype \"{}\" (supported: {})", where,
            name, code.get_ref<const std::string&>(), supported_codes());

  SafetensorsEntry entry;
  entry.name = name;
  entry.dtype = *dtype;
  uint64_t nbytes = 0;
  entry.shape = parse_shape(name, v.at("shape"), *dtype, nbytes, where);

  const json& offsets = v.at("data_offsets");
  std::optional<uint64_t> begin, end;
  if (offsets.is_array() && offsets.size() == 2) {
    begin = as_u64(offsets[0]);
    end = as_u64(offsets[1]);
  }
  MPT_CHECK(begin && end, "[safetensors] {}: tensor \"{}\": expected \"data_offsets\" to be two non-negative "
            "integers [begin, end], got {}", where, name, brief(offsets));
  entry.begin = *begin;
  entry.end = *end;
  MPT_CHECK(entry.begin <= entry.end, "[safetensors] {}: tensor \"{}\": data_offsets [{}, {}] are not ordered "
            "(begin > end)", where, name, entry.begin, entry.end);
  MPT_CHECK(entry.end - entry.begin == nbytes, "[safetensors] {}: tensor \"{}\": data_offsets [{}, {}] span {} bytes "
            "but {} {} needs {}", where, name, entry.begin, entry.end, entry.end - entry.begin,
            dtype_code(*dtype).code, shape_str(entry.shape), nbytes);
  MPT_CHECK(entry.end <= buffer_size, "[safetensors] {}: tensor \"{}\": data_offsets [{}, {}] end past the byte "
            "buffer, which holds {} bytes", where, name, entry.begin, entry.end, buffer_size);
  return entry;
}

// Sorts by offset and requires the entries to tile the byte buffer exactly: no overlap, no hole, no trailing bytes.
void check_layout(std::vector<SafetensorsEntry>& entries, uint64_t buffer_size, const std::string& where) {
  std::sort(entries.begin(), entries.end(), [](const SafetensorsEntry& a, const SafetensorsEntry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const SafetensorsEntry* last = nullptr;
  for (const SafetensorsEntry& e : entries) {
    MPT_CHECK(e.begin >= covered, "[safetensors] {}: tensors \"{}\" [{}, {}] and \"{}\" [{}, {}] overlap", where,
              last->name, last->begin, last->end, e.name, e.begin, e.end);
    MPT_CHECK(e.begin == covered, "[safetensors] {}: hole in the byte buffer: bytes [{}, {}) before tensor \"{}\" "
              "belong to no tensor", where, covered, e.begin, e.name);
    covered = e.end;
    last = &e;
  }
  MPT_CHECK(covered == buffer_size, "[safetensors] {}: trailing bytes: bytes [{}, {}) at the end of the byte buffer "
            "belong to no tensor", where, covered, buffer_size);
}

}  // namespace

ParsedHeader parse_safetensors_header(std::string_view text, uint64_t buffer_size, const std::string& where) {
  const json header = parse_header(std::string(text), where);
  ParsedHeader out;
  for (const auto& [key, value] : header.items()) {
    if (key == "__metadata__") {
      out.metadata = parse_metadata(value, where);
    } else {
      out.entries.push_back(parse_entry(key, value, buffer_size, where));
    }
  }
  check_layout(out.entries, buffer_size, where);
  return out;
}

}  // namespace mpt::io::detail
