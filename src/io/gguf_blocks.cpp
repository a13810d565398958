// src/io/gguf_blocks.cpp: GGUF's tensor types: sizes, names, the Q8_0/Q4_0 block packers, the Q4_K quantizer, dequantization.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "kernels/math/numerics.h"
#include "mpt/core/error.h"
#include "mpt/io/gguf.h"

namespace mpt::io {
namespace {

static_assert(std::endian::native == std::endian::little, "GGUF is little-endian: bytes are copied without swapping");

constexpr int64_t kQBlock = 32;  // elements per Q8_0 / Q4_0 block (ggml's QK8_0, QK4_0)
constexpr size_t kQ8Bytes = 2 + 32;
constexpr size_t kQ4Bytes = 2 + 16;
constexpr int64_t kKBlock = 256;                // elements per Q4_K block (ggml's QK_K)
constexpr int kKSub = 32;                       // elements per Q4_K sub-block
constexpr size_t kQ4KBytes = 2 + 2 + 12 + 128;  // d, dmin, scales[12], qs[128]
constexpr int kKCodeMax = 15, kKScaleMax = 63;  // 4-bit codes, 6-bit sub-block scales and mins

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

// round(v) clamped to [0, max], ties to even (the default rounding mode): ggml's nearest_int and its clamps; NaN
// gives 0.
uint8_t rounded_code(float v, int max) {
  return static_cast<uint8_t>(std::nearbyint(v > 0.0f ? std::min(v, static_cast<float>(max)) : 0.0f));
}

// One Q4_K sub-block's fit x ~ scale * q - min (q in [0, 15], min >= 0) minimizing sum w (scale q - min - x)^2: the
// min/max codes, then those of 21 step sizes around them ((14 + 0.1 s) / (max - offset), measured from the best fit's
// offset so far, as ggml does), each refit in closed form (the 2x2 normal equations; the offset clamped to 0 with the
// scale refit alone), kept when the error drops. Writes the codes.
std::pair<float, float> fit_sub_block(const float* x, const float* w, uint8_t* q) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < kKSub; ++i) {
    lo = std::min(lo, x[i]), hi = std::max(hi, x[i]);
    sum_w += w[i], sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the offset -min is never positive
  if (hi == lo) {           // constant and not positive: value = -min whatever the codes
    std::fill(q, q + kKSub, uint8_t{0});
    return {0.0f, -lo};
  }
  const auto error = [&](float scale, float offset, const uint8_t* codes) {
    float e = 0;
    for (int i = 0; i < kKSub; ++i) {
      const float diff = scale * static_cast<float>(codes[i]) + offset - x[i];
      e += w[i] * (diff * diff);
    }
    return e;
  };
  float inv = static_cast<float>(kKCodeMax) / (hi - lo), scale = 1 / inv, offset = lo;
  for (int i = 0; i < kKSub; ++i) q[i] = rounded_code(inv * (x[i] - lo), kKCodeMax);
  float best = error(scale, offset, q);
  uint8_t trial[kKSub];
  for (int s = 0; s <= 20; ++s) {
    inv = (-1.0f + 0.1f * static_cast<float>(s) + static_cast<float>(kKCodeMax)) / (hi - offset);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < kKSub; ++i) {
      trial[i] = rounded_code(inv * (x[i] - offset), kKCodeMax);
      const float wl = w[i] * static_cast<float>(trial[i]);
      sum_l += wl, sum_l2 += wl * static_cast<float>(trial[i]), sum_xl += wl * x[i];
    }
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0)) continue;
    float s_scale = (sum_w * sum_xl - sum_x * sum_l) / det, s_offset = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (s_offset > 0) s_offset = 0, s_scale = sum_xl / sum_l2;
    const float e = error(s_scale, s_offset, trial);
    if (e < best) best = e, scale = s_scale, offset = s_offset, std::copy(trial, trial + kKSub, q);
  }
  return {scale, -offset};
}

// Sub-block j's 6-bit scale and min from a block's scales[12] (ggml's get_scale_min_k4).
std::pair<int, int> scale_min_k4(const uint8_t* s, int j) {
  if (j < 4) return {s[j] & 63, s[j + 4] & 63};
  return {(s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)};
}

// One Q4_K block of x[0, 256) into out[0, 144): the sub-block fits, their scales and mins in 6 bits against the
// largest, the codes again against those.
void quantize_block_q4_k(const float* x, size_t block, uint8_t* out) {
  float scale[8], min[8], w[kKSub], max_scale = 0, max_min = 0;
  uint8_t q[kKBlock];
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + kKSub * j;
    float sum_x2 = 0;
    for (int i = 0; i < kKSub; ++i) sum_x2 += xs[i] * xs[i];
    const float rms = std::sqrt(sum_x2 / kKSub);
    for (int i = 0; i < kKSub; ++i) w[i] = rms + std::fabs(xs[i]);  // the larger values weigh more
    std::tie(scale[j], min[j]) = fit_sub_block(xs, w, q + kKSub * j);
    max_scale = std::max(max_scale, scale[j]), max_min = std::max(max_min, min[j]);
  }
  const uint16_t d = float_to_f16_bits(max_scale / kKScaleMax), dmin = float_to_f16_bits(max_min / kKScaleMax);
  MPT_CHECK(std::isfinite(f16_bits_to_float(d)) && std::isfinite(f16_bits_to_float(dmin)), "[gguf] quantize_q4_k: "
            "block {}: its largest sub-block scale ({}) or min ({}) overflows the FP16 super-scale (65504 * 63 at "
            "most)", block, max_scale, max_min);
  const float inv_scale = max_scale > 0 ? kKScaleMax / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? kKScaleMax / max_min : 0.0f;
  std::memcpy(out, &d, 2), std::memcpy(out + 2, &dmin, 2);
  uint8_t* s = out + 4;
  std::fill(s, s + 12, uint8_t{0});
  for (int j = 0; j < 8; ++j) {
    const uint8_t ls = rounded_code(inv_scale * scale[j], kKScaleMax), lm = rounded_code(inv_min * min[j], kKScaleMax);
    if (j < 4) {
      s[j] = ls, s[j + 4] = lm;
    } else {
      s[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      s[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6), s[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  for (int j = 0; j < 8; ++j) {  // the codes again, against the scales the file holds
    const auto [sc, m] = scale_min_k4(s, j);
    const float step = f16_bits_to_float(d) * static_cast<float>(sc);
    const float offset = f16_bits_to_float(dmin) * static_cast<float>(m);
    if (step == 0) continue;  // every code means -offset: the fit's codes stay
    for (int i = 0; i < kKSub; ++i) q[kKSub * j + i] = rounded_code((x[kKSub * j + i] + offset) / step, kKCodeMax);
  }
  for (int c = 0; c < 4; ++c)  // 64 values per 32 bytes: the first 32 in the low nibbles, the next 32 in the high
    for (int i = 0; i < 32; ++i) out[16 + 32 * c + i] = static_cast<uint8_t>(q[64 * c + i] | (q[64 * c + 32 + i] << 4));
}

// (d * sc) * q - dmin * m, each product rounded to float: ggml's dequantize_row_q4_K and the gguf package compute the
// same, bit for bit (GgufQ4K.TheGgufPackageAndLlamaCppReadAndWriteTheSameBlocks; a build that fused the multiply and
// subtract into an FMA would fail it).
void dequantize_block_q4_k(const uint8_t* in, float* y) {
  uint16_t d_bits, dmin_bits;
  std::memcpy(&d_bits, in, 2), std::memcpy(&dmin_bits, in + 2, 2);
  const float d = f16_bits_to_float(d_bits), dmin = f16_bits_to_float(dmin_bits);
  for (int j = 0; j < 8; ++j) {
    const auto [sc, m] = scale_min_k4(in + 4, j);
    const float step = d * static_cast<float>(sc), offset = dmin * static_cast<float>(m);
    const uint8_t* qs = in + 16 + 32 * (j / 2);
    const int shift = 4 * (j % 2);
    for (int i = 0; i < kKSub; ++i) y[kKSub * j + i] = step * static_cast<float>((qs[i] >> shift) & 0xF) - offset;
  }
}

}  // namespace

int64_t gguf_block_size(GgufType type) {
  switch (type) {
    case GgufType::Q4_0:
    case GgufType::Q8_0: return kQBlock;
    case GgufType::Q4_K: return kKBlock;
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
    case GgufType::Q4_K: return kQ4KBytes;
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

std::string quantize_q4_k(std::span<const float> x) {
  MPT_CHECK(x.size() % kKBlock == 0, "[gguf] quantize_q4_k: {} values; Q4_K blocks are 256 wide, so the size must be "
            "a multiple of 256", x.size());
  for (size_t i = 0; i < x.size(); ++i)
    MPT_CHECK(std::isfinite(x[i]), "[gguf] quantize_q4_k: value {} (block {}, element {}) is {}", i, i / kKBlock,
              i % kKBlock, x[i]);
  std::string out(x.size() / kKBlock * kQ4KBytes, '\0');
  for (size_t b = 0; b < x.size() / kKBlock; ++b)
    quantize_block_q4_k(x.data() + b * kKBlock, b, reinterpret_cast<uint8_t*>(out.data()) + b * kQ4KBytes);
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
    case GgufType::Q4_K:
      for (size_t b = 0; b < blocks; ++b)
        dequantize_block_q4_k(reinterpret_cast<const uint8_t*>(p) + b * kQ4KBytes, out.data() + b * kKBlock);
      break;
  }
  return out;
}

}  // namespace mpt::io
