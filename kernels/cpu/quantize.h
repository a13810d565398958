// kernels/cpu/quantize.h: FP8 quantization on the CPU: amax, per-tensor quantize (optionally transposed), 1x128 / 128x128 block quantize, dequantize.
#pragma once

#include <cstdint>

#include "kernels/math/numerics.h"
#include "kernels/math/quantize.h"

namespace mpt::kernels::cpu {

// T (input) and Out (dequantized output): float, f16, bf16. Q: f8e4m3, f8e5m2. The element math is
// kernels/math/quantize.h (q = fp8(float(x) * scale), out = Out(float(q) * scale_inv)), shared with CUDA;
// the AVX-512 paths give the scalar path's bits and follow set_vector_conversions (kernels/cpu/convert.h).

// max |x[i]| over i < n; NaN if any element is NaN (the canonical 0x7FC00000); 0 for n == 0.
template <class T>
float amax(const T* x, int64_t n);

struct QuantizeArgs {
  float scale = 1.0f;                           // q = fp8(x * scale)
  Fp8Saturation sat = Fp8Saturation::Saturate;  // NoSaturate: overflow -> NaN (E4M3) or Inf (E5M2)
  float* amax = nullptr;                        // optional: receives amax(x) of the input, as amax() computes it
};

// q[i] = fp8(x[i] * scale) for i < n.
template <class Q, class T>
void quantize(const T* x, Q* q, int64_t n, const QuantizeArgs& args);

// x is [rows, cols] row-major: q = fp8(x * scale) [rows, cols] and qt = its transpose [cols, rows], in one
// pass (cache-blocked tiles): qt[c * rows + r] == q[r * cols + c] bit for bit.
template <class Q, class T>
void quantize_transpose(const T* x, Q* q, Q* qt, math::Dims2 dims, const QuantizeArgs& args);

// out[c] = the column sums of x [rows, cols] (the bias gradient of a gradient dy), summed in FP32 in the order
// kernels/math/quantize.h fixes for the fused cast + transpose + dbias (tiles of math::kDbiasTileRows rows), rounded
// once to Out: bit for bit what the CUDA kernel gives.
template <class T, class Out>
void column_sums_tiled(const T* x, math::Dims2 dims, Out* out);

// Block quantization of x [layout.rows, layout.cols] (layout in kernels/math/quantize.h): per block,
// s = scaling(amax(block)), q = fp8(x * s) saturating, scale_inv[block] = 1 / s.
template <class Q, class T>
void quantize_blockwise(const T* x, Q* q, float* scale_inv, const math::BlockScaleLayout& layout,
                        const math::ScaleFromAmax& scaling);

// 1x128 block quantization of x^T for x [rows, cols] row-major: q [cols, rows] and scale_inv [cols, ceil(rows/128)],
// bit for bit quantize_blockwise of the contiguous transpose (an FP8 recipe's columnwise copy for the weight
// gradient), without materialising it: tiles of 16 columns x 128 rows are transposed in a buffer that stays in L1.
template <class Q, class T>
void quantize_blockwise_1x128_transposed(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv,
                                         const math::ScaleFromAmax& scaling);

// out[i] = Out(float(q[i]) * scale_inv).
template <class Out, class Q>
void dequantize(const Q* q, Out* out, int64_t n, float scale_inv);

// out[r, c] = Out(float(q[r, c]) * scale_inv[layout.scale_index(r, c)]).
template <class Out, class Q>
void dequantize_blockwise(const Q* q, Out* out, const float* scale_inv, const math::BlockScaleLayout& layout);

}  // namespace mpt::kernels::cpu
