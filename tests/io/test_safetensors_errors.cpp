// tests/io/test_safetensors_errors.cpp: every malformed-file error, each from a file crafted byte by byte.
#include <gtest/gtest.h>

#include <initializer_list>

#include "io_test_util.h"
#include "mpt/mpt.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::io;
using namespace mpt::testing;

namespace {

// Writes `bytes` as a file, opens it, and requires an mpt::Error that starts with "[safetensors] <path>: " and
// contains every fragment.
void check_open_error(const std::string& bytes, std::initializer_list<std::string> fragments) {
  TempDir dir;
  const auto path = dir / "bad.safetensors";
  write_bytes(path, bytes);
  const std::string message = error_message([&] { SafetensorsFile file(path); });
  EXPECT_TRUE(message.starts_with("[safetensors] " + path.string() + ": ")) << message;
  for (const std::string& fragment : fragments)
    EXPECT_TRUE(contains(message, fragment)) << "expected \"" << fragment << "\" in \"" << message << "\"";
}

#define EXPECT_OPEN_ERROR(bytes, ...)          \
  do {                                         \
    SCOPED_TRACE("crafted file");              \
    check_open_error(bytes, {__VA_ARGS__});    \
  } while (0)

// A file with this header and `n` bytes of data.
std::string file_with(const std::string& header, size_t n = 0) {
  return safetensors_bytes(header, std::string(n, '\x5a'));
}

// A header holding one tensor.
std::string one(const std::string& dtype, const std::string& shape, const std::string& offsets) {
  return R"({"t":{"dtype":)" + dtype + R"(,"shape":)" + shape + R"(,"data_offsets":)" + offsets + "}}";
}

}  // namespace

TEST(SafetensorsErrors, FileShorterThanTheLength) {
  EXPECT_OPEN_ERROR("", "the file holds 0 bytes, shorter than the 8-byte header length");
  EXPECT_OPEN_ERROR(std::string("\x02\0\0\0\0", 5), "the file holds 5 bytes");
}

TEST(SafetensorsErrors, HeaderLengthTooLarge) {
  EXPECT_OPEN_ERROR(le64(1000) + "{}", "header length 1000 is larger than the file: only 2 bytes follow");
  EXPECT_OPEN_ERROR(le64(~uint64_t{0}) + "{}", "exceeds the limit of 100000000 bytes");
  // Larger than the cap but not than the file: a sparse 110 MB file.
  TempDir dir;
  const auto path = dir / "huge.safetensors";
  write_bytes(path, le64(105'000'000) + "{}");
  std::filesystem::resize_file(path, 110'000'000);
  EXPECT_MPT_ERROR(SafetensorsFile{path}, "header length 105000000 exceeds the limit of 100000000 bytes");
}

TEST(SafetensorsErrors, JsonSyntax) {
  EXPECT_OPEN_ERROR(file_with(R"({"t":)"), "the header is not valid JSON", "parse error");
  EXPECT_OPEN_ERROR(file_with(""), "the header is not valid JSON", "unexpected end of input");
  EXPECT_OPEN_ERROR(file_with("{\"\xff\":1}"), "the header is not valid JSON", "UTF-8");
  EXPECT_OPEN_ERROR(file_with("{}x"), "the header is not valid JSON");
}

TEST(SafetensorsErrors, HeaderNotAnObject) {
  EXPECT_OPEN_ERROR(file_with("[1,2]"), "expected the header to be a JSON object, got array");
  EXPECT_OPEN_ERROR(file_with("\"text\""), "expected the header to be a JSON object, got string");
}

TEST(SafetensorsErrors, EntryShape) {
  EXPECT_OPEN_ERROR(file_with(R"({"t":3})"), "tensor \"t\": expected an object with \"dtype\", \"shape\"",
                    "got number");
  EXPECT_OPEN_ERROR(file_with(R"({"t":{"shape":[],"data_offsets":[0,4]}})", 4), "tensor \"t\": missing \"dtype\"");
  EXPECT_OPEN_ERROR(file_with(R"({"t":{"dtype":"F32","data_offsets":[0,4]}})", 4), "tensor \"t\": missing \"shape\"");
  EXPECT_OPEN_ERROR(file_with(R"({"t":{"dtype":"F32","shape":[]}})", 4), "tensor \"t\": missing \"data_offsets\"");
}

TEST(SafetensorsErrors, WrongJsonTypes) {
  EXPECT_OPEN_ERROR(file_with(one("5", "[]", "[0,4]"), 4), "expected \"dtype\" to be a string, got 5");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "\"2x2\"", "[0,16]"), 16), "expected \"shape\" to be an array");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "{\"0\":2}", "[0,8]"), 8), "expected \"shape\" to be an array");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1.5]", "[0,4]"), 4), "to hold non-negative integers, got 1.5");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[\"2\"]", "[0,8]"), 8), "to hold non-negative integers, got \"2\"");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[null]", "[0,4]"), 4), "to hold non-negative integers, got null");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "\"0,4\""), 4), "\"data_offsets\" to be two non-negative");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[0]"), 4), "\"data_offsets\" to be two non-negative", "[0]");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[0,4,8]"), 8), "\"data_offsets\" to be two non-negative");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[0,4.0]"), 4), "\"data_offsets\" to be two non-negative");
}

TEST(SafetensorsErrors, UnsupportedDtype) {
  for (const char* code : {"BOOL", "I16", "U32", "U64", "F8_E8M0", "F4", "C64", "f32", "float32", ""}) {
    SCOPED_TRACE(code);
    EXPECT_OPEN_ERROR(file_with(one(std::string("\"") + code + "\"", "[1]", "[0,1]"), 1),
                      std::string("tensor \"t\": unsupported dtype \"") + code + "\"",
                      "(supported: I64, F64, F32, I32, BF16, F16, U16, F8_E4M3, F8_E5M2, I8, U8)");
  }
}

TEST(SafetensorsErrors, NegativeOrOverflowingShape) {
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[-1,2]", "[0,0]")), "negative dimension -1 in shape [-1,2]");
  EXPECT_OPEN_ERROR(file_with(one("\"U8\"", "[4294967296,4294967296]", "[0,0]")),
                    "overflows (more than 2^63 - 1 elements)");
  EXPECT_OPEN_ERROR(file_with(one("\"U8\"", "[9223372036854775808]", "[0,0]")),
                    "overflows: dimension 9223372036854775808 is larger than 2^63 - 1");
  EXPECT_OPEN_ERROR(file_with(one("\"U8\"", "[0,18446744073709551615]", "[0,0]")), "dimension 18446744073709551615");
  EXPECT_OPEN_ERROR(file_with(one("\"F64\"", "[2305843009213693952]", "[0,0]")),
                    "overflows (more than 2^63 - 1 bytes)");
  EXPECT_OPEN_ERROR(file_with(one("\"U8\"", "[1e3]", "[0,1000]"), 1000), "non-negative integers, got 1000.0");
}

TEST(SafetensorsErrors, DataOffsets) {
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[-4,0]"), 4), "\"data_offsets\" to be two non-negative", "[-4,0]");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[0]", "[8,4]"), 8), "data_offsets [8, 4] are not ordered");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[2]", "[0,4]"), 4),
                    "data_offsets [0, 4] span 4 bytes but F32 [2] needs 8");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[2,2]", "[0,8]"), 8), "span 8 bytes but F32 [2, 2] needs 16");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[2]", "[0,8]"), 4),
                    "data_offsets [0, 8] end past the byte buffer, which holds 4 bytes");
  EXPECT_OPEN_ERROR(file_with(one("\"U8\"", "[2]", "[18446744073709551614,18446744073709551615]"), 4), "span 1 bytes");
}

TEST(SafetensorsErrors, OverlapsHolesAndTrailingBytes) {
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12),
                    "tensors \"a\" [0, 8] and \"b\" [4, 12] overlap");
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8),
                    "tensors \"a\" [0, 8] and \"b\" [0, 8] overlap");
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", 8),
                    "tensors \"a\" [0, 8] and \"z\" [4, 4] overlap");
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})", 12),
                    "hole in the byte buffer: bytes [4, 8) before tensor \"b\" belong to no tensor");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[4,8]"), 8), "bytes [0, 4) before tensor \"t\"");
  EXPECT_OPEN_ERROR(file_with(one("\"F32\"", "[1]", "[0,4]"), 6),
                    "trailing bytes: bytes [4, 6) at the end of the byte buffer belong to no tensor");
  EXPECT_OPEN_ERROR(file_with("{}", 1), "trailing bytes: bytes [0, 1)");
}

TEST(SafetensorsErrors, DuplicateKeys) {
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                              R"("a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
                    "duplicate key in the header: tensor name \"a\" appears twice");
  EXPECT_OPEN_ERROR(file_with(R"({"a":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})", 4),
                    "duplicate key in the header: key \"dtype\" appears twice in \"a\"");
  EXPECT_OPEN_ERROR(file_with(R"({"__metadata__":{"k":"1","k":"2"}})"), "key \"k\" appears twice in \"__metadata__\"");
  EXPECT_OPEN_ERROR(file_with(R"({"__metadata__":{},"__metadata__":{}})"),
                    "tensor name \"__metadata__\" appears twice");
  // Equal keys in different objects are fine.
  TempDir dir;
  write_bytes(dir / "ok.safetensors", file_with(R"({"__metadata__":{"a":"x"},"a":{"dtype":"U8","shape":[1],)"
                                                R"("data_offsets":[0,1]}})", 1));
  EXPECT_EQ(SafetensorsFile(dir / "ok.safetensors").metadata().at("a"), "x");
}

TEST(SafetensorsErrors, Metadata) {
  EXPECT_OPEN_ERROR(file_with(R"({"__metadata__":{"epoch":1}})"),
                    "expected a string for \"__metadata__\" key \"epoch\", got number 1");
  EXPECT_OPEN_ERROR(file_with(R"({"__metadata__":{"nested":{"a":"b"}}})"), "key \"nested\", got object");
  EXPECT_OPEN_ERROR(file_with(R"({"__metadata__":["a"]})"),
                    "expected \"__metadata__\" to be an object of strings, got array");
}

TEST(SafetensorsErrors, NotARegularFile) {
  TempDir dir;
  EXPECT_MPT_ERROR(SafetensorsFile{dir.path()}, "[safetensors] " + dir.path().string() + ": not a regular file");
}

TEST(SafetensorsErrors, UnknownTensorName) {
  TempDir dir;
  std::map<std::string, Tensor> tensors;
  for (int i = 0; i < 25; ++i) tensors[fmt::format("layer{:02}", i)] = Tensor::zeros({1});
  save_safetensors(dir / "many.safetensors", tensors);
  const SafetensorsFile file(dir / "many.safetensors");
  EXPECT_MPT_ERROR(file.tensor("layer99"), "[safetensors] " + (dir / "many.safetensors").string() +
                   ": no tensor named \"layer99\"; the file holds 25 tensor(s): \"layer00\", \"layer01\"");
  EXPECT_MPT_ERROR(file.entry("layer99"), "\"layer09\" and 15 more");
  const std::string message = error_message([&] { file.tensor("nope"); });
  EXPECT_FALSE(contains(message, "layer10")) << message;

  save_safetensors(dir / "none.safetensors", {});
  EXPECT_MPT_ERROR(SafetensorsFile(dir / "none.safetensors").tensor("x"),
                   "no tensor named \"x\"; the file holds 0 tensor(s)");
}
