// mpt/io/gguf.h: GGUF (llama.cpp's model file format, version 3): writer, reader, the Q8_0/Q4_0 packers, the Q4_K quantizer.
#pragma once

#include <cstdint>
#include <filesystem>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace mpt::io {

// ggml_type codes of the tensor types mptrain writes and reads (ggml's docs/gguf.md, enum ggml_type).
enum class GgufType : uint32_t { F32 = 0, F16 = 1, Q4_0 = 2, Q8_0 = 8, Q4_K = 12, BF16 = 30 };

// Elements per block (32 for Q4_0 and Q8_0, 256 for Q4_K, 1 otherwise) and bytes per block: Q8_0 is {f16 d; int8
// qs[32]} (34 bytes), Q4_0 is {f16 d; uint8 qs[16]} (18 bytes), Q4_K is {f16 d; f16 dmin; uint8 scales[12]; uint8
// qs[128]} (144 bytes; see quantize_q4_k).
int64_t gguf_block_size(GgufType type);
int64_t gguf_block_bytes(GgufType type);
// "F32", "Q8_0", ...; for a code mptrain does not support, ggml's name of it (or "unknown").
std::string_view gguf_type_name(uint32_t ggml_type);
inline std::string_view gguf_type_name(GgufType type) { return gguf_type_name(static_cast<uint32_t>(type)); }

// Metadata value types; a GgufValue's (and a GgufArray's) variant index is this code.
enum class GgufValueType : uint32_t {
  UInt8 = 0, Int8 = 1, UInt16 = 2, Int16 = 3, UInt32 = 4, Int32 = 5, Float32 = 6, Bool = 7, String = 8, Array = 9,
  UInt64 = 10, Int64 = 11, Float64 = 12,
};
std::string_view gguf_value_type_name(GgufValueType type);

// An array of one scalar type; the index of the held vector is the element type's code. Slot 9 (ARRAY) holds
// nothing: the spec allows nested arrays, but ggml's reader refuses them, and so does mptrain.
using GgufArray = std::variant<std::vector<uint8_t>, std::vector<int8_t>, std::vector<uint16_t>, std::vector<int16_t>,
                               std::vector<uint32_t>, std::vector<int32_t>, std::vector<float>, std::vector<bool>,
                               std::vector<std::string>, std::monostate, std::vector<uint64_t>, std::vector<int64_t>,
                               std::vector<double>>;

// One metadata value; value.index() is its GgufValueType code.
using GgufValue = std::variant<uint8_t, int8_t, uint16_t, int16_t, uint32_t, int32_t, float, bool, std::string,
                               GgufArray, uint64_t, int64_t, double>;

inline GgufValueType gguf_value_type(const GgufValue& v) { return static_cast<GgufValueType>(v.index()); }
inline GgufValueType gguf_array_type(const GgufArray& a) { return static_cast<GgufValueType>(a.index()); }

struct GgufKV {
  std::string key;
  GgufValue value;
  bool operator==(const GgufKV&) const = default;
};

// The file's default alignment of the data section and of every tensor, when it holds no general.alignment.
inline constexpr uint32_t kGgufDefaultAlignment = 32;
// ggml's GGML_QNT_VERSION: the general.quantization_version a file with Q8_0/Q4_0/Q4_K tensors declares.
inline constexpr uint32_t kGgufQuantizationVersion = 2;

// Builds a GGUF v3 file in memory and writes it whole. Keys and tensors keep insertion order, the bytes are a
// function of the calls alone, and the layout is ggml's: tensor data in insertion order, each tensor at an offset
// that is a multiple of the alignment and zero-padded to the next one (the last one too), as llama.cpp requires.
// Every add_* validates first and changes nothing when it throws mpt::Error "[gguf] ...".
class GgufWriter {
 public:
  // Any value. Keys are unique, non-empty, at most 65535 bytes. "general.alignment" must be a UINT32 power of two
  // from 8 to 1 MiB; it sets the alignment of this file.
  void add(std::string key, GgufValue value);
  void add_u32(std::string key, uint32_t v) { add(std::move(key), v); }
  void add_i32(std::string key, int32_t v) { add(std::move(key), v); }
  void add_u64(std::string key, uint64_t v) { add(std::move(key), v); }
  void add_f32(std::string key, float v) { add(std::move(key), v); }
  void add_bool(std::string key, bool v) { add(std::move(key), v); }
  void add_string(std::string key, std::string v) { add(std::move(key), GgufValue(std::move(v))); }
  void add_string_array(std::string key, std::vector<std::string> v) { add(std::move(key), GgufArray(std::move(v))); }
  void add_f32_array(std::string key, std::vector<float> v) { add(std::move(key), GgufArray(std::move(v))); }
  void add_i32_array(std::string key, std::vector<int32_t> v) { add(std::move(key), GgufArray(std::move(v))); }

  // A tensor of `shape_row_major` (torch's order: the last dimension is contiguous; written reversed, as GGUF's
  // dims[0] is the fastest-varying), 1 to 4 dimensions, names unique and at most 63 bytes (ggml's GGML_MAX_NAME).
  // `bytes` must hold exactly the type's size for the shape; for Q8_0/Q4_0 (Q4_K) the innermost dimension is a
  // multiple of 32 (256) and the bytes are the packed blocks, row after row (pack_q8_0 / pack_q4_0 / quantize_q4_k).
  void add_tensor(std::string name, std::vector<int64_t> shape_row_major, GgufType type, std::string bytes);

  // The file's bytes. Refuses a file with quantized (Q8_0/Q4_0/Q4_K) tensors but no general.quantization_version
  // (the spec requires it of quantized files).
  std::string serialize() const;
  // serialize(), written with a temporary file, fsync and rename: a file already at `path` is kept whole when
  // anything fails, including serialize()'s validation.
  void write(const std::filesystem::path& path) const;

  uint32_t alignment() const { return alignment_; }

 private:
  // Refuses a file that may not be written yet; `where` prefixes the message.
  void check_complete(std::string_view where) const;

  struct PendingTensor {
    std::string name;
    std::vector<int64_t> shape;  // row-major
    GgufType type;
    std::string bytes;
  };
  std::vector<GgufKV> kvs_;
  std::vector<PendingTensor> tensors_;
  std::set<std::string, std::less<>> keys_, names_;
  uint32_t alignment_ = kGgufDefaultAlignment;
};

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> shape;  // row-major (the file's dims reversed)
  GgufType type = GgufType::F32;
  uint64_t offset = 0;  // relative to the start of the data section, as in the file
  std::string bytes;    // the tensor's data
  int64_t numel() const;
};

struct GgufFile {
  uint32_t version = 3;
  uint32_t alignment = kGgufDefaultAlignment;
  uint64_t data_start = 0;  // file offset of the data section
  std::vector<GgufKV> kvs;  // in file order
  std::vector<GgufTensorInfo> tensors;  // in file order

  // nullptr when absent.
  const GgufValue* find(std::string_view key) const;
  const GgufTensorInfo* find_tensor(std::string_view name) const;
};

// Reads and validates a whole GGUF v3 file: magic, version, counts and string lengths against the bytes that
// remain, value and tensor types, bools, dims, general.alignment, offsets (aligned, in bounds, non-overlapping),
// no duplicate keys or names, no nested arrays. Throws mpt::Error "[gguf] <path>: ..." on the first violation; a
// truncated or corrupt file never reads past its end, and allocates in proportion to its size, whatever its counts
// claim. Tensor bytes are copied out (the whole data section is held in memory).
GgufFile read_gguf(const std::filesystem::path& path);

// Q8_0 blocks from codes the caller computed: 32 codes in [-127, 127] per FP16 scale (bits, finite), value =
// d * code.
// -128 is refused: ggml's quantizer never emits it and its x86 dot products negate codes with sign_epi8, which
// overflows at -128.
std::string pack_q8_0(std::span<const int8_t> codes, std::span<const uint16_t> scale_f16_bits);
// Q4_0 blocks: 32 codes in [-8, 7] per FP16 scale, value = d * code; code j of a block goes to the low nibble of
// qs[j] (j < 16) or the high nibble of qs[j - 16], stored as code + 8.
std::string pack_q4_0(std::span<const int8_t> codes, std::span<const uint16_t> scale_f16_bits);

// Q4_K (llama.cpp's k-quant "Q4_K") blocks of `x`, whose size must be a multiple of 256 (a row of a tensor, or rows
// one after another). A block is 256 values in 8 sub-blocks of 32, value = d * sc * q - dmin * m: q a 4-bit code in
// [0, 15], sc and m the sub-block's 6-bit scale and min, d and dmin the block's FP16 super-scales. Bytes: d, dmin
// (f16), scales[12] (sub-block j < 4: sc in scales[j] & 63, m in scales[j + 4] & 63; j >= 4: the low 4 bits of sc
// and m in scales[j + 4]'s low and high nibbles, their top 2 bits in bits 6-7 of scales[j - 4] and scales[j]), qs[128]
// (each 64 values: 32 bytes, the first 32 codes in the low nibbles, the next 32 in the high nibbles).
// The search (ggml's quantize_row_q4_K_ref, our code): per sub-block, the affine fit x ~ scale * q - min with
// min >= 0 that minimizes the squared error weighted by (rms + |x|), over a grid of 21 code assignments around the
// min/max one, each refit in closed form; then the 8 scales and mins in 6 bits against the block's largest
// (d = max scale / 63, dmin = max min / 63, FP16), and the codes again with those. Throws for a size that is not a
// multiple of 256, a value that is not finite, or a block whose d or dmin overflows FP16.
std::string quantize_q4_k(std::span<const float> x);

// `n` elements of `type` from their bytes, as float, computed in float as ggml does: d * code (Q8_0, Q4_0);
// (d * sc) * q - (dmin * m) (Q4_K).
std::vector<float> dequantize_gguf(GgufType type, std::string_view bytes, int64_t n);

}  // namespace mpt::io
