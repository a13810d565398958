// src/io/checksum.cpp: XXH3-64 of buffers and of files read in 1 MiB chunks.
#include "io/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mpt/core/error.h"

namespace mpt::io::detail {

uint64_t xxh3_64(const void* data, size_t size) { return XXH3_64bits(data, size); }

Xxh3Stream::Xxh3Stream() : state_(XXH3_createState()) {
  MPT_CHECK(state_ != nullptr, "[checkpoint] cannot allocate an XXH3 state");
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

Xxh3Stream::~Xxh3Stream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Xxh3Stream::update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
  bytes_ += size;
}

FileDigest Xxh3Stream::digest() const {
  return {bytes_, XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_))};
}

FileDigest digest_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MPT_CHECK(fd >= 0, "[checkpoint] {}: cannot open for reading: {}", path.string(),
            std::error_code(errno, std::generic_category()).message());
  Xxh3Stream stream;
  std::vector<char> buf(1 << 20);
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      MPT_THROW("[checkpoint] {}: read failed after {} bytes: {}", path.string(), stream.digest().bytes,
                std::error_code(err, std::generic_category()).message());
    }
    if (r == 0) break;
    stream.update(buf.data(), static_cast<size_t>(r));
  }
  ::close(fd);
  return stream.digest();
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace mpt::io::detail
