// kernels/math/rope.h: rotary position embedding of one (x_i, x_{i + D/2}) pair, written once for CPU and CUDA.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::math {

// Hugging Face Llama's convention ("rotate_half"): the head dimension D is split into halves, and element i of the
// first half pairs with element i of the second, rotated by the angle pos * theta^(-2i / D):
//   y_i         = x_i cos - x_{i+D/2} sin
//   y_{i + D/2} = x_{i+D/2} cos + x_i sin
// The backward is the inverse rotation (sin negated). Products feed explicit fma_op: the same bits on CPU and CUDA.
struct RopeShape {
  int64_t rows;       // B * T * H rows of D elements: token r / H, head r % H
  int64_t seq;        // T
  int64_t heads;      // H
  int64_t head_dim;   // D (even)
  int64_t table_ld;   // D / 2: the row stride of the cos / sin tables
  int64_t position0;  // the first position's row in the tables (a generation offset)
  bool inverse;       // rotate by -angle (the backward)
  // Elements from one token's heads to the next's in x and in y: 0 for H * D (contiguous (B, T, H, D)); more for the
  // heads of a wider packed row (Llama's q | k | v projection output, ops::rope_qkv).
  int64_t x_ld = 0, y_ld = 0;
  // Heads [rotated, H) of each token are copied unrotated (Llama's v heads beside its q and k heads, ops::rope_qkv);
  // 0: every head is rotated.
  int64_t rotated = 0;
};

// Whether row r (token r / H, head r % H) is rotated (else copied).
MPT_HD MPT_INLINE bool rope_row_rotated(const RopeShape& s, int64_t r) {
  return s.rotated <= 0 || r % s.heads < s.rotated;
}

// Where row r (token r / H, head r % H) of a RopeShape's x (ld = s.x_ld) or y starts.
MPT_HD MPT_INLINE int64_t rope_row_offset(const RopeShape& s, int64_t r, int64_t ld) {
  return (r / s.heads) * (ld > 0 ? ld : s.heads * s.head_dim) + (r % s.heads) * s.head_dim;
}

template <class F>
MPT_HD MPT_INLINE void rope_pair(F x1, F x2, F c, F s, F& y1, F& y2) {
  y1 = fma_op(x1, c, -mul_rn(x2, s));
  y2 = fma_op(x2, c, mul_rn(x1, s));
}

}  // namespace mpt::kernels::math
