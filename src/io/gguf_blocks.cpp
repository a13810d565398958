// src/io/gguf_blocks.cpp: GGUF's tensor types: sizes, names, the Q8_0/Q4_0 block packers and dequantization.
#include <bit>
#include <cmath>
#include <cstring>

#include "kernels/math/numerics.h"
#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian: bytes are copied without swapping");

constexpr int64_t kQBlock = 32;  // elements per Q8_0 / Q4_0 block (ggml's QK8_0, QK4_0)
constexpr size_t kQ8Bytes = 2 + 32;
constexpr size_t kQ4Bytes = 2 + 16;

// Checks the packers' common arguments and returns the number of blocks.
size_t check_blocks(std::string_view op, std::span<const int8_t> codes, std::span<const uint16_t> scales) {
  MPT_CHECK(codes.size() == scales.size() * kQBlock, "[gguf] {}: {} codes for {} scales; a block is 32 codes and "
            "one scale, so expected {} codes", op, codes.size(), scales.size(), scales.size() * kQBlock);
  for (size_t b = 0; b < scales.size(); ++b) {
    const float d = f16_bits_to_float(scales[b]);
    MPT_CHECK(std::isfinite(d), "[gguf] {}: the scale of block {} is not finite (f16 bits 0x{:04x})", op, b,
              scales[b]);
  }
  return scales.size();
}

void put_scale(std::string& out, size_t at, uint16_t bits) { std::memcpy(out.data() + at, &bits, 2); }

uint16_t get_scale(std::string_view bytes, size_t at) {
  uint16_t bits;
  std::memcpy(&bits, bytes.data() + at, 2);
  return bits;
}

}  // namespace

int64_t gguf_block_size(GgufType type) {
  switch (type) {
    case GgufType::Q4_0:
    case GgufType::Q8_0: return kQBlock;
    case GgufType::F32:
    case GgufType::F16:
    case GgufType::BF16: return 1;
  }
  MPT_THROW("[gguf] unknown tensor type {}", static_cast<uint32_t>(type));
}

int64_t gguf_block_bytes(GgufType type) {
  switch (type) {
    case GgufType::F32: return 4;
    case GgufType::F16:
    case GgufType::BF16: return 2;
    case GgufType::Q8_0: return kQ8Bytes;
    case GgufType::Q4_0: return kQ4Bytes;
  }
  MPT_THROW("[gguf] unknown tensor type {}", static_cast<uint32_t>(type));
}

std::string_view gguf_type_name(uint32_t ggml_type) {
  // ggml's enum ggml_type (docs/gguf.md); gaps are codes whose support ggml removed.
  static constexpr std::string_view kNames[] = {
      "F32",     "F16",    "Q4_0",   "Q4_1",    "",        "",        "Q5_0",  "Q5_1",  "Q8_0", "Q8_1",
      "Q2_K",    "Q3_K",   "Q4_K",   "Q5_K",    "Q6_K",    "Q8_K",    "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S",
      "IQ4_NL",  "IQ3_S",  "IQ2_S",  "IQ4_XS",  "I8",      "I16",     "I32",   "I64",   "F64",  "IQ1_M",
      "BF16",    "",       "",       "",        "TQ1_0",   "TQ2_0",   "",      "",      "",     "MXFP4",
  };
  if (ggml_type < std::size(kNames) && !kNames[ggml_type].empty()) return kNames[ggml_type];
  return "unknown";
}

std::string_view gguf_value_type_name(GgufValueType type) {
  static constexpr std::string_view kNames[] = {"UINT8",  "INT8",  "UINT16", "INT16",  "UINT32", "INT32",  "FLOAT32",
                                                "BOOL",   "STRING", "ARRAY", "UINT64", "INT64",  "FLOAT64"};
  const auto code = static_cast<uint32_t>(type);
  return code < std::size(kNames) ? kNames[code] : "unknown";
}

std::string pack_q8_0(std::span<const int8_t> codes, std::span<const uint16_t> scale_f16_bits) {
  const size_t blocks = check_blocks("pack_q8_0", codes, scale_f16_bits);
  for (size_t i = 0; i < codes.size(); ++i)
    MPT_CHECK(codes[i] != -128, "[gguf] pack_q8_0: code {} (block {}, element {}) is -128; Q8_0 codes are in "
              "[-127, 127] (ggml's quantizer never emits -128, and its x86 dot products negate codes with "
              "sign_epi8, which overflows there)", i, i / kQBlock, i % kQBlock);
  std::string out(blocks * kQ8Bytes, '\0');
  for (size_t b = 0; b < blocks; ++b) {
    put_scale(out, b * kQ8Bytes, scale_f16_bits[b]);
    std::memcpy(out.data() + b * kQ8Bytes + 2, codes.data() + b * kQBlock, kQBlock);
  }
  return out;
}

std::string pack_q4_0(std::span<const int8_t> codes, std::span<const uint16_t> scale_f16_bits) {
  const size_t blocks = check_blocks("pack_q4_0", codes, scale_f16_bits);
  for (size_t i = 0; i < codes.size(); ++i)
    MPT_CHECK(codes[i] >= -8 && codes[i] <= 7, "[gguf] pack_q4_0: code {} (block {}, element {}) is {}; Q4_0 "
              "codes are in [-8, 7]", i, i / kQBlock, i % kQBlock, codes[i]);
  std::string out(blocks * kQ4Bytes, '\0');
  for (size_t b = 0; b < blocks; ++b) {
    put_scale(out, b * kQ4Bytes, scale_f16_bits[b]);
    const int8_t* c = codes.data() + b * kQBlock;
    for (size_t j = 0; j < kQBlock / 2; ++j) {
      const auto lo = static_cast<unsigned>(c[j] + 8), hi = static_cast<unsigned>(c[j + kQBlock / 2] + 8);
      out[b * kQ4Bytes + 2 + j] = static_cast<char>(lo | (hi << 4));
    }
  }
  return out;
}

std::vector<float> dequantize_gguf(GgufType type, std::string_view bytes, int64_t n) {
  const int64_t block = gguf_block_size(type), block_bytes = gguf_block_bytes(type);
  MPT_CHECK(n >= 0 && n % block == 0, "[gguf] dequantize: {} elements of {}: expected a non-negative multiple of "
            "its block of {}", n, gguf_type_name(type), block);
  const auto blocks = static_cast<size_t>(n / block);
  const size_t expected = blocks * static_cast<size_t>(block_bytes);
  MPT_CHECK(bytes.size() == expected, "[gguf] dequantize: {} elements of {} take {} bytes, got {}", n,
            gguf_type_name(type), expected, bytes.size());
  std::vector<float> out(static_cast<size_t>(n));
  const char* p = bytes.data();
  switch (type) {
    case GgufType::F32:
      if (n > 0) std::memcpy(out.data(), p, bytes.size());
      break;
    case GgufType::F16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_bits_to_float(get_scale(bytes, 2 * i));
      break;
    case GgufType::BF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_bits_to_float(get_scale(bytes, 2 * i));
      break;
    case GgufType::Q8_0:
      for (size_t b = 0; b < blocks; ++b) {
        const float d = f16_bits_to_float(get_scale(bytes, b * kQ8Bytes));
        for (size_t j = 0; j < kQBlock; ++j)
          out[b * kQBlock + j] = static_cast<float>(static_cast<int8_t>(p[b * kQ8Bytes + 2 + j])) * d;
      }
      break;
    case GgufType::Q4_0:
      for (size_t b = 0; b < blocks; ++b) {
        const float d = f16_bits_to_float(get_scale(bytes, b * kQ4Bytes));
        for (size_t j = 0; j < kQBlock / 2; ++j) {
          const auto q = static_cast<uint8_t>(p[b * kQ4Bytes + 2 + j]);
          out[b * kQBlock + j] = static_cast<float>((q & 0x0F) - 8) * d;
          out[b * kQBlock + j + kQBlock / 2] = static_cast<float>((q >> 4) - 8) * d;
        }
      }
      break;
  }
  return out;
}

}  // namespace mpt::io
