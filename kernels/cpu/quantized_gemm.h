// kernels/cpu/quantized_gemm.h: quantized inference GEMMs on the CPU: INT8 x INT8 on oneDNN (W8A8), weight-only codes x float (W4A16 / W8A16), and group dequantization.
#pragma once

#include <cstdint>

#include "kernels/math/fake_quant.h"

namespace mpt::kernels::cpu {

using math::GroupWeights;

// out[i] = value of codes[i] * scales[i / group] (rounded to Out), for n * k elements; Out in {float, bf16, f16}.
template <class Out>
void dequantize_groups(const GroupWeights& w, Out* out);

// y [m, n] = x [m, k] W^T + bias: for each output j, in 16 interleaved float lanes (lane l takes a group's elements l,
// l + 16, ...), each group's products x * code are summed, scaled by the group's scale and added to the row's lanes;
// the lanes are added pairwise at the end; bias (optional [n]) last. Integer codes, or E4M3 codes through a 256-entry
// table. Reads each weight code once per row of x (a decoding step's GEMV reads 1 byte per weight, not 4); OpenMP
// over n.
void weight_only_gemm(const float* x, int64_t m, const GroupWeights& w, const float* bias, float* y);

// acc [m, n] = a [m, k] b^T with a, b int8 codes and b stored [n, k] (exact int32 sums, so the same integers on
// every path): oneDNN's s8 matmul where the CPU has VNNI / AMX-INT8, for every m (at one row it beat a dot product
// per output by 1.2x on 3072 x 12288, bench_quantized, and more at 2-16 rows); without VNNI, whose oneDNN path
// saturates pairs of products in int16, f32 GEMMs over K slices short enough to sum exactly.
void gemm_s8s8s32(int64_t m, int64_t n, int64_t k, const int8_t* a, const int8_t* b, int32_t* acc);

// y[i, j] = float(acc[i, j]) * sa[i] * sb[j] + bias[j] (bias optional), multiplied in that order in float: the
// W8A8 GEMM's dequantizing epilogue (sa: the input's per-token scales, sb: the weight's per-channel scales).
void int8_epilogue(const int32_t* acc, int64_t m, int64_t n, const float* sa, const float* sb, const float* bias,
                   float* y);

}  // namespace mpt::kernels::cpu
