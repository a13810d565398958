// kernels/cuda/pack.cuh: 8-element vector accesses and grid sizing shared by the cast and quantize kernels (include only from .cu files).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace mpt::kernels::cuda {

inline constexpr int kPackThreads = 256;

// Eight consecutive elements moved as one access of 8 * sizeof(T) bytes (32 for float: two 16-byte accesses;
// 16 for f16/bf16; 8 for FP8), so a conversion reads and writes whole vectors on both sides.
template <class T>
struct alignas(sizeof(T) * 8) Pack8 {
  T v[8];
};

template <class T>
MPT_DEVICE MPT_INLINE Pack8<T> load8(const T* p) {
#if defined(MPT_CUDA_EMULATION)
  ::mpt::cuda_emu::check_aligned(p, sizeof(Pack8<T>), "load8");
#endif
  return *reinterpret_cast<const Pack8<T>*>(p);
}

template <class T>
MPT_DEVICE MPT_INLINE void store8(T* p, const Pack8<T>& v) {
#if defined(MPT_CUDA_EMULATION)
  ::mpt::cuda_emu::check_aligned(p, sizeof(Pack8<T>), "store8");
#endif
  *reinterpret_cast<Pack8<T>*>(p) = v;
}

template <class T>
inline bool pack8_aligned(const T* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack8<T>) == 0;
}

// Blocks for a grid-stride loop over `units` work items of one thread each (at least 1, at most 65535 * 8).
inline unsigned grid_stride_blocks(int64_t units) {
  const int64_t blocks = (units + kPackThreads - 1) / kPackThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : (blocks > 65535 * 8 ? 65535 * 8 : blocks));
}

}  // namespace mpt::kernels::cuda
