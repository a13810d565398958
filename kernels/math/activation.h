// kernels/math/activation.h: GELU (tanh approximation) and its derivative, written once for CPU and CUDA.
#pragma once

#include <cmath>

#include "kernels/math/common.h"

namespace mpt::kernels::math {

// tanh in float: Eigen's rational approximation (odd degree-13 / even degree-6 polynomials, clamped at +-7.9988),
// max error 4.9 ulp (2.9e-7 absolute) against float64 tanh (every third float checked). Pure arithmetic in explicit fused
// multiply-adds, so the CPU loop vectorises (glibc's tanhf does not) and CPU and CUDA compute the same bits.
MPT_HD MPT_INLINE float tanh_op(float x) {
  const float c = 7.99881172180175781f;
  const float xc = x > c ? c : (x < -c ? -c : x);
  const float x2 = xc * xc;
  float p = -2.76076847742355e-16f;
  p = fma_op(p, x2, 2.00018790482477e-13f);
  p = fma_op(p, x2, -8.60467152213735e-11f);
  p = fma_op(p, x2, 5.12229709037114e-08f);
  p = fma_op(p, x2, 1.48572235717979e-05f);
  p = fma_op(p, x2, 6.37261928875436e-04f);
  p = fma_op(p, x2, 4.89352455891786e-03f);
  p = p * xc;
  float q = 1.19825839466702e-06f;
  q = fma_op(q, x2, 1.18534705686654e-04f);
  q = fma_op(q, x2, 2.26843463243900e-03f);
  q = fma_op(q, x2, 4.89352518554385e-03f);
  const float r = p / q;
  return (x < 0.0004f && x > -0.0004f) ? x : r;  // tanh(x) == x to float precision; keeps -0 and tiny x exact
}

// The f64 reference path uses the correctly rounded libm tanh.
MPT_HD MPT_INLINE double tanh_op(double x) {
#if defined(__CUDA_ARCH__)
  return ::tanh(x);
#else
  return std::tanh(x);
#endif
}

// sqrt(2/pi) (x + 0.044715 x^3), the argument of GELU's tanh, with one fused multiply-add.
template <class F>
MPT_HD MPT_INLINE F gelu_inner(F x) {
  const F k = F(0.7978845608028654), c = F(0.044715);
  return k * fma_op(c * x * x, x, x);
}

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2's and cuBLASLt's GELU epilogue); the
// multiply-adds are explicit fma_op, so every CPU path and CUDA compute the same bits.
struct GeluForward {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    const F h = F(0.5) * x;
    return fma_op(h, tanh_op(gelu_inner(x)), h);
  }
};

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(inner)
struct GeluGrad {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    const F k = F(0.7978845608028654), c3 = F(3 * 0.044715);
    const F t = tanh_op(gelu_inner(x));
    const F slope = F(0.5) * x * fma_op(-t, t, F(1)) * k;  // 0.5 x (1 - t^2) sqrt(2/pi)
    return fma_op(slope, fma_op(c3 * x, x, F(1)), fma_op(F(0.5), t, F(0.5)));
  }
};

// dx = dy * gelu'(x)
struct GeluBackward {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F dy, F x) const {
    return dy * GeluGrad{}(x);
  }
};

}  // namespace mpt::kernels::math
