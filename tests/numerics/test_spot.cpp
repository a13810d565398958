// tests/numerics/test_spot.cpp: hand-checked conversions from the OCP FP8 spec, NVIDIA's documented behaviour and IEEE binary16.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "kernels/math/numerics.h"

namespace mpt {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr auto kSat = Fp8Saturation::Saturate;
constexpr auto kNoSat = Fp8Saturation::NoSaturate;

float e4m3(float x, Fp8Saturation sat = kSat) { return e4m3_bits_to_float(float_to_e4m3_bits(x, sat)); }
float e5m2(float x, Fp8Saturation sat = kSat) { return e5m2_bits_to_float(float_to_e5m2_bits(x, sat)); }

TEST(Spot, E4M3Values) {
  EXPECT_EQ(e4m3(1.0f), 1.0f);
  EXPECT_EQ(e4m3(-3.3f), -3.25f);
  EXPECT_EQ(e4m3(17.0f), 16.0f);      // 17 lies between 16 and 18: nearer 16
  EXPECT_EQ(e4m3(300.0f), 288.0f);    // spacing 32 above 256
  EXPECT_EQ(e4m3(500.0f), 448.0f);    // saturates
  EXPECT_EQ(e4m3(0.01f), 0.009765625f);
  EXPECT_EQ(e4m3(0.0009f), 0.0f);     // below half the smallest subnormal 2^-9
  EXPECT_EQ(e4m3(464.0f), 448.0f);    // tie between 448 (even) and 480: to even
  EXPECT_EQ(e4m3(464.0f, kNoSat), 448.0f);
  EXPECT_TRUE(std::isnan(e4m3(464.01f, kNoSat)));
  EXPECT_EQ(float_to_e4m3_bits(464.01f, kNoSat), 0x7F);
  EXPECT_EQ(float_to_e4m3_bits(-464.01f, kNoSat), 0xFF);  // an overflow NaN keeps the sign (as NVIDIA's)
  EXPECT_EQ(float_to_e4m3_bits(448.0f, kSat), 0x7E);
  EXPECT_EQ(float_to_e4m3_bits(-448.0f, kSat), 0xFE);
  EXPECT_EQ(float_to_e4m3_bits(-1000.0f, kSat), 0xFE);
}

TEST(Spot, Fp8InfinityAndNaN) {
  EXPECT_EQ(float_to_e4m3_bits(kInf, kSat), 0x7E);    // 448
  EXPECT_EQ(float_to_e4m3_bits(-kInf, kSat), 0xFE);   // -448
  EXPECT_EQ(float_to_e4m3_bits(kInf, kNoSat), 0x7F);  // NaN: E4M3 has no Inf
  EXPECT_EQ(float_to_e4m3_bits(-kInf, kNoSat), 0xFF);
  EXPECT_EQ(float_to_e5m2_bits(kInf, kSat), 0x7B);    // 57344
  EXPECT_EQ(float_to_e5m2_bits(-kInf, kSat), 0xFB);
  EXPECT_EQ(float_to_e5m2_bits(kInf, kNoSat), 0x7C);  // +Inf
  EXPECT_EQ(float_to_e5m2_bits(-kInf, kNoSat), 0xFC);
  EXPECT_EQ(float_to_e5m2_bits(1e6f, kNoSat), 0x7C);  // finite overflow -> Inf
  EXPECT_EQ(e5m2(1e6f), 57344.0f);
  EXPECT_EQ(e5m2(-3.3f), -3.5f);  // 2 bits of mantissa: 3.3 is nearer 3.5 than 3.0
  EXPECT_EQ(float_to_e5m2_bits(61440.0f, kNoSat), 0x7C);  // tie 57344 (odd mantissa) / 65536: to even = Inf
  EXPECT_EQ(float_to_e5m2_bits(61439.0f, kNoSat), 0x7B);
  EXPECT_EQ(float_to_e5m2_bits(61440.0f, kSat), 0x7B);
  for (auto sat : {kSat, kNoSat}) {  // a NaN input gives the canonical, unsigned NaN
    EXPECT_EQ(float_to_e4m3_bits(kNaN, sat), 0x7F);
    EXPECT_EQ(float_to_e4m3_bits(-kNaN, sat), 0x7F);
    EXPECT_EQ(float_to_e5m2_bits(kNaN, sat), 0x7F);
    EXPECT_EQ(float_to_e5m2_bits(-kNaN, sat), 0x7F);
  }
  EXPECT_TRUE(std::isinf(e5m2_bits_to_float(0x7C)) && e5m2_bits_to_float(0x7C) > 0);
  EXPECT_TRUE(std::isinf(e5m2_bits_to_float(0xFC)) && e5m2_bits_to_float(0xFC) < 0);
  for (uint8_t c : {0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF}) EXPECT_TRUE(std::isnan(e5m2_bits_to_float(c))) << int(c);
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_bits_to_float(0xFF)));
  EXPECT_EQ(e4m3_bits_to_float(0x7E), 448.0f);
  EXPECT_EQ(e4m3_bits_to_float(0x78), 256.0f);  // exponent field 15 is an ordinary binade in E4M3
  EXPECT_EQ(e5m2_bits_to_float(0x7B), 57344.0f);
}

TEST(Spot, ConstructorsSaturateLikeCudaTypes) {
  EXPECT_EQ(f8e4m3(1000.0f).bits, 0x7E);
  EXPECT_EQ(f8e4m3(kInf).bits, 0x7E);
  EXPECT_EQ(f8e5m2(1e9f).bits, 0x7B);
  EXPECT_EQ(f8e5m2(-kInf).bits, 0xFB);
  EXPECT_EQ(f8e4m3(kNaN).bits, 0x7F);
  EXPECT_EQ(f8e5m2(kNaN).bits, 0x7F);
  EXPECT_EQ(static_cast<float>(f8e4m3(-3.3)), -3.25f);  // double constructor
  EXPECT_EQ(f16(1e6f).bits, 0x7C00);                    // IEEE: overflow is Inf
  EXPECT_EQ(bf16(-kInf).bits, 0xFF80);
  EXPECT_EQ(f16(kNaN).bits, 0x7FFF);
  EXPECT_EQ(bf16(-kNaN).bits, 0x7FFF);
  EXPECT_EQ(f16(3).bits, 0x4200);  // integer constructor
  EXPECT_EQ(bf16(-2).bits, 0xC000);
  EXPECT_EQ(f8e4m3(17).bits, f8e4m3(16.0f).bits);
}

TEST(Spot, SmallestSubnormalsAndTheirHalves) {
  EXPECT_EQ(float_to_e4m3_bits(0x1p-9f, kSat), 0x01);
  EXPECT_EQ(e4m3_bits_to_float(0x01), 0x1p-9f);
  EXPECT_EQ(float_to_e4m3_bits(0x1p-10f, kSat), 0x00);            // tie with 0: to even
  EXPECT_EQ(float_to_e4m3_bits(0x1.000002p-10f, kSat), 0x01);     // just above the tie
  EXPECT_EQ(float_to_e4m3_bits(-0x1p-10f, kSat), 0x80);           // -0 keeps its sign
  EXPECT_EQ(float_to_e4m3_bits(3 * 0x1p-10f, kSat), 0x02);        // 1.5 steps: tie, to even 2
  EXPECT_EQ(float_to_e5m2_bits(0x1p-16f, kSat), 0x01);
  EXPECT_EQ(e5m2_bits_to_float(0x01), 0x1p-16f);
  EXPECT_EQ(float_to_e5m2_bits(0x1p-17f, kSat), 0x00);
  EXPECT_EQ(float_to_f16_bits(0x1p-24f), 0x0001);
  EXPECT_EQ(f16_bits_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(float_to_f16_bits(0x1p-25f), 0x0000);
  EXPECT_EQ(float_to_f16_bits(0x1.000002p-25f), 0x0001);
  EXPECT_EQ(float_to_f16_bits(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bf16_bits(0x1p-133f), 0x0001);
  EXPECT_EQ(bf16_bits_to_float(0x0001), 0x1p-133f);
  EXPECT_EQ(float_to_bf16_bits(0x1p-134f), 0x0000);
  EXPECT_EQ(float_to_bf16_bits(0x1.8p-133f), 0x0002);  // 1.5 steps: to even
  EXPECT_EQ(float_to_bf16_bits(0x1p-149f), 0x0000);    // the smallest float
}

TEST(Spot, F16AndBF16Limits) {
  EXPECT_EQ(float_to_f16_bits(65504.0f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(65519.996f), 0x7BFF);
  EXPECT_EQ(float_to_f16_bits(65520.0f), 0x7C00);  // the tie above max rounds to even = Inf
  EXPECT_EQ(float_to_f16_bits(1.0f + 0x1p-11f), 0x3C00);            // tie, to even
  EXPECT_EQ(float_to_f16_bits(1.0f + 3 * 0x1p-11f), 0x3C02);        // tie, to even (up)
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1p-8f), 0x3F80);
  EXPECT_EQ(float_to_bf16_bits(1.0f + 0x1.02p-8f), 0x3F81);
  EXPECT_EQ(float_to_bf16_bits(0x1.FFp127f), 0x7F80);               // tie above max -> Inf
  EXPECT_EQ(float_to_bf16_bits(0x1.FEFFFEp127f), 0x7F7F);
  EXPECT_EQ(kF16Max, f16_bits_to_float(0x7BFF));
  EXPECT_EQ(kBF16Max, bf16_bits_to_float(0x7F7F));
  EXPECT_EQ(kE4M3Max, e4m3_bits_to_float(0x7E));
  EXPECT_EQ(kE5M2Max, e5m2_bits_to_float(0x7B));
  EXPECT_EQ(kE4M3MinSubnormal, e4m3_bits_to_float(0x01));
  EXPECT_EQ(kE5M2MinSubnormal, e5m2_bits_to_float(0x01));
  EXPECT_EQ(kF16MinNormal, f16_bits_to_float(0x0400));
  EXPECT_EQ(kBF16MinNormal, bf16_bits_to_float(0x0080));
  EXPECT_EQ(kE4M3MinNormal, e4m3_bits_to_float(0x08));
  EXPECT_EQ(kE5M2MinNormal, e5m2_bits_to_float(0x04));
}

// Double sources round once, from the double: rounding to float first would land exactly on a tie
// and then round to even, the wrong way.
TEST(Spot, DoubleSourcesDoNotRoundTwice) {
  const double x = 1.0 + 0x1p-11 + 0x1p-40;  // just above the f16 tie between 1 and 1 + 2^-10
  ASSERT_EQ(static_cast<double>(static_cast<float>(x)), 1.0 + 0x1p-11);  // float loses the nudge
  EXPECT_EQ(float_to_f16_bits(static_cast<float>(x)), 0x3C00);              // the double-rounded answer
  EXPECT_EQ(double_to_f16_bits(x), 0x3C01);
  EXPECT_EQ(f16(x).bits, 0x3C01);
  const double y = 1.0 + 0x1p-8 + 0x1p-30;  // bf16 tie between 1 and 1 + 2^-7, nudged up
  EXPECT_EQ(float_to_bf16_bits(static_cast<float>(y)), 0x3F80);
  EXPECT_EQ(double_to_bf16_bits(y), 0x3F81);
  const double z = 464.0 + 0x1p-25;  // E4M3: above the 448/480 tie -> overflow
  EXPECT_EQ(float_to_e4m3_bits(static_cast<float>(z), kNoSat), 0x7E);
  EXPECT_EQ(double_to_e4m3_bits(z, kNoSat), 0x7F);
  EXPECT_EQ(double_to_e4m3_bits(z, kSat), 0x7E);
  EXPECT_EQ(double_to_e5m2_bits(1e300, kNoSat), 0x7C);
  EXPECT_EQ(double_to_bf16_bits(1e300), 0x7F80);
  EXPECT_EQ(double_to_bf16_bits(1e-300), 0x0000);
  EXPECT_EQ(double_to_bf16_bits(-1e-300), 0x8000);
  EXPECT_EQ(double_to_f16_bits(std::numeric_limits<double>::denorm_min()), 0x0000);
}

// Integers beyond 2^53 are rounded once, from their exact value.
TEST(Spot, LargeIntegersRoundOnce) {
  const int64_t i = (int64_t(1) << 60) + (int64_t(1) << 52) + 1;  // just above a bf16 tie
  ASSERT_EQ(static_cast<double>(i), 0x1p60 + 0x1p52);                 // double lands on the tie
  EXPECT_EQ(bf16(static_cast<double>(i)).bits, 0x5D80);               // 2^60: the double-rounded answer
  EXPECT_EQ(bf16(i).bits, 0x5D81);
  EXPECT_EQ(bf16(-i).bits, 0xDD81);
  EXPECT_EQ(bf16(uint64_t(1) << 63).bits, 0x5F00);
  EXPECT_EQ(bf16(~uint64_t(0)).bits, 0x5F80);  // 2^64 - 1 rounds up to 2^64
  EXPECT_EQ(f16(int64_t(1) << 62).bits, 0x7C00);
}

}  // namespace
}  // namespace mpt
