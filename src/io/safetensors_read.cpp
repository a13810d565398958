// src/io/safetensors_read.cpp: SafetensorsFile: the header validated when opening, tensor bytes read with pread.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <system_error>
#include <utility>

#include "io/safetensors_format.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"

namespace mpt::io {
namespace {

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

    detail::ParsedHeader parsed = detail::parse_safetensors_header(text, file_size - 8 - n, where);
    entries_ = std::move(parsed.entries);
    metadata_ = std::move(parsed.metadata);
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
