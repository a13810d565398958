// kernels/math/common.h: host/device qualifiers shared by every math functor (CUDA, emulation, plain C++).
#pragma once

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)
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
