// kernels/math/reduce.h: warp and block reductions for device code (CUDA, or host C++ under the emulation harness).
#pragma once

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/device.h>
#elif !defined(__CUDACC__)
#error "kernels/math/reduce.h is device code: include it from a .cu file"
#endif

#include <cmath>

#include "kernels/math/common.h"

namespace mpt::kernels::math {

inline constexpr unsigned kFullWarpMask = 0xffffffffu;
// Shared-memory floats (or T) that block_allreduce needs: one per warp plus the broadcast slot.
inline constexpr int kBlockReduceScratch = 33;

struct SumOp {
  template <class T>
  MPT_HD MPT_INLINE T operator()(T a, T b) const {
    return a + b;
  }
};

// fmaxf: commutative, and a NaN operand loses (a NaN row still yields NaN through its exp and sum).
struct MaxOp {
  MPT_HD MPT_INLINE float operator()(float a, float b) const { return fmaxf(a, b); }
};

// The block's threads in CUDA's linear order (x fastest); lanes and warps follow this order.
MPT_DEVICE MPT_INLINE int block_threads() { return static_cast<int>(blockDim.x * blockDim.y * blockDim.z); }
MPT_DEVICE MPT_INLINE int block_thread_index() {
  return static_cast<int>(threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z));
}

// The lanes that exist in this thread's warp: all 32, except in the partial last warp of a block
// whose size is not a multiple of 32.
MPT_DEVICE MPT_INLINE unsigned warp_lanes_mask() {
  const int lanes = block_threads() - (block_thread_index() & ~31);
  return lanes >= 32 ? kFullWarpMask : (1u << lanes) - 1u;
}

// op over the values of the lanes in `mask` (which must be lanes 0..n-1 of the warp, as
// warp_lanes_mask() gives); every lane of the mask gets the same result. Full warps use a butterfly;
// a partial warp reduces into lane 0 without reading absent lanes, then broadcasts.
template <class T, class Op>
MPT_DEVICE MPT_INLINE T warp_allreduce(T v, Op op, unsigned mask = kFullWarpMask) {
  if (mask == kFullWarpMask) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) v = op(v, __shfl_xor_sync(mask, v, offset));
    return v;
  }
  const int lanes = __popc(mask);
  const int lane = block_thread_index() & 31;
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) {
    const int src = lane + offset;
    const T other = __shfl_sync(mask, v, src < lanes ? src : lane);
    if (src < lanes) v = op(v, other);
  }
  return __shfl_sync(mask, v, 0);
}

// op over one value per thread of the block (any block size up to 1024, partial last warp included);
// every thread gets the same result. `scratch` is __shared__ T[kBlockReduceScratch]. Contains
// __syncthreads, so every thread of the block must call it; back-to-back calls may share `scratch`.
template <class T, class Op>
MPT_DEVICE MPT_INLINE T block_allreduce(T v, Op op, T identity, T* scratch) {
  const int tid = block_thread_index();
  const int warp = tid / 32, lane = tid % 32;
  const int warps = (block_threads() + 31) / 32;
  v = warp_allreduce(v, op, warp_lanes_mask());
  if (warps == 1) return v;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {  // a full warp, since the block has more than one
    T w = lane < warps ? scratch[lane] : identity;
    w = warp_allreduce(w, op);
    if (lane == 0) scratch[32] = w;
  }
  __syncthreads();
  return scratch[32];
}

}  // namespace mpt::kernels::math
