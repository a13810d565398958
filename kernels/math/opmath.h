// kernels/math/opmath.h: the type math is done in (float for every storage type, double for double) and the
// load/store conversions every functor uses, on CPU and CUDA alike.
#pragma once

#include <type_traits>

#include "kernels/math/common.h"
#include "kernels/math/numerics.h"
#include "kernels/math/numerics_cast.h"

// M(T) for every storage type a CPU kernel is instantiated for (f64 is the finite-difference reference) and for
// every type a CUDA kernel is: one list, so adding a type is one edit.
#define MPT_FOR_CPU_FLOAT_TYPES(M) M(float) M(double) M(::mpt::f16) M(::mpt::bf16)
#define MPT_FOR_CUDA_FLOAT_TYPES(M) M(float) M(::mpt::f16) M(::mpt::bf16)

namespace mpt::kernels::math {

// Low-precision values are widened to float for arithmetic (like ATen's opmath); double stays double
// so the CPU backend can run an op in float64 for finite-difference checks.
template <class T>
using opmath_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <class T>
MPT_HD MPT_INLINE opmath_t<T> load(T x) {
  return ::mpt::scalar_cast<opmath_t<T>>(x);
}

template <class T, class U>
MPT_HD MPT_INLINE T store(U x) {
  return ::mpt::scalar_cast<T>(x);
}

}  // namespace mpt::kernels::math
