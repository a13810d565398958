// tests/io/test_safetensors_reference.cpp: compatibility with the reference implementation (Python safetensors).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>

#include "io_test_util.h"
#include "mpt/mpt.h"
#include "reference_golden.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::io;
using namespace mpt::testing;

namespace {

struct GoldenSpec {
  const char* name;
  DType dtype;
  Shape shape;
};

// Mirrors GOLDEN in tools/safetensors_crosscheck.py.
const std::vector<GoldenSpec> kGolden = {
    {"a.f64", DType::F64, {3}},           {"b.f32", DType::F32, {3, 5}},   {"c.f16", DType::F16, {7}},
    {"d.bf16", DType::BF16, {}},          {"e.f8e4m3", DType::F8E4M3, {2, 3, 2}}, {"f.f8e5m2", DType::F8E5M2, {5}},
    {"g.i64", DType::I64, {2}},           {"h.i32", DType::I32, {1, 3}},   {"i.u16", DType::U16, {3}},
    {"j.u8", DType::U8, {9}},             {"k.empty", DType::F32, {0, 4}}, {"l.empty", DType::U8, {0}},
};
const std::map<std::string, std::string> kGoldenMetadata = {{"format", "pt"}};

// Byte k of kGolden[index] (golden_bytes in the script).
std::string golden_bytes(size_t index, size_t nbytes) {
  std::string out(nbytes, '\0');
  for (size_t k = 0; k < nbytes; ++k) out[k] = static_cast<char>((index * 16 + k * 5 + 1) & 0xFF);
  return out;
}

std::map<std::string, Tensor> golden_tensors() {
  std::map<std::string, Tensor> out;
  for (size_t i = 0; i < kGolden.size(); ++i) {
    Tensor t = Tensor::empty(kGolden[i].shape, kGolden[i].dtype);
    const std::string bytes = golden_bytes(i, t.nbytes());
    if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    out[kGolden[i].name] = t;
  }
  return out;
}

std::string bytes_of(const Tensor& t) {
  return t.nbytes() == 0 ? std::string() : std::string(static_cast<const char*>(t.data_ptr()), t.nbytes());
}

}  // namespace

// The reference wrote kReferenceGolden: we read every tensor of it, and writing the same content gives its bytes.
TEST(SafetensorsReference, ReadsAndReproducesReferenceFile) {
  const std::string golden(reinterpret_cast<const char*>(kReferenceGolden), sizeof(kReferenceGolden));
  TempDir dir;
  write_bytes(dir / "reference.safetensors", golden);
  const SafetensorsFile file(dir / "reference.safetensors");
  EXPECT_EQ(file.metadata(), kGoldenMetadata);
  ASSERT_EQ(file.entries().size(), kGolden.size());
  for (size_t i = 0; i < kGolden.size(); ++i) {
    SCOPED_TRACE(kGolden[i].name);
    const SafetensorsEntry& e = file.entry(kGolden[i].name);
    EXPECT_EQ(e.dtype, kGolden[i].dtype);
    EXPECT_EQ(e.shape, kGolden[i].shape);
    const Tensor t = file.tensor(kGolden[i].name);
    EXPECT_EQ(bytes_of(t), golden_bytes(i, t.nbytes()));
  }
  save_safetensors(dir / "ours.safetensors", golden_tensors(), kGoldenMetadata);
  EXPECT_EQ(read_bytes(dir / "ours.safetensors"), golden);
}

// Writes files for `tools/safetensors_crosscheck.py check` (which reads them with the reference) when
// MPT_SAFETENSORS_EXPORT_DIR names a directory; skipped otherwise, so the suite never needs Python.
TEST(SafetensorsReference, ExportForCrossCheck) {
  const char* dir = std::getenv("MPT_SAFETENSORS_EXPORT_DIR");
  if (dir == nullptr || *dir == '\0') GTEST_SKIP() << "set MPT_SAFETENSORS_EXPORT_DIR to export files";
  const std::filesystem::path out(dir);
  std::filesystem::create_directories(out);

  save_safetensors(out / "golden.safetensors", golden_tensors(), kGoldenMetadata);

  std::map<std::string, Tensor> mixed;
  Generator gen(1234);
  uint32_t i = 0;
  for (DType dtype : kAllDTypes) {
    for (const Shape& shape : std::vector<Shape>{{}, {0}, {5}, {2, 3}, {3, 1, 4}}) {
      Tensor t = Tensor::uniform(shape, -100.0, 100.0, DType::F32, Device::cpu(), gen);
      mixed[fmt::format("{}/{}.{}", dtype, shape.size(), i++)] = t.to(dtype);
    }
  }
  const Tensor base = Tensor::arange(0.0, 24.0, 1.0).view({2, 3, 4});
  mixed["strided.permuted"] = base.permute({2, 0, 1});
  mixed["strided.sliced"] = base.slice(2, 1, 4, 2).to(DType::BF16);
  save_safetensors(out / "mixed.safetensors", mixed,
                   {{"escapes", "quote\" backslash\\ newline\n ctrl\x01 del\x7f unicode h\xc3\xa9 \xe2\x9c\x93"}});
  save_safetensors(out / "empty.safetensors", {});
  save_safetensors(out / "metadata_only.safetensors", {}, {{"a", "1"}, {"b", "2"}, {"c", "3"}});
}
