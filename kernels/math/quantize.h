// kernels/math/quantize.h: FP8 scaling math shared by the CPU and CUDA quantize kernels: amax as float bits, scale from amax, the quantize/dequantize element and the block-scale layout.
#pragma once

#include <cstdint>
#include <type_traits>

#include "kernels/math/activation.h"
#include "kernels/math/common.h"
#include "kernels/math/numerics.h"
#include "kernels/math/numerics_cast.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::math {

// ---- amax = max |x|, NaN-propagating and order-independent
// Non-negative floats order like their bit patterns, and every NaN's |bits| lies above +Inf's. So amax is
// an unsigned max over |x| bits: associative and commutative (any reduction order, atomicMax on a GPU,
// gives the same bits), and a NaN anywhere makes the result NaN, reported as the canonical 0x7FC00000.
inline constexpr uint32_t kAbsMask = 0x7FFFFFFFu;
inline constexpr uint32_t kInfBits = 0x7F800000u;
inline constexpr uint32_t kCanonicalNaNBits = 0x7FC00000u;

template <class T>
MPT_HD MPT_INLINE uint32_t abs_bits(T x) {
  return numerics_detail::bit_cast<uint32_t>(scalar_cast<float>(x)) & kAbsMask;
}

// Any NaN pattern becomes the canonical one (apply before combining partial results from different threads
// when the result is read as raw bits, e.g. after atomicMax).
MPT_HD MPT_INLINE uint32_t canonical_amax_bits(uint32_t bits) { return bits > kInfBits ? kCanonicalNaNBits : bits; }

MPT_HD MPT_INLINE float amax_from_bits(uint32_t bits) {
  return numerics_detail::bit_cast<float>(canonical_amax_bits(bits));
}

// The reduction of amax bits (an unsigned max: any order, any thread layout, the same bits).
struct AmaxBitsMax {
  MPT_HD MPT_INLINE uint32_t operator()(uint32_t a, uint32_t b) const { return a > b ? a : b; }
};

// TransformerEngine's amax (an fmaxf reduction) ignores NaN elements and keeps Inf: a NaN's bits count as 0.
template <class T>
MPT_HD MPT_INLINE uint32_t amax_bits(T x, bool ignore_nan) {
  const uint32_t b = abs_bits(x);
  return ignore_nan && b > kInfBits ? 0u : b;
}

// ---- scale from amax (TransformerEngine's compute_scale_from_amax, recipe_common.cuh)
// s = (fp8_max * 2^-margin) / amax, one IEEE division. amax 0, Inf or NaN -> s = 1 (nothing to scale by);
// an overflowing quotient (tiny amax) -> inf_value (FLT_MAX); power_of_2 floors s to a power of two (keeps only the
// exponent), as TE's block scaling does by default. The quantizer stores scale_inv = 1 / s. The one amax -> scale
// function of the project: current and block scaling, delayed scaling's update, FP8 weight copies and the FP8
// gradient all-reduce all compute their scales with it.
struct ScaleFromAmax {
  float fp8_max = kE4M3Max;
  int margin = 0;  // 0..64
  bool power_of_2 = false;
  float epsilon = 0.0f;  // TE's amax_epsilon: a smaller amax counts as epsilon
  float inf_value = 0x1.fffffep127f;  // an overflowing quotient becomes this (TE: FLT_MAX, or the input dtype's max)

  MPT_HD MPT_INLINE float operator()(float amax) const {
    if (amax < epsilon) amax = epsilon;
    const uint32_t a = numerics_detail::bit_cast<uint32_t>(amax);
    if (amax == 0.0f || (a & kInfBits) == kInfBits) return 1.0f;
    const float factor = numerics_detail::bit_cast<float>(static_cast<uint32_t>(127 - margin) << 23);
    float s = (fp8_max * factor) / amax;
    if ((numerics_detail::bit_cast<uint32_t>(s) & kAbsMask) == kInfBits) s = inf_value;
    if (power_of_2) s = numerics_detail::bit_cast<float>(numerics_detail::bit_cast<uint32_t>(s) & 0xFF800000u);
    return s;
  }
};

// ---- delayed scaling: one tensor's update from its amax history (scaling-spec B1, TE's kernel_bulk)
// h: the history [len] ([0] this step's amax, then past ones, newest last); buf: this step's (possibly all-reduced)
// amax. An amax of 0 leaves everything untouched (the tensor was quantized nowhere this step). Otherwise the scale
// comes from the history's max (algo_max) or this amax, before the history rolls. fmax drops NaN.
struct DelayedUpdate {
  int64_t len;
  bool algo_max;
  int margin;
  float fp8_max;
};
MPT_HD MPT_INLINE void delayed_scaling_update(const DelayedUpdate& u, float* h, float buf, float* scale,
                                              float* scale_inv) {
  const float a = buf != 0.0f ? buf : h[0];
  if (a == 0.0f) return;
  float amax_max = a;
  for (int64_t i = 1; i < u.len; ++i) amax_max = fmaxf(amax_max, h[i]);
  for (int64_t i = 1; i + 1 < u.len; ++i) h[i] = h[i + 1];
  if (u.len > 1) h[u.len - 1] = a;
  h[0] = 0.0f;
  const float amax = u.algo_max ? amax_max : a;
  const uint32_t bits = numerics_detail::bit_cast<uint32_t>(amax);
  if ((bits & kInfBits) == kInfBits || !(amax > 0.0f)) return;  // Inf or NaN or 0: the scale stays
  const float s = ScaleFromAmax{u.fp8_max, u.margin}(amax);
  *scale = s;
  *scale_inv = 1.0f / s;
}

MPT_HD MPT_INLINE float reciprocal(float s) { return 1.0f / s; }

// ---- the elements: q = fp8(float(x) * scale), x = float(q) * scale_inv rounded to Out
// The per-tensor quantizers' optional prologue: GELU (tanh) of x rounded back to x's dtype, the tensor a layer after
// a GELU reads, so that quantize(gelu(x)) and its amax come from one pass over x (TransformerEngine's gelu + cast;
// the FP8 MLP's hidden codes). kGelu false: x itself.
template <bool kGelu, class T>
MPT_HD MPT_INLINE T quantize_input(T x) {
  if constexpr (kGelu) {
    return scalar_cast<T>(GeluForward{}(scalar_cast<float>(x)));
  } else {
    return x;
  }
}

// The block quantizers' DGELU prologue: dy * gelu'(pre) rounded to T, the gelu_backward kernel's bits (its map
// computes GeluBackward in opmath and stores T): the FP8 MLP's dpre under block scaling, quantized as it is made.
template <class T>
MPT_HD MPT_INLINE T dgelu_input(T dy, T pre) {
  return store<T>(GeluBackward{}(load(dy), load(pre)));
}

template <class Q, class T>
MPT_HD MPT_INLINE Q quantize_value(T x, float scale, Fp8Saturation sat) {
  static_assert(std::is_same_v<Q, f8e4m3> || std::is_same_v<Q, f8e5m2>);
  return scalar_cast<Q>(scalar_cast<float>(x) * scale, sat);
}

template <class Out, class Q>
MPT_HD MPT_INLINE Out dequantize_value(Q q, float scale_inv) {
  return scalar_cast<Out>(static_cast<float>(q) * scale_inv);
}

template <class Q>
MPT_HD constexpr float fp8_max() {
  return std::is_same_v<Q, f8e4m3> ? kE4M3Max : kE5M2Max;
}

// A row-major matrix's extents (cast + transpose).
struct Dims2 {
  int64_t rows = 0, cols = 0;
};

// ---- a column's partial sums in two levels: parts [parts, cols] (a reduction's per-tile or per-block partials)
// summed in at most kPartialGroups groups of `size` consecutive parts, each group from 0 in order, then the groups'
// sums from 0 in order. Up to kPartialGroups parts every group holds one part: the plain in-order sum. Why two levels:
// a GPU finishing the sum one thread per column keeps only `cols` loads in flight (a few SMs busy for a 2048-wide
// bias); the groups give it kPartialGroups times as many.
inline constexpr int64_t kPartialGroups = 32;
struct PartialGroups {
  int64_t groups = 0, size = 0;  // group g: parts [g * size, min(parts, (g + 1) * size))
};
MPT_HD MPT_INLINE PartialGroups partial_groups(int64_t parts) {
  if (parts <= 0) return {};
  const int64_t most = parts < kPartialGroups ? parts : kPartialGroups;
  const int64_t size = (parts + most - 1) / most;
  return {(parts + size - 1) / size, size};
}

// ---- the bias gradient fused into cast + transpose (TransformerEngine's cast_transpose_dbias)
// Column sums of x [rows, cols] in FP32, in one order on every backend: each tile of kDbiasTileRows rows summed top to
// bottom from 0 (a partial per tile and column), then a column's tile partials in partial_groups' two levels (in tile
// order from 0 up to 32 tiles, 1024 rows), rounded once.
inline constexpr int kDbiasTileRows = 32;
MPT_HD MPT_INLINE int64_t dbias_tiles(int64_t rows) { return (rows + kDbiasTileRows - 1) / kDbiasTileRows; }

// ---- block scaling (DeepSeek-V3 / TE Float8BlockScaling), the layout kernels/cpu/gemm.h consumes
// x is [rows, cols] row-major; blocks are 128 wide along cols (the GEMM's K) and kBlockRows tall:
//   Block1x128    one FP32 scale_inv per (row, 128-column group): row-major [rows, ceil(cols / 128)]
//   Block128x128  one per 128 x 128 tile:                         row-major [ceil(rows / 128), ceil(cols / 128)]
// Partial blocks at the right and bottom edges hold only the real elements (no padding in the amax).
// Dequantize: x = q * scale_inv[block of (r, c)].
inline constexpr int64_t kBlockCols = 128;
enum class BlockScaling : uint8_t { Block1x128, Block128x128 };

struct BlockScaleLayout {
  int64_t rows = 0, cols = 0;
  int64_t block_rows = 1;  // 1 or 128

  MPT_HD MPT_INLINE static BlockScaleLayout make(int64_t rows, int64_t cols, BlockScaling b) {
    return BlockScaleLayout{rows, cols, b == BlockScaling::Block1x128 ? 1 : 128};
  }
  MPT_HD MPT_INLINE int64_t scale_cols() const { return (cols + kBlockCols - 1) / kBlockCols; }
  MPT_HD MPT_INLINE int64_t scale_rows() const { return (rows + block_rows - 1) / block_rows; }
  MPT_HD MPT_INLINE int64_t scale_index(int64_t r, int64_t c) const {
    return (r / block_rows) * scale_cols() + c / kBlockCols;
  }
};

}  // namespace mpt::kernels::math
