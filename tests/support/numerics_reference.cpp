// tests/support/numerics_reference.cpp: value-level (frexp/ldexp/floor) rounding reference for f16, bf16 and OCP FP8.
#include "numerics_reference.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

namespace mpt::test {

RefFormatInfo ref_info(RefFormat f) {
  switch (f) {
    case RefFormat::F16: return {5, 10, true, 65504.0L, std::ldexp(1.0L, -24), "f16"};
    case RefFormat::BF16: return {8, 7, true, std::ldexp(255.0L, 120), std::ldexp(1.0L, -133), "bf16"};
    case RefFormat::E4M3: return {4, 3, false, 448.0L, std::ldexp(1.0L, -9), "e4m3"};
    case RefFormat::E5M2: return {5, 2, true, 57344.0L, std::ldexp(1.0L, -16), "e5m2"};
  }
  return {};
}

uint32_t ref_code_count(RefFormat f) {
  const RefFormatInfo info = ref_info(f);
  return 1u << (1 + info.exp_bits + info.man_bits);
}

namespace {

struct Layout {
  int bias;
  int emin;       // exponent of the smallest normal value
  int precision;  // significant bits including the implicit one
  uint32_t sign_bit;
  uint32_t nan_code;
  uint32_t inf_code;  // only when has_inf
};

Layout layout(const RefFormatInfo& info) {
  Layout l;
  l.bias = (1 << (info.exp_bits - 1)) - 1;
  l.emin = 1 - l.bias;
  l.precision = info.man_bits + 1;
  l.sign_bit = 1u << (info.exp_bits + info.man_bits);
  l.nan_code = l.sign_bit - 1;  // all ones below the sign: 0x7FFF and 0x7F
  l.inf_code = ((1u << info.exp_bits) - 1) << info.man_bits;
  return l;
}

// Encodes a value that is known to be representable (0 < v <= max_finite).
uint32_t encode_exact(const RefFormatInfo& info, const Layout& l, long double v) {
  int e = 0;
  std::frexp(v, &e);  // v = m * 2^e, m in [0.5, 1): the leading bit has weight 2^(e-1)
  const int lead = e - 1;
  if (lead < l.emin) {
    const long double steps = std::ldexp(v, -(l.emin - info.man_bits));  // multiple of the subnormal step
    return static_cast<uint32_t>(steps);
  }
  const long double frac = std::ldexp(v, -lead) - 1.0L;  // in [0, 1)
  const auto man = static_cast<uint32_t>(std::ldexp(frac, info.man_bits));
  return (static_cast<uint32_t>(lead + l.bias) << info.man_bits) | man;
}

}  // namespace

uint32_t ref_encode(RefFormat f, long double x, bool saturate) {
  const RefFormatInfo info = ref_info(f);
  const Layout l = layout(info);
  if (std::isnan(x)) return l.nan_code;
  const uint32_t sign = std::signbit(x) ? l.sign_bit : 0u;
  const long double a = std::fabs(x);
  const auto overflow = [&]() -> uint32_t {
    if (saturate) return sign | encode_exact(info, l, info.max_finite);
    return sign | (info.has_inf ? l.inf_code : l.nan_code);
  };
  if (std::isinf(a)) return overflow();
  if (a == 0.0L) return sign;

  // The spacing of representable values around a: 2^(max(lead, emin) - (precision - 1)), with an
  // unbounded exponent above the range so that overflow is decided after rounding.
  int e = 0;
  std::frexp(a, &e);
  const int lead = std::max(e - 1, l.emin);
  const int quantum_exp = lead - (l.precision - 1);
  const long double scaled = std::ldexp(a, -quantum_exp);  // exact: a power-of-two scaling
  long double below = std::floor(scaled);
  const long double remainder = scaled - below;  // exact
  bool up = false;
  if (remainder > 0.5L) {
    up = true;
  } else if (remainder == 0.5L) {
    up = std::fmod(below, 2.0L) != 0.0L;  // tie: go to the even neighbour
  }
  if (up) below += 1.0L;
  const long double rounded = std::ldexp(below, quantum_exp);
  if (rounded > info.max_finite) return overflow();
  if (rounded == 0.0L) return sign;
  return sign | encode_exact(info, l, rounded);
}

bool ref_is_nan(RefFormat f, uint32_t bits) {
  const RefFormatInfo info = ref_info(f);
  const Layout l = layout(info);
  const uint32_t mag = bits & (l.sign_bit - 1);
  if (info.has_inf) return mag > l.inf_code;
  return mag == l.nan_code;
}

long double ref_decode(RefFormat f, uint32_t bits) {
  const RefFormatInfo info = ref_info(f);
  const Layout l = layout(info);
  if (ref_is_nan(f, bits)) return std::numeric_limits<long double>::quiet_NaN();
  const bool negative = (bits & l.sign_bit) != 0;
  const uint32_t mag = bits & (l.sign_bit - 1);
  long double v;
  if (info.has_inf && mag == l.inf_code) {
    v = std::numeric_limits<long double>::infinity();
  } else {
    const uint32_t exp_field = mag >> info.man_bits;
    const uint32_t man = mag & ((1u << info.man_bits) - 1);
    if (exp_field == 0) {
      v = std::ldexp(static_cast<long double>(man), l.emin - info.man_bits);
    } else {
      const long double significand = 1.0L + std::ldexp(static_cast<long double>(man), -info.man_bits);
      v = std::ldexp(significand, static_cast<int>(exp_field) - l.bias);
    }
  }
  return negative ? -v : v;
}

namespace {

std::vector<long double> representable_magnitudes(RefFormat f) {
  std::vector<long double> out;
  const uint32_t half = ref_code_count(f) / 2;
  for (uint32_t c = 0; c < half; ++c) {
    if (ref_is_nan(f, c)) continue;
    const long double v = ref_decode(f, c);
    if (!std::isinf(v)) out.push_back(v);
  }
  return out;  // ascending: codes of one sign are ordered like their values
}

template <class T>
void push_with_neighbours(std::vector<T>& out, T v, int ulps) {
  out.push_back(v);
  T up = v, down = v;
  for (int i = 0; i < ulps; ++i) {
    up = std::nextafter(up, std::numeric_limits<T>::infinity());
    down = std::nextafter(down, -std::numeric_limits<T>::infinity());
    out.push_back(up);
    out.push_back(down);
  }
}

template <class T>
void add_specials_and_mirror(std::vector<T>& out) {
  constexpr T kInf = std::numeric_limits<T>::infinity();
  out.push_back(0);
  out.push_back(kInf);
  out.push_back(std::numeric_limits<T>::max());
  out.push_back(std::numeric_limits<T>::denorm_min());
  out.push_back(std::numeric_limits<T>::min());
  const size_t n = out.size();
  for (size_t i = 0; i < n; ++i) out.push_back(-out[i]);
  // NaNs: quiet, signalling, all-ones payload, both signs.
  if constexpr (sizeof(T) == 4) {
    for (uint32_t bits : {0x7FC00000u, 0x7F800001u, 0x7FBFFFFFu, 0x7FFFFFFFu, 0xFFC00000u, 0xFF800001u, 0xFFFFFFFFu,
                          0x7FC00001u, 0x7FE00000u}) {
      out.push_back(std::bit_cast<float>(bits));
    }
  } else {
    for (uint64_t bits : {0x7FF8000000000000ull, 0x7FF0000000000001ull, 0x7FFFFFFFFFFFFFFFull, 0xFFF8000000000000ull,
                          0x7FF4000000000000ull, 0x7FFC000000000000ull, 0xFFF0000000000001ull}) {
      out.push_back(std::bit_cast<double>(bits));
    }
  }
}

template <class T>
std::vector<T> format_samples(RefFormat f, bool double_traps) {
  const std::vector<long double> values = representable_magnitudes(f);
  const RefFormatInfo info = ref_info(f);
  std::vector<T> out;
  for (size_t i = 0; i < values.size(); ++i) {
    push_with_neighbours(out, static_cast<T>(values[i]), 1);
    // The midpoint to the next value; beyond the largest finite value the "next" value is the
    // first power of two past the range (max + one ulp), which makes the overflow threshold.
    const long double next = i + 1 < values.size() ? values[i + 1] : values[i] + (values[i] - values[i - 1]);
    const long double mid = (values[i] + next) / 2;
    if (mid > static_cast<long double>(std::numeric_limits<T>::max())) continue;
    const T tie = static_cast<T>(mid);  // exact: midpoints need one more bit than the format
    push_with_neighbours(out, tie, 2);
    if (double_traps && mid != 0) {
      // Nudges that a double->float rounding erases, turning the value back into an exact tie.
      for (int k : {30, 40, 52}) {
        out.push_back(static_cast<T>(mid + std::ldexp(mid, -k)));
        out.push_back(static_cast<T>(mid - std::ldexp(mid, -k)));
      }
    }
  }
  out.push_back(static_cast<T>(info.min_subnormal / 2));
  out.push_back(static_cast<T>(info.min_subnormal / 4));
  out.push_back(static_cast<T>(info.max_finite * 2));
  out.push_back(static_cast<T>(info.max_finite * 1024));
  add_specials_and_mirror(out);
  return out;
}

}  // namespace

std::vector<float> ref_float_samples(RefFormat f) { return format_samples<float>(f, false); }
std::vector<double> ref_double_samples(RefFormat f) { return format_samples<double>(f, true); }

std::vector<float> float_boundary_samples() {
  std::vector<float> out;
  for (int e = -149; e <= 127; ++e) push_with_neighbours(out, std::ldexp(1.0f, e), 3);
  add_specials_and_mirror(out);
  return out;
}

}  // namespace mpt::test
