// kernels/cuda/row_io.cuh: loads and stores of one thread's share of a row (16-byte vector or one element)
// as opmath values, for the row kernels (layernorm.cu, softmax.cu, cross_entropy.cu; include only from .cu).
#pragma once

#include "kernels/cuda/launch.cuh"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {

// N consecutive elements of U moved as one access (8 bytes for four bf16 beside float rows).
template <class U, int N>
struct alignas(sizeof(U) * N) RowVec {
  U v[N];
};

// kWidth consecutive elements of T widened to float: one Vec16 when kVec, else one element. load and store also
// take another element type U (a float row's output written as bf16, its gradient read as bf16): the same kWidth
// elements, as one access of kWidth * sizeof(U) bytes.
template <class T, bool kVec>
struct RowPack {
  static constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  float v[kWidth];

  template <class U = T>
  MPT_DEVICE MPT_INLINE static RowPack load(const U* p) {
    RowPack r;
    if constexpr (kVec) {
#if defined(MPT_CUDA_EMULATION)
      ::mpt::cuda_emu::check_aligned(p, sizeof(RowVec<U, kWidth>), "RowPack::load");
#endif
      const RowVec<U, kWidth> q = *reinterpret_cast<const RowVec<U, kWidth>*>(p);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) r.v[k] = math::load(q.v[k]);
    } else {
      r.v[0] = math::load(*p);
    }
    return r;
  }

  template <class U = T>
  MPT_DEVICE MPT_INLINE void store(U* p) const {
    if constexpr (kVec) {
      RowVec<U, kWidth> q;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) q.v[k] = math::store<U>(v[k]);
#if defined(MPT_CUDA_EMULATION)
      ::mpt::cuda_emu::check_aligned(p, sizeof(RowVec<U, kWidth>), "RowPack::store");
#endif
      *reinterpret_cast<RowVec<U, kWidth>*>(p) = q;
    } else {
      *p = math::store<U>(v[0]);
    }
  }
};

// Threads of a block stride over a row in units of kWidth elements: the first element this thread handles
// and the stride. Every pass over a row uses the same mapping, so a thread reads back only what it wrote.
struct RowStride {
  int64_t first;
  int64_t stride;
};

template <int kWidth>
MPT_DEVICE MPT_INLINE RowStride row_stride() {
  return {static_cast<int64_t>(threadIdx.x) * kWidth, static_cast<int64_t>(blockDim.x) * kWidth};
}

// Threads for a block that walks `units` vectors or elements per row: all of them up to kMaxThreads,
// rounded up to whole warps.
inline int row_block_threads(int64_t units, int max_threads) {
  return units >= max_threads ? max_threads : static_cast<int>((units + 31) / 32 * 32);
}

}  // namespace mpt::kernels::cuda
