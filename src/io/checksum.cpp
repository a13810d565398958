// src/io/checksum.cpp: XXH3-64 of buffers and of files read in 1 MiB chunks.
#include "io/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <system_error>
#include <vector>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "mpt/core/error.h"

namespace mpt::io::detail {

uint64_t xxh3_64(const void* data, size_t size) { return XXH3_64bits(data, size); }

FileDigest digest_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MPT_CHECK(fd >= 0, "[checkpoint] {}: cannot open for reading: {}", path.string(),
            std::error_code(errno, std::generic_category()).message());
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
  XXH3_64bits_reset(state.get());
  std::vector<char> buf(1 << 20);
  FileDigest d;
  for (;;) {
    const ssize_t r = ::read(fd, buf.data(), buf.size());
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      const int err = errno;
      ::close(fd);
      MPT_THROW("[checkpoint] {}: read failed after {} bytes: {}", path.string(), d.bytes,
                std::error_code(err, std::generic_category()).message());
    }
    if (r == 0) break;
    XXH3_64bits_update(state.get(), buf.data(), static_cast<size_t>(r));
    d.bytes += static_cast<uint64_t>(r);
  }
  ::close(fd);
  d.xxh3 = XXH3_64bits_digest(state.get());
  return d;
}

std::string hex64(uint64_t v) { return fmt::format("{:016x}", v); }

}  // namespace mpt::io::detail
