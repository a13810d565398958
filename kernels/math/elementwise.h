// kernels/math/elementwise.h: add, mul, scale and dropout functors, written once for CPU and CUDA.
#pragma once

#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/philox.h"
#include "kernels/math/random.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::math {

// The shape of a binary op: `a` and `out` have n elements; `b` has b_period elements and element i of
// `a` pairs with b[i % b_period] (b_period == n: same shape; b_period == C: a bias [C] over rows [N, C]).
// b_period must divide n. With `accumulate`, out += result instead of out = result.
struct BinaryShape {
  int64_t n;
  int64_t b_period;
  bool accumulate = false;
};

// A dropout application: the mask stream (seed, offset), the drop probability 0 <= p < 1, and whether
// the result is added to the output (backward accumulates into gradients).
struct DropoutArgs {
  uint64_t seed;
  uint64_t offset;
  float p;
  bool accumulate = false;
};

struct AddOp {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F a, F b) const {
    return a + b;
  }
};

// a + alpha * b, the product rounded before the sum.
template <class F>
struct AddScaledOp {
  F alpha;
  MPT_HD MPT_INLINE F operator()(F a, F b) const { return add_rn(a, mul_rn(alpha, b)); }
};

struct MulOp {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F a, F b) const {
    return mul_rn(a, b);
  }
};

template <class F>
struct ScaleOp {
  F alpha;
  MPT_HD MPT_INLINE F operator()(F x) const { return mul_rn(alpha, x); }
};

// ---- the gradients of one low-precision tensor's readers, summed in f32 (ops::fan_out): the last reader's first,
// the order in which the autograd engine delivered them when each reader cast its own copy.
struct WidenSum2 {
  MPT_HD MPT_INLINE float operator()(float a, float b) const { return add_rn(b, a); }
};
struct WidenSum3 {
  MPT_HD MPT_INLINE float operator()(float a, float b, float c) const { return add_rn(add_rn(c, b), a); }
};

// ---- dropout: the mask is a pure function of (seed, offset, element index), never stored.

// Element i is kept when uniform_at(seed, offset, i, 0, 1) >= p, i.e. with probability 1 - p for p on the
// 2^-24 grid (kernels/math/random.h); the 24-bit uniform of word j of philox(seed, offset + i / 4).
MPT_HD MPT_INLINE bool dropout_keep_word(uint32_t word, float p) { return uint32_to_uniform01(word) >= p; }

// Keep bits of elements 4 * group .. 4 * group + 3 (bit j for element 4 * group + j): one Philox call.
MPT_HD MPT_INLINE unsigned dropout_keep4(uint64_t seed, uint64_t offset, int64_t group, float p) {
  const Philox4x32 w = philox(seed, offset + static_cast<uint64_t>(group));
  return (dropout_keep_word(w.v[0], p) ? 1u : 0u) | (dropout_keep_word(w.v[1], p) ? 2u : 0u) |
         (dropout_keep_word(w.v[2], p) ? 4u : 0u) | (dropout_keep_word(w.v[3], p) ? 8u : 0u);
}

// The same decision for one element (equal to uniform_at(seed, offset, i, 0, 1) >= p).
MPT_HD MPT_INLINE bool dropout_keep_at(uint64_t seed, uint64_t offset, int64_t i, float p) {
  return ((dropout_keep4(seed, offset, i / 4, p) >> (i & 3)) & 1u) != 0;
}

// y = keep ? x * scale : 0 with scale = 1 / (1 - p) (computed once by the launcher). A dropped element is
// exactly 0 even when x is Inf or NaN: the loss does not depend on it.
template <class F>
MPT_HD MPT_INLINE F dropout_apply(F x, bool keep, F scale) {
  return keep ? mul_rn(x, scale) : F(0);
}

}  // namespace mpt::kernels::math
