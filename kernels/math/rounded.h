// kernels/math/rounded.h: +, -, *, / and sqrt rounded on their own (never fused by a compiler), for CPU and CUDA.
#pragma once

#include <cmath>
#include <type_traits>

#include "kernels/math/common.h"

// nvcc contracts `a * b + c` into an FMA by default; the x86-64 host build (-ffp-contract=off) cannot. Device code
// therefore uses the explicitly rounded intrinsics (__fmul_rn, ...), which are never contracted and keep their
// rounding under --use_fast_math, so CPU and GPU compute the same bits. Where a fusion is wanted, math::fma_op
// spells it out on both sides.
namespace mpt::kernels::math {

template <class F>
MPT_HD MPT_INLINE F mul_rn(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) return __fmul_rn(a, b);
  if constexpr (std::is_same_v<F, double>) return __dmul_rn(a, b);
#endif
  return a * b;
}
template <class F>
MPT_HD MPT_INLINE F add_rn(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) return __fadd_rn(a, b);
  if constexpr (std::is_same_v<F, double>) return __dadd_rn(a, b);
#endif
  return a + b;
}
template <class F>
MPT_HD MPT_INLINE F sub_rn(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) return __fsub_rn(a, b);
  if constexpr (std::is_same_v<F, double>) return __dsub_rn(a, b);
#endif
  return a - b;
}
template <class F>
MPT_HD MPT_INLINE F div_rn(F a, F b) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) return __fdiv_rn(a, b);
  if constexpr (std::is_same_v<F, double>) return __ddiv_rn(a, b);
#endif
  return a / b;
}
template <class F>
MPT_HD MPT_INLINE F sqrt_rn(F a) {
#if defined(__CUDA_ARCH__)
  if constexpr (std::is_same_v<F, float>) return __fsqrt_rn(a);
  if constexpr (std::is_same_v<F, double>) return __dsqrt_rn(a);
#endif
  return std::sqrt(a);
}

}  // namespace mpt::kernels::math
