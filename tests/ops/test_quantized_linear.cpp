// tests/ops/test_quantized_linear.cpp: quantized inference GEMMs (W8A8 on oneDNN's INT8 matmul, weight-only INT4 / INT8 codes, FP8 weights) against exact integer sums and float64, and against the QAT forward they deploy.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using ops::QuantFormat;
using ops::QuantGranularity;
using ops::QuantSpec;
using testing::random_tensor;

const QuantSpec kInt8Channel{QuantFormat::Int8, QuantGranularity::PerChannel, 0, true};
const QuantSpec kInt8Token{QuantFormat::Int8, QuantGranularity::PerToken, 0, false};

// W8A8: y = float(sum of code products, exact) * s_x * s_w + b, multiplied in that order: bit for bit.
TEST(QuantizedLinear, W8A8IsTheExactIntegerSumScaledInItsEpilogue) {
  for (int64_t n : {1, 5, 40}) {
    const int64_t k = 96, m = 24;
    const Tensor x = random_tensor({n, k}, DType::F32, 1 + n, 2.0), w = random_tensor({m, k}, DType::F32, 2, 0.3);
    const Tensor b = random_tensor({m}, DType::F32, 3, 0.1);
    const auto wq = ops::quantize_groups(w, kInt8Channel), xq = ops::quantize_groups(x, kInt8Token);
    const std::vector<int8_t> xc = xq.codes.to_vector<int8_t>(), wc = wq.codes.to_vector<int8_t>();
    const std::vector<float> sx = xq.scales.to_vector<float>(), sw = wq.scales.to_vector<float>(),
                             bv = b.to_vector<float>();
    std::vector<float> want(static_cast<size_t>(n * m));
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < m; ++j) {
        int64_t acc = 0;
        for (int64_t t = 0; t < k; ++t) acc += int64_t{xc[i * k + t]} * int64_t{wc[j * k + t]};
        want[i * m + j] = static_cast<float>(acc) * sx[i] * sw[j] + bv[j];
      }
    }
    const Tensor y = ops::quantized_linear(x, wq, b, kInt8Token);
    EXPECT_EQ(y.to_vector<float>(), want) << "rows " << n;
  }
}

// Weight-only codes (a decoding step's few rows, and a prefill's many) and FP8 weights: float64 of the same
// dequantized weight within float summation error.
TEST(QuantizedLinear, WeightOnlyCodesMatchFloat64OfTheDequantizedWeight) {
  const QuantSpec specs[] = {{QuantFormat::Int4, QuantGranularity::PerGroup, 32, true},
                             {QuantFormat::Int4, QuantGranularity::PerGroup, 128, true},
                             {QuantFormat::Int8, QuantGranularity::PerChannel, 0, true},
                             {QuantFormat::FP8, QuantGranularity::PerChannel, 0, false},
                             {QuantFormat::Int4, QuantGranularity::PerGroup, 40, false}};  // a group not of 16s
  for (const QuantSpec& spec : specs) {
    for (int64_t n : {1, 3, 4, 5, 16, 50}) {
      const int64_t k = 640, m = 33;
      const Tensor x = random_tensor({n, k}, DType::F32, 5, 1.0), w = random_tensor({m, k}, DType::F32, 6, 0.2);
      const Tensor b = random_tensor({m}, DType::F32, 7, 0.1);
      const auto wq = ops::quantize_groups(w, spec);
      const std::vector<float> wd = ops::dequantize_groups(wq).to_vector<float>(), xv = x.to_vector<float>(),
                               bv = b.to_vector<float>();
      std::vector<double> want(static_cast<size_t>(n * m));
      for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < m; ++j) {
          double acc = bv[j];
          for (int64_t t = 0; t < k; ++t) acc += double{xv[i * k + t]} * double{wd[j * k + t]};
          want[i * m + j] = acc;
        }
      const Tensor y = ops::quantized_linear(x, wq, b);
      ASSERT_EQ(y.shape(), (Shape{n, m}));
      EXPECT_LT(testing::max_rel_error(y.to_vector<float>(), want), 2e-6) << spec.str() << " rows " << n;
    }
  }
}

// The deployed layer computes what QAT trained: linear(fake_quantize(x), fake_quantize(W)) + b.
TEST(QuantizedLinear, EqualsTheQatForwardItDeploys) {
  for (const char* name : {"int8", "int4", "fp8"}) {
    const amp::QatScheme s = amp::QatScheme::named(name);
    for (int64_t n : {1, 64}) {
      const Tensor x = random_tensor({n, 256}, DType::F32, 8, 1.0), w = random_tensor({48, 256}, DType::F32, 9, 0.2);
      const Tensor b = random_tensor({48}, DType::F32, 10, 0.1);
      const Tensor qat = ops::linear(s.input ? ops::fake_quantize(x, *s.input) : x, ops::fake_quantize(w, *s.weight), b);
      const Tensor y = ops::quantized_linear(x, ops::quantize_groups(w, *s.weight), b, s.input);
      const std::vector<float> q = qat.to_vector<float>();
      EXPECT_LT(testing::max_rel_error(y.to_vector<float>(), std::vector<double>(q.begin(), q.end())), 2e-6) << name << " " << n;
    }
  }
}

TEST(QuantizedLinear, RefusesMismatchedShapesAndActivationGranularities) {
  const Tensor w = random_tensor({8, 64}, DType::F32, 1, 1.0);
  const auto wq = ops::quantize_groups(w, kInt8Channel);
  EXPECT_MPT_ERROR(ops::quantized_linear(Tensor::zeros({2, 32}), wq, {}), "expected x [N, K] and weight codes [M, K]");
  EXPECT_MPT_ERROR(ops::quantized_linear(Tensor::zeros({2, 64}), wq, Tensor::zeros({7})), "bias");
  EXPECT_MPT_ERROR(ops::quantized_linear(Tensor::zeros({2, 64}), ops::quantize_groups(w, kInt8Token), {}),
                   "per channel or per group");
  ops::GroupQuantized bad = wq;
  bad.codes = wq.codes.to(DType::F32);
  EXPECT_MPT_ERROR(ops::quantized_linear(Tensor::zeros({2, 64}), bad, {}), "i8 codes");
}

}  // namespace
}  // namespace mpt
