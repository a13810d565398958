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
  int64_t rows;       // B * T * H rows of D elements (x is (B, T, H, D) contiguous)
  int64_t seq;        // T
  int64_t heads;      // H
  int64_t head_dim;   // D (even)
  int64_t table_ld;   // D / 2: the row stride of the cos / sin tables
  int64_t position0;  // the first position's row in the tables (a generation offset)
  bool inverse;       // rotate by -angle (the backward)
};

template <class F>
MPT_HD MPT_INLINE void rope_pair(F x1, F x2, F c, F s, F& y1, F& y2) {
  y1 = fma_op(x1, c, -mul_rn(x2, s));
  y2 = fma_op(x2, c, mul_rn(x1, s));
}

}  // namespace mpt::kernels::math
