// src/io/durable_file.cpp: whole-or-nothing file writes: a temporary, fsync, rename, fsync of the directory.
#include "io/durable_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <cerrno>
#include <system_error>

#include "io/safetensors_format.h"
#include "mpt/core/error.h"

namespace mpt::io::detail {

namespace fs = std::filesystem;

std::string errno_text(int err) { return std::error_code(err, std::generic_category()).message(); }

void fsync_dir(const fs::path& dir, std::string_view op) {
  save_point("fsync directory");
  const fs::path d = dir.empty() ? fs::path(".") : dir;
  const int fd = ::open(d.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MPT_CHECK(fd >= 0, "[{}] cannot open the directory '{}' to flush it: {}", op, d.string(), errno_text(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  MPT_CHECK(rc == 0 || err == EINVAL, "[{}] cannot flush the directory '{}': {}", op, d.string(), errno_text(err));
}

void write_file_durably(const fs::path& path, std::string_view bytes, std::string_view op) {
  const fs::path tmp = path.parent_path() / fmt::format(".{}.tmp-{}", path.filename().string(), ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MPT_CHECK(fd >= 0, "[{}] cannot create '{}': {}", op, tmp.string(), errno_text(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    save_point("write");
    const ssize_t w = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      MPT_THROW("[{}] cannot write '{}': {}", op, tmp.string(), errno_text(err));
    }
    done += static_cast<size_t>(w);
  }
  save_point("fsync file");
  const bool ok = ::fsync(fd) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) ::unlink(tmp.c_str());
  MPT_CHECK(ok, "[{}] cannot flush '{}': {}", op, tmp.string(), errno_text(err));
  save_point("rename file");
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int rerr = errno;
    ::unlink(tmp.c_str());
    MPT_THROW("[{}] cannot rename '{}' to '{}': {}", op, tmp.string(), path.string(), errno_text(rerr));
  }
  fsync_dir(path.parent_path(), op);
}

}  // namespace mpt::io::detail
