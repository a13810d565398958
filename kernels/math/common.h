// kernels/math/common.h: host/device qualifiers shared by every math functor (CUDA, emulation, plain C++).
#pragma once

// Under the CUDA emulation harness device code is plain host code, so the qualifiers vanish there too.
#if defined(__CUDACC__)
#define MPT_HD __host__ __device__
#define MPT_DEVICE __device__
#else
#define MPT_HD
#define MPT_DEVICE
#endif

#if defined(__CUDACC__)
#define MPT_INLINE __forceinline__
#else
#define MPT_INLINE inline __attribute__((always_inline))
#endif

#if !defined(__CUDACC__)
#include <cmath>
#endif

namespace mpt::kernels::math {

// a * b + c rounded once (IEEE fused multiply-add) on every path: CUDA's __fmaf_rn, the CPU's FMA instruction where
// the function's ISA has one (AVX2+FMA and AVX-512 clones), else libm's exact software fma. Writing the fusions
// out makes CPU, emulated and real CUDA kernels compute the same bits whatever each compiler would contract.
MPT_HD MPT_INLINE float fma_op(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
  return __fmaf_rn(a, b, c);
#else
  return __builtin_fmaf(a, b, c);
#endif
}
MPT_HD MPT_INLINE double fma_op(double a, double b, double c) {
#if defined(__CUDA_ARCH__)
  return __fma_rn(a, b, c);
#else
  return __builtin_fma(a, b, c);
#endif
}

}  // namespace mpt::kernels::math
