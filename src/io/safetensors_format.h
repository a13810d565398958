// src/io/safetensors_format.h: what the reader and the writer share: dtype codes, layout order, limits.
#pragma once

#include <bit>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "mpt/core/dtype.h"
#include "mpt/io/safetensors.h"

namespace mpt::io::detail {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian: bytes are copied as they are, without swapping");

// The reference implementation rejects headers above this size (100 MB); so do we.
inline constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// dtype <-> header code. `rank` is the code's position in the reference implementation's Dtype enum, which
// lists dtypes by increasing alignment: its writer orders tensors by descending rank, then by name.
struct DTypeCode {
  DType dtype;
  std::string_view code;
  int rank;
};

inline constexpr DTypeCode kDTypeCodes[] = {
    {DType::I64, "I64", 10}, {DType::F64, "F64", 9},         {DType::F32, "F32", 8},
    {DType::I32, "I32", 7},  {DType::BF16, "BF16", 6},       {DType::F16, "F16", 5},
    {DType::U16, "U16", 4},  {DType::F8E4M3, "F8_E4M3", 3}, {DType::F8E5M2, "F8_E5M2", 2},
    {DType::I8, "I8", 1},    {DType::U8, "U8", 0},
};

constexpr const DTypeCode& dtype_code(DType dtype) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.dtype == dtype) return c;
  return kDTypeCodes[0];  // unreachable: every DType has a code (checked below)
}

constexpr std::optional<DType> parse_dtype_code(std::string_view code) {
  for (const DTypeCode& c : kDTypeCodes)
    if (c.code == code) return c.dtype;
  return std::nullopt;
}

constexpr bool every_dtype_has_a_code() {
  for (DType t : kAllDTypes)
    if (dtype_code(t).dtype != t) return false;
  return true;
}
static_assert(every_dtype_has_a_code());

// "I64, F64, F32, ..." for error messages.
inline std::string supported_codes() {
  std::string out;
  for (const DTypeCode& c : kDTypeCodes) {
    if (!out.empty()) out += ", ";
    out += c.code;
  }
  return out;
}

// A header (the JSON text after the 8-byte length) checked against every rule of the format for a byte buffer of
// `buffer_size` bytes: entries sorted by offset, tiling the buffer. Throws mpt::Error "[safetensors] <where>: ...".
// Pure (no I/O): the reader's front end and a fuzz target (tests/fuzz).
struct ParsedHeader {
  std::vector<SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;
};
ParsedHeader parse_safetensors_header(std::string_view text, uint64_t buffer_size, const std::string& where);

// save_safetensors, returning the XXH3-64 of the bytes it wrote (hashed as they are written: no second read).
struct FileDigest;  // io/checksum.h
FileDigest save_safetensors_hashed(const std::filesystem::path& path, const std::map<std::string, Tensor>& tensors,
                                   const std::map<std::string, std::string>& metadata);

// The crash-test hook of train::testing::set_save_hook (checkpoint.h): save_safetensors and save_checkpoint call
// save_point() at every place a crash could land. A no-op unless a test set a hook.
std::function<void(std::string_view)>& save_hook();
inline void save_point(std::string_view label) {
  if (save_hook()) save_hook()(label);
}

}  // namespace mpt::io::detail
