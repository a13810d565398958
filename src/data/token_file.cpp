// src/data/token_file.cpp: writing token files and reading them through a read-only memory map.
#include "mpt/data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "io/durable_file.h"
#include "mpt/core/error.h"

namespace mpt::data {
namespace {

constexpr char kMagic[8] = {'M', 'P', 'T', 'T', 'O', 'K', 'E', 'N'};

template <class T>
void put(std::string& out, T v) {  // little-endian, as every supported host is
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

template <class T>
T get(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

}  // namespace

TokenVector::TokenVector(std::vector<int32_t> ids, int64_t vocab_size) : ids_(std::move(ids)), vocab_(vocab_size) {
  MPT_CHECK(vocab_ > 0, "[tokens] vocab_size {} must be positive", vocab_);
  for (size_t i = 0; i < ids_.size(); ++i)
    MPT_CHECK(ids_[i] >= 0 && ids_[i] < vocab_, "[tokens] id {} at position {} is outside [0, {})", ids_[i], i, vocab_);
}

void TokenVector::read(int64_t start, int64_t n, int64_t* out) const {
  MPT_CHECK(start >= 0 && n >= 0 && start + n <= size(), "[tokens] ids [{}, {}) are outside the stream's {}", start,
            start + n, size());
  for (int64_t i = 0; i < n; ++i) out[i] = ids_[static_cast<size_t>(start + i)];
}

void write_token_file(const std::filesystem::path& path, std::span<const int32_t> ids, int64_t vocab_size) {
  MPT_CHECK(vocab_size > 0 && vocab_size <= (int64_t{1} << 31), "[token file] '{}': vocab_size {} must be in [1, 2^31]",
            path.string(), vocab_size);
  const uint32_t width = vocab_size <= 65536 ? 2 : 4;
  std::string bytes;
  bytes.reserve(static_cast<size_t>(kTokenFileHeaderBytes) + ids.size() * width);
  bytes.append(kMagic, sizeof(kMagic));
  put<uint32_t>(bytes, 1);
  put<uint32_t>(bytes, static_cast<uint32_t>(vocab_size));
  put<uint32_t>(bytes, width);
  put<uint32_t>(bytes, 0);
  put<uint64_t>(bytes, ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    MPT_CHECK(ids[i] >= 0 && ids[i] < vocab_size, "[token file] '{}': id {} at position {} is outside [0, {}); "
              "nothing was written", path.string(), ids[i], i, vocab_size);
    if (width == 2) put<uint16_t>(bytes, static_cast<uint16_t>(ids[i]));
    else put<uint32_t>(bytes, static_cast<uint32_t>(ids[i]));
  }
  io::detail::write_file_durably(path, bytes, "token file");
}

TokenFile::TokenFile(const std::filesystem::path& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MPT_CHECK(fd >= 0, "[token file] cannot open '{}': {}", path.string(), io::detail::errno_text(errno));
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const int stat_err = errno;
  if (!stat_ok || !S_ISREG(st.st_mode)) ::close(fd);
  MPT_CHECK(stat_ok, "[token file] cannot stat '{}': {}", path.string(), io::detail::errno_text(stat_err));
  MPT_CHECK(S_ISREG(st.st_mode), "[token file] '{}' is not a regular file", path.string());
  const auto bytes = static_cast<size_t>(st.st_size);
  if (bytes < static_cast<size_t>(kTokenFileHeaderBytes)) {
    ::close(fd);
    MPT_THROW("[token file] '{}' has {} bytes, fewer than the {}-byte header: not a token file (write one with "
              "mpt-tokenize)", path.string(), bytes, kTokenFileHeaderBytes);
  }
  void* m = ::mmap(nullptr, bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_err = errno;
  ::close(fd);  // the mapping keeps the file
  MPT_CHECK(m != MAP_FAILED, "[token file] cannot map '{}': {}", path.string(), io::detail::errno_text(map_err));
  map_ = static_cast<const unsigned char*>(m);
  map_bytes_ = bytes;
  try {
    MPT_CHECK(std::memcmp(map_, kMagic, sizeof(kMagic)) == 0,
              "[token file] '{}' does not start with \"MPTTOKEN\": not a token file (write one with mpt-tokenize)",
              path.string());
    const auto version = get<uint32_t>(map_ + 8);
    MPT_CHECK(version == 1, "[token file] '{}' has version {}; this build reads version 1", path.string(), version);
    vocab_ = get<uint32_t>(map_ + 12);
    width_ = static_cast<int>(get<uint32_t>(map_ + 16));
    count_ = static_cast<int64_t>(get<uint64_t>(map_ + 24));
    MPT_CHECK(width_ == 2 || width_ == 4, "[token file] '{}': {} bytes per id; expected 2 or 4", path.string(), width_);
    MPT_CHECK(vocab_ > 0, "[token file] '{}': the vocabulary size is 0", path.string());
    const size_t expected = static_cast<size_t>(kTokenFileHeaderBytes) + static_cast<size_t>(count_) * width_;
    MPT_CHECK(count_ >= 0 && bytes == expected,
              "[token file] '{}' has {} bytes but its header promises {} ids of {} bytes ({} bytes with the header): "
              "the file is truncated or corrupt", path.string(), bytes, count_, width_, expected);
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    throw;
  }
  ::madvise(const_cast<unsigned char*>(map_), map_bytes_, MADV_RANDOM);  // windows are read at random offsets
}

TokenFile::~TokenFile() {
  if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

TokenFile::TokenFile(TokenFile&& o) noexcept
    : path_(std::move(o.path_)), map_(std::exchange(o.map_, nullptr)), map_bytes_(std::exchange(o.map_bytes_, 0)),
      count_(o.count_), vocab_(o.vocab_), width_(o.width_) {}

TokenFile& TokenFile::operator=(TokenFile&& o) noexcept {
  if (this != &o) {
    if (map_ != nullptr) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    path_ = std::move(o.path_);
    map_ = std::exchange(o.map_, nullptr);
    map_bytes_ = std::exchange(o.map_bytes_, 0);
    count_ = o.count_, vocab_ = o.vocab_, width_ = o.width_;
  }
  return *this;
}

int64_t TokenFile::at(int64_t i) const {
  int64_t v = 0;
  read(i, 1, &v);
  return v;
}

void TokenFile::read(int64_t start, int64_t n, int64_t* out) const {
  MPT_CHECK(start >= 0 && n >= 0 && start + n <= count_, "[token file] '{}': ids [{}, {}) are outside the file's {}",
            path_.string(), start, start + n, count_);
  const unsigned char* p = map_ + kTokenFileHeaderBytes + static_cast<size_t>(start) * width_;
  int64_t bad = -1;
  if (width_ == 2) {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint16_t>(p + 2 * i);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = get<uint32_t>(p + 4 * i);
  }
  for (int64_t i = 0; i < n && bad < 0; ++i)
    if (out[i] >= vocab_) bad = i;
  MPT_CHECK(bad < 0, "[token file] '{}': id {} at position {} is outside the vocabulary [0, {}): the file is corrupt",
            path_.string(), bad >= 0 ? out[bad] : 0, start + bad, vocab_);
}

}  // namespace mpt::data
