// kernels/math/exp.h: exp in float as pure arithmetic (vectorises on the CPU, same expression on CUDA); f64 exp and log via libm.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/numerics_rounding.h"

namespace mpt::kernels::math {

// Cephes's expf: x = n ln2 + r with |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact), exp(r) by a degree-7
// polynomial in explicit fused multiply-adds (fma_op: the same bits on every CPU path and on CUDA), times 2^n
// built from exponent bits. Within 1.0104 ulp of exp over every float in [-87.33, 88.72] (all 2.2e9 checked once
// against float64; tests/numerics/test_exp.cpp sweeps a strided subset and the edges, including the worst case).
// Results below FLT_MIN flush to +0 (expf would give subnormals below 1.2e-38), exp(-inf) = 0, exp(+inf) and
// x > ln(FLT_MAX) give +inf, NaN stays NaN.
// Softmax, cross-entropy and attention call it on x - max <= 0, where only the flush can differ from expf.
// glibc's expf does not vectorise; this does, so the CPU's softmax-like rows run at memory speed.
MPT_HD MPT_INLINE float exp_op(float x) {
  const float lo = -87.3365478515625f, hi = 88.72283172607421875f;  // just below ln(FLT_MIN); ln(FLT_MAX) rounded down
  float xc = x < lo ? lo : x;  // selects, not fminf/fmaxf: GCC vectorises these; a NaN is replaced at the end
  xc = xc > hi ? hi : xc;
  const float fn = floorf(fma_op(xc, 1.44269504088896341f, 0.5f));  // n in [-126, 128]
  const float r = fma_op(fn, 2.12194440e-4f, fma_op(fn, -0.693359375f, xc));
  float p = 1.9875691500e-4f;
  p = fma_op(p, r, 1.3981999507e-3f);
  p = fma_op(p, r, 8.3334519073e-3f);
  p = fma_op(p, r, 4.1665795894e-2f);
  p = fma_op(p, r, 1.6666665459e-1f);
  p = fma_op(p, r, 5.0000001201e-1f);
  const float y = fma_op(p, r * r, r) + 1.0f;
  // 2^128 is not a float, so n = 128 is applied as 2 * 2^127 (the doubling is exact).
  const float twice = fn > 127.0f ? 2.0f : 1.0f;
  const float scale = numerics_detail::bit_cast<float>((static_cast<int32_t>(fn > 127.0f ? 127.0f : fn) + 127) << 23);
  float e = (y * twice) * scale;
  e = x < lo ? 0.0f : e;
  e = x > hi ? INFINITY : e;
  return x != x ? x : e;
}

// exp in double (the CPU's float64 reference path) and log in either precision (row statistics, once per row):
// the libm / CUDA math functions.
MPT_HD MPT_INLINE double exp_op(double x) {
#if defined(__CUDA_ARCH__)
  return ::exp(x);
#else
  return std::exp(x);
#endif
}

template <class F>
MPT_HD MPT_INLINE F log_op(F x) {
#if defined(__CUDA_ARCH__)
  return ::log(x);
#else
  return std::log(x);
#endif
}

}  // namespace mpt::kernels::math
