// src/io/safetensors_write.cpp: save_safetensors: the reference layout, written to a temporary and renamed into place.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>
#include <utility>
#include <vector>

#include "io/checksum.h"
#include "io/safetensors_format.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"

namespace mpt::io {
namespace {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

std::string errno_message(int err) { return std::error_code(err, std::generic_category()).message(); }

struct Planned {
  const std::string* name;
  const Tensor* tensor;
  uint64_t begin, end;
};

// Reference order: descending dtype rank (alignment), then name. `tensors` iterates by name already.
std::vector<Planned> plan_layout(const std::map<std::string, Tensor>& tensors, const std::string& where) {
  std::vector<Planned> plan;
  for (const auto& [name, tensor] : tensors) {
    MPT_CHECK(name != "__metadata__", "[safetensors] {}: \"__metadata__\" is reserved and cannot name a tensor", where);
    MPT_CHECK(tensor.defined(), "[safetensors] {}: tensor \"{}\" is undefined", where, name);
    plan.push_back({&name, &tensor, 0, 0});
  }
  std::stable_sort(plan.begin(), plan.end(), [](const Planned& a, const Planned& b) {
    return detail::dtype_code(a.tensor->dtype()).rank > detail::dtype_code(b.tensor->dtype()).rank;
  });
  uint64_t offset = 0;
  for (Planned& p : plan) {
    p.begin = offset;
    offset += p.tensor->nbytes();
    p.end = offset;
  }
  return plan;
}

// Compact JSON (as serde_json writes it), "__metadata__" first, padded with spaces to a multiple of 8 bytes.
std::string header_text(const std::vector<Planned>& plan, const std::map<std::string, std::string>& metadata,
                        const std::string& where) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json meta = ordered_json::object();
    for (const auto& [key, value] : metadata) meta[key] = value;
    header["__metadata__"] = std::move(meta);
  }
  for (const Planned& p : plan) {
    ordered_json entry = ordered_json::object();
    entry["dtype"] = detail::dtype_code(p.tensor->dtype()).code;
    entry["shape"] = p.tensor->shape();
    entry["data_offsets"] = ordered_json::array({p.begin, p.end});
    header[*p.name] = std::move(entry);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    MPT_THROW("[safetensors] {}: tensor names and metadata must be valid UTF-8: {}", where, e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

// The temporary file beside the target: closed and removed unless commit() renamed it into place.
class TempFile {
 public:
  TempFile(const fs::path& target, const std::string& where) : where_(where) {
    static std::atomic<uint64_t> counter{0};
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    for (int attempt = 0; fd_ < 0; ++attempt) {
      path_ = dir / fmt::format("{}.tmp.{}.{}", target.filename().string(), ::getpid(), counter++);
      fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      MPT_CHECK(fd_ >= 0 || (errno == EEXIST && attempt < 100), "[safetensors] {}: cannot create the temporary "
                "file {}: {}", where_, path_.string(), errno_message(errno));
    }
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t n) {
    constexpr size_t kChunk = size_t{1} << 20;  // crash-test points: the first write and every MiB boundary
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const size_t chunk = std::min(n, kChunk - written_ % kChunk);
      if (written_ % kChunk == 0) detail::save_point("write");
      const ssize_t w = ::write(fd_, p, chunk);
      if (w > 0) hash_.update(p, static_cast<size_t>(w));
      if (w < 0 && errno == EINTR) continue;
      MPT_CHECK(w > 0, "[safetensors] {}: cannot write the temporary file {}: {}", where_, path_.string(),
                w < 0 ? errno_message(errno) : "no progress");
      p += w;
      n -= static_cast<size_t>(w);
      written_ += static_cast<size_t>(w);
    }
  }

  // fsync, close and rename over `target`; then fsync the directory so the rename itself is durable.
  detail::FileDigest digest() const { return hash_.digest(); }

  void commit(const fs::path& target) {
    detail::save_point("fsync file");
    MPT_CHECK(::fsync(fd_) == 0, "[safetensors] {}: cannot flush the temporary file {}: {}", where_, path_.string(),
              errno_message(errno));
    const int fd = std::exchange(fd_, -1);
    MPT_CHECK(::close(fd) == 0, "[safetensors] {}: cannot close the temporary file {}: {}", where_, path_.string(),
              errno_message(errno));
    detail::save_point("rename file");
    MPT_CHECK(::rename(path_.c_str(), target.c_str()) == 0, "[safetensors] {}: cannot rename the temporary file {} "
              "over it: {}", where_, path_.string(), errno_message(errno));
    committed_ = true;
    const fs::path dir = target.parent_path().empty() ? fs::path(".") : target.parent_path();
    const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir_fd >= 0) {
      ::fsync(dir_fd);  // best effort: the file is in place already, and some file systems refuse this
      ::close(dir_fd);
    }
  }

 private:
  std::string where_;
  fs::path path_;
  int fd_ = -1;
  detail::Xxh3Stream hash_;
  size_t written_ = 0;
  bool committed_ = false;
};

}  // namespace

std::function<void(std::string_view)>& detail::save_hook() {
  static std::function<void(std::string_view)> hook;
  return hook;
}

void save_safetensors(const fs::path& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  detail::save_safetensors_hashed(path, tensors, metadata);
}

detail::FileDigest detail::save_safetensors_hashed(const fs::path& path, const std::map<std::string, Tensor>& tensors,
                                                   const std::map<std::string, std::string>& metadata) {
  const std::string where = path.string();
  const std::vector<Planned> plan = plan_layout(tensors, where);
  const std::string header = header_text(plan, metadata, where);

  TempFile tmp(path, where);
  const uint64_t n = header.size();  // little-endian on disk and on the host (safetensors_format.h)
  tmp.write(&n, sizeof(n));
  tmp.write(header.data(), header.size());
  for (const Planned& p : plan) {
    if (p.end == p.begin) continue;
    Tensor host;
    try {
      host = p.tensor->to(Device::cpu()).contiguous();
    } catch (const Error& e) {
      MPT_THROW("[safetensors] {}: cannot copy tensor \"{}\" to the host: {}", where, *p.name, e.what());
    }
    tmp.write(host.data_ptr(), host.nbytes());
  }
  tmp.commit(path);
  return tmp.digest();
}

}  // namespace mpt::io
