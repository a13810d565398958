// tests/numerics/test_convert.cpp: kernels::cpu::convert: vector paths equal the scalar path bit for bit, and every type pair follows the rules.
#include "kernels/cpu/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/math/numerics.h"
#include "kernels/math/numerics_cast.h"
#include "numerics_reference.h"

namespace mpt {
namespace {

using kernels::cpu::convert;
using kernels::cpu::set_vector_conversions;

// Restores the default (vector paths on) when a test ends.
struct ScopedVector {
  explicit ScopedVector(bool on) { set_vector_conversions(on); }
  ~ScopedVector() { set_vector_conversions(true); }
};

template <class T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

// Converts src with the vector paths and with the scalar path and counts differing output bits.
template <class Dst, class Src>
size_t vector_scalar_mismatches(const std::vector<Src>& src, const char* what,
                                Fp8Saturation sat = Fp8Saturation::Saturate) {
  std::vector<Dst> vec(src.size()), sca(src.size());
  {
    ScopedVector on(true);
    convert(src.data(), vec.data(), src.size(), sat);
  }
  {
    ScopedVector off(false);
    convert(src.data(), sca.data(), src.size(), sat);
  }
  size_t bad = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    if (bits_of(vec[i]) != bits_of(sca[i]) && ++bad <= 5) {
      ADD_FAILURE() << what << " element " << i << ": source 0x" << std::hex << bits_of(src[i]) << ", vector 0x"
                    << bits_of(vec[i]) << ", scalar 0x" << bits_of(sca[i]);
    }
  }
  return bad;
}

bool any_vector_path() {
  const auto isa = kernels::cpu::convert_isa();
  return isa.f16c || isa.avx512_bf16 || isa.avx2;
}

// All float bit patterns with a stride, then every subnormal (both signs) and every NaN class.
void for_each_float_batch(uint32_t stride, const std::function<void(const std::vector<float>&)>& fn) {
  constexpr size_t kBatch = size_t(1) << 22;
  std::vector<float> batch;
  batch.reserve(kBatch);
  auto flush = [&] {
    if (!batch.empty()) fn(batch);
    batch.clear();
  };
  auto add = [&](uint32_t bits) {
    batch.push_back(std::bit_cast<float>(bits));
    if (batch.size() == kBatch) flush();
  };
  for (uint64_t b = 0; b <= 0xFFFFFFFFull; b += stride) add(static_cast<uint32_t>(b));
  for (uint32_t m = 0; m < 0x800000u; ++m) {
    add(m);
    add(0x80000000u | m);
  }
  for (uint32_t m = 0; m < 0x800000u; m += 4099) {
    add(0x7F800000u | m);
    add(0xFF800000u | m);
  }
  flush();
}

TEST(ConvertVector, FloatToF16AndBF16MatchScalarOverSweep) {
  const auto isa = kernels::cpu::convert_isa();
  if (!isa.f16c && !isa.avx512_bf16) GTEST_SKIP() << "this CPU has neither F16C nor AVX512-BF16";
  size_t total = 0, f16_bad = 0, bf16_bad = 0;
  for_each_float_batch(37, [&](const std::vector<float>& batch) {
    total += batch.size();
    if (isa.f16c) f16_bad += vector_scalar_mismatches<f16>(batch, "float->f16");
    if (isa.avx512_bf16) bf16_bad += vector_scalar_mismatches<bf16>(batch, "float->bf16");
  });
  EXPECT_GT(total, size_t(100) << 20);
  EXPECT_EQ(f16_bad, 0u);
  EXPECT_EQ(bf16_bad, 0u);
}

TEST(ConvertVector, NarrowToFloatMatchesScalarForEveryCode) {
  if (!any_vector_path()) GTEST_SKIP() << "no vector conversion path on this CPU";
  std::vector<f16> h(1 << 18);  // every code four times: above the parallel threshold
  std::vector<bf16> b(1 << 18);
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = f16::from_bits(static_cast<uint16_t>(i));
    b[i] = bf16::from_bits(static_cast<uint16_t>(i * 7));
  }
  EXPECT_EQ((vector_scalar_mismatches<float>(h, "f16->float")), 0u);
  EXPECT_EQ((vector_scalar_mismatches<float>(b, "bf16->float")), 0u);
}

TEST(ConvertVector, TailsAndUnalignedStarts) {
  if (!any_vector_path()) GTEST_SKIP() << "no vector conversion path on this CPU";
  std::mt19937 rng(7);
  std::vector<float> f(80);
  const std::vector<float> specials = test::float_boundary_samples();
  for (size_t start = 0; start < 3; ++start) {
    for (size_t n = 0; n + start <= f.size(); ++n) {
      for (size_t i = 0; i < f.size(); ++i) {
        f[i] = (i % 3 == 0) ? specials[rng() % specials.size()] : std::bit_cast<float>(static_cast<uint32_t>(rng()));
      }
      const std::vector<float> src(f.begin() + start, f.begin() + start + n);
      // Guard elements after the end must stay untouched (masked AVX-512 stores).
      std::vector<f16> h(n + 4, f16::from_bits(0xABCD));
      std::vector<bf16> b(n + 4, bf16::from_bits(0xABCD));
      convert(src.data(), h.data(), n);
      convert(src.data(), b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(h[i].bits, float_to_f16_bits(src[i])) << "n=" << n << " i=" << i;
        ASSERT_EQ(b[i].bits, float_to_bf16_bits(src[i])) << "n=" << n << " i=" << i;
      }
      for (size_t i = n; i < n + 4; ++i) ASSERT_TRUE(h[i].bits == 0xABCD && b[i].bits == 0xABCD) << "n=" << n;
      std::vector<float> back(n + 4, 1.5f);
      convert(h.data(), back.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(back[i]), bits_of(f16_bits_to_float(h[i].bits)));
      convert(b.data(), back.data(), n);
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(bits_of(back[i]), bits_of(bf16_bits_to_float(b[i].bits)));
      ASSERT_EQ(back[n], 1.5f);
    }
  }
}

constexpr Fp8Saturation kBothModes[] = {Fp8Saturation::Saturate, Fp8Saturation::NoSaturate};

TEST(ConvertVector, FloatToFp8MatchesScalarOverSweep) {
  if (!kernels::cpu::convert_isa().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  size_t total = 0, bad = 0;
  for_each_float_batch(37, [&](const std::vector<float>& batch) {
    total += batch.size();
    for (Fp8Saturation sat : kBothModes) {
      bad += vector_scalar_mismatches<f8e4m3>(batch, "float->e4m3", sat);
      bad += vector_scalar_mismatches<f8e5m2>(batch, "float->e5m2", sat);
    }
  });
  EXPECT_GT(total, size_t(100) << 20);
  EXPECT_EQ(bad, 0u);
}

// Exact ties, their neighbours, every representable value, overflow thresholds (464 and 480 for E4M3,
// 61440 for E5M2), the smallest subnormal and its half, infinities and NaNs with several payloads.
TEST(ConvertVector, FloatToFp8MatchesScalarAndReferenceOnTiesAndSpecials) {
  if (!kernels::cpu::convert_isa().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<float> src = test::float_boundary_samples();
  for (test::RefFormat f : {test::RefFormat::E4M3, test::RefFormat::E5M2}) {
    const std::vector<float> s = test::ref_float_samples(f);
    src.insert(src.end(), s.begin(), s.end());
  }
  for (Fp8Saturation sat : kBothModes) {
    EXPECT_EQ((vector_scalar_mismatches<f8e4m3>(src, "float->e4m3", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e5m2>(src, "float->e5m2", sat)), 0u);
    // And the vector path alone against the independent long double reference.
    std::vector<f8e4m3> q4(src.size());
    std::vector<f8e5m2> q5(src.size());
    convert(src.data(), q4.data(), src.size(), sat);
    convert(src.data(), q5.data(), src.size(), sat);
    const bool saturate = sat == Fp8Saturation::Saturate;
    size_t bad = 0;
    for (size_t i = 0; i < src.size(); ++i) {
      bad += q4[i].bits != test::ref_encode(test::RefFormat::E4M3, src[i], saturate);
      bad += q5[i].bits != test::ref_encode(test::RefFormat::E5M2, src[i], saturate);
    }
    EXPECT_EQ(bad, 0u) << "saturate=" << saturate;
  }
}

TEST(ConvertVector, SixteenBitToFp8MatchesScalarForEveryCode) {
  if (!kernels::cpu::convert_isa().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::vector<f16> h(1 << 18);  // every code four times: above the parallel threshold
  std::vector<bf16> b(1 << 18);
  for (size_t i = 0; i < h.size(); ++i) {
    h[i] = f16::from_bits(static_cast<uint16_t>(i));
    b[i] = bf16::from_bits(static_cast<uint16_t>(i * 7));
  }
  for (Fp8Saturation sat : kBothModes) {
    EXPECT_EQ((vector_scalar_mismatches<f8e4m3>(h, "f16->e4m3", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e5m2>(h, "f16->e5m2", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e4m3>(b, "bf16->e4m3", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e5m2>(b, "bf16->e5m2", sat)), 0u);
  }
}

// The decode tables against the scalar path, every code in every position of a long array.
template <class Src>
void expect_fp8_tables_match_scalar() {
  std::vector<Src> q(1 << 17);
  for (size_t i = 0; i < q.size(); ++i) q[i] = Src::from_bits(static_cast<uint8_t>(i * 13 + (i >> 8)));
  for (Fp8Saturation sat : kBothModes) {
    EXPECT_EQ((vector_scalar_mismatches<float>(q, "fp8->float", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<double>(q, "fp8->double", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f16>(q, "fp8->f16", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<bf16>(q, "fp8->bf16", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e4m3>(q, "fp8->e4m3", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<f8e5m2>(q, "fp8->e5m2", sat)), 0u);
    EXPECT_EQ((vector_scalar_mismatches<int32_t>(q, "fp8->int32", sat)), 0u);
  }
}

TEST(ConvertVector, Fp8DecodeTablesMatchScalarForEveryCode) {
  expect_fp8_tables_match_scalar<f8e4m3>();
  expect_fp8_tables_match_scalar<f8e5m2>();
  // E5M2 -> E4M3 overflows beyond 448: the two modes must differ there (the table is per mode).
  const f8e5m2 big = f8e5m2::from_bits(0x78);  // 32768
  f8e4m3 sat{}, nosat{};
  convert(&big, &sat, 1, Fp8Saturation::Saturate);
  convert(&big, &nosat, 1, Fp8Saturation::NoSaturate);
  EXPECT_EQ(sat.bits, 0x7E);
  EXPECT_EQ(nosat.bits, 0x7F);
}

TEST(ConvertVector, Fp8TailsUnalignedStartsAndGuards) {
  if (!kernels::cpu::convert_isa().avx512) GTEST_SKIP() << "this CPU has no AVX-512";
  std::mt19937 rng(11);
  const std::vector<float> specials = test::ref_float_samples(test::RefFormat::E4M3);
  std::vector<float> f(70);
  for (size_t start = 0; start < 3; ++start) {
    for (size_t n = 0; n + start <= f.size(); ++n) {
      for (size_t i = 0; i < f.size(); ++i) f[i] = specials[rng() % specials.size()];
      const std::vector<float> src(f.begin() + start, f.begin() + start + n);
      std::vector<bf16> b(n);
      for (size_t i = 0; i < n; ++i) b[i] = bf16::from_bits(static_cast<uint16_t>(rng()));
      for (Fp8Saturation sat : kBothModes) {
        std::vector<f8e4m3> q4(n + 3, f8e4m3::from_bits(0xAB));
        std::vector<f8e5m2> q5(n + 3, f8e5m2::from_bits(0xAB));
        convert(src.data(), q4.data(), n, sat);
        convert(b.data(), q5.data(), n, sat);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(q4[i].bits, float_to_e4m3_bits(src[i], sat)) << "n=" << n << " i=" << i;
          ASSERT_EQ(q5[i].bits, float_to_e5m2_bits(static_cast<float>(b[i]), sat)) << "n=" << n << " i=" << i;
        }
        for (size_t i = n; i < n + 3; ++i) ASSERT_TRUE(q4[i].bits == 0xAB && q5[i].bits == 0xAB) << "n=" << n;
        // And back: fp8 -> bf16 / f16 (32-lane table lookups) from an unaligned start, guards untouched.
        std::vector<bf16> back(n + 3, bf16::from_bits(0xABCD));
        std::vector<f16> back16(n + 3, f16::from_bits(0xABCD));
        convert(q4.data(), back.data(), n, sat);
        convert(q5.data(), back16.data(), n, sat);
        for (size_t i = 0; i < n; ++i) {
          ASSERT_EQ(back[i].bits, scalar_cast<bf16>(q4[i], sat).bits) << "n=" << n << " i=" << i;
          ASSERT_EQ(back16[i].bits, scalar_cast<f16>(q5[i], sat).bits) << "n=" << n << " i=" << i;
        }
        for (size_t i = n; i < n + 3; ++i) ASSERT_TRUE(back[i].bits == 0xABCD && back16[i].bits == 0xABCD);
      }
    }
  }
}

TEST(ConvertVector, ScalarSwitch) {
  set_vector_conversions(false);
  EXPECT_FALSE(kernels::cpu::vector_conversions_enabled());
  set_vector_conversions(true);
  EXPECT_TRUE(kernels::cpu::vector_conversions_enabled());
}

}  // namespace
}  // namespace mpt
