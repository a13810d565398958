// src/io/gguf_read.cpp: read_gguf: every field checked against the bytes that remain before it is read or allocated.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <set>
#include <system_error>

#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian: values are copied without swapping");

constexpr uint32_t kMaxAlignment = 1 << 20;  // ggml's reader refuses larger alignments
constexpr uint32_t kMaxDims = 4;             // ggml's GGML_MAX_DIMS
constexpr uint64_t kHeaderBytes = 24;        // magic, version, tensor count, key-value count
constexpr uint64_t kMinKVBytes = 8 + 4 + 1;  // key length, value type, a one-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 4 + 8;  // name length, n_dims, type, offset

std::string errno_message() { return std::error_code(errno, std::generic_category()).message(); }

// The file, read forward through a buffer refilled with pread; every read is checked against the file's size first.
class Reader {
 public:
  explicit Reader(const std::filesystem::path& path) : where_(path.string()) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    MPT_CHECK(fd_ >= 0, "[gguf] {}: cannot open for reading: {}", where_, errno_message());
    struct stat st {};
    const bool stat_ok = ::fstat(fd_, &st) == 0;
    if (!stat_ok || !S_ISREG(st.st_mode)) {
      const std::string why = stat_ok ? "not a regular file" : errno_message();
      ::close(fd_);
      MPT_THROW("[gguf] {}: cannot read: {}", where_, why);
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  ~Reader() { ::close(fd_); }
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& where() const { return where_; }
  uint64_t size() const { return size_; }
  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  // The next n bytes; `what` names them in the error when the file ends first.
  std::string_view take(uint64_t n, std::string_view what) {
    MPT_CHECK(n <= remaining(), "[gguf] {}: the file ends at byte {}, inside {} ({} bytes needed at byte {})", where_,
              size_, what, n, pos_);
    if (pos_ < buf_start_ || pos_ + n > buf_start_ + buf_.size()) {
      buf_.resize(static_cast<size_t>(std::min<uint64_t>(std::max<uint64_t>(n, kChunk), remaining())));
      read_at(buf_.data(), buf_.size(), pos_);
      buf_start_ = pos_;
    }
    const std::string_view out(buf_.data() + (pos_ - buf_start_), static_cast<size_t>(n));
    pos_ += n;
    return out;
  }

  template <class T>
  T get(std::string_view what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what).data(), sizeof(T));
    return v;
  }

  std::string get_string(std::string_view what) {
    const auto n = get<uint64_t>(what);
    MPT_CHECK(n <= remaining(), "[gguf] {}: {} claims {} bytes, but only {} remain in the file (at byte {})", where_,
              what, n, remaining(), pos_);
    return std::string(take(n, what));
  }

  void read_at(char* dst, size_t n, uint64_t offset) const {
    size_t done = 0;
    while (done < n) {
      const ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
      if (r < 0 && errno == EINTR) continue;
      MPT_CHECK(r >= 0, "[gguf] {}: read failed at byte {}: {}", where_, offset + done, errno_message());
      MPT_CHECK(r > 0, "[gguf] {}: the file shrank while being read (it ended at byte {})", where_, offset + done);
      done += static_cast<size_t>(r);
    }
  }

 private:
  static constexpr uint64_t kChunk = uint64_t{1} << 20;
  std::string where_;
  int fd_ = -1;
  uint64_t size_ = 0, pos_ = 0, buf_start_ = 0;
  std::string buf_;
};

uint64_t min_element_bytes(GgufValueType type) {
  switch (type) {
    case GgufValueType::UInt16:
    case GgufValueType::Int16: return 2;
    case GgufValueType::UInt32:
    case GgufValueType::Int32:
    case GgufValueType::Float32: return 4;
    case GgufValueType::String:  // the length; the bytes may be none
    case GgufValueType::UInt64:
    case GgufValueType::Int64:
    case GgufValueType::Float64: return 8;
    default: return 1;
  }
}

template <class T>
T read_scalar(Reader& r, const std::string& what) {
  if constexpr (std::is_same_v<T, std::string>) {
    return r.get_string(what);
  } else if constexpr (std::is_same_v<T, bool>) {
    const auto b = r.get<uint8_t>(what);
    MPT_CHECK(b <= 1, "[gguf] {}: {} is a BOOL holding {}; the spec allows only 0 and 1", r.where(), what, b);
    return b == 1;
  } else {
    return r.get<T>(what);
  }
}

// The scalar of variant slot `code` (of GgufValue or GgufArray's element vector), built by f<T>().
template <class F>
auto with_scalar_type(uint32_t code, F&& f) {
  switch (static_cast<GgufValueType>(code)) {
    case GgufValueType::UInt8: return f.template operator()<uint8_t>();
    case GgufValueType::Int8: return f.template operator()<int8_t>();
    case GgufValueType::UInt16: return f.template operator()<uint16_t>();
    case GgufValueType::Int16: return f.template operator()<int16_t>();
    case GgufValueType::UInt32: return f.template operator()<uint32_t>();
    case GgufValueType::Int32: return f.template operator()<int32_t>();
    case GgufValueType::Float32: return f.template operator()<float>();
    case GgufValueType::Bool: return f.template operator()<bool>();
    case GgufValueType::String: return f.template operator()<std::string>();
    case GgufValueType::UInt64: return f.template operator()<uint64_t>();
    case GgufValueType::Int64: return f.template operator()<int64_t>();
    case GgufValueType::Float64: return f.template operator()<double>();
    case GgufValueType::Array: break;
  }
  MPT_THROW("[gguf] not a scalar value type: {}", code);  // callers check the code first
}

uint32_t read_value_type(Reader& r, const std::string& what) {
  const auto code = r.get<uint32_t>(what + "'s value type");
  MPT_CHECK(code <= static_cast<uint32_t>(GgufValueType::Float64), "[gguf] {}: {} has value type {}, not a GGUF "
            "value type (0 to 12)", r.where(), what, code);
  return code;
}

GgufValue read_value(Reader& r, const std::string& what) {
  const uint32_t code = read_value_type(r, what);
  if (code != static_cast<uint32_t>(GgufValueType::Array))
    return with_scalar_type(code, [&]<class T>() { return GgufValue(read_scalar<T>(r, what)); });
  const uint32_t element = read_value_type(r, what + "'s array");
  MPT_CHECK(element != static_cast<uint32_t>(GgufValueType::Array), "[gguf] {}: {} is an array of arrays; nested "
            "arrays are not supported (ggml's reader refuses them too)", r.where(), what);
  const auto n = r.get<uint64_t>(what + "'s array length");
  const uint64_t min_bytes = min_element_bytes(static_cast<GgufValueType>(element));
  MPT_CHECK(n <= r.remaining() / min_bytes, "[gguf] {}: {} claims {} elements of {}, but only {} bytes remain in the "
            "file (at byte {})", r.where(), what, n, gguf_value_type_name(static_cast<GgufValueType>(element)),
            r.remaining(), r.pos());
  const std::string elements = what + "'s elements";
  return with_scalar_type(element, [&]<class T>() {
    std::vector<T> items;
    // At most the file's size: n <= remaining / sizeof(T). Strings grow as read, each from at least 8 bytes.
    if constexpr (!std::is_same_v<T, std::string>) items.reserve(static_cast<size_t>(n));
    for (uint64_t i = 0; i < n; ++i) items.push_back(read_scalar<T>(r, elements));
    return GgufValue(GgufArray(std::move(items)));
  });
}

std::optional<GgufType> supported_type(uint32_t code) {
  for (const GgufType t :
       {GgufType::F32, GgufType::F16, GgufType::Q4_0, GgufType::Q8_0, GgufType::Q4_K, GgufType::BF16})
    if (static_cast<uint32_t>(t) == code) return t;
  return std::nullopt;
}

uint64_t align_up(uint64_t x, uint64_t a) { return x + (a - x % a) % a; }

uint32_t read_alignment(const Reader& r, const std::vector<GgufKV>& kvs) {
  for (const GgufKV& kv : kvs) {
    if (kv.key != "general.alignment") continue;
    MPT_CHECK(gguf_value_type(kv.value) == GgufValueType::UInt32, "[gguf] {}: general.alignment must be UINT32, "
              "got {}", r.where(), gguf_value_type_name(gguf_value_type(kv.value)));
    const uint32_t a = std::get<uint32_t>(kv.value);
    MPT_CHECK(std::has_single_bit(a) && a <= kMaxAlignment, "[gguf] {}: general.alignment {} must be a power of two "
              "no larger than {}", r.where(), a, kMaxAlignment);
    return a;
  }
  return kGgufDefaultAlignment;
}

GgufTensorInfo read_tensor_info(Reader& r, uint64_t index, uint32_t alignment, uint64_t& nbytes) {
  GgufTensorInfo t;
  t.name = r.get_string(fmt::format("the name of tensor {}", index));
  const std::string what = fmt::format("tensor \"{}\"", t.name);
  const auto n_dims = r.get<uint32_t>(what + "'s n_dims");
  MPT_CHECK(n_dims <= kMaxDims, "[gguf] {}: {} has {} dimensions; ggml allows at most {}", r.where(), what, n_dims,
            kMaxDims);
  t.shape.resize(n_dims);
  int64_t numel = 1;
  for (uint32_t i = 0; i < n_dims; ++i) {
    const auto d = r.get<uint64_t>(fmt::format("{}'s dims[{}]", what, i));
    MPT_CHECK(d <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) &&
                  (d == 0 || numel <= std::numeric_limits<int64_t>::max() / static_cast<int64_t>(d)),
              "[gguf] {}: {} has dims[{}] = {}: its element count overflows int64", r.where(), what, i, d);
    t.shape[n_dims - 1 - i] = static_cast<int64_t>(d);  // GGUF's dims[0] is the innermost, row-major's last
    numel *= static_cast<int64_t>(d);
  }
  const auto code = r.get<uint32_t>(what + "'s type");
  const std::optional<GgufType> type = supported_type(code);
  MPT_CHECK(type.has_value(), "[gguf] {}: {} has ggml type {} ({}); mptrain reads F32, F16, BF16, Q8_0, Q4_0 "
            "and Q4_K", r.where(), what, code, gguf_type_name(code));
  t.type = *type;
  const int64_t block = gguf_block_size(t.type);
  const int64_t inner = n_dims == 0 ? 1 : t.shape.back();
  MPT_CHECK(inner % block == 0, "[gguf] {}: {} is {} with {} elements per row, not a multiple of its {}-element "
            "block", r.where(), what, gguf_type_name(t.type), inner, block);
  nbytes = static_cast<uint64_t>(numel / block) * static_cast<uint64_t>(gguf_block_bytes(t.type));
  t.offset = r.get<uint64_t>(what + "'s offset");
  MPT_CHECK(t.offset % alignment == 0, "[gguf] {}: {} has offset {}, not a multiple of the alignment {}", r.where(),
            what, t.offset, alignment);
  return t;
}

}  // namespace

int64_t GgufTensorInfo::numel() const {
  return std::accumulate(shape.begin(), shape.end(), int64_t{1}, std::multiplies<>());
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const GgufKV& kv : kvs)
    if (kv.key == key) return &kv.value;
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view name) const {
  for (const GgufTensorInfo& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

GgufFile read_gguf(const std::filesystem::path& path) {
  Reader r(path);
  const std::string& where = r.where();
  if (r.size() >= 4) {
    const std::string_view magic = r.take(4, "the magic");
    MPT_CHECK(magic == "GGUF", "[gguf] {}: not a GGUF file: it starts with {:02x} {:02x} {:02x} {:02x}, not \"GGUF\" "
              "(47 47 55 46)", where, uint8_t(magic[0]), uint8_t(magic[1]), uint8_t(magic[2]), uint8_t(magic[3]));
  }
  MPT_CHECK(r.size() >= kHeaderBytes, "[gguf] {}: the file holds {} bytes, shorter than the {}-byte GGUF header",
            where, r.size(), kHeaderBytes);
  GgufFile file;
  file.version = r.get<uint32_t>("the version");
  MPT_CHECK(file.version != 0x03000000, "[gguf] {}: version 0x03000000 is a byte-swapped 3: a big-endian file, "
            "which mptrain does not read", where);
  MPT_CHECK(file.version == 3, "[gguf] {}: GGUF version {}; mptrain reads version 3 only{}", where, file.version,
            file.version < 3 ? " (convert the model again with a current llama.cpp)" : "");
  const auto n_tensors = r.get<uint64_t>("the tensor count");
  const auto n_kv = r.get<uint64_t>("the key-value count");
  MPT_CHECK(n_kv <= r.remaining() / kMinKVBytes, "[gguf] {}: the header claims {} key-value pairs, but the {} bytes "
            "after it hold at most {}", where, n_kv, r.remaining(), r.remaining() / kMinKVBytes);
  MPT_CHECK(n_tensors <= (r.remaining() - n_kv * kMinKVBytes) / kMinTensorInfoBytes, "[gguf] {}: the header claims {} "
            "tensors and {} key-value pairs, but the {} bytes after it hold at most {} tensor infos beside them",
            where, n_tensors, n_kv, r.remaining(), (r.remaining() - n_kv * kMinKVBytes) / kMinTensorInfoBytes);

  // No reserve() from the counts: a corrupt one fails at the end of the file, having allocated little.
  std::set<std::string, std::less<>> seen;
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = r.get_string(fmt::format("the key of key-value pair {}", i));
    MPT_CHECK(seen.insert(key).second, "[gguf] {}: duplicate key \"{}\" (key-value pair {})", where, key, i);
    GgufValue value = read_value(r, fmt::format("key \"{}\"", key));
    file.kvs.push_back({std::move(key), std::move(value)});
  }
  file.alignment = read_alignment(r, file.kvs);

  seen.clear();
  std::vector<uint64_t> sizes;
  for (uint64_t i = 0; i < n_tensors; ++i) {
    sizes.push_back(0);
    file.tensors.push_back(read_tensor_info(r, i, file.alignment, sizes.back()));
    MPT_CHECK(seen.insert(file.tensors.back().name).second, "[gguf] {}: duplicate tensor name \"{}\" (tensor {})",
              where, file.tensors.back().name, i);
  }
  file.data_start = align_up(r.pos(), file.alignment);
  if (n_tensors == 0) return file;
  MPT_CHECK(file.data_start <= r.size(), "[gguf] {}: the file ends at byte {}, before its data section (byte {})",
            where, r.size(), file.data_start);

  const uint64_t data_bytes = r.size() - file.data_start;
  std::vector<size_t> order(file.tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i : order) {
    const GgufTensorInfo& t = file.tensors[i];
    MPT_CHECK(t.offset <= data_bytes && sizes[i] <= data_bytes - t.offset, "[gguf] {}: tensor \"{}\" spans bytes "
              "[{}, {}) of the data section, which holds {} bytes: the file is truncated or the offset is wrong",
              where, t.name, t.offset, t.offset + sizes[i], data_bytes);
  }
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return file.tensors[a].offset != file.tensors[b].offset ? file.tensors[a].offset < file.tensors[b].offset
                                                              : sizes[a] < sizes[b];
  });
  std::optional<size_t> last;  // the previous non-empty tensor: sorted by offset, each must start after it ends
  for (const size_t i : order) {
    if (sizes[i] == 0) continue;
    const GgufTensorInfo& t = file.tensors[i];
    if (last) {
      const GgufTensorInfo& p = file.tensors[*last];
      MPT_CHECK(p.offset + sizes[*last] <= t.offset, "[gguf] {}: tensors \"{}\" (bytes [{}, {})) and \"{}\" (bytes "
                "[{}, {})) overlap in the data section", where, p.name, p.offset, p.offset + sizes[*last], t.name,
                t.offset, t.offset + sizes[i]);
    }
    last = i;
  }
  for (size_t i = 0; i < file.tensors.size(); ++i) {
    GgufTensorInfo& t = file.tensors[i];
    t.bytes.resize(static_cast<size_t>(sizes[i]));
    r.read_at(t.bytes.data(), t.bytes.size(), file.data_start + t.offset);
  }
  return file;
}

}  // namespace mpt::io
