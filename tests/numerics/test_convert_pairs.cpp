// tests/numerics/test_convert_pairs.cpp: kernels::cpu::convert for all 100 type pairs against exact long double expectations.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/math/numerics.h"
#include "numerics_reference.h"

namespace mpt {
namespace {

using test::RefFormat;

template <class... Ts>
struct TypeList {};
using AllTypes = TypeList<float, double, f16, bf16, f8e4m3, f8e5m2, int32_t, int64_t, uint8_t, uint16_t>;

template <class T>
std::string type_name() {
  if constexpr (std::is_same_v<T, float>) return "float";
  else if constexpr (std::is_same_v<T, double>) return "double";
  else if constexpr (std::is_same_v<T, f16>) return "f16";
  else if constexpr (std::is_same_v<T, bf16>) return "bf16";
  else if constexpr (std::is_same_v<T, f8e4m3>) return "f8e4m3";
  else if constexpr (std::is_same_v<T, f8e5m2>) return "f8e5m2";
  else return (std::is_signed_v<T> ? "int" : "uint") + std::to_string(sizeof(T) * 8);
}

template <class T>
constexpr RefFormat format_of() {
  if constexpr (std::is_same_v<T, f16>) return RefFormat::F16;
  else if constexpr (std::is_same_v<T, bf16>) return RefFormat::BF16;
  else if constexpr (std::is_same_v<T, f8e4m3>) return RefFormat::E4M3;
  else return RefFormat::E5M2;
}

template <class T>
uint64_t bits_of(T v) {
  uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}

// Source values with their exact values (NaN where the source is NaN).
template <class T>
struct Samples {
  std::vector<T> values;
  std::vector<long double> exact;
  void add(T v, long double e) {
    values.push_back(v);
    exact.push_back(e);
  }
};

template <class T>
Samples<T> make_samples() {
  Samples<T> s;
  std::mt19937_64 rng(42);
  if constexpr (is_narrow_float_v<T>) {
    const uint32_t codes = test::ref_code_count(format_of<T>());
    for (uint32_t c = 0; c < codes; c += codes > 256 ? 7 : 1) {
      T v;
      if constexpr (sizeof(T) == 2) v = T::from_bits(static_cast<uint16_t>(c));
      else v = T::from_bits(static_cast<uint8_t>(c));
      s.add(v, test::ref_decode(format_of<T>(), c));
    }
  } else if constexpr (std::is_floating_point_v<T>) {
    std::vector<long double> picks = {0.5L, 1.5L, 2.5L, 0.999L, 127.5L, 255.5L, 256.0L, 65535.5L, 65536.0L,
                                      0x1.FFFFFEp30L, 0x1p31L, 0x1.000002p31L, 0x1p32L, 0x1p53L, 0x1p63L, 0x1p64L, 1e20L,
                                      464.0L, 61440.0L, 65520.0L, 1e-3L, 0x1p-24L, 0x1p-133L};
    for (long double p : picks) {
      s.add(static_cast<T>(p), static_cast<long double>(static_cast<T>(p)));
      s.add(static_cast<T>(-p), static_cast<long double>(static_cast<T>(-p)));
    }
    for (float f : test::float_boundary_samples()) s.add(static_cast<T>(f), static_cast<long double>(f));
    for (double d : test::ref_double_samples(RefFormat::E4M3)) {
      s.add(static_cast<T>(d), static_cast<long double>(static_cast<T>(d)));
    }
    for (int i = 0; i < 2000; ++i) {
      const T v = static_cast<T>(std::ldexp(static_cast<double>(static_cast<int64_t>(rng())), -static_cast<int>(rng() % 90)));
      s.add(v, static_cast<long double>(v));
    }
  } else {
    using Wide = std::conditional_t<std::is_signed_v<T>, int64_t, uint64_t>;
    std::vector<Wide> picks = {0, 1, 2, 3, 127, 128, 255, 256, 257, 1000003, 65535, 65536, 65519, 65520,
                               (Wide(1) << 24) + 1, (Wide(1) << 31) - 1, (Wide(1) << 53) + 1,
                               (Wide(1) << 60) + (Wide(1) << 52) + 1, std::numeric_limits<Wide>::max()};
    if constexpr (std::is_signed_v<T>) {
      const size_t n = picks.size();
      for (size_t i = 0; i < n; ++i) picks.push_back(-picks[i]);
      picks.push_back(std::numeric_limits<int64_t>::min());
    }
    for (int i = 0; i < 2000; ++i) picks.push_back(static_cast<Wide>(rng() >> (rng() % 64)));
    for (Wide w : picks) {
      if (w < static_cast<Wide>(std::numeric_limits<T>::min()) || w > static_cast<Wide>(std::numeric_limits<T>::max())) {
        continue;
      }
      s.add(static_cast<T>(w), static_cast<long double>(w));  // exact: long double has 64 significant bits
    }
  }
  return s;
}

template <class Dst, class Src>
uint64_t expected_bits(long double v, Fp8Saturation sat) {
  if constexpr (is_narrow_float_v<Dst>) {
    constexpr bool kFp8 = std::is_same_v<Dst, f8e4m3> || std::is_same_v<Dst, f8e5m2>;
    return test::ref_encode(format_of<Dst>(), v, kFp8 && sat == Fp8Saturation::Saturate);
  } else if constexpr (std::is_floating_point_v<Dst>) {
    return bits_of(static_cast<Dst>(v));  // one hardware rounding from the exact value
  } else if constexpr (std::is_integral_v<Src>) {
    // Integer -> integer: reduce modulo 2^bits into the destination's range.
    const __int128 mod = static_cast<__int128>(1) << (sizeof(Dst) * 8);
    __int128 r = static_cast<__int128>(v) % mod;
    if (r < 0) r += mod;
    if (std::is_signed_v<Dst> && r >= mod / 2) r -= mod;
    return bits_of(static_cast<Dst>(static_cast<int64_t>(r)));
  } else {
    // Floating -> integer: truncate toward zero, saturate, NaN -> 0.
    if (std::isnan(v)) return 0;
    const long double t = std::trunc(v);
    if (t >= static_cast<long double>(std::numeric_limits<Dst>::max())) return bits_of(std::numeric_limits<Dst>::max());
    if (t <= static_cast<long double>(std::numeric_limits<Dst>::min())) return bits_of(std::numeric_limits<Dst>::min());
    return bits_of(static_cast<Dst>(static_cast<int64_t>(t)));
  }
}

template <class Dst, class Src>
void check_pair(const Samples<Src>& s, Fp8Saturation sat) {
  std::vector<Dst> out(s.values.size());
  kernels::cpu::convert(s.values.data(), out.data(), out.size(), sat);
  int bad = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const long double v = s.exact[i];
    const uint64_t got = bits_of(out[i]);
    bool ok;
    if constexpr (std::is_same_v<Dst, Src>) {
      ok = got == bits_of(s.values[i]);  // a plain copy, NaN payloads included
    } else if constexpr (std::is_floating_point_v<Dst>) {
      ok = std::isnan(v) ? std::isnan(out[i]) : got == expected_bits<Dst, Src>(v, sat);
    } else {
      ok = got == expected_bits<Dst, Src>(v, sat);
    }
    if (!ok && ++bad <= 5) {
      ADD_FAILURE() << type_name<Src>() << " -> " << type_name<Dst>()
                    << (sat == Fp8Saturation::Saturate ? " (saturate)" : " (no saturate)") << ": source bits 0x"
                    << std::hex << bits_of(s.values[i]) << " value " << std::hexfloat << static_cast<double>(v)
                    << " gave 0x" << got << ", expected 0x" << expected_bits<Dst, Src>(v, sat);
    }
  }
}

template <class Src, class... Dsts>
void check_all_destinations(TypeList<Dsts...>) {
  const Samples<Src> s = make_samples<Src>();
  ASSERT_GT(s.values.size(), 200u) << type_name<Src>();
  for (Fp8Saturation sat : {Fp8Saturation::Saturate, Fp8Saturation::NoSaturate}) (check_pair<Dsts, Src>(s, sat), ...);
}

template <class... Srcs>
void check_all_pairs(TypeList<Srcs...> all) {
  (check_all_destinations<Srcs>(all), ...);
}

TEST(ConvertPairs, EveryPairFollowsTheRules) {
  check_all_pairs(AllTypes{});
  kernels::cpu::set_vector_conversions(false);
  check_all_pairs(AllTypes{});
  kernels::cpu::set_vector_conversions(true);
}

// A large array goes through the OpenMP path; every element must still match the reference.
TEST(ConvertPairs, LargeArraysUseThreadsAndStayExact) {
  std::mt19937_64 rng(3);
  std::vector<double> src(300001);
  for (double& d : src) d = std::ldexp(static_cast<double>(static_cast<int64_t>(rng())), -60 - static_cast<int>(rng() % 40));
  std::vector<f8e4m3> e4(src.size());
  std::vector<bf16> b(src.size());
  kernels::cpu::convert(src.data(), e4.data(), src.size(), Fp8Saturation::NoSaturate);
  kernels::cpu::convert(src.data(), b.data(), src.size());
  size_t bad = 0;
  for (size_t i = 0; i < src.size(); ++i) {
    bad += e4[i].bits != test::ref_encode(RefFormat::E4M3, src[i], false);
    bad += b[i].bits != test::ref_encode(RefFormat::BF16, src[i], false);
  }
  EXPECT_EQ(bad, 0u);
}

}  // namespace
}  // namespace mpt
