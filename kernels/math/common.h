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
