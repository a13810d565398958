// kernels/math/reduce_ops.h: the one summation order of sum/mean/L2-norm on CPU and CUDA, and the finite test.
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/math/common.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/numerics.h"

// Full unrolling of the lane butterfly (so a CUDA thread keeps its 32 lanes in registers).
#if defined(__CUDACC__)
#define MPT_UNROLL_LANES _Pragma("unroll")
#else
#define MPT_UNROLL_LANES _Pragma("GCC unroll 32")
#endif

namespace mpt::kernels::math {

// The canonical order (both backends implement exactly this, so their results agree bit for bit):
//   reduce32(v[0..m)): 32 lanes; lane j adds v[j], v[j + 32], v[j + 64], ... in increasing order onto 0;
//     then the lane partials are combined by the butterfly of a warp shuffle reduction:
//     for s = 16, 8, 4, 2, 1: lane[j] = lane[j] + lane[j + s] (j < s); the result is lane[0].
//   A reduction of length L <= kReduceChunk is reduce32(x). A longer one splits x into chunks of
//   kReduceChunk elements, reduces each chunk with reduce32 (first pass) and returns reduce32 of the
//   chunk partials (second pass).
// Accumulation is in float (double for double). Error bound vs exact arithmetic, u = 2^-24 (2^-53):
//   |err| <= (ceil(min(L, kChunk) / 32) + ceil(P / 32) + 10) * u * sum |x_i|,  P = number of chunks,
// i.e. about 75 u for L <= 64 Ki elements and 590 u at 32 Mi elements (sequential summation: L u).
// x viewed as [outer, len, inner] (row-major), reduced over the middle axis into [outer, inner].
struct ReduceShape {
  int64_t outer;
  int64_t len;
  int64_t inner;
};

inline constexpr int kReduceLanes = 32;
inline constexpr int64_t kReduceChunk = 2048;  // 64 elements per lane in the first pass

MPT_HD MPT_INLINE constexpr int64_t reduce_chunks(int64_t len) {
  return len <= kReduceChunk ? 1 : (len + kReduceChunk - 1) / kReduceChunk;
}

// The element transforms a reduction applies before summing (f(x) in opmath).
struct IdentityOp {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    return x;
  }
};

struct SquareOp {
  template <class F>
  MPT_HD MPT_INLINE F operator()(F x) const {
    return mul_rn(x, x);
  }
};

namespace reduce_detail {
template <int kStep, class F>
MPT_HD MPT_INLINE void butterfly_step(F (&lane)[kReduceLanes]) {
  MPT_UNROLL_LANES
  for (int j = 0; j < kStep; ++j) lane[j] = add_rn(lane[j], lane[j + kStep]);
}
}  // namespace reduce_detail

// The butterfly over 32 lane partials held in an array (CPU, and CUDA threads that own all 32 lanes);
// constant trip counts, so a CUDA thread keeps the lanes in registers.
template <class F>
MPT_HD MPT_INLINE F combine_lanes(F (&lane)[kReduceLanes]) {
  reduce_detail::butterfly_step<16>(lane);
  reduce_detail::butterfly_step<8>(lane);
  reduce_detail::butterfly_step<4>(lane);
  reduce_detail::butterfly_step<2>(lane);
  reduce_detail::butterfly_step<1>(lane);
  return lane[0];
}

// True unless x is Inf or NaN: the exponent field is not all ones (bit test, no float compare, so it
// also works under fast-math and for the 16-bit formats without converting).
MPT_HD MPT_INLINE bool is_finite_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x7F800000u) != 0x7F800000u;
}
MPT_HD MPT_INLINE bool is_finite_bits(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}
MPT_HD MPT_INLINE bool is_finite_bits(f16 x) { return (x.bits & 0x7C00u) != 0x7C00u; }
MPT_HD MPT_INLINE bool is_finite_bits(bf16 x) { return (x.bits & 0x7F80u) != 0x7F80u; }

}  // namespace mpt::kernels::math
