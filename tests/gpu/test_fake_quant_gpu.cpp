// tests/gpu/test_fake_quant_gpu.cpp: fake quantization and codes + scales on cuda:0 against the CPU backend, bit for bit (every format and granularity, the per-tensor three-launch path; skipped without a GPU).
#include <gtest/gtest.h>

#include <string>

#include "device_test.h"
#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using ops::QuantFormat;
using ops::QuantGranularity;
using ops::QuantSpec;
using testing::expect_match;
using testing::random_tensor;
using testing::to_gpu;

// The same float math (kernels/math/fake_quant.h: one IEEE division, rint, one product) on both backends.
const testing::Match kSameBits = testing::Match::exact(testing::Tolerance{0, 0});

TEST(GpuFakeQuant, EveryFormatAndGranularityMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const QuantSpec specs[] = {{QuantFormat::Int8, QuantGranularity::PerChannel, 0, false},
                             {QuantFormat::Int8, QuantGranularity::PerToken, 0, true},
                             {QuantFormat::Int4, QuantGranularity::PerGroup, 32, true},
                             {QuantFormat::Int4, QuantGranularity::PerGroup, 128, false},
                             {QuantFormat::FP8, QuantGranularity::PerChannel, 0, false},
                             {QuantFormat::FP8, QuantGranularity::PerTensor, 0, false},
                             {QuantFormat::Int8, QuantGranularity::PerTensor, 0, true}};
  for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
    for (const QuantSpec& spec : specs) {
      const Tensor x = random_tensor({37, 256}, dt, 4, 3.0), gx = to_gpu(x);
      const std::string n = spec.str() + " " + std::string(dtype_name(dt));
      expect_match(ops::fake_quantize(gx, spec), ops::fake_quantize(x, spec), kSameBits, "values " + n);
      const auto qc = ops::quantize_groups(x, spec), qg = ops::quantize_groups(gx, spec);
      expect_match(qg.scales, qc.scales, kSameBits, "scales " + n);
      EXPECT_EQ(qg.codes.to(Device::cpu(), DType::I8).to_vector<int8_t>(), qc.codes.to_vector<int8_t>()) << n;
    }
  }
}

TEST(GpuFakeQuant, StraightThroughGradientOnTheDevice) {
  MPT_REQUIRE_GPU(8);
  Tensor x = to_gpu(random_tensor({8, 64}, DType::F32, 5, 1.0)).requires_grad_();
  const Tensor dy = random_tensor({8, 64}, DType::F32, 6, 1.0);
  ops::sum(ops::fake_quantize(x, {QuantFormat::Int4, QuantGranularity::PerGroup, 32, false}) * to_gpu(dy)).backward();
  EXPECT_EQ(x.grad().to(Device::cpu(), DType::F32).to_vector<float>(), dy.to_vector<float>());
}

}  // namespace
}  // namespace mpt
