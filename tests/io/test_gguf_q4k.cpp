// tests/io/test_gguf_q4k.cpp: GGUF's Q4_K: its bit layout against a decoder written here, the quantizer's error against a plain min/max fit, files, refusals, and the golden of the gguf package and llama.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "kernels/math/numerics.h"
#include "mpt/io/gguf.h"
#include "mpt/io/safetensors.h"
#include "sha256.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::io;
using namespace mpt::testing;

namespace {

constexpr size_t kBlockBytes = 144;

// One block as its parts, decoded here from the layout ggml documents (block_q4_K, get_scale_min_k4), in float64.
struct Block {
  double d, dmin;
  int sc[8], m[8], q[256];
};

Block decode(const std::string& bytes, size_t b) {
  const auto* p = reinterpret_cast<const uint8_t*>(bytes.data()) + b * kBlockBytes;
  Block k{};
  k.d = f16_bits_to_float(static_cast<uint16_t>(p[0] | (p[1] << 8)));
  k.dmin = f16_bits_to_float(static_cast<uint16_t>(p[2] | (p[3] << 8)));
  const uint8_t* s = p + 4;
  for (int j = 0; j < 4; ++j) {
    k.sc[j] = s[j] & 0x3F, k.m[j] = s[j + 4] & 0x3F;
    k.sc[j + 4] = (s[j + 8] & 0x0F) + 16 * (s[j] >> 6), k.m[j + 4] = (s[j + 8] >> 4) + 16 * (s[j + 4] >> 6);
  }
  for (int i = 0; i < 256; ++i) {  // chunk of 64: byte l holds element l (low nibble) and element l + 32 (high)
    const uint8_t byte = p[16 + 32 * (i / 64) + i % 32];
    k.q[i] = (i % 64) < 32 ? byte & 0x0F : byte >> 4;
  }
  return k;
}

double value(const Block& k, int i) { return k.d * k.sc[i / 32] * k.q[i] - k.dmin * k.m[i / 32]; }

// The bytes of one block from its parts, packed here (the inverse of decode).
std::string encode(uint16_t d, uint16_t dmin, const int* sc, const int* m, const int* q) {
  std::string b(kBlockBytes, '\0');
  auto* p = reinterpret_cast<uint8_t*>(b.data());
  p[0] = d & 0xFF, p[1] = d >> 8, p[2] = dmin & 0xFF, p[3] = dmin >> 8;
  for (int j = 0; j < 4; ++j) {
    p[4 + j] = static_cast<uint8_t>((sc[j] & 0x3F) | ((sc[j + 4] >> 4) << 6));
    p[8 + j] = static_cast<uint8_t>((m[j] & 0x3F) | ((m[j + 4] >> 4) << 6));
    p[12 + j] = static_cast<uint8_t>((sc[j + 4] & 0x0F) | ((m[j + 4] & 0x0F) << 4));
  }
  for (int i = 0; i < 256; ++i) p[16 + 32 * (i / 64) + i % 32] |= static_cast<uint8_t>(q[i] << ((i % 64) < 32 ? 0 : 4));
  return b;
}

std::vector<float> gaussian(size_t n, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = dist(rng);
  return x;
}

double rms(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
  return std::sqrt(s / static_cast<double>(a.size()));
}

// The golden's source: [8, 512] from integer arithmetic alone (no libm), rows that reach the quantizer's corners.
std::vector<float> golden_source() {
  std::vector<float> x(8 * 512);
  for (int r = 0; r < 8; ++r) {
    for (int c = 0; c < 512; ++c) {
      const uint32_t h = static_cast<uint32_t>(r * 512 + c + 1) * 2654435761u;
      const double u = static_cast<double>(h >> 8) / 16777216.0, s = 2 * u - 1;  // [0, 1), [-1, 1)
      double v = 0;
      switch (r) {
        case 0: v = 0.02 * s; break;
        case 1: v = 0.05 * u; break;                                  // all positive: the offset stays 0
        case 2: v = -0.05 * u; break;                                 // all negative
        case 3: v = s / static_cast<double>(1 << (3 * (c / 32 % 4))); break;  // sub-blocks 1 to 1/512 wide
        case 4: v = c < 64 ? 0.0 : (c < 128 ? 0.3 : (c < 192 ? -0.2 : 0.01 * s)); break;  // zeros, constants
        case 5: v = c % 37 == 0 ? (c % 2 == 0 ? 0.5 : -0.5) : 0.01 * s; break;  // outliers
        case 6: v = 1000 * s; break;
        default: v = 1e-6 * s; break;  // FP16-subnormal super-scales
      }
      x[static_cast<size_t>(r * 512 + c)] = static_cast<float>(v);
    }
  }
  return x;
}

}  // namespace

TEST(GgufQ4K, SizesAndName) {
  EXPECT_EQ(gguf_block_size(GgufType::Q4_K), 256);
  EXPECT_EQ(gguf_block_bytes(GgufType::Q4_K), 144);
  EXPECT_EQ(gguf_type_name(GgufType::Q4_K), "Q4_K");
  EXPECT_EQ(static_cast<uint32_t>(GgufType::Q4_K), 12u);
}

// A block built here by hand, every 6-bit scale and min using its top bits: dequantize_gguf against the float64 decode.
TEST(GgufQ4K, BitLayoutOfAHandBuiltBlock) {
  const int sc[8] = {1, 63, 17, 32, 48, 5, 60, 33}, m[8] = {0, 62, 16, 31, 47, 63, 4, 34};
  int q[256];
  for (int i = 0; i < 256; ++i) q[i] = (7 * i + i / 32) % 16;
  for (const auto& [d, dmin] : std::vector<std::pair<uint16_t, uint16_t>>{{0x3800, 0x3400}, {0x2E66, 0x1A3D}}) {
    const std::string bytes = encode(d, dmin, sc, m, q);
    const Block k = decode(bytes, 0);
    ASSERT_EQ(k.d, f16_bits_to_float(d));
    for (int j = 0; j < 8; ++j) ASSERT_EQ(k.sc[j], sc[j]) << j;
    for (int j = 0; j < 8; ++j) ASSERT_EQ(k.m[j], m[j]) << j;
    const std::vector<float> v = dequantize_gguf(GgufType::Q4_K, bytes, 256);
    for (int i = 0; i < 256; ++i) {
      const double want = value(k, i);
      if (d == 0x3800) {
        ASSERT_EQ(v[i], static_cast<float>(want)) << i;  // powers of two: exact
      } else {
        ASSERT_NEAR(v[i], want, 1e-6 * (std::fabs(want) + k.dmin * m[i / 32])) << i;
      }
      // ggml's float arithmetic: (d * sc) * q - (dmin * m), each product rounded to float.
      const float step = static_cast<float>(k.d) * static_cast<float>(sc[i / 32]);
      const float offset = static_cast<float>(k.dmin) * static_cast<float>(m[i / 32]);
      ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), std::bit_cast<uint32_t>(step * static_cast<float>(q[i]) - offset)) << i;
    }
  }
  // Spot bytes: sub-block 4's scale 48 = 0b110000: low nibble 0 in scales[8], top bits 11 in bits 6-7 of scales[0].
  const std::string bytes = encode(0x3C00, 0x3C00, sc, m, q);
  EXPECT_EQ(uint8_t(bytes[4]), 0xC1);   // sc[0] = 1 | (48 >> 4) << 6
  EXPECT_EQ(uint8_t(bytes[12]), 0xF0);  // sc[4] & 15 = 0 low, m[4] & 15 = 47 & 15 = 15 high
}

TEST(GgufQ4K, QuantizerOutputDecodesAsTheLayoutSays) {
  const std::vector<float> x = gaussian(4 * 256, 0.05f, 7);
  const std::string bytes = quantize_q4_k(x);
  ASSERT_EQ(bytes.size(), 4 * kBlockBytes);
  const std::vector<float> v = dequantize_gguf(GgufType::Q4_K, bytes, 1024);
  for (size_t b = 0; b < 4; ++b) {
    const Block k = decode(bytes, b);
    EXPECT_EQ(*std::max_element(k.sc, k.sc + 8), 63) << "the largest scale is d * 63";
    for (int i = 0; i < 256; ++i) {
      ASSERT_GE(k.q[i], 0);
      ASSERT_LE(k.q[i], 15);
      ASSERT_NEAR(v[b * 256 + i], value(k, i), 1e-6) << b << " " << i;
    }
  }
}

// Every element within half a step of its sub-block (d * sc) where its code was not clamped to [0, 15], within two
// where it was; and a lower RMS error than a plain per-sub-block min/max 4-bit fit with FP32 scales and offsets.
TEST(GgufQ4K, RoundTripErrorIsWithinHalfAStepAndBeatsMinMax) {
  for (const float sigma : {1.0f, 0.02f, 3e-4f}) {
    SCOPED_TRACE(sigma);
    const std::vector<float> x = gaussian(64 * 256, sigma, 11);
    const std::string bytes = quantize_q4_k(x);
    const std::vector<float> v = dequantize_gguf(GgufType::Q4_K, bytes, static_cast<int64_t>(x.size()));
    for (size_t b = 0; b < x.size() / 256; ++b) {
      const Block k = decode(bytes, b);
      for (int i = 0; i < 256; ++i) {
        const double step = k.d * k.sc[i / 32], offset = k.dmin * k.m[i / 32], xi = x[b * 256 + i];
        ASSERT_GT(step, 0);
        const double t = (xi + offset) / step, err = std::fabs(xi - v[b * 256 + i]);
        if (t >= -0.5 && t <= 15.5) {
          ASSERT_LE(err, 0.5 * step * (1 + 1e-5) + 1e-6 * std::fabs(xi)) << b << " " << i;
        } else {
          ASSERT_LE(err, 2 * step) << b << " " << i;
        }
      }
    }
    std::vector<float> naive(x.size());
    for (size_t s = 0; s < x.size(); s += 32) {
      const auto first = x.begin() + static_cast<int64_t>(s);
      const auto [lo, hi] = std::minmax_element(first, first + 32);
      const double scale = (double{*hi} - *lo) / 15;
      for (size_t i = s; i < s + 32; ++i)
        naive[i] = static_cast<float>(*lo + scale * std::nearbyint((x[i] - *lo) / scale));
    }
    EXPECT_LT(rms(v, x), 0.95 * rms(naive, x));
  }
}

TEST(GgufQ4K, ZerosAndConstants) {
  const std::string zeros = quantize_q4_k(std::vector<float>(512, 0.0f));
  EXPECT_EQ(zeros, std::string(2 * kBlockBytes, '\0'));
  for (float v : dequantize_gguf(GgufType::Q4_K, zeros, 512)) ASSERT_EQ(std::bit_cast<uint32_t>(v), 0u);
  // A sub-block of zeros beside others: its scale and min are 0, so its values are exactly +0.
  std::vector<float> x = gaussian(256, 0.1f, 3);
  std::fill(x.begin() + 64, x.begin() + 96, 0.0f);
  const std::vector<float> v = dequantize_gguf(GgufType::Q4_K, quantize_q4_k(x), 256);
  for (int i = 64; i < 96; ++i) ASSERT_EQ(std::bit_cast<uint32_t>(v[i]), 0u) << i;
  // Constant rows: c = d * 63 * 15 (positive) or -dmin * 63 (negative), d and dmin rounded to FP16.
  for (const float c : {0.3f, -0.3f, 1234.5f, -7e-3f}) {
    for (float y : dequantize_gguf(GgufType::Q4_K, quantize_q4_k(std::vector<float>(256, c)), 256))
      ASSERT_NEAR(y, c, std::fabs(c) * 0x1p-10) << c;
  }
}

TEST(GgufQ4K, Refusals) {
  EXPECT_MPT_ERROR(quantize_q4_k(std::vector<float>(300, 1.0f)), "[gguf] quantize_q4_k: 300 values; Q4_K blocks are "
                   "256 wide, so the size must be a multiple of 256");
  std::vector<float> x(512, 0.5f);
  x[300] = std::nanf("");
  EXPECT_MPT_ERROR(quantize_q4_k(x), "value 300 (block 1, element 44) is nan");
  x[300] = 1e10f;
  EXPECT_MPT_ERROR(quantize_q4_k(x), "block 1: its largest sub-block scale");
  EXPECT_MPT_ERROR(dequantize_gguf(GgufType::Q4_K, std::string(144, '\0'), 255), "255 elements of Q4_K: expected a "
                   "non-negative multiple of its block of 256");
  EXPECT_MPT_ERROR(dequantize_gguf(GgufType::Q4_K, std::string(143, '\0'), 256), "256 elements of Q4_K take 144 "
                   "bytes, got 143");
  GgufWriter w;
  EXPECT_MPT_ERROR(w.add_tensor("w", {2, 128}, GgufType::Q4_K, std::string(144, '\0')), "[gguf] tensor \"w\" of shape "
                   "[2, 128], Q4_K: the innermost dimension (128) must be a multiple of the 256-element block");
  EXPECT_MPT_ERROR(w.add_tensor("w", {2, 256}, GgufType::Q4_K, std::string(287, '\0')), "Q4_K: expected 288 bytes (2 "
                   "blocks of 144 bytes), got 287");
  w.add_tensor("w", {1, 256}, GgufType::Q4_K, std::string(144, '\0'));
  EXPECT_MPT_ERROR(w.serialize(), "tensor \"w\" is Q4_K, and a file holding quantized tensors must declare "
                   "general.quantization_version");
}

TEST(GgufQ4K, FileRoundTripAndTruncation) {
  const std::vector<float> x = gaussian(3 * 512, 0.05f, 5);
  const std::string q = quantize_q4_k(x);
  GgufWriter w;
  w.add_u32("general.quantization_version", kGgufQuantizationVersion);
  w.add_tensor("q4k", {3, 512}, GgufType::Q4_K, q);
  TempDir dir;
  w.write(dir / "q4k.gguf");
  const GgufFile f = read_gguf(dir / "q4k.gguf");
  const GgufTensorInfo* t = f.find_tensor("q4k");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->type, GgufType::Q4_K);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 512}));
  EXPECT_EQ(t->bytes, q);
  EXPECT_EQ(dequantize_gguf(t->type, t->bytes, t->numel()), dequantize_gguf(GgufType::Q4_K, q, 1536));

  // A Q4_K tensor cut short, and one whose rows are not whole blocks.
  const std::string full = read_bytes(dir / "q4k.gguf");
  ASSERT_EQ(full.size(), f.data_start + 864);  // 6 blocks of 144 bytes: a multiple of 32, no padding
  write_bytes(dir / "cut.gguf", full.substr(0, full.size() - 1));
  const std::string cut = error_message([&] { read_gguf(dir / "cut.gguf"); });
  EXPECT_TRUE(contains(cut, "tensor \"q4k\" spans bytes [0, 864) of the data section, which holds 863 bytes: the file "
                            "is truncated")) << cut;
  std::string narrow = full;
  const size_t dim0 = narrow.find("q4k") + 3 + 4;  // after the name and n_dims: dims[0] = 512
  ASSERT_EQ(uint8_t(narrow[dim0]), 0x00);
  ASSERT_EQ(uint8_t(narrow[dim0 + 1]), 0x02);
  narrow[dim0] = static_cast<char>(0x80), narrow[dim0 + 1] = static_cast<char>(0x01);  // 384
  write_bytes(dir / "narrow.gguf", narrow);
  const std::string bad = error_message([&] { read_gguf(dir / "narrow.gguf"); });
  EXPECT_TRUE(contains(bad, "tensor \"q4k\" is Q4_K with 384 elements per row, not a multiple of its 256-element "
                            "block")) << bad;
}

// tools/q4k_reference.py (tests/goldens/quantized/gguf_q4k.safetensors): the gguf package 0.19.0 dequantizes our Q4_K
// bytes of golden_source() to exactly our values, llama.cpp's dequantize_row_q4_K too, and llama.cpp's own quantizer
// (quantize_row_q4_K_ref, what llama-quantize runs without an importance matrix) writes exactly our bytes. With
// MPT_WRITE_Q4K_GGUF=PATH, the test writes the file the tool reads (the source F32 and our Q4_K) and skips.
TEST(GgufQ4K, TheGgufPackageAndLlamaCppReadAndWriteTheSameBlocks) {
  const std::vector<float> x = golden_source();
  const std::string q = quantize_q4_k(x);
  if (const char* out = std::getenv("MPT_WRITE_Q4K_GGUF"); out != nullptr && *out != '\0') {
    GgufWriter w;
    w.add_u32("general.quantization_version", kGgufQuantizationVersion);
    w.add_tensor("source", {8, 512}, GgufType::F32, std::string(reinterpret_cast<const char*>(x.data()), x.size() * 4));
    w.add_tensor("q4k", {8, 512}, GgufType::Q4_K, q);
    w.write(out);
    GTEST_SKIP() << "wrote " << out;
  }
  const std::filesystem::path path = std::filesystem::path(MPT_GOLDENS_DIR) / "quantized/gguf_q4k.safetensors";
  const SafetensorsFile file(path);
  const auto golden = load_safetensors(path);
  EXPECT_EQ(sha256_hex(q), file.metadata().at("q4k_sha256")) << "the Q4_K bytes differ from those the tools read";
  const std::vector<float> ours = dequantize_gguf(GgufType::Q4_K, q, static_cast<int64_t>(x.size()));
  const auto same_bits = [&](const std::string& name) {
    const std::vector<float> theirs = golden.at(name).to_vector<float>();
    ASSERT_EQ(theirs.size(), ours.size()) << name;
    for (size_t i = 0; i < ours.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(ours[i]), std::bit_cast<uint32_t>(theirs[i])) << name << " element " << i;
  };
  same_bits("gguf_py.dequantized");
  same_bits("llama_cpp.dequantized");
  const std::vector<uint8_t> ref = golden.at("llama_cpp.quantized").to_vector<uint8_t>();
  ASSERT_EQ(ref.size(), q.size());
  for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(ref[i], uint8_t(q[i])) << "byte " << i << ", block " << i / 144;
}
