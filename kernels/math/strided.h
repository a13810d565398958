// kernels/math/strided.h: index arithmetic of n-d strided copies (dimension coalescing, linear index -> element
// offsets), the same code on the host and in CUDA kernels.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"

namespace mpt::kernels::math {

inline constexpr int kMaxStridedDims = 8;

// A shape walked in row-major order (last dimension fastest) and the element strides of the two arrays it pairs
// (dst, src; a stride of 0 repeats an element). Plain data, so it travels to a kernel as one parameter.
struct StridedDims {
  int ndim = 0;  // 0: a single element
  int64_t shape[kMaxStridedDims] = {};
  int64_t dst[kMaxStridedDims] = {};
  int64_t src[kMaxStridedDims] = {};
};

// Drops size-1 dimensions and merges dimension i into i+1 when both arrays step through the pair as one run, so a
// dense copy becomes one dimension and a row-wise one two. False when more than kMaxStridedDims dimensions remain.
// A shape with a 0 extent is not expected (there is nothing to copy).
MPT_HD inline bool coalesce_strided(const int64_t* shape, const int64_t* dst_strides, const int64_t* src_strides,
                                    int ndim, StridedDims& out) {
  out.ndim = 0;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 1) continue;
    const int last = out.ndim - 1;
    if (last >= 0 && out.dst[last] == dst_strides[i] * shape[i] && out.src[last] == src_strides[i] * shape[i]) {
      out.shape[last] *= shape[i];
      out.dst[last] = dst_strides[i];
      out.src[last] = src_strides[i];
      continue;
    }
    if (out.ndim == kMaxStridedDims) return false;
    out.shape[out.ndim] = shape[i];
    out.dst[out.ndim] = dst_strides[i];
    out.src[out.ndim] = src_strides[i];
    ++out.ndim;
  }
  return true;
}

MPT_HD MPT_INLINE int64_t strided_numel(const StridedDims& d) {
  int64_t n = 1;
  for (int k = 0; k < d.ndim; ++k) n *= d.shape[k];
  return n;
}

// Element offsets in dst and src of the i-th element in row-major order. Index is the type the divisions run in
// (uint32_t when every index fits: a 64-bit division costs several times more on a GPU). The loop is unrolled over
// the maximum rank so the dimensions stay in kernel parameters instead of local memory.
template <class Index>
MPT_HD MPT_INLINE void strided_offsets(const StridedDims& d, Index i, int64_t& dst_offset, int64_t& src_offset) {
  int64_t doff = 0, soff = 0;
#if defined(__CUDACC__)
#pragma unroll
#endif
  for (int k = kMaxStridedDims - 1; k >= 0; --k) {
    if (k < d.ndim) {
      const auto size = static_cast<Index>(d.shape[k]);
      const Index idx = i % size;
      i /= size;
      doff += static_cast<int64_t>(idx) * d.dst[k];
      soff += static_cast<int64_t>(idx) * d.src[k];
    }
  }
  dst_offset = doff;
  src_offset = soff;
}

}  // namespace mpt::kernels::math
