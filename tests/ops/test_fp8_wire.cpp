// tests/ops/test_fp8_wire.cpp: the FP8 gradient all-reduce's scales (ops::fp8_wire_amax_, ops::fp8_wire_scales) against MS-AMP's formula written out in double here, and its per-parameter passes over a bucket against each parameter's own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mpt/mpt.h"
#include "op_test.h"
#include "numerics_reference.h"
#include "test_util.h"

namespace mpt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// MS-AMP's compute_scaling_factor(amax, 1, 448, 0) floored to a power of two, then / sqrt(world): in double, from the
// float quotient (scaling-spec.md), 1 for an amax of 0 or a non-finite one.
double reference_scale(float amax, int world) {
  double pow2 = 1;
  if (amax > 0 && std::isfinite(amax)) {
    const float q = 448.0f / amax;
    pow2 = std::isinf(q) ? std::ldexp(1.0, 127) : std::exp2(std::floor(std::log2(static_cast<double>(q))));
  }
  return pow2 * (1.0 / std::sqrt(static_cast<double>(world)));
}

TEST(Fp8Wire, NanAmaxesTravelAsInfAndNothingElseMoves) {
  Tensor a = Tensor::from_vector(std::vector<float>{0, 1.5f, kNaN, kInf, -0.0f, 3e-40f}, {6});
  ops::fp8_wire_amax_(a);
  const std::vector<float> v = a.to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 1.5f);
  EXPECT_EQ(v[2], kInf);
  EXPECT_EQ(v[3], kInf);
  EXPECT_TRUE(std::signbit(v[4]));
  EXPECT_EQ(v[5], 3e-40f);
}

TEST(Fp8Wire, ScalesAndInversesAreMsAmpsInDouble) {
  const std::vector<float> amax{0.0f, 1.0f, 448.0f, 447.99f, 1e-3f, 3.3e-7f, 1e-44f, 6.5e4f, kInf, kNaN, 2.0f};
  for (const int world : {1, 2, 3, 8}) {
    SCOPED_TRACE(world);
    const ops::Fp8WireScales s = ops::fp8_wire_scales(Tensor::from_vector(amax, {static_cast<int64_t>(amax.size())}), world);
    const std::vector<float> scale = s.scale.to_vector<float>(), inv = s.inv.to_vector<float>();
    for (size_t i = 0; i < amax.size(); ++i) {
      const double want = reference_scale(amax[i], world);
      EXPECT_EQ(scale[i], static_cast<float>(want)) << "amax " << amax[i];
      if (std::isfinite(amax[i])) {
        EXPECT_EQ(inv[i], static_cast<float>(1.0 / (want * world))) << "amax " << amax[i];
      } else {
        EXPECT_TRUE(std::isnan(inv[i])) << "amax " << amax[i] << ": a non-finite gradient averages to NaN";
      }
    }
  }
  // scaling-spec.md's F9: four ranks whose shared amax is 3: s = 128 * 0.5 = 64, scale_inv = 1/256.
  const ops::Fp8WireScales f9 = ops::fp8_wire_scales(Tensor::from_vector(std::vector<float>{3.0f}, {1}), 4);
  EXPECT_EQ(f9.scale.to_vector<float>()[0], 64.0f);
  EXPECT_EQ(f9.inv.to_vector<float>()[0], 1.0f / 256);
  EXPECT_MPT_ERROR(ops::fp8_wire_scales(Tensor::zeros({2, 2}, DType::F32), 2), "expected a contiguous 1-d f32 vector");
  EXPECT_MPT_ERROR(ops::fp8_wire_scales(Tensor::zeros({2}, DType::F32), 0), "world must be >= 1, got 0");
  EXPECT_MPT_ERROR(ops::amax(Tensor::ones({3}), Tensor::zeros({2})), "out must be one contiguous f32 element");
}

// A bucket of parameters of awkward sizes (empty ones, single elements, one across the CUDA kernels' 8192-element
// chunks, unaligned starts), one holding a NaN and one an inf, values that saturate E4M3 at their scale.
struct WireBucket {
  std::vector<int64_t> bounds{0};
  Tensor flat;
  Tensor scale;
};

WireBucket wire_bucket(DType dt) {
  WireBucket b;
  for (const int64_t n : {0, 5, 8, 0, 1, 3000, 17, 9000, 7, 0}) b.bounds.push_back(b.bounds.back() + n);
  const int64_t numel = b.bounds.back();
  std::vector<float> v = testing::random_tensor({numel}, DType::F32, 7, 100.0).to_vector<float>();
  v[static_cast<size_t>(b.bounds[6] + 3)] = kNaN;   // the 17-element parameter
  v[static_cast<size_t>(b.bounds[8] + 2)] = -kInf;  // the last non-empty one
  b.flat = Tensor::from_vector(v, {numel}).to(dt);
  const std::vector<float> scales{1.0f, 8.0f, 0.25f, 3.7f, 64.0f, 1.0f / 3, 2.0f, 0.5f, 1e-3f, 16.0f};
  b.scale = Tensor::from_vector(scales, {static_cast<int64_t>(scales.size())});
  return b;
}

// ops::fp8_wire_amaxes against max |x| per parameter computed here (a NaN as +inf, 0 for an empty parameter), and
// fp8_wire_quantize / fp8_wire_dequantize against an independent E4M3 encoder and float(code) * inv in double.
TEST(Fp8Wire, BucketPassesAreEachParametersOwn) {
  for (const DType dt : {DType::F32, DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(dt));
    const WireBucket b = wire_bucket(dt);
    const size_t segments = b.bounds.size() - 1;
    const std::vector<float> x = b.flat.to(DType::F32).to_vector<float>();
    Tensor amax = Tensor::full({static_cast<int64_t>(segments)}, 7.0f, DType::F32);  // overwritten, not max-ed into
    ops::fp8_wire_amaxes(b.flat, b.bounds, amax);
    const std::vector<float> got = amax.to_vector<float>();
    for (size_t i = 0; i < segments; ++i) {
      float want = 0;
      for (int64_t j = b.bounds[i]; j < b.bounds[i + 1]; ++j)
        want = std::isnan(x[static_cast<size_t>(j)]) ? kInf : std::max(want, std::abs(x[static_cast<size_t>(j)]));
      EXPECT_EQ(got[i], want) << "parameter " << i;
    }
    EXPECT_EQ(got[6], kInf) << "the NaN";
    EXPECT_EQ(got[8], kInf) << "the -inf";

    // Each element's code from the independent encoder (tests/support/numerics_reference.h: round to nearest even
    // by value, E4M3 saturating at 448, inf to 448, NaN to 0x7F) of float(x) * scale rounded to f32, TE's order.
    Tensor codes = Tensor::empty({b.flat.numel()}, DType::F8E4M3, Device::cpu());
    ops::fp8_wire_quantize(b.flat, b.bounds, b.scale, codes);
    const std::vector<float> scales = b.scale.to_vector<float>();
    std::vector<uint8_t> got_codes(static_cast<size_t>(codes.numel()));
    std::memcpy(got_codes.data(), codes.data_ptr(), got_codes.size());
    size_t saturated = 0;
    for (size_t i = 0; i < segments; ++i) {
      for (int64_t j = b.bounds[i]; j < b.bounds[i + 1]; ++j) {
        const float y = x[static_cast<size_t>(j)] * scales[i];
        const uint32_t want = test::ref_encode(test::RefFormat::E4M3, static_cast<long double>(y), true);
        saturated += std::isfinite(y) && std::abs(y) > 448.0f;
        ASSERT_EQ(got_codes[static_cast<size_t>(j)], want) << "parameter " << i << " element " << j << ": " << y;
      }
    }
    EXPECT_GE(saturated, 2u) << "the bucket should hold finite values beyond E4M3's range at their scale";

    const std::vector<float> inv{0.5f, 1.0f / 3, 4.0f, 1e-5f, 7.25f, kNaN, 1.0f, 0.125f, 3.0f, 2.0f};
    Tensor out = Tensor::full({b.flat.numel()}, 9.0f, dt);
    ops::fp8_wire_dequantize(codes, b.bounds, Tensor::from_vector(inv, {static_cast<int64_t>(inv.size())}), out);
    const std::vector<float> c = codes.to(DType::F32).to_vector<float>();  // E4M3 values are exact in f32
    std::vector<float> want(c.size());
    for (size_t i = 0; i < segments; ++i)
      for (int64_t j = b.bounds[i]; j < b.bounds[i + 1]; ++j)
        want[static_cast<size_t>(j)] =
            static_cast<float>(static_cast<double>(c[static_cast<size_t>(j)]) * static_cast<double>(inv[i]));
    EXPECT_TRUE(testing::same_bits(out, Tensor::from_vector(want, {b.flat.numel()}).to(dt)));
  }
}

TEST(Fp8Wire, BucketPassesRefuseWhatDoesNotFit) {
  const Tensor flat = Tensor::zeros({10}, DType::BF16), amax = Tensor::zeros({2}, DType::F32);
  const Tensor codes = Tensor::empty({10}, DType::F8E4M3, Device::cpu());
  EXPECT_MPT_ERROR(ops::fp8_wire_amaxes(flat, {0, 4, 9}, amax),
                   "[fp8_wire_amaxes] the parameter bounds must run from 0 to the buffer's 10 elements, got 3 bounds "
                   "from 0 to 9");
  EXPECT_MPT_ERROR(ops::fp8_wire_amaxes(flat, {0, 6, 4, 10}, Tensor::zeros({3}, DType::F32)),
                   "parameter bound 2 (4) is below bound 1 (6)");
  EXPECT_MPT_ERROR(ops::fp8_wire_amaxes(flat, {0, 4, 6, 10}, amax), "expected the amaxes as a contiguous f32 [3]");
  EXPECT_MPT_ERROR(ops::fp8_wire_amaxes(Tensor::zeros({2, 5}, DType::F32), {0, 4, 10}, amax),
                   "expected a contiguous 1-d f32, bf16 or f16 gradient buffer, got");
  EXPECT_MPT_ERROR(ops::fp8_wire_quantize(flat, {0, 4, 10}, amax, Tensor::empty({10}, DType::F8E5M2, Device::cpu())),
                   "[fp8_wire_quantize] expected the codes as a contiguous f8e4m3 [10]");
  EXPECT_MPT_ERROR(ops::fp8_wire_dequantize(codes, {0, 4, 10}, Tensor::zeros({2}, DType::BF16), flat),
                   "[fp8_wire_dequantize] expected the inverse scales as a contiguous f32 [2]");
  EXPECT_MPT_ERROR(ops::fp8_wire_dequantize(codes.slice(0, 0, 8), {0, 4, 10}, amax, flat),
                   "expected the codes as a contiguous f8e4m3 [10]");
}

}  // namespace
}  // namespace mpt
