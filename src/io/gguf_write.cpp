// src/io/gguf_write.cpp: GgufWriter: validated metadata and tensors, laid out as ggml's writer does, written whole.
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <limits>
#include <utility>

#include "io/durable_file.h"
#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian: values are copied without swapping");

constexpr size_t kMaxKeyBytes = 65535;     // the spec's limit on a key
constexpr size_t kMaxNameBytes = 63;       // ggml's GGML_MAX_NAME (64) holds the terminating NUL
constexpr size_t kMaxDims = 4;             // ggml's GGML_MAX_DIMS
constexpr uint32_t kMaxAlignment = 1 << 20;  // ggml's reader refuses larger alignments

template <class T>
void put(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out.append(b, sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s);
}

template <class T>
void put_scalar(std::string& out, const T& v) {
  if constexpr (std::is_same_v<T, std::string>) {
    put_string(out, v);
  } else if constexpr (std::is_same_v<T, bool>) {
    put<uint8_t>(out, v ? 1 : 0);
  } else {
    put<T>(out, v);
  }
}

void put_value(std::string& out, const GgufValue& value) {
  put<uint32_t>(out, static_cast<uint32_t>(value.index()));
  std::visit(
      [&](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, GgufArray>) {
          put<uint32_t>(out, static_cast<uint32_t>(v.index()));
          std::visit(
              [&](const auto& items) {
                using V = std::decay_t<decltype(items)>;
                if constexpr (!std::is_same_v<V, std::monostate>) {
                  put<uint64_t>(out, items.size());
                  for (const auto& item : items) put_scalar<typename V::value_type>(out, item);
                }
              },
              v);
        } else {
          put_scalar(out, v);
        }
      },
      value);
}

uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

void pad_to(std::string& out, uint64_t alignment) { out.append(align_up(out.size(), alignment) - out.size(), '\0'); }

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

bool is_quantized(GgufType type) {
  return type == GgufType::Q8_0 || type == GgufType::Q4_0 || type == GgufType::Q4_K;
}

}  // namespace

void GgufWriter::add(std::string key, GgufValue value) {
  MPT_CHECK(!key.empty() && key.size() <= kMaxKeyBytes, "[gguf] a key has 1 to {} bytes, got {}", kMaxKeyBytes,
            key.size());
  MPT_CHECK(!keys_.contains(key), "[gguf] duplicate key \"{}\"", key);
  const GgufValueType type = gguf_value_type(value);
  if (type == GgufValueType::Array)
    MPT_CHECK(gguf_array_type(std::get<GgufArray>(value)) != GgufValueType::Array,
              "[gguf] key \"{}\": nested arrays are not supported (ggml's reader refuses them)", key);
  uint32_t alignment = alignment_;
  if (key == "general.alignment" || key == "general.quantization_version")
    MPT_CHECK(type == GgufValueType::UInt32, "[gguf] key \"{}\" must be UINT32, got {}", key,
              gguf_value_type_name(type));
  if (key == "general.alignment") {
    alignment = std::get<uint32_t>(value);
    MPT_CHECK(std::has_single_bit(alignment) && alignment >= 8 && alignment <= kMaxAlignment,
              "[gguf] general.alignment {} must be a power of two from 8 to {}", alignment, kMaxAlignment);
  }
  keys_.insert(key);
  kvs_.push_back({std::move(key), std::move(value)});
  alignment_ = alignment;
}

void GgufWriter::add_tensor(std::string name, std::vector<int64_t> shape, GgufType type, std::string bytes) {
  const std::string what = fmt::format("tensor \"{}\" of shape {}", name, shape_text(shape));
  MPT_CHECK(!name.empty() && name.size() <= kMaxNameBytes, "[gguf] {}: a tensor name has 1 to {} bytes (ggml's "
            "GGML_MAX_NAME), this one {}", what, kMaxNameBytes, name.size());
  MPT_CHECK(!names_.contains(name), "[gguf] duplicate tensor name \"{}\"", name);
  MPT_CHECK(type == GgufType::F32 || type == GgufType::F16 || type == GgufType::BF16 || is_quantized(type),
            "[gguf] {}: unsupported type code {}", what, static_cast<uint32_t>(type));
  MPT_CHECK(!shape.empty() && shape.size() <= kMaxDims, "[gguf] {}: GGUF tensors have 1 to {} dimensions, got {}",
            what, kMaxDims, shape.size());
  int64_t numel = 1;
  for (const int64_t d : shape) {
    MPT_CHECK(d >= 0, "[gguf] {}: negative dimension {}", what, d);
    MPT_CHECK(d == 0 || numel <= std::numeric_limits<int64_t>::max() / d, "[gguf] {}: too many elements", what);
    numel *= d;
  }
  const int64_t block = gguf_block_size(type);
  MPT_CHECK(shape.back() % block == 0, "[gguf] {}, {}: the innermost dimension ({}) must be a multiple of the "
            "{}-element block", what, gguf_type_name(type), shape.back(), block);
  const auto expected = static_cast<uint64_t>(numel / block) * static_cast<uint64_t>(gguf_block_bytes(type));
  MPT_CHECK(bytes.size() == expected, "[gguf] {}, {}: expected {} bytes ({} {} of {} bytes), got {}", what,
            gguf_type_name(type), expected, numel / block, block == 1 ? "elements" : "blocks", gguf_block_bytes(type),
            bytes.size());
  names_.insert(name);
  tensors_.push_back({std::move(name), std::move(shape), type, std::move(bytes)});
}

void GgufWriter::check_complete(std::string_view where) const {
  for (const PendingTensor& t : tensors_) {
    if (!is_quantized(t.type) || keys_.contains("general.quantization_version")) continue;
    MPT_THROW("[gguf] {}tensor \"{}\" is {}, and a file holding quantized tensors must declare "
              "general.quantization_version (the spec requires it): add_u32(\"general.quantization_version\", {})",
              where, t.name, gguf_type_name(t.type), kGgufQuantizationVersion);
  }
}

std::string GgufWriter::serialize() const {
  check_complete("");
  uint64_t data_bytes = 0;
  for (const PendingTensor& t : tensors_) data_bytes += align_up(t.bytes.size(), alignment_);

  std::string out;
  out.append("GGUF");
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size());
  for (const GgufKV& kv : kvs_) {
    put_string(out, kv.key);
    put_value(out, kv.value);
  }
  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<uint64_t>(out, static_cast<uint64_t>(*d));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += align_up(t.bytes.size(), alignment_);
  }
  pad_to(out, alignment_);
  out.reserve(out.size() + data_bytes);
  for (const PendingTensor& t : tensors_) {
    out.append(t.bytes);
    pad_to(out, alignment_);
  }
  return out;
}

void GgufWriter::write(const std::filesystem::path& path) const {
  check_complete(fmt::format("{}: not written: ", path.string()));
  detail::write_file_durably(path, serialize(), "gguf");
}

}  // namespace mpt::io
