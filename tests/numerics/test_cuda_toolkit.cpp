// tests/numerics/test_cuda_toolkit.cpp: bit-for-bit agreement with cuda_fp16.h / cuda_bf16.h / cuda_fp8.h host conversions (skipped without the toolkit).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/math/numerics.h"
#include "numerics_reference.h"

#if __has_include(<cuda_fp8.h>)
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>
#define MPT_TEST_HAVE_CUDA_HEADERS 1
#endif

namespace mpt {
namespace {

#if defined(MPT_TEST_HAVE_CUDA_HEADERS)

// Bits must be equal, with one exception: for a NaN *input*, NVIDIA's double -> FP8 path keeps the
// sign (and, for E5M2, two payload bits) where ours gives the canonical NaN, as NVIDIA's own float
// path does. There NVIDIA must give some NaN and ours exactly the canonical one.
struct Tally {
  uint64_t checked = 0, mismatched = 0;
  void check(uint32_t ours, uint32_t theirs, bool input_is_nan, bool theirs_is_nan, uint32_t canonical_nan) {
    ++checked;
    mismatched += input_is_nan ? !(theirs_is_nan && ours == canonical_nan) : ours != theirs;
  }
};

bool f16_is_nan(uint32_t b) { return (b & 0x7FFFu) > 0x7C00u; }
bool e4m3_is_nan(uint32_t b) { return (b & 0x7Fu) == 0x7Fu; }
bool e5m2_is_nan(uint32_t b) { return (b & 0x7Fu) > 0x7Cu; }

enum Slot { kF16, kBF16, kE4M3Sat, kE4M3NoSat, kE5M2Sat, kE5M2NoSat, kSlots };
const char* const kSlotNames[kSlots] = {"f16", "bf16", "e4m3 satfinite", "e4m3 nosat", "e5m2 satfinite", "e5m2 nosat"};

template <class X>
void compare_one(X x, Tally* t) {
  constexpr bool kFloat = std::is_same_v<X, float>;
  constexpr auto kSat = Fp8Saturation::Saturate;
  constexpr auto kNoSat = Fp8Saturation::NoSaturate;
  const bool nan_in = std::isnan(x);
  uint32_t h, b;
  if constexpr (kFloat) {
    h = __half_raw(__float2half_rn(x)).x;
    b = __nv_bfloat16_raw(__float2bfloat16_rn(x)).x;
    t[kF16].check(float_to_f16_bits(x), h, nan_in, f16_is_nan(h), 0x7FFF);
    t[kBF16].check(float_to_bf16_bits(x), b, nan_in, (b & 0x7FFFu) > 0x7F80u, 0x7FFF);
  } else {
    h = __half_raw(__double2half(x)).x;
    b = __nv_bfloat16_raw(__double2bfloat16(x)).x;
    t[kF16].check(double_to_f16_bits(x), h, nan_in, f16_is_nan(h), 0x7FFF);
    t[kBF16].check(double_to_bf16_bits(x), b, nan_in, (b & 0x7FFFu) > 0x7F80u, 0x7FFF);
  }
  const auto nv = [&](__nv_saturation_t s, __nv_fp8_interpretation_t i) -> uint32_t {
    if constexpr (kFloat) return __nv_cvt_float_to_fp8(x, s, i);
    else return __nv_cvt_double_to_fp8(x, s, i);
  };
  const auto ours = [&](bool e4m3, Fp8Saturation s) -> uint32_t {
    if constexpr (kFloat) return e4m3 ? float_to_e4m3_bits(x, s) : float_to_e5m2_bits(x, s);
    else return e4m3 ? double_to_e4m3_bits(x, s) : double_to_e5m2_bits(x, s);
  };
  uint32_t r = nv(__NV_SATFINITE, __NV_E4M3);
  t[kE4M3Sat].check(ours(true, kSat), r, nan_in, e4m3_is_nan(r), 0x7F);
  r = nv(__NV_NOSAT, __NV_E4M3);
  t[kE4M3NoSat].check(ours(true, kNoSat), r, nan_in, e4m3_is_nan(r), 0x7F);
  r = nv(__NV_SATFINITE, __NV_E5M2);
  t[kE5M2Sat].check(ours(false, kSat), r, nan_in, e5m2_is_nan(r), 0x7F);
  r = nv(__NV_NOSAT, __NV_E5M2);
  t[kE5M2NoSat].check(ours(false, kNoSat), r, nan_in, e5m2_is_nan(r), 0x7F);
}

void report(const Tally* t, uint64_t min_checked) {
  for (int s = 0; s < kSlots; ++s) {
    EXPECT_EQ(t[s].mismatched, 0u) << kSlotNames[s] << ": " << t[s].mismatched << " of " << t[s].checked;
    EXPECT_GE(t[s].checked, min_checked) << kSlotNames[s];
  }
}

TEST(CudaToolkit, FloatToNarrowMatchesNvidiaOnStridedSweepAndSpecials) {
  constexpr uint64_t kStride = 97;
  Tally total[kSlots];
#pragma omp parallel
  {
    Tally local[kSlots];
#pragma omp for schedule(static)
    for (int64_t i = 0; i <= static_cast<int64_t>(0xFFFFFFFFull / kStride); ++i) {
      compare_one(std::bit_cast<float>(static_cast<uint32_t>(static_cast<uint64_t>(i) * kStride)), local);
    }
#pragma omp critical
    for (int s = 0; s < kSlots; ++s) {
      total[s].checked += local[s].checked;
      total[s].mismatched += local[s].mismatched;
    }
  }
  for (float x : test::float_boundary_samples()) compare_one(x, total);
  for (auto f : {test::RefFormat::F16, test::RefFormat::BF16, test::RefFormat::E4M3, test::RefFormat::E5M2}) {
    for (float x : test::ref_float_samples(f)) compare_one(x, total);
  }
  report(total, 0xFFFFFFFFull / kStride);
}

TEST(CudaToolkit, DoubleToNarrowMatchesNvidia) {
  Tally total[kSlots];
  for (auto f : {test::RefFormat::F16, test::RefFormat::BF16, test::RefFormat::E4M3, test::RefFormat::E5M2}) {
    for (double x : test::ref_double_samples(f)) compare_one(x, total);
  }
  std::mt19937_64 rng(11);
  for (int i = 0; i < (1 << 20); ++i) {
    uint64_t bits = rng();
    if (i % 4 != 0) bits = (bits & 0x800FFFFFFFFFFFFFull) | ((1023ull - 140 + rng() % 270) << 52);
    compare_one(std::bit_cast<double>(bits), total);
  }
  report(total, 1 << 20);
}

TEST(CudaToolkit, DecodingMatchesNvidiaForEveryCode) {
  for (uint32_t c = 0; c < 65536; ++c) {
    __half_raw hr;
    hr.x = static_cast<unsigned short>(c);
    const float h = __half2float(__half(hr));
    __nv_bfloat16_raw br;
    br.x = static_cast<unsigned short>(c);
    const float b = __bfloat162float(__nv_bfloat16(br));
    const float oh = f16_bits_to_float(static_cast<uint16_t>(c));
    const float ob = bf16_bits_to_float(static_cast<uint16_t>(c));
    if (std::isnan(h)) EXPECT_TRUE(std::isnan(oh)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(oh), std::bit_cast<uint32_t>(h)) << c;
    if (std::isnan(b)) EXPECT_TRUE(std::isnan(ob)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(ob), std::bit_cast<uint32_t>(b)) << c;
  }
  for (uint32_t c = 0; c < 256; ++c) {
    const auto code = static_cast<__nv_fp8_storage_t>(c);
    const float e4 = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E4M3)));
    const float e5 = __half2float(__half(__nv_cvt_fp8_to_halfraw(code, __NV_E5M2)));
    const float o4 = e4m3_bits_to_float(static_cast<uint8_t>(c));
    const float o5 = e5m2_bits_to_float(static_cast<uint8_t>(c));
    if (std::isnan(e4)) EXPECT_TRUE(std::isnan(o4)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(o4), std::bit_cast<uint32_t>(e4)) << c;
    if (std::isnan(e5)) EXPECT_TRUE(std::isnan(o5)) << c;
    else EXPECT_EQ(std::bit_cast<uint32_t>(o5), std::bit_cast<uint32_t>(e5)) << c;
    // The storage types agree with CUDA's.
    EXPECT_EQ(f8e4m3(o4).bits, __nv_fp8_e4m3(e4).__x) << c;
    EXPECT_EQ(f8e5m2(o5).bits, __nv_fp8_e5m2(e5).__x) << c;
  }
}

#else

TEST(CudaToolkit, FloatToNarrowMatchesNvidiaOnStridedSweepAndSpecials) {
  GTEST_SKIP() << "cuda_fp8.h not found: built without the CUDA toolkit headers";
}
TEST(CudaToolkit, DoubleToNarrowMatchesNvidia) {
  GTEST_SKIP() << "cuda_fp8.h not found: built without the CUDA toolkit headers";
}
TEST(CudaToolkit, DecodingMatchesNvidiaForEveryCode) {
  GTEST_SKIP() << "cuda_fp8.h not found: built without the CUDA toolkit headers";
}

#endif

}  // namespace
}  // namespace mpt
