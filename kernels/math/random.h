// kernels/math/random.h: uniform and normal numbers from Philox words, bit-identical on CPU and GPU.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/math/common.h"
#include "kernels/math/rounded.h"
#include "kernels/math/philox.h"

// Bit-identity between host and device. Integer -> float conversions, +, -, *, /, sqrt and fmaf are
// correctly rounded (IEEE round-to-nearest-even) on both sides, so a computation built only from them
// gives the same bits everywhere, provided no compiler fuses a separate `a * b` and `+ c` into an FMA
// (nvcc does so by default; g++ may with -ffp-contract=fast and FMA hardware). Therefore:
//   * every multiply-add is an explicit fmaf;
//   * no product is ever an operand of an addition or subtraction (products feed only fmaf operands,
//     other products, sqrt or the result), so there is nothing left to contract; the only plain `*`
//     are scalings by powers of two, which are exact;
//   * device code uses the explicitly rounded intrinsics (__fmul_rn, __fadd_rn, __fdiv_rn, __fsqrt_rn),
//     which keep their rounding under --use_fast_math (no subnormals arise for ordinary mean/std).
// Checked on the host: g++ -O3 -march=native -ffp-contract=fast gives the same fills as -O2.
// The transcendental functions (log, sin, cos) are our own, written in those operations only:
// libm and CUDA's logf/sinf differ in their last bits. Accuracy (measured exhaustively over every input
// the fills can produce, in tests/kernels/test_random.cpp, against double-precision std::log/sin/cos):
// log within 0.76 ulp, sin/cos of 2*pi*k/2^24 within 1.02 ulp (the final rounding plus the rounding of
// pi^2/2 and y^2 in cos(pi y) near |y| = 1/4).
namespace mpt::kernels::math {

namespace rng_detail {

// mul_rn, add_rn, sub_rn, div_rn and sqrt_rn: kernels/math/rounded.h.

MPT_HD MPT_INLINE float fma_rn(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}

MPT_HD MPT_INLINE uint32_t float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}

MPT_HD MPT_INLINE float bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace rng_detail

// [0, 1) on the grid k * 2^-24 (the top 24 bits of x). Half-open like torch.rand and numpy's
// random(): a uniform(low, high) fill excludes high, `u < p` holds with probability exactly p for p on
// the grid (dropout), and every value is exact in float, so the conversion is identical everywhere.
MPT_HD MPT_INLINE float uint32_to_uniform01(uint32_t x) {
  return static_cast<float>(x >> 8) * 0x1p-24f;
}

// (0, 1]: (x + 1) * 2^-32 rounded to float. Never 0, so log() is finite, and its full 32-bit
// resolution near 0 lets Box-Muller reach sqrt(-2 ln 2^-32) = 6.66 sigma instead of 5.77.
MPT_HD MPT_INLINE float uint32_to_uniform01_positive(uint32_t x) {
  return static_cast<float>(static_cast<uint64_t>(x) + 1u) * 0x1p-32f;
}

// Natural log of a positive normal float, fdlibm-style: u = 2^e * m with m in [sqrt(1/2), sqrt(2)),
// f = m - 1 (exact), s = f / (2 + f), ln(m) = f - f^2/2 + s * (f^2/2 + R(s^2)), where R is the
// atanh series 2/3 z + 2/5 z^2 + ... + 2/11 z^5 (z = s^2 <= 0.0295, truncation below 2^-32).
MPT_HD MPT_INLINE float log_rn(float u) {
  using namespace rng_detail;
  uint32_t bits = float_bits(u);
  int e = static_cast<int>(bits >> 23) - 127;
  uint32_t mant = bits & 0x007FFFFFu;
  if (mant > 0x3504F3u) {  // m > sqrt(2): use m / 2 and e + 1
    mant |= 0x3F000000u;
    e += 1;
  } else {
    mant |= 0x3F800000u;
  }
  const float f = sub_rn(bits_float(mant), 1.0f);
  const float s = div_rn(f, add_rn(2.0f, f));
  const float z = mul_rn(s, s);
  float p = fma_rn(z, 0x1.745d18p-3f, 0x1.c71c72p-3f);  // 2/11, 2/9
  p = fma_rn(z, p, 0x1.24924ap-2f);                     // 2/7
  p = fma_rn(z, p, 0x1.99999ap-2f);                     // 2/5
  p = fma_rn(z, p, 0x1.555556p-1f);                     // 2/3
  const float r = mul_rn(z, p);
  const float h = mul_rn(0.5f, f);  // exact; h * f = f^2 / 2
  const float dk = static_cast<float>(e);
  const float a = fma_rn(s, fma_rn(h, f, r), mul_rn(dk, 0x1.7f7d1cp-20f));  // s*(f^2/2+R) + e*ln2_lo
  const float b = sub_rn(fma_rn(h, f, -a), f);                               // (f^2/2 - a) - f
  return fma_rn(dk, 0x1.62e4p-1f, -b);                                       // e*ln2_hi - b
}

// sin(2 pi k / 2^24) and cos(2 pi k / 2^24) for k < 2^24 (a 24-bit angle word). The reduction is exact
// integer arithmetic: 2 pi k / 2^24 = q pi / 2 + pi y with q in 0..3 and y = j / 2^23, |y| <= 1/4.
// sin(pi y) and cos(pi y) are their Taylor series up to y^9 and y^10 (truncation below 3e-9 relative);
// pi itself is split into hi + lo so the leading term carries no coefficient rounding.
MPT_HD MPT_INLINE void sincos_2pi_u24(uint32_t k, float* sin_out, float* cos_out) {
  using namespace rng_detail;
  const uint32_t q = ((k + (1u << 21)) >> 22);
  const int32_t j = static_cast<int32_t>(k) - static_cast<int32_t>(q << 22);  // [-2^21, 2^21)
  const float y = static_cast<float>(j) * 0x1p-23f;                         // exact
  const float z = mul_rn(y, y);
  float ps = fma_rn(z, 0x1.507834p-4f, -0x1.32d2ccp-1f);  // pi^9/9!, -pi^7/7!
  ps = fma_rn(z, ps, 0x1.466bc6p+1f);                     // pi^5/5!
  ps = fma_rn(z, ps, -0x1.4abbcep+2f);                    // -pi^3/3!
  ps = fma_rn(z, ps, -0x1.777a5cp-24f);                   // pi_lo
  const float sn = fma_rn(y, 0x1.921fb6p+1f, mul_rn(y, ps));  // y * pi_hi + y * (pi_lo + ...)
  float pc = fma_rn(z, -0x1.a6d1f2p-6f, 0x1.e1f506p-3f);  // -pi^10/10!, pi^8/8!
  pc = fma_rn(z, pc, -0x1.55d3c8p+0f);                    // -pi^6/6!
  pc = fma_rn(z, pc, 0x1.03c1f0p+2f);                     // pi^4/4!
  pc = fma_rn(z, pc, -0x1.3bd3ccp+2f);                    // -pi^2/2!
  const float cs = fma_rn(z, pc, 1.0f);
  switch (q & 3u) {
    case 0: *sin_out = sn; *cos_out = cs; break;
    case 1: *sin_out = cs; *cos_out = -sn; break;
    case 2: *sin_out = -sn; *cos_out = -cs; break;
    default: *sin_out = -cs; *cos_out = sn; break;
  }
}

// Maps u in [0, 1) to [low, high). When rounding would reach high (possible when |low| >> high - low),
// the largest float below high is returned instead, so float results always stay in [low, high).
MPT_HD MPT_INLINE float uniform_from_unit(float u, float low, float high) {
  using namespace rng_detail;
  const float r = fma_rn(u, sub_rn(high, low), low);
  return (r < high || !(high > low)) ? r : nextafterf(high, low);
}

// Four uniform numbers in [low, high) from one Philox call: element i of a fill is word i % 4 of the
// call for counter offset + i / 4 (see philox_offset_increment).
MPT_HD MPT_INLINE void uniform4(uint64_t seed, uint64_t counter, float low, float high, float out[4]) {
  const Philox4x32 w = philox(seed, counter);
  out[0] = uniform_from_unit(uint32_to_uniform01(w.v[0]), low, high);
  out[1] = uniform_from_unit(uint32_to_uniform01(w.v[1]), low, high);
  out[2] = uniform_from_unit(uint32_to_uniform01(w.v[2]), low, high);
  out[3] = uniform_from_unit(uint32_to_uniform01(w.v[3]), low, high);
}

// Box-Muller on one pair of words: radius from w_r (via (0, 1]), angle from the top 24 bits of w_a.
// Returns mean + std * r * cos(theta) in *first and mean + std * r * sin(theta) in *second.
MPT_HD MPT_INLINE void box_muller(uint32_t w_r, uint32_t w_a, float mean, float std, float* first,
                                  float* second) {
  using namespace rng_detail;
  const float radius = sqrt_rn(mul_rn(-2.0f, log_rn(uint32_to_uniform01_positive(w_r))));
  float sn, cs;
  sincos_2pi_u24(w_a >> 8, &sn, &cs);
  *first = fma_rn(mul_rn(radius, cs), std, mean);
  *second = fma_rn(mul_rn(radius, sn), std, mean);
}

// Four normal numbers from one Philox call: pairs (w0, w1) and (w2, w3) give elements
// (cos, sin), (cos, sin) in that order.
MPT_HD MPT_INLINE void normal4(uint64_t seed, uint64_t counter, float mean, float std, float out[4]) {
  const Philox4x32 w = philox(seed, counter);
  box_muller(w.v[0], w.v[1], mean, std, &out[0], &out[1]);
  box_muller(w.v[2], w.v[3], mean, std, &out[2], &out[3]);
}

// Element i of a uniform fill started at `offset`: a pure function of (seed, offset, i).
MPT_HD MPT_INLINE float uniform_at(uint64_t seed, uint64_t offset, int64_t i, float low, float high) {
  const Philox4x32 w = philox(seed, offset + static_cast<uint64_t>(i) / 4u);
  return uniform_from_unit(uint32_to_uniform01(philox_word(w, static_cast<int>(i & 3))), low, high);
}

// Element i of a normal fill started at `offset`: a pure function of (seed, offset, i).
MPT_HD MPT_INLINE float normal_at(uint64_t seed, uint64_t offset, int64_t i, float mean, float std) {
  const Philox4x32 w = philox(seed, offset + static_cast<uint64_t>(i) / 4u);
  const int pair = static_cast<int>(i & 2);
  float first, second;
  box_muller(philox_word(w, pair), philox_word(w, pair + 1), mean, std, &first, &second);
  return (i & 1) ? second : first;
}

}  // namespace mpt::kernels::math
