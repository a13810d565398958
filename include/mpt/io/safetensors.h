// mpt/io/safetensors.h: reading and writing safetensors files, the tensor format of PyTorch and HuggingFace.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/core/dtype.h"
#include "mpt/core/shape.h"
#include "mpt/core/tensor.h"

namespace mpt::io {

// One tensor of a file. begin/end are its "data_offsets": byte offsets into the byte buffer that follows the
// header (not into the file), end exclusive.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A safetensors file opened for reading. The constructor reads and validates the whole header (every rule of
// the format: types, dtypes, shapes, sizes, no overlaps, no holes, no trailing bytes, no duplicate keys) and
// throws mpt::Error "[safetensors] <path>: ..." on the first violation. Tensor data is read lazily, by
// tensor(), from the file descriptor opened here: a file replaced (renamed over) after opening keeps being
// read consistently. tensor() uses pread and may be called from several threads at once.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&& other) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&& other) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Ordered by offset in the byte buffer (zero-size entries at the same offset by name).
  const std::vector<SafetensorsEntry>& entries() const { return entries_; }
  // The "__metadata__" object (string -> string); empty when the file has none.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  bool contains(std::string_view name) const { return index_.find(name) != index_.end(); }
  // Throws, listing the names the file holds, when `name` is not one of them.
  const SafetensorsEntry& entry(std::string_view name) const;
  // A contiguous CPU tensor holding a copy of the tensor's bytes.
  Tensor tensor(std::string_view name) const;
  // File offset of the byte buffer (8 + header length).
  uint64_t data_start() const { return data_start_; }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  uint64_t data_start_ = 0;
  std::vector<SafetensorsEntry> entries_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in entries_
  std::map<std::string, std::string> metadata_;
};

// Every tensor of the file, by name.
std::map<std::string, Tensor> load_safetensors(const std::filesystem::path& path);

// Writes `tensors` (any device, any strides: each is copied to contiguous CPU memory as it is written) and
// `metadata` (omitted from the header when empty). The layout is the reference implementation's, byte for
// byte: compact JSON header with "__metadata__" first, padded with spaces to a multiple of 8 bytes; tensors
// ordered by descending dtype alignment, then by name, so every tensor is aligned to its element size. The
// file is written to a temporary in the same directory, fsynced and renamed over `path`: an existing file is
// either kept whole or replaced whole. On failure the temporary is removed and mpt::Error names `path`.
void save_safetensors(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace mpt::io
