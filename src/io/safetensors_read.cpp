// src/io/safetensors_read.cpp: SafetensorsFile: the header validated when opening, tensor bytes read with pread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <system_error>
#include <tuple>
#include <utility>

#include "io/safetensors_format.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"

namespace mpt::io {
namespace {

using json = nlohmann::json;

std::string errno_message() { return std::error_code(errno, std::generic_category()).message(); }

// Reads up to n bytes at `offset`; returns how many were read (fewer only at the end of the file).
size_t pread_full(int fd, void* buf, size_t n, uint64_t offset, const std::string& where) {
  auto* p = static_cast<char*>(buf);
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    MPT_CHECK(r >= 0, "[safetensors] {}: read failed at byte {}: {}", where, offset + done, errno_message());
    if (r == 0) break;
    done += static_cast<size_t>(r);
  }
  return done;
}

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
            "(more than 2^63 - 1 bytes)", where, name, brief(v), detail::dtype_code(dtype).code);
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
  const std::optional<DType> dtype = detail::parse_dtype_code(code.get_ref<const std::string&>());
  MPT_CHECK(dtype.has_value(), "[safetensors] {}: tensor \"{}\": unsupported dtype \"{}\" (supported: {})", where,
            name, code.get_ref<const std::string&>(), detail::supported_codes());

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
            detail::dtype_code(*dtype).code, shape_str(entry.shape), nbytes);
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

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  const std::string where = path.string();
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MPT_CHECK(fd_ >= 0, "[safetensors] {}: cannot open for reading: {}", where, errno_message());
  try {
    struct stat st {};
    MPT_CHECK(::fstat(fd_, &st) == 0, "[safetensors] {}: cannot stat: {}", where, errno_message());
    MPT_CHECK(S_ISREG(st.st_mode), "[safetensors] {}: not a regular file", where);
    const auto file_size = static_cast<uint64_t>(st.st_size);
    MPT_CHECK(file_size >= 8, "[safetensors] {}: the file holds {} bytes, shorter than the 8-byte header length",
              where, file_size);

    uint64_t n = 0;  // little-endian on disk and on the host (static_assert in safetensors_format.h)
    MPT_CHECK(pread_full(fd_, &n, 8, 0, where) == 8, "[safetensors] {}: the file shrank while being read", where);
    MPT_CHECK(n <= detail::kMaxHeaderBytes, "[safetensors] {}: header length {} exceeds the limit of {} bytes", where,
              n, detail::kMaxHeaderBytes);
    MPT_CHECK(n <= file_size - 8, "[safetensors] {}: header length {} is larger than the file: only {} bytes follow "
              "the 8-byte length", where, n, file_size - 8);
    std::string text(n, '\0');
    MPT_CHECK(pread_full(fd_, text.data(), n, 8, where) == n, "[safetensors] {}: the file shrank while being read",
              where);

    const json header = parse_header(text, where);
    const uint64_t buffer_size = file_size - 8 - n;
    for (const auto& [key, value] : header.items()) {
      if (key == "__metadata__") {
        metadata_ = parse_metadata(value, where);
      } else {
        entries_.push_back(parse_entry(key, value, buffer_size, where));
      }
    }
    check_layout(entries_, buffer_size, where);
    for (size_t i = 0; i < entries_.size(); ++i) index_.emplace(entries_[i].name, i);
    data_start_ = 8 + n;
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (fd_ >= 0) ::close(fd_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& other) noexcept
    : path_(std::move(other.path_)), fd_(std::exchange(other.fd_, -1)), data_start_(other.data_start_),
      entries_(std::move(other.entries_)), index_(std::move(other.index_)), metadata_(std::move(other.metadata_)) {}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    path_ = std::move(other.path_);
    fd_ = std::exchange(other.fd_, -1);
    data_start_ = other.data_start_;
    entries_ = std::move(other.entries_);
    index_ = std::move(other.index_);
    metadata_ = std::move(other.metadata_);
  }
  return *this;
}

const SafetensorsEntry& SafetensorsFile::entry(std::string_view name) const {
  const auto it = index_.find(name);
  if (it != index_.end()) return entries_[it->second];
  constexpr size_t kShown = 10;
  std::string names;
  for (size_t i = 0; i < std::min(entries_.size(), kShown); ++i)
    names += fmt::format("{}\"{}\"", i == 0 ? "" : ", ", entries_[i].name);
  if (entries_.size() > kShown) names += fmt::format(" and {} more", entries_.size() - kShown);
  MPT_THROW("[safetensors] {}: no tensor named \"{}\"; the file holds {} tensor(s){}{}", path_.string(), name,
            entries_.size(), entries_.empty() ? "" : ": ", names);
}

Tensor SafetensorsFile::tensor(std::string_view name) const {
  MPT_CHECK(fd_ >= 0, "[safetensors] {}: tensor() on a moved-from SafetensorsFile", path_.string());
  const SafetensorsEntry& e = entry(name);
  Tensor t = Tensor::empty(e.shape, e.dtype);
  const uint64_t n = e.end - e.begin;
  if (n > 0) {
    const size_t got = pread_full(fd_, t.data_ptr(), n, data_start_ + e.begin, path_.string());
    MPT_CHECK(got == n, "[safetensors] {}: the file ended {} bytes into tensor \"{}\" ({} bytes expected): was it "
              "truncated after it was opened?", path_.string(), got, e.name, n);
  }
  return t;
}

std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path) {
  const SafetensorsFile file(path);
  std::map<std::string, Tensor> out;
  for (const SafetensorsEntry& e : file.entries()) out.emplace(e.name, file.tensor(e.name));
  return out;
}

}  // namespace mpt::io
