// tests/gpu/test_fake_quant_gpu.cpp: fake quantization and codes + scales on cuda:0 against the CPU backend, bit for bit (every format and granularity, the per-tensor three-launch path; skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

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

// A per-tensor scale over more than 16384 elements runs amax, scale and apply as three launches; a short single group
// (one decoding token quantized per token) stays one warp: the same bits as the CPU either way.
TEST(GpuFakeQuant, LargeSingleGroupAndOneTokenMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const QuantSpec tensor_int8{QuantFormat::Int8, QuantGranularity::PerTensor, 0, true};
  const QuantSpec token_fp8{QuantFormat::FP8, QuantGranularity::PerToken, 0, false};
  for (const auto& [shape, spec] : {std::pair{Shape{130, 256}, tensor_int8}, std::pair{Shape{1, 768}, token_fp8},
                                    std::pair{Shape{1, 20000}, token_fp8}}) {
    const Tensor x = random_tensor(shape, DType::BF16, 14, 3.0), gx = to_gpu(x);
    const auto qc = ops::quantize_groups(x, spec), qg = ops::quantize_groups(gx, spec);
    expect_match(qg.scales, qc.scales, kSameBits, "scales " + spec.str());
    EXPECT_EQ(qg.codes.to(Device::cpu(), DType::I8).to_vector<int8_t>(), qc.codes.to_vector<int8_t>()) << spec.str();
    expect_match(ops::fake_quantize(gx, spec), ops::fake_quantize(x, spec), kSameBits, "values " + spec.str());
  }
}

// LSQ on the device: the forward and dx are the CPU's bits; dscale (a warp's sum per group) within FP32 summation.
TEST(GpuFakeQuant, LearnedScaleForwardAndGradientsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (const QuantSpec& spec : {QuantSpec{QuantFormat::Int4, QuantGranularity::PerGroup, 32, false},
                                QuantSpec{QuantFormat::Int8, QuantGranularity::PerChannel, 0, false}}) {
    for (DType dt : {DType::F32, DType::BF16}) {
      const Tensor x = random_tensor({8, 256}, dt, 15, 2.0), dy = random_tensor({8, 256}, dt, 16, 1.0);
      const Tensor s = ops::quantize_groups(x, spec).scales * 0.6;
      Tensor xc = x.detach().requires_grad_(), sc = s.detach().requires_grad_();
      Tensor xg = to_gpu(x).requires_grad_(), sg = to_gpu(s).requires_grad_();
      const Tensor yc = ops::fake_quantize_learned(xc, sc, spec), yg = ops::fake_quantize_learned(xg, sg, spec);
      const std::string n = spec.str() + " " + std::string(dtype_name(dt));
      expect_match(yg, yc, kSameBits, "values " + n);
      ops::sum(yc * dy).backward();
      ops::sum(yg * to_gpu(dy)).backward();
      expect_match(xg.grad(), xc.grad(), kSameBits, "dx " + n);
      const std::vector<float> dc = sc.grad().contiguous().to_vector<float>(),
                               dg = sg.grad().to(Device::cpu()).contiguous().to_vector<float>();
      for (size_t i = 0; i < dc.size(); ++i) EXPECT_NEAR(dg[i], dc[i], 1e-5 * (1 + std::fabs(dc[i]))) << n << " " << i;
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

// Quantized inference on the device: the weight dequantized by the plain kernel (bit for bit the CPU's), then the GEMM;
// against the CPU's INT8 / weight-only GEMMs within float summation error. FP8 runs the codes x codes GEMM on the
// device's FP8 tensor cores, whose accumulation is coarser than FP32 on Hopper: its bound is the accumulation's
// 2 k u |x||w| (u = fp8_accumulation_roundoff(); the E4M3 values within 2^-4 of x and w, hence 1.13 |x||w|) relative
// to the largest output.
TEST(GpuFakeQuant, QuantizedLinearMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (const char* name : {"int8", "int4", "fp8"}) {
    const amp::QatScheme s = amp::QatScheme::named(name);
    const Tensor x = random_tensor({5, 128}, DType::F32, 7, 1.0), w = random_tensor({24, 128}, DType::F32, 8, 0.2);
    const Tensor b = random_tensor({24}, DType::F32, 9, 0.1);
    const auto qc = ops::quantize_groups(w, *s.weight), qg = ops::quantize_groups(to_gpu(w), *s.weight);
    expect_match(ops::dequantize_groups(qg), ops::dequantize_groups(qc), kSameBits, std::string("dequantize ") + name);
    const Tensor yc = ops::quantized_linear(x, qc, b, s.input);
    const Tensor yg = ops::quantized_linear(to_gpu(x), qg, to_gpu(b), s.input);
    const std::vector<float> c = yc.to_vector<float>(), g = yg.to(Device::cpu(), DType::F32).to_vector<float>();
    double err = 0, scale = 0;
    for (size_t i = 0; i < c.size(); ++i) err = std::max(err, double(std::fabs(c[i] - g[i]))), scale = std::max(scale, double(std::fabs(c[i])));
    double bound = 1e-5;
    if (std::string(name) == "fp8") {
      const int64_t k = x.shape()[1];
      double mag = 0;
      for (double v : ops::matmul(testing::abs64(x), testing::abs64(w).t()).to_vector<double>()) mag = std::max(mag, v);
      bound += 2.0 * double(k) * testing::fp8_accumulation_roundoff() * 1.13 * mag / scale;
    }
    EXPECT_LT(err / scale, bound) << name;
  }
}

}  // namespace
}  // namespace mpt
