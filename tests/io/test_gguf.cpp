// tests/io/test_gguf.cpp: GGUF files byte for byte, the Q8_0/Q4_0 blocks, round trips, and every refusal.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include "io_test_util.h"
#include "mpt/io/gguf.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::io;
using namespace mpt::testing;

namespace {

// Little-endian bytes written out one at a time, independently of the writer.
struct Bytes {
  std::string s;
  Bytes& le(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  Bytes& u8(uint8_t v) { return le(v, 1); }
  Bytes& u16(uint16_t v) { return le(v, 2); }
  Bytes& u32(uint32_t v) { return le(v, 4); }
  Bytes& u64(uint64_t v) { return le(v, 8); }
  Bytes& str(std::string_view v) {
    u64(v.size());
    s.append(v);
    return *this;
  }
  Bytes& raw(std::string_view v) {
    s.append(v);
    return *this;
  }
  Bytes& zeros(size_t n) {
    s.append(n, '\0');
    return *this;
  }
  Bytes& pad(size_t alignment) { return zeros((alignment - s.size() % alignment) % alignment); }
  // A key-value pair's key and type.
  Bytes& kv(std::string_view key, uint32_t type) { return str(key).u32(type); }
  // The 24-byte header.
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(n_tensors).u64(n_kv);
  }
  // A tensor info; dims in GGUF order (innermost first).
  Bytes& info(std::string_view name, std::initializer_list<uint64_t> dims, uint32_t type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) u64(d);
    return u32(type).u64(offset);
  }
};

// Writes `bytes` as a file, reads it, and requires an mpt::Error starting "[gguf] <path>: " holding `fragment`.
void expect_read_error(const std::string& bytes, const std::string& fragment) {
  TempDir dir;
  const auto path = dir / "bad.gguf";
  write_bytes(path, bytes);
  const std::string message = error_message([&] { read_gguf(path); });
  EXPECT_TRUE(message.starts_with("[gguf] " + path.string() + ": ")) << message;
  EXPECT_TRUE(contains(message, fragment)) << "expected \"" << fragment << "\" in \"" << message << "\"";
}

std::string floats_bytes(std::initializer_list<float> values) {
  Bytes b;
  for (float v : values) b.u32(std::bit_cast<uint32_t>(v));
  return b.s;
}

// A small file: two KVs (one an array of strings) and an F32 [2, 4] tensor after a Q4_0 [1, 32] one. Every tensor
// fills its 32-byte slot up to the end of the file but one: cut anywhere, some byte that matters is gone.
std::string small_file() {
  GgufWriter w;
  w.add_u32("general.quantization_version", 2);
  w.add_string_array("tokenizer.ggml.tokens", {"a", "bc"});
  std::vector<int8_t> codes(32, 3);
  w.add_tensor("q", {1, 32}, GgufType::Q4_0, pack_q4_0(codes, std::vector<uint16_t>{0x3C00}));
  w.add_tensor("f", {2, 4}, GgufType::F32, floats_bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  return w.serialize();
}

}  // namespace

TEST(GgufFormat, ExactBytesOfAHandBuiltFile) {
  GgufWriter w;
  w.add("k.u8", uint8_t{200});
  w.add("k.i8", int8_t{-100});
  w.add("k.u16", uint16_t{60000});
  w.add("k.i16", int16_t{-30000});
  w.add_u32("general.quantization_version", 2);
  w.add_i32("k.i32", -2000000000);
  w.add_f32("k.f32", 0.15625f);
  w.add_bool("k.bool", true);
  w.add_string("general.architecture", "llama");
  w.add_i32_array("k.i32s", {1, -1});
  w.add_string_array("k.strs", {"a", "bc"});
  w.add_u64("k.u64", (uint64_t{1} << 40) + 5);
  w.add("k.i64", int64_t{-(int64_t{1} << 40)});
  w.add("k.f64", -0.1);
  w.add_tensor("w.f32", {2, 3}, GgufType::F32, floats_bytes({1, 2, 3, 4, 5, 6}));
  Bytes q8;  // two blocks by hand: d = 1.0 (0x3C00) with codes -16..15, d = -0.5 (0xB800) with codes 127, -127, 0...
  q8.u16(0x3C00);
  for (int j = 0; j < 32; ++j) q8.u8(static_cast<uint8_t>(j - 16));
  q8.u16(0xB800).u8(0x7F).u8(0x81).zeros(30);
  w.add_tensor("w.q8", {2, 32}, GgufType::Q8_0, q8.s);

  Bytes e;
  e.header(2, 14);
  e.kv("k.u8", 0).u8(200);
  e.kv("k.i8", 1).u8(0x9C);
  e.kv("k.u16", 2).u16(60000);
  e.kv("k.i16", 3).u16(0x8AD0);
  e.kv("general.quantization_version", 4).u32(2);
  e.kv("k.i32", 5).u32(0x88CA6C00);
  e.kv("k.f32", 6).u32(0x3E200000);
  e.kv("k.bool", 7).u8(1);
  e.kv("general.architecture", 8).str("llama");
  e.kv("k.i32s", 9).u32(5).u64(2).u32(1).u32(0xFFFFFFFF);
  e.kv("k.strs", 9).u32(8).u64(2).str("a").str("bc");
  e.kv("k.u64", 10).u64(0x10000000005);
  e.kv("k.i64", 11).u64(0xFFFFFF0000000000);
  e.kv("k.f64", 12).u64(0xBFB999999999999A);
  e.info("w.f32", {3, 2}, 0, 0);
  e.info("w.q8", {32, 2}, 8, 32);  // 24 bytes of F32 padded to 32
  e.pad(32);
  const size_t data_start = e.s.size();
  e.raw(floats_bytes({1, 2, 3, 4, 5, 6})).zeros(8).raw(q8.s).zeros(28);  // 68 bytes of Q8_0 padded to 96
  EXPECT_EQ(e.s.size() - data_start, 128u);
  const std::string got = w.serialize();
  ASSERT_EQ(got.size(), e.s.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(uint8_t(got[i]), uint8_t(e.s[i])) << "byte " << i;

  TempDir dir;
  w.write(dir / "m.gguf");
  EXPECT_EQ(read_bytes(dir / "m.gguf"), e.s);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"m.gguf"});
}

TEST(GgufBlocks, Q8_0ExactBytesAndValues) {
  std::vector<int8_t> codes(64);
  for (int j = 0; j < 32; ++j) codes[j] = static_cast<int8_t>(j - 16);
  codes[32] = 127;
  codes[33] = -127;
  codes[34] = -1;
  const std::vector<uint16_t> scales = {0x3C00, 0xB800};  // 1.0, -0.5
  const std::string packed = pack_q8_0(codes, scales);
  ASSERT_EQ(packed.size(), 68u);
  EXPECT_EQ(uint8_t(packed[0]), 0x00);
  EXPECT_EQ(uint8_t(packed[1]), 0x3C);
  EXPECT_EQ(uint8_t(packed[2]), 0xF0);   // -16
  EXPECT_EQ(uint8_t(packed[33]), 0x0F);  // 15
  EXPECT_EQ(uint8_t(packed[34]), 0x00);
  EXPECT_EQ(uint8_t(packed[35]), 0xB8);
  EXPECT_EQ(uint8_t(packed[36]), 0x7F);
  EXPECT_EQ(uint8_t(packed[37]), 0x81);
  EXPECT_EQ(uint8_t(packed[38]), 0xFF);
  EXPECT_EQ(packed.substr(39), std::string(29, '\0'));

  const std::vector<float> v = dequantize_gguf(GgufType::Q8_0, packed, 64);
  ASSERT_EQ(v.size(), 64u);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(v[j], float(j - 16)) << j;
  EXPECT_EQ(v[32], -63.5f);
  EXPECT_EQ(v[33], 63.5f);
  EXPECT_EQ(v[34], 0.5f);
  for (int j = 35; j < 64; ++j) EXPECT_EQ(std::bit_cast<uint32_t>(v[j]), 0x80000000u) << j;  // 0 * -0.5 = -0
}

TEST(GgufBlocks, Q4_0NibbleOrderExactBytesAndValues) {
  // Code j (j < 16) is the low nibble of qs[j], code j + 16 its high nibble; each stored as code + 8.
  std::vector<int8_t> codes(32);
  for (int j = 0; j < 16; ++j) {
    codes[j] = static_cast<int8_t>(j - 8);   // nibble j
    codes[j + 16] = static_cast<int8_t>(7 - j);  // nibble 15 - j
  }
  const std::string packed = pack_q4_0(codes, std::vector<uint16_t>{0x4000});  // d = 2
  const uint8_t expected[18] = {0x00, 0x40, 0xF0, 0xE1, 0xD2, 0xC3, 0xB4, 0xA5, 0x96,
                                0x87, 0x78, 0x69, 0x5A, 0x4B, 0x3C, 0x2D, 0x1E, 0x0F};
  ASSERT_EQ(packed.size(), 18u);
  for (size_t i = 0; i < 18; ++i) EXPECT_EQ(uint8_t(packed[i]), expected[i]) << "byte " << i;

  const std::vector<float> v = dequantize_gguf(GgufType::Q4_0, packed, 32);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(v[j], 2.0f * float(j - 8)) << j;
    EXPECT_EQ(v[j + 16], 2.0f * float(7 - j)) << j + 16;
  }
}

TEST(GgufBlocks, RoundTripOfEveryCode) {
  std::vector<int8_t> q8, q4;
  for (int c = -127; c <= 127; ++c) q8.push_back(static_cast<int8_t>(c));
  q8.push_back(0);  // 256 codes: 8 blocks
  for (int i = 0; i < 64; ++i) q4.push_back(static_cast<int8_t>(i % 16 - 8));
  const std::vector<uint16_t> s8 = {0x0001, 0x03FF, 0x0400, 0x3555, 0x7BFF, 0xFBFF, 0x8000, 0x2E66};
  const std::vector<uint16_t> s4 = {0x0001, 0xC200};  // the smallest subnormal, -3
  const std::vector<float> v8 = dequantize_gguf(GgufType::Q8_0, pack_q8_0(q8, s8), 256);
  const std::vector<float> v4 = dequantize_gguf(GgufType::Q4_0, pack_q4_0(q4, s4), 64);
  for (size_t i = 0; i < q8.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(v8[i]), std::bit_cast<uint32_t>(float(q8[i]) * f16_bits_to_float(s8[i / 32])));
  for (size_t i = 0; i < q4.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(v4[i]), std::bit_cast<uint32_t>(float(q4[i]) * f16_bits_to_float(s4[i / 32])));
  EXPECT_EQ(v8[0], -127.0f * 0x1p-24f);
  EXPECT_EQ(v4[32], 24.0f);  // -8 * -3
}

TEST(GgufBlocks, DequantizeFloatTypes) {
  EXPECT_EQ(dequantize_gguf(GgufType::F32, floats_bytes({1.5f, -2.0f}), 2), (std::vector<float>{1.5f, -2.0f}));
  EXPECT_EQ(dequantize_gguf(GgufType::F16, Bytes{}.u16(0x3C00).u16(0xC100).u16(0x0001).s, 3),
            (std::vector<float>{1.0f, -2.5f, 0x1p-24f}));
  EXPECT_EQ(dequantize_gguf(GgufType::BF16, Bytes{}.u16(0x3F80).u16(0xC040).s, 2), (std::vector<float>{1.0f, -3.0f}));
  EXPECT_MPT_ERROR(dequantize_gguf(GgufType::Q8_0, std::string(34, '\0'), 33), "33 elements of Q8_0: expected a "
                   "non-negative multiple of its block of 32");
  EXPECT_MPT_ERROR(dequantize_gguf(GgufType::Q4_0, std::string(17, '\0'), 32), "32 elements of Q4_0 take 18 bytes, "
                   "got 17");
}

TEST(GgufBlocks, PackersRefuseBadCodesAndScales) {
  std::vector<int8_t> codes(64, 0);
  const std::vector<uint16_t> two = {0x3C00, 0x3C00};
  codes[37] = 8;
  EXPECT_MPT_ERROR(pack_q4_0(codes, two), "[gguf] pack_q4_0: code 37 (block 1, element 5) is 8; Q4_0 codes are in "
                   "[-8, 7]");
  codes[37] = 0;
  codes[3] = -9;
  codes[40] = 9;
  EXPECT_MPT_ERROR(pack_q4_0(codes, two), "code 3 (block 0, element 3) is -9");
  codes.assign(64, 0);
  codes[63] = -128;
  EXPECT_MPT_ERROR(pack_q8_0(codes, two), "[gguf] pack_q8_0: code 63 (block 1, element 31) is -128; Q8_0 codes are "
                   "in [-127, 127]");
  codes[63] = 0;
  EXPECT_MPT_ERROR(pack_q8_0(codes, std::vector<uint16_t>{0x3C00}), "64 codes for 1 scales; a block is 32 codes and "
                   "one scale, so expected 32 codes");
  EXPECT_MPT_ERROR(pack_q4_0(codes, std::vector<uint16_t>{0x3C00, 0x7C00}), "the scale of block 1 is not finite "
                   "(f16 bits 0x7c00)");
  EXPECT_MPT_ERROR(pack_q8_0(codes, std::vector<uint16_t>{0x7E00, 0x3C00}), "the scale of block 0 is not finite");
  EXPECT_EQ(pack_q8_0({}, {}), "");
}

TEST(GgufRoundTrip, EveryValueTypeEveryTensorTypeAndAlignment) {
  const std::vector<GgufKV> kvs = {
      {"general.alignment", uint32_t{64}},
      {"general.quantization_version", uint32_t{2}},
      {"v.u8", uint8_t{255}},
      {"v.i8", int8_t{-128}},
      {"v.u16", uint16_t{65535}},
      {"v.i16", int16_t{-32768}},
      {"v.i32", int32_t{std::numeric_limits<int32_t>::min()}},
      {"v.f32", -3.25e-20f},
      {"v.bool", false},
      {"v.string", std::string("h\xc3\xa9llo\0world", 12)},
      {"v.empty_string", std::string()},
      {"v.u64", std::numeric_limits<uint64_t>::max()},
      {"v.i64", std::numeric_limits<int64_t>::min()},
      {"v.f64", 1e300},
      {"a.u8", GgufArray(std::vector<uint8_t>{0, 1, 255})},
      {"a.i8", GgufArray(std::vector<int8_t>{-128, 127})},
      {"a.u16", GgufArray(std::vector<uint16_t>{7})},
      {"a.i16", GgufArray(std::vector<int16_t>{-2, 2})},
      {"a.u32", GgufArray(std::vector<uint32_t>{4000000000u})},
      {"a.i32", GgufArray(std::vector<int32_t>{1, 1, 2})},
      {"a.f32", GgufArray(std::vector<float>{0.0f, -0.0f, 1e-45f, 3.4e38f})},
      {"a.bool", GgufArray(std::vector<bool>{true, false, true})},
      {"a.string", GgufArray(std::vector<std::string>{"<s>", "", "\xe2\x96\x81the"})},
      {"a.u64", GgufArray(std::vector<uint64_t>{1, uint64_t{1} << 63})},
      {"a.i64", GgufArray(std::vector<int64_t>{-1})},
      {"a.f64", GgufArray(std::vector<double>{})},
  };
  struct Case {
    std::string name;
    std::vector<int64_t> shape;
    GgufType type;
    size_t nbytes;
  };
  const std::vector<Case> cases = {
      {"f32.1d", {5}, GgufType::F32, 20},          {"f16.2d", {3, 7}, GgufType::F16, 42},
      {"bf16.3d", {2, 1, 3}, GgufType::BF16, 12},  {"q8.2d", {3, 64}, GgufType::Q8_0, 6 * 34},
      {"q4.4d", {2, 1, 2, 32}, GgufType::Q4_0, 4 * 18}, {"empty", {0, 32}, GgufType::Q8_0, 0},
      {"f32.last", {1}, GgufType::F32, 4},
  };
  GgufWriter w;
  for (const GgufKV& kv : kvs) w.add(kv.key, kv.value);
  EXPECT_EQ(w.alignment(), 64u);
  std::vector<std::string> data;
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string bytes(cases[i].nbytes, '\0');
    for (size_t j = 0; j < bytes.size(); ++j) bytes[j] = static_cast<char>(j * 7 + i * 31 + 1);
    data.push_back(bytes);
    w.add_tensor(cases[i].name, cases[i].shape, cases[i].type, bytes);
  }
  TempDir dir;
  const auto path = dir / "all.gguf";
  w.write(path);
  const GgufFile f = read_gguf(path);
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.alignment, 64u);
  EXPECT_EQ(f.data_start % 64, 0u);
  ASSERT_EQ(f.kvs.size(), kvs.size());
  for (size_t i = 0; i < kvs.size(); ++i) {
    EXPECT_EQ(f.kvs[i].key, kvs[i].key);
    EXPECT_TRUE(f.kvs[i].value == kvs[i].value) << kvs[i].key;
    EXPECT_EQ(gguf_value_type(f.kvs[i].value), gguf_value_type(kvs[i].value)) << kvs[i].key;
  }
  ASSERT_EQ(f.tensors.size(), cases.size());
  uint64_t next = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const GgufTensorInfo& t = f.tensors[i];
    EXPECT_EQ(t.name, cases[i].name);
    EXPECT_EQ(t.shape, cases[i].shape);
    EXPECT_EQ(t.type, cases[i].type);
    EXPECT_EQ(t.bytes, data[i]) << t.name;
    EXPECT_EQ(t.offset % 64, 0u) << t.name;
    EXPECT_EQ(t.offset, next) << t.name << ": ggml's reader wants the tensors back to back, each padded";
    next = t.offset + (cases[i].nbytes + 63) / 64 * 64;
  }
  EXPECT_EQ(std::filesystem::file_size(path), f.data_start + next);
  EXPECT_EQ(f.tensors[3].numel(), 192);
  EXPECT_EQ(std::get<std::vector<std::string>>(std::get<GgufArray>(*f.find("a.string")))[2], "\xe2\x96\x81the");
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.find_tensor("q8.2d")->type, GgufType::Q8_0);
  EXPECT_EQ(f.find_tensor("missing"), nullptr);
  // The same calls give the same bytes.
  GgufWriter again;
  for (const GgufKV& kv : kvs) again.add(kv.key, kv.value);
  for (size_t i = 0; i < cases.size(); ++i) again.add_tensor(cases[i].name, cases[i].shape, cases[i].type, data[i]);
  EXPECT_EQ(again.serialize(), read_bytes(path));
}

TEST(GgufRoundTrip, DefaultAlignmentAndNoTensors) {
  GgufWriter w;
  w.add_string("general.architecture", "gpt2");
  w.add_f32_array("tokenizer.ggml.scores", {0.5f, -1.0f});
  TempDir dir;
  w.write(dir / "meta.gguf");
  const GgufFile f = read_gguf(dir / "meta.gguf");
  EXPECT_EQ(f.alignment, 32u);
  EXPECT_TRUE(f.tensors.empty());
  ASSERT_EQ(f.kvs.size(), 2u);
  EXPECT_EQ(std::get<std::string>(f.kvs[0].value), "gpt2");
  EXPECT_EQ(std::get<std::vector<float>>(std::get<GgufArray>(f.kvs[1].value)), (std::vector<float>{0.5f, -1.0f}));
  EXPECT_EQ(std::filesystem::file_size(dir / "meta.gguf") % 32, 0u);
}

TEST(GgufWriter, RefusesBadTensors) {
  GgufWriter w;
  EXPECT_MPT_ERROR(w.add_tensor("blk.0.attn_q.weight", {4, 48}, GgufType::Q8_0, std::string(4 * 51, '\0')),
                   "[gguf] tensor \"blk.0.attn_q.weight\" of shape [4, 48], Q8_0: the innermost dimension (48) must be "
                   "a multiple of the 32-element block");
  EXPECT_MPT_ERROR(w.add_tensor("w", {2, 64}, GgufType::Q4_0, std::string(71, '\0')),
                   "[gguf] tensor \"w\" of shape [2, 64], Q4_0: expected 72 bytes (4 blocks of 18 bytes), got 71");
  EXPECT_MPT_ERROR(w.add_tensor("w", {3, 2}, GgufType::F32, std::string(20, '\0')),
                   "[gguf] tensor \"w\" of shape [3, 2], F32: expected 24 bytes (6 elements of 4 bytes), got 20");
  EXPECT_MPT_ERROR(w.add_tensor("w", {1, 1, 1, 1, 1}, GgufType::F32, std::string(4, '\0')),
                   "GGUF tensors have 1 to 4 dimensions, got 5");
  EXPECT_MPT_ERROR(w.add_tensor("w", {}, GgufType::F32, std::string(4, '\0')), "got 0");
  EXPECT_MPT_ERROR(w.add_tensor("w", {-1}, GgufType::F32, ""), "negative dimension -1");
  EXPECT_MPT_ERROR(w.add_tensor(std::string(64, 'n'), {1}, GgufType::F32, std::string(4, '\0')),
                   "a tensor name has 1 to 63 bytes (ggml's GGML_MAX_NAME), this one 64");
  EXPECT_MPT_ERROR(w.add_tensor("w", {1}, static_cast<GgufType>(14), std::string(4, '\0')), "unsupported type code 14");
  w.add_tensor("w", {1}, GgufType::F32, std::string(4, '\0'));
  EXPECT_MPT_ERROR(w.add_tensor("w", {2}, GgufType::F32, std::string(8, '\0')), "[gguf] duplicate tensor name \"w\"");
  // Nothing refused was kept.
  const std::string bytes = w.serialize();
  TempDir dir;
  write_bytes(dir / "one.gguf", bytes);
  const GgufFile f = read_gguf(dir / "one.gguf");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].shape, std::vector<int64_t>{1});
}

TEST(GgufWriter, RefusesBadKeys) {
  GgufWriter w;
  w.add_u32("general.alignment", 16);
  EXPECT_MPT_ERROR(w.add_u32("general.alignment", 16), "[gguf] duplicate key \"general.alignment\"");
  GgufWriter v;
  EXPECT_MPT_ERROR(v.add_u64("general.alignment", 32), "key \"general.alignment\" must be UINT32, got UINT64");
  EXPECT_MPT_ERROR(v.add_u32("general.alignment", 48), "general.alignment 48 must be a power of two from 8 to 1048576");
  EXPECT_MPT_ERROR(v.add_u32("general.alignment", 4), "general.alignment 4 must be a power of two");
  EXPECT_MPT_ERROR(v.add_i32("general.quantization_version", 2), "must be UINT32, got INT32");
  EXPECT_MPT_ERROR(v.add_string("", "x"), "a key has 1 to 65535 bytes, got 0");
  EXPECT_MPT_ERROR(v.add_string(std::string(65536, 'k'), "x"), "got 65536");
  EXPECT_MPT_ERROR(v.add("nested", GgufArray(std::monostate{})), "key \"nested\": nested arrays are not supported");
  EXPECT_EQ(v.alignment(), 32u);
  EXPECT_EQ(v.serialize().size(), 32u);  // the header alone, padded: nothing refused was kept
}

TEST(GgufWriter, QuantizedTensorsNeedTheQuantizationVersion) {
  GgufWriter w;
  w.add_tensor("q", {32}, GgufType::Q8_0, std::string(34, '\0'));
  EXPECT_MPT_ERROR(w.serialize(), "[gguf] tensor \"q\" is Q8_0, and a file holding quantized tensors must declare "
                   "general.quantization_version (the spec requires it): add_u32(\"general.quantization_version\", 2)");
  w.add_u32("general.quantization_version", 2);
  EXPECT_NO_THROW(w.serialize());
}

TEST(GgufWriter, FailedWriteLeavesTheOldFileUntouched) {
  TempDir dir;
  const auto path = dir / "model.gguf";
  const std::string old = small_file();
  write_bytes(path, old);
  GgufWriter w;  // valid tensors, but quantized without general.quantization_version
  w.add_tensor("q", {32}, GgufType::Q4_0, std::string(18, '\0'));
  const std::string message = error_message([&] { w.write(path); });
  EXPECT_TRUE(message.starts_with("[gguf] " + path.string() + ": not written: tensor \"q\" is Q4_0")) << message;
  EXPECT_EQ(read_bytes(path), old);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"model.gguf"});
  // Into a directory that does not exist: the durable write's own error.
  EXPECT_MPT_ERROR(GgufWriter{}.write(dir / "no_such_dir" / "x.gguf"), "[gguf] cannot create");
}

TEST(GgufRead, EveryTruncationIsAnError) {
  const std::string bytes = small_file();
  ASSERT_EQ(bytes.size() % 32, 0u);
  TempDir dir;
  const auto path = dir / "cut.gguf";
  write_bytes(path, bytes);
  const GgufFile whole = read_gguf(path);
  ASSERT_EQ(whole.tensors.size(), 2u);
  EXPECT_EQ(whole.tensors[1].offset + 32, bytes.size() - whole.data_start);  // "f" ends the file: no trailing pad
  for (size_t n = 0; n < bytes.size(); ++n) {
    write_bytes(path, bytes.substr(0, n));
    const std::string message = error_message([&] { read_gguf(path); });
    EXPECT_TRUE(message.starts_with("[gguf] " + path.string() + ": ")) << "cut at " << n << ": " << message;
  }
}

TEST(GgufRead, RefusesBadHeaders) {
  expect_read_error("", "the file holds 0 bytes, shorter than the 24-byte GGUF header");
  expect_read_error("GGU", "the file holds 3 bytes");
  expect_read_error(Bytes{}.raw("GGML").u32(3).u64(0).u64(0).s, "not a GGUF file: it starts with 47 47 4d 4c");
  expect_read_error(Bytes{}.header(0, 0, 2).s, "GGUF version 2; mptrain reads version 3 only (convert the model again "
                    "with a current llama.cpp)");
  expect_read_error(Bytes{}.header(0, 0, 1).s, "GGUF version 1; mptrain reads version 3 only");
  expect_read_error(Bytes{}.header(0, 0, 4).s, "GGUF version 4; mptrain reads version 3 only");
  expect_read_error(Bytes{}.raw("GGUF").u32(0x03000000).u64(0).u64(0).s, "a big-endian file");
  expect_read_error(Bytes{}.header(~uint64_t{0}, 0).zeros(100).s, "the header claims 18446744073709551615 tensors and "
                    "0 key-value pairs, but the 100 bytes after it hold at most 4 tensor infos");
  expect_read_error(Bytes{}.header(1'000'000'000, 1).kv("k", 0).u8(0).s, "claims 1000000000 tensors");
  expect_read_error(Bytes{}.header(0, uint64_t{1} << 60).zeros(26).s, "the header claims 1152921504606846976 "
                    "key-value pairs, but the 26 bytes after it hold at most 2");
}

TEST(GgufRead, RefusesBadKeyValues) {
  expect_read_error(Bytes{}.header(0, 1).u64(~uint64_t{0}).zeros(16).s, "the key of key-value pair 0 claims "
                    "18446744073709551615 bytes, but only 16 remain");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 13).u32(0).s, "key \"k\" has value type 13, not a GGUF value type");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 7).u8(2).s, "key \"k\" is a BOOL holding 2");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 9).u32(9).u64(1).s, "key \"k\" is an array of arrays");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 9).u32(8).u64(uint64_t{1} << 62).zeros(16).s, "key \"k\" claims "
                    "4611686018427387904 elements of STRING, but only 16 bytes remain");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 9).u32(5).u64(5).zeros(16).s, "claims 5 elements of INT32, but only "
                    "16 bytes remain");
  expect_read_error(Bytes{}.header(0, 1).kv("k", 9).u32(8).u64(2).str("a").u64(1000).zeros(16).s,
                    "key \"k\"'s elements claims 1000 bytes, but only 16 remain");
  expect_read_error(Bytes{}.header(0, 2).kv("k", 0).u8(1).kv("k", 0).u8(1).s, "duplicate key \"k\" (key-value pair 1)");
  expect_read_error(Bytes{}.header(0, 1).kv("general.alignment", 10).u64(32).s, "general.alignment must be UINT32, got "
                    "UINT64");
  expect_read_error(Bytes{}.header(0, 1).kv("general.alignment", 4).u32(24).s, "general.alignment 24 must be a power "
                    "of two");
  expect_read_error(Bytes{}.header(0, 1).kv("general.alignment", 4).u32(0).s, "general.alignment 0 must be a power");
}

TEST(GgufRead, RefusesBadTensorInfos) {
  const auto one = [](std::initializer_list<uint64_t> dims, uint32_t type, uint64_t offset, size_t data) {
    return Bytes{}.header(1, 0).info("t", dims, type, offset).pad(32).zeros(data).s;
  };
  EXPECT_NO_THROW({
    TempDir dir;
    write_bytes(dir / "ok.gguf", one({4}, 0, 0, 16));
    read_gguf(dir / "ok.gguf");
  });
  expect_read_error(one({1, 1, 1, 1, 1}, 0, 0, 32), "tensor \"t\" has 5 dimensions; ggml allows at most 4");
  expect_read_error(one({uint64_t{1} << 63}, 0, 0, 32), "tensor \"t\" has dims[0] = 9223372036854775808: its element "
                    "count overflows int64");
  expect_read_error(one({uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 32), "dims[1] = 4294967296: its element count "
                    "overflows");
  expect_read_error(one({32}, 14, 0, 210), "tensor \"t\" has ggml type 14 (Q6_K); mptrain reads F32, F16, BF16, Q8_0, "
                    "Q4_0 and Q4_K");
  expect_read_error(one({32}, 99, 0, 32), "ggml type 99 (unknown)");
  expect_read_error(one({48, 2}, 8, 0, 102), "tensor \"t\" is Q8_0 with 48 elements per row, not a multiple of its "
                    "32-element block");
  expect_read_error(one({4}, 0, 16, 64), "tensor \"t\" has offset 16, not a multiple of the alignment 32");
  expect_read_error(one({4}, 0, 32, 40), "tensor \"t\" spans bytes [32, 48) of the data section, which holds 40 bytes");
  expect_read_error(one({4}, 0, uint64_t{1} << 63, 16), "spans bytes [9223372036854775808, 9223372036854775824)");
  expect_read_error(Bytes{}.header(1, 0).info("t", {4}, 0, 0).s, "the file ends at byte 57, before its data section "
                    "(byte 64)");
  expect_read_error(Bytes{}.header(2, 0).info("a", {16}, 0, 0).info("b", {8}, 0, 32).pad(32).zeros(64).s,
                    "tensors \"a\" (bytes [0, 64)) and \"b\" (bytes [32, 64)) overlap in the data section");
  expect_read_error(Bytes{}.header(3, 0).info("a", {16}, 0, 0).info("z", {0}, 0, 32).info("b", {8}, 0, 32).pad(32)
                        .zeros(64).s, "tensors \"a\" (bytes [0, 64)) and \"b\" (bytes [32, 64)) overlap");
  expect_read_error(Bytes{}.header(2, 0).info("a", {4}, 0, 0).info("a", {4}, 0, 32).pad(32).zeros(64).s,
                    "duplicate tensor name \"a\" (tensor 1)");
  expect_read_error(Bytes{}.header(1, 0).u64(1000).zeros(30).s, "the name of tensor 0 claims 1000 bytes, but only 30 "
                    "remain");
}

TEST(GgufRead, OpensOnlyRegularFiles) {
  TempDir dir;
  EXPECT_MPT_ERROR(read_gguf(dir / "missing.gguf"), "cannot open for reading: No such file or directory");
  EXPECT_MPT_ERROR(read_gguf(dir.path()), "[gguf] " + dir.path().string() + ": cannot read: not a regular file");
}
