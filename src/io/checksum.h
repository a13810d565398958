// src/io/checksum.h: XXH3-64 checksums of buffers and files (xxHash, header-only), as 16 hex digits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace mpt::io::detail {

uint64_t xxh3_64(const void* data, size_t size);
// Streams the file; throws mpt::Error "[checkpoint] <path>: ..." when it cannot be read.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh3 = 0;
};
FileDigest digest_file(const std::filesystem::path& path);
std::string hex64(uint64_t v);  // 16 lower-case hex digits

// XXH3-64 of a stream of buffers: update() as bytes are written, digest() at the end (no second read of a file).
class Xxh3Stream {
 public:
  Xxh3Stream();
  ~Xxh3Stream();
  Xxh3Stream(const Xxh3Stream&) = delete;
  Xxh3Stream& operator=(const Xxh3Stream&) = delete;
  void update(const void* data, size_t size);
  FileDigest digest() const;

 private:
  void* state_;  // XXH3_state_t (xxhash.h stays inside checksum.cpp)
  uint64_t bytes_ = 0;
};

}  // namespace mpt::io::detail
