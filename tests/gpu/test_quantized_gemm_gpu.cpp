// tests/gpu/test_quantized_gemm_gpu.cpp: quantized inference's codes x codes GEMMs on cuda:0 (W8A8 on cuBLASLt's INT8 kernels, FP8 x FP8) against the CPU's exact INT8 GEMM and a float64 reference, and the fallback where cuBLASLt cannot take the shape.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"
#include "op_test.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

using ops::QuantFormat;
using ops::QuantGranularity;
using ops::QuantSpec;
using testing::random_tensor;
using testing::to_gpu;

const QuantSpec kTokenInt8{QuantFormat::Int8, QuantGranularity::PerToken, 0, false};
const QuantSpec kChannelInt8{QuantFormat::Int8, QuantGranularity::PerChannel, 0, false};
const QuantSpec kTokenFp8{QuantFormat::FP8, QuantGranularity::PerToken, 0, false};
const QuantSpec kChannelFp8{QuantFormat::FP8, QuantGranularity::PerChannel, 0, false};

std::vector<float> host(const Tensor& t) { return t.to(Device::cpu(), DType::F32).to_vector<float>(); }

// What cuBLASLt was asked for, under emulation: the matmul count and the bytes of A, B and D (so an INT8 GEMM on
// [n, k] x [m, k] codes reads n k + m k bytes and writes 4 n m; the dequantized fallback reads 4 (n k + m k)).
struct LtCost {
  uint64_t matmuls = 0, bytes = 0;
};
template <class F>
LtCost lt_cost(F&& f) {
#if defined(MPT_CUDA_EMULATION)
  cuda_emu::reset_counters();
  f();
  const cuda_emu::Counters c = cuda_emu::counters();
  return {c.matmuls, c.matmul_bytes};
#else
  f();
  return {};
#endif
}

// y = (sum_l code_x[i,l] code_w[j,l]) s_x[i] s_w[j] + b[j] in float64, from the CPU's codes and scales. With
// `magnitude`: sum_l |code_x[i,l] code_w[j,l]| s_x[i] s_w[j], no bias (the |A||B| of a GEMM error bound).
std::vector<double> reference(const ops::GroupQuantized& xq, const ops::GroupQuantized& wq, const Tensor& b,
                              bool magnitude = false) {
  const int64_t n = xq.codes.shape()[0], k = xq.codes.shape()[1], m = wq.codes.shape()[0];
  const Tensor xv = ops::dequantize_groups({xq.codes, Tensor::ones(xq.scales.shape(), DType::F32), xq.spec});
  const Tensor wv = ops::dequantize_groups({wq.codes, Tensor::ones(wq.scales.shape(), DType::F32), wq.spec});
  const std::vector<float> cx = xv.to_vector<float>(), cw = wv.to_vector<float>(), sx = xq.scales.to_vector<float>(),
                           sw = wq.scales.to_vector<float>(), bias = b.to_vector<float>();
  std::vector<double> y(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) {
        const double p = double(cx[i * k + l]) * cw[j * k + l];
        acc += magnitude ? std::fabs(p) : p;
      }
      y[i * m + j] = acc * sx[i] * sw[j] + (magnitude ? 0.0 : bias[j]);
    }
  return y;
}

// W8A8 on the device: the same INT32 sums as the CPU's oneDNN s8 GEMM and the same epilogue formula, so the same bits
// in f32; in bf16 / f16 the CPU's f32 result rounded once. Under emulation: one INT8 GEMM on the codes.
TEST(GpuQuantizedGemm, Int8CodesGemmMatchesTheCpuBitForBit) {
  MPT_REQUIRE_GPU(8);
  for (int64_t n : {1, 5, 40}) {
    const int64_t m = 24, k = 128;
    const Tensor x = random_tensor({n, k}, DType::F32, 11 + n, 1.0), w = random_tensor({m, k}, DType::F32, 12, 0.2);
    const Tensor b = random_tensor({m}, DType::F32, 13, 0.1);
    const auto wc = ops::quantize_groups(w, kChannelInt8), wg = ops::quantize_groups(to_gpu(w), kChannelInt8);
    const Tensor yc = ops::quantized_linear(x, wc, b, kTokenInt8);
    Tensor yg;
    [[maybe_unused]] const LtCost cost = lt_cost([&] { yg = ops::quantized_linear(to_gpu(x), wg, to_gpu(b), kTokenInt8); });
    EXPECT_EQ(yg.dtype(), DType::F32);
    EXPECT_EQ(host(yg), yc.to_vector<float>()) << "n=" << n;
#if defined(MPT_CUDA_EMULATION)
    EXPECT_EQ(cost.matmuls, 1u) << "n=" << n;
    EXPECT_EQ(cost.bytes, uint64_t(n * k + m * k + 4 * n * m)) << "n=" << n << ": not the INT8 GEMM on the codes";
#endif
    EXPECT_LT(testing::max_rel_error(yc.to_vector<float>(), reference(ops::quantize_groups(x, kTokenInt8), wc, b)), 1e-6);
    for (DType dt : {DType::BF16, DType::F16}) {
      const Tensor yh = ops::quantized_linear(to_gpu(x).to(dt), wg, to_gpu(b), kTokenInt8);
      EXPECT_EQ(yh.dtype(), dt);
      // x rounded to dt first: the CPU's W8A8 on the same rounded input, then one rounding to dt.
      const Tensor want = ops::quantized_linear(x.to(dt), wc, b, kTokenInt8).to(dt);
      EXPECT_EQ(host(yh), host(want)) << dtype_name(dt) << " n=" << n;
    }
  }
}

// The worst error of an FP8 x FP8 codes GEMM, relative to the largest |want|: the accumulation's 2 k u |A||B| (u: the
// device's FP8 accumulation roundoff, device_test.h, coarser than FP32's on Hopper) and the epilogue's three float
// roundings of |A||B| + |bias|.
double fp8_codes_gemm_bound(const std::vector<double>& mag, const std::vector<double>& want, int64_t k, const Tensor& b) {
  double mag_max = 0, want_max = 0, bias_max = 0;
  for (double v : mag) mag_max = std::max(mag_max, v);
  for (double v : want) want_max = std::max(want_max, std::fabs(v));
  for (float v : b.to_vector<float>()) bias_max = std::max(bias_max, double(std::fabs(v)));
  return (2.0 * double(k) * testing::fp8_accumulation_roundoff() * mag_max + 3 * 0x1p-24 * (mag_max + bias_max)) /
         want_max;
}

// FP8 x FP8 on the device: the E4M3 codes' products summed by cuBLASLt (FP32 between K blocks; coarser inside
// Hopper's MMA), then the per-token and per-channel scales: against the float64 sum of the same codes.
TEST(GpuQuantizedGemm, Fp8CodesGemmMatchesTheFloat64Reference) {
  MPT_REQUIRE_GPU(8);
  const int64_t n = 6, m = 32, k = 256;
  const Tensor x = random_tensor({n, k}, DType::F32, 21, 2.0), w = random_tensor({m, k}, DType::F32, 22, 0.3);
  const Tensor b = random_tensor({m}, DType::F32, 23, 0.1);
  const auto wg = ops::quantize_groups(to_gpu(w), kChannelFp8);
  Tensor yg;
  [[maybe_unused]] const LtCost cost = lt_cost([&] { yg = ops::quantized_linear(to_gpu(x), wg, to_gpu(b), kTokenFp8); });
  const auto xq = ops::quantize_groups(x, kTokenFp8), wq = ops::quantize_groups(w, kChannelFp8);
  const auto want = reference(xq, wq, b);
  const double bound = fp8_codes_gemm_bound(reference(xq, wq, b, /*magnitude=*/true), want, k, b);
  EXPECT_LT(testing::max_rel_error(host(yg), want), bound);
#if defined(MPT_CUDA_EMULATION)
  EXPECT_EQ(cost.matmuls, 1u);
  EXPECT_EQ(cost.bytes, uint64_t(n * k + m * k + 4 * n * m)) << "not the FP8 GEMM on the codes";
#endif
  // The CPU (fake-quantized input x dequantized weight) agrees within float summation error.
  EXPECT_LT(testing::max_rel_error(ops::quantized_linear(x, ops::quantize_groups(w, kChannelFp8), b, kTokenFp8).to_vector<float>(), want),
            1e-5);
}

// Shapes the codes GEMMs cannot take (INT8: out_features not a multiple of 4; FP8: K not a multiple of 16) with more
// rows than the GEMV takes run the dequantized weight through the float GEMM: the same values within float summation
// error, no error.
TEST(GpuQuantizedGemm, UnsupportedShapesFallBackToTheDequantizedGemm) {
  MPT_REQUIRE_GPU(8);
  struct Case {
    QuantSpec in, wt;
    int64_t m, k;
  };
  for (const Case& c : {Case{kTokenInt8, kChannelInt8, 22, 128}, Case{kTokenFp8, kChannelFp8, 32, 120}}) {
    const int64_t n = 24;
    const Tensor x = random_tensor({n, c.k}, DType::F32, 31, 1.0), w = random_tensor({c.m, c.k}, DType::F32, 32, 0.2);
    const Tensor b = random_tensor({c.m}, DType::F32, 33, 0.1);
    Tensor yg;
    [[maybe_unused]] const LtCost cost =
        lt_cost([&] { yg = ops::quantized_linear(to_gpu(x), ops::quantize_groups(to_gpu(w), c.wt), to_gpu(b), c.in); });
    const auto want = reference(ops::quantize_groups(x, c.in), ops::quantize_groups(w, c.wt), b);
    EXPECT_LT(testing::max_rel_error(host(yg), want), 1e-5) << c.in.str();
#if defined(MPT_CUDA_EMULATION)
    EXPECT_EQ(cost.matmuls, 1u) << c.in.str();
    // x, W, y and the bias the epilogue adds, all f32.
    EXPECT_EQ(cost.bytes, uint64_t(4 * (n * c.k + c.m * c.k + n * c.m + c.m))) << c.in.str()
                                                                              << ": not the f32 fallback GEMM";
#endif
  }
}

// y = x dequant(W)^T + b in float64 from the CPU's codes (x already on its quantization grid when the scheme has one).
std::vector<double> dequantized_reference(const Tensor& x, const ops::GroupQuantized& wq, const Tensor& b) {
  const int64_t n = x.shape()[0], k = x.shape()[1], m = wq.codes.shape()[0];
  const std::vector<float> xv = x.to(Device::cpu(), DType::F32).to_vector<float>(),
                           wv = ops::dequantize_groups(wq).to_vector<float>(), bias = b.to_vector<float>();
  std::vector<double> y(static_cast<size_t>(n * m));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j) {
      double acc = 0;
      for (int64_t l = 0; l < k; ++l) acc += double(xv[i * k + l]) * wv[j * k + l];
      y[i * m + j] = acc + bias[j];
    }
  return y;
}

// Decoding with weight-only codes (INT4 per group, INT8 / FP8 weights without an activation grid) and the schemes whose
// codes x codes GEMM cuBLASLt refuses: one GEMV kernel on the codes (no dequantized copy, no cuBLASLt call) up to 16
// rows; 17 rows take the dequantized GEMM. FP32 accumulation against float64; bf16 / f16 outputs within one rounding.
TEST(GpuQuantizedGemm, WeightOnlyGemvReadsTheCodes) {
  MPT_REQUIRE_GPU(8);
  struct Case {
    QuantSpec wt;
    std::optional<QuantSpec> in;
    int64_t m, k;
  };
  const Case cases[] = {{{QuantFormat::Int4, QuantGranularity::PerGroup, 32, true}, std::nullopt, 40, 256},
                        {{QuantFormat::Int4, QuantGranularity::PerGroup, 128, false}, std::nullopt, 8, 384},
                        {kChannelInt8, std::nullopt, 12, 132},
                        {kChannelFp8, std::nullopt, 16, 96},
                        {kChannelInt8, kTokenInt8, 22, 128},  // W8A8 refused by the INT8 GEMM (22 % 4): GEMV
                        {kChannelFp8, kTokenFp8, 32, 120}};   // FP8 refused (120 % 16): GEMV
  for (const Case& c : cases) {
    for (int64_t n : {1, 16, 17}) {
      const Tensor x = random_tensor({n, c.k}, DType::F32, 41 + n, 1.0), w = random_tensor({c.m, c.k}, DType::F32, 42, 0.2);
      const Tensor b = random_tensor({c.m}, DType::F32, 43, 0.1);
      const auto wc = ops::quantize_groups(w, c.wt), wg = ops::quantize_groups(to_gpu(w), c.wt);
      const std::string what = c.wt.str() + (c.in ? " x " + c.in->str() : "") + " n=" + std::to_string(n);
      Tensor yg;
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      yg = ops::quantized_linear(to_gpu(x), wg, to_gpu(b), c.in);
#if defined(MPT_CUDA_EMULATION)
      const cuda_emu::Counters cnt = cuda_emu::counters();
      EXPECT_EQ(cnt.matmuls, n <= 16 ? 0u : 1u) << what;
      if (n <= 16) {  // the GEMV alone (after the input's quantization, if any): codes once, not a dequantized copy
        EXPECT_LT(cnt.kernel_bytes_written, uint64_t(4 * c.m * c.k)) << what;
      }
#endif
      const Tensor xq = c.in ? ops::fake_quantize(x, *c.in) : x;
      const auto want = dequantized_reference(xq, wc, b);
      EXPECT_LT(testing::max_rel_error(host(yg), want), 1e-5) << what;
      const Tensor yh = ops::quantized_linear(to_gpu(x).to(DType::BF16), wg, to_gpu(b), c.in);
      EXPECT_EQ(yh.dtype(), DType::BF16) << what;
      const Tensor xh = x.to(DType::BF16).to(DType::F32);
      EXPECT_LT(testing::max_rel_error(host(yh), dequantized_reference(c.in ? ops::fake_quantize(xh, *c.in) : xh, wc, b)), 1.0 / 128)
          << what;
    }
  }
}

}  // namespace
}  // namespace mpt
