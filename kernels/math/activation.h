// kernels/math/activation.h: GELU (tanh approximation) and its derivative, written once for CPU and CUDA.
#pragma once

#include <cmath>

#include "kernels/math/common.h"

namespace mpt::kernels::math {

template <class F>
MPT_HD MPT_INLINE F tanh_op(F x) {
#if defined(__CUDA_ARCH__)
  return ::tanh(x);
#else
  return std::tanh(x);
#endif
}

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))  (GPT-2's and cuBLASLt's GELU epilogue)
struct GeluForward {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    const F k = F(0.7978845608028654), c = F(0.044715);
    return F(0.5) * x * (F(1) + tanh_op(k * (x + c * x * x * x)));
  }
};

// d gelu / dx = 0.5 (1 + t) + 0.5 x (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(inner)
struct GeluGrad {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    const F k = F(0.7978845608028654), c = F(0.044715);
    const F t = tanh_op(k * (x + c * x * x * x));
    return F(0.5) * (F(1) + t) + F(0.5) * x * (F(1) - t * t) * k * (F(1) + F(3) * c * x * x);
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
