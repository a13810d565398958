// tests/io/test_safetensors.cpp: safetensors round trips, byte-exact layout, lazy reads and atomic saves.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <random>

#include "io_test_util.h"
#include "mpt/mpt.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::io;
using namespace mpt::testing;

namespace {

// A tensor of pseudo-random bytes: for float dtypes every bit pattern (NaN payloads, infinities, subnormals).
Tensor random_bytes(const Shape& shape, DType dtype, uint32_t seed) {
  Tensor t = Tensor::empty(shape, dtype);
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(t.data_ptr());
  for (size_t i = 0; i < t.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return t;
}

// The tensor's elements in row-major order, as raw bytes.
std::string bytes_of(const Tensor& t) {
  const Tensor c = t.to(Device::cpu()).contiguous();
  if (c.nbytes() == 0) return {};
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

template <class T>
Tensor from_bits(DType dtype, const Shape& shape, const std::vector<T>& bits) {
  Tensor t = Tensor::empty(shape, dtype);
  EXPECT_EQ(t.nbytes(), bits.size() * sizeof(T));
  if (!bits.empty()) std::memcpy(t.data_ptr(), bits.data(), bits.size() * sizeof(T));
  return t;
}

}  // namespace

TEST(Safetensors, RoundTripEveryDtypeBitExact) {
  const std::vector<Shape> shapes = {{}, {0}, {3, 0, 2}, {1}, {7}, {3, 5}, {2, 3, 5}, {1, 1, 1, 1}};
  std::map<std::string, Tensor> tensors;
  uint32_t seed = 1;
  for (DType dtype : kAllDTypes)
    for (size_t i = 0; i < shapes.size(); ++i)
      tensors[fmt::format("{}.{}", dtype, i)] = random_bytes(shapes[i], dtype, seed++);

  TempDir dir;
  const auto path = dir / "all.safetensors";
  save_safetensors(path, tensors);

  const SafetensorsFile file(path);
  EXPECT_EQ(file.data_start() % 8, 0u);
  ASSERT_EQ(file.entries().size(), tensors.size());
  uint64_t previous_end = 0;
  for (const SafetensorsEntry& e : file.entries()) {
    SCOPED_TRACE(e.name);
    const Tensor& original = tensors.at(e.name);
    EXPECT_EQ(e.dtype, original.dtype());
    EXPECT_EQ(e.shape, original.shape());
    EXPECT_EQ(e.begin, previous_end);  // entries() is in offset order and tiles the buffer
    EXPECT_EQ(e.begin % dtype_size(e.dtype), 0u) << "the reference layout aligns every tensor";
    previous_end = e.end;
    const Tensor loaded = file.tensor(e.name);
    EXPECT_TRUE(loaded.device().is_cpu());
    EXPECT_EQ(loaded.strides(), contiguous_strides(loaded.shape()));
    EXPECT_EQ(loaded.dtype(), original.dtype());
    EXPECT_EQ(loaded.shape(), original.shape());
    EXPECT_EQ(bytes_of(loaded), bytes_of(original));
  }

  const std::map<std::string, Tensor> all = load_safetensors(path);
  ASSERT_EQ(all.size(), tensors.size());
  for (const auto& [name, t] : tensors) EXPECT_EQ(bytes_of(all.at(name)), bytes_of(t)) << name;
  EXPECT_TRUE(file.metadata().empty());
  EXPECT_EQ(read_bytes(path).find("__metadata__"), std::string::npos);
}

TEST(Safetensors, StridedTensorsAreSavedAsTheirContiguousValues) {
  const Tensor base = Tensor::arange(0.0, 12.0, 1.0).view({3, 4});  // (3,4) f32
  const std::map<std::string, Tensor> tensors = {
      {"transposed", base.t()},                                          // (4,3)
      {"sliced", base.slice(1, 1, 4, 2)},                                // (3,2) with an offset
      {"expanded", Tensor::arange(0.0, 3.0, 1.0).view({3, 1}).expand({3, 4})},  // stride 0
      {"bf16_transposed", base.to(DType::BF16).t()},
      {"selected", base.select(1, 2)},                                   // (3)
  };
  for (const auto& [name, t] : tensors) ASSERT_TRUE(!t.is_contiguous() || t.offset() != 0) << name;

  TempDir dir;
  save_safetensors(dir / "strided.safetensors", tensors);
  const auto loaded = load_safetensors(dir / "strided.safetensors");
  for (const auto& [name, t] : tensors) {
    SCOPED_TRACE(name);
    EXPECT_EQ(loaded.at(name).shape(), t.shape());
    EXPECT_EQ(bytes_of(loaded.at(name)), bytes_of(t));
    EXPECT_EQ(loaded.at(name).to_vector<float>(), t.to_vector<float>());
  }
  EXPECT_EQ(loaded.at("transposed").to_vector<float>(), (std::vector<float>{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11}));
}

TEST(Safetensors, MetadataRoundTrip) {
  const std::map<std::string, std::string> metadata = {
      {"format", "pt"}, {"empty", ""}, {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
      {"escapes", "quote\" backslash\\ newline\n tab\t bell\x07"}, {"", "empty key"}};
  TempDir dir;
  save_safetensors(dir / "m.safetensors", {{"x", Tensor::ones({2})}}, metadata);
  const SafetensorsFile file(dir / "m.safetensors");
  EXPECT_EQ(file.metadata(), metadata);
  EXPECT_EQ(file.tensor("x").to_vector<float>(), (std::vector<float>{1, 1}));
  // Metadata alone, no tensors.
  save_safetensors(dir / "only.safetensors", {}, {{"k", "v"}});
  EXPECT_EQ(SafetensorsFile(dir / "only.safetensors").metadata(), (std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_TRUE(SafetensorsFile(dir / "only.safetensors").entries().empty());
}

// Expected files spelled out byte by byte. The first two are the reference implementation's own unit-test vectors
// (safetensors/src/tensor.rs: test_serialization, test_serialization_forced_alignement, test_empty).
TEST(Safetensors, ByteExactReferenceVectors) {
  const std::string f32_0_to_5 = std::string("\x00\x00\x00\x00\x00\x00\x80\x3f\x00\x00\x00\x40", 12) +
                                 std::string("\x00\x00\x40\x40\x00\x00\x80\x40\x00\x00\xa0\x40", 12);
  const Tensor values = Tensor::arange(0.0, 6.0, 1.0);
  TempDir dir;
  const auto path = dir / "v.safetensors";

  save_safetensors(path, {{"attn.0", values.view({1, 2, 3})}});
  EXPECT_EQ(read_bytes(path), std::string("\x40\0\0\0\0\0\0\0", 8) +
                                  R"({"attn.0":{"dtype":"F32","shape":[1,2,3],"data_offsets":[0,24]}})" + f32_0_to_5);

  save_safetensors(path, {{"attn0", values.view({1, 1, 2, 3})}});
  EXPECT_EQ(read_bytes(path), std::string("\x48\0\0\0\0\0\0\0", 8) +
                                  R"({"attn0":{"dtype":"F32","shape":[1,1,2,3],"data_offsets":[0,24]}})" +
                                  "       " + f32_0_to_5);

  save_safetensors(path, {});
  EXPECT_EQ(read_bytes(path), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  save_safetensors(path, {}, {{"framework", "pt"}});
  EXPECT_EQ(read_bytes(path),
            std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(Safetensors, ByteExactMixedDtypes) {
  const std::map<std::string, Tensor> tensors = {
      {"a", Tensor::from_vector<uint8_t>({1, 2, 3}, {3})},
      {"b", Tensor::from_vector<float>({1.0f, -2.0f}, {2})},
      {"c", from_bits<uint16_t>(DType::BF16, {}, {0x3FC0})},            // 1.5
      {"y", from_bits<uint16_t>(DType::F16, {2, 1}, {0x3C00, 0xFC00})},  // 1, -inf
      {"z", Tensor::empty({0}, DType::I64)},
  };
  // Descending dtype alignment, then name: I64 z, F32 b, BF16 c, F16 y, U8 a. 314 bytes of JSON + 6 spaces.
  const std::string json =
      R"({"__metadata__":{"format":"pt","note":"x"},)"
      R"("z":{"dtype":"I64","shape":[0],"data_offsets":[0,0]},)"
      R"("b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
      R"("c":{"dtype":"BF16","shape":[],"data_offsets":[8,10]},)"
      R"("y":{"dtype":"F16","shape":[2,1],"data_offsets":[10,14]},)"
      R"("a":{"dtype":"U8","shape":[3],"data_offsets":[14,17]}})";
  ASSERT_EQ(json.size(), 314u);
  const std::string expected = std::string("\x40\x01\0\0\0\0\0\0", 8) + json + std::string(6, ' ') +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8) +  // b
                               std::string("\xc0\x3f", 2) +                          // c
                               std::string("\x00\x3c\x00\xfc", 4) +                  // y
                               std::string("\x01\x02\x03", 3);                       // a
  TempDir dir;
  const auto path = dir / "mixed.safetensors";
  save_safetensors(path, tensors, {{"note", "x"}, {"format", "pt"}});
  EXPECT_EQ(read_bytes(path), expected);

  const SafetensorsFile file(path);
  std::vector<std::string> order;
  for (const auto& e : file.entries()) order.push_back(e.name);
  EXPECT_EQ(order, (std::vector<std::string>{"z", "b", "c", "y", "a"}));
  EXPECT_EQ(file.data_start(), 328u);
  EXPECT_EQ(file.entry("y").begin, 10u);
  EXPECT_EQ(file.entry("y").end, 14u);
  EXPECT_EQ(file.entry("c").shape, Shape{});
  EXPECT_EQ(file.tensor("c").item<float>(), 1.5f);
  EXPECT_EQ(file.tensor("b").to_vector<float>(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(file.tensor("a").to_vector<uint8_t>(), (std::vector<uint8_t>{1, 2, 3}));
  EXPECT_EQ(file.tensor("z").numel(), 0);
  EXPECT_EQ(bytes_of(file.tensor("y")), std::string("\x00\x3c\x00\xfc", 4));
  EXPECT_TRUE(file.contains("a"));
  EXPECT_FALSE(file.contains("x"));
}

// Another writer's choices: pretty-printed JSON, entries in any order, keys in any order, extra keys, padding.
TEST(Safetensors, ReadsHandWrittenFile) {
  const std::string header = "{\n  \"w\": {\"shape\": [2], \"data_offsets\": [4, 12], \"dtype\": \"F32\"},\n"
                             "  \"__metadata__\": {\"format\": \"np\"},\n"
                             "  \"i\": {\"dtype\": \"I32\", \"data_offsets\": [0, 4], \"shape\": [], \"extra\": 1}\n}"
                             "          ";
  const std::string buffer = std::string("\x07\x00\x00\x00", 4) + std::string("\x00\x00\x20\x41\x00\x00\x30\xc1", 8);
  TempDir dir;
  write_bytes(dir / "h.safetensors", safetensors_bytes(header, buffer));
  const SafetensorsFile file(dir / "h.safetensors");
  ASSERT_EQ(file.entries().size(), 2u);
  EXPECT_EQ(file.entries()[0].name, "i");
  EXPECT_EQ(file.entries()[1].name, "w");
  EXPECT_EQ(file.metadata().at("format"), "np");
  EXPECT_EQ(file.tensor("i").item<int32_t>(), 7);
  EXPECT_EQ(file.tensor("w").to_vector<float>(), (std::vector<float>{10.0f, -11.0f}));
}

TEST(Safetensors, ReaderKeepsReadingTheFileItOpened) {
  TempDir dir;
  const auto path = dir / "r.safetensors";
  save_safetensors(path, {{"a", Tensor::full({3}, 1.0)}});
  const SafetensorsFile old_file(path);
  save_safetensors(path, {{"a", Tensor::full({3}, 2.0)}});  // renamed over the path
  EXPECT_EQ(old_file.tensor("a").to_vector<float>(), (std::vector<float>{1, 1, 1}));
  EXPECT_EQ(SafetensorsFile(path).tensor("a").to_vector<float>(), (std::vector<float>{2, 2, 2}));

  SafetensorsFile moved = SafetensorsFile(path);
  SafetensorsFile target(std::move(moved));
  EXPECT_EQ(target.tensor("a").to_vector<float>(), (std::vector<float>{2, 2, 2}));
  EXPECT_MPT_ERROR(moved.tensor("a"), "moved-from");  // NOLINT(bugprone-use-after-move): the point of the check
}

TEST(Safetensors, TruncatedAfterOpening) {
  TempDir dir;
  const auto path = dir / "t.safetensors";
  save_safetensors(path, {{"a", Tensor::zeros({64})}});
  const SafetensorsFile file(path);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 10);
  EXPECT_MPT_ERROR(file.tensor("a"), "truncated after it was opened");
}

// ---- atomic saves: a failed save never touches an existing file and leaves no temporary behind

TEST(SafetensorsAtomicSave, RejectedTensorKeepsOldFile) {
  TempDir dir;
  const auto path = dir / "ckpt.safetensors";
  save_safetensors(path, {{"w", Tensor::ones({4})}});
  const std::string old_bytes = read_bytes(path);
  EXPECT_MPT_ERROR(save_safetensors(path, {{"w", Tensor::zeros({4})}, {"broken", Tensor()}}),
                   "[safetensors] " + path.string() + ": tensor \"broken\" is undefined");
  EXPECT_MPT_ERROR(save_safetensors(path, {{"__metadata__", Tensor::zeros({1})}}), "reserved");
  EXPECT_MPT_ERROR(save_safetensors(path, {{"bad\xff", Tensor::zeros({1})}}), "must be valid UTF-8");
  EXPECT_MPT_ERROR(save_safetensors(path, {{"w", Tensor::zeros({1})}}, {{"k", "\xc3"}}), "must be valid UTF-8");
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"});
}

TEST(SafetensorsAtomicSave, DirectoryTargetFailsAndRemovesTemporary) {
  TempDir dir;
  const auto target = dir / "a_directory";
  std::filesystem::create_directory(target);
  write_bytes(target / "inside", "keep");
  EXPECT_MPT_ERROR(save_safetensors(target, {{"w", Tensor::ones({4})}}),
                   "[safetensors] " + target.string() + ": cannot rename the temporary file");
  EXPECT_TRUE(std::filesystem::is_directory(target));
  EXPECT_EQ(read_bytes(target / "inside"), "keep");
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"a_directory"});
}

TEST(SafetensorsAtomicSave, MissingDirectory) {
  TempDir dir;
  const auto path = dir / "no" / "such" / "dir.safetensors";
  EXPECT_MPT_ERROR(save_safetensors(path, {{"w", Tensor::ones({4})}}),
                   "[safetensors] " + path.string() + ": cannot create the temporary file");
  EXPECT_MPT_ERROR(SafetensorsFile{path}, "[safetensors] " + path.string() + ": cannot open for reading");
}

// A write that fails halfway (here: the file-size limit, as a full disk would) keeps the old file.
TEST(SafetensorsAtomicSave, FailedWriteKeepsOldFile) {
  TempDir dir;
  const auto path = dir / "ckpt.safetensors";
  save_safetensors(path, {{"w", Tensor::ones({4})}});
  const std::string old_bytes = read_bytes(path);

  rlimit old_limit{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  if (old_limit.rlim_cur != RLIM_INFINITY && old_limit.rlim_cur < (8u << 20)) GTEST_SKIP() << "file size limit set";
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG instead of a signal
  rlimit small = old_limit;
  small.rlim_cur = 1u << 20;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  const std::string message =
      error_message([&] { save_safetensors(path, {{"big", Tensor::zeros({1 << 20})}}); });  // 4 MiB
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_TRUE(contains(message, "[safetensors] " + path.string() + ": cannot write the temporary file")) << message;
  EXPECT_EQ(read_bytes(path), old_bytes);
  EXPECT_EQ(dir.listing(), std::vector<std::string>{"ckpt.safetensors"});
}
