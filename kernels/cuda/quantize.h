// kernels/cuda/quantize.h: dtype conversion and FP8 quantization on a CUDA stream (the CPU twin is kernels/cpu/quantize.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/numerics.h"
#include "kernels/math/quantize.h"

namespace mpt::kernels::cuda {

// Every pointer is a device pointer; every launcher is asynchronous on `stream` and returns
// cudaErrorInvalidValue for a negative size or a missing required pointer, else the launch error. Element math
// is kernels/math (scalar_cast, quantize.h), the same code as the CPU kernels, so results are bit-identical
// to them (on sm_89+ the saturating FP8 conversion is the hardware's, which NVIDIA documents as the same
// rounding). Types: T and Out in {float, f16, bf16}; Q in {f8e4m3, f8e5m2}. 16-byte-class vector accesses
// when the pointers allow, else a scalar kernel.

// dst[i] = scalar_cast<Dst>(src[i], sat) for every pair of {float, f16, bf16, f8e4m3, f8e5m2} (25 pairs).
template <class Dst, class Src>
cudaError_t convert(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat, cudaStream_t stream);

// *amax = max |x| (the canonical NaN if any element is NaN; 0 for n == 0). Block reductions and an
// atomicMax on the float's bits, which is order-independent: deterministic. gelu: max |gelu(x)| (QuantizeArgs::gelu's
// prologue: current scaling's amax of the tensor a gelu + cast pass quantizes).
template <class T>
cudaError_t amax(const T* x, int64_t n, float* amax, cudaStream_t stream, bool ignore_nan = false, bool gelu = false);

// One delayed-scaling update (math::delayed_scaling_update) per entry, all on the device: the history rolls in
// place, the scale and its inverse are rewritten. Entries travel as kernel arguments (several launches for long
// lists); every pointer is a device pointer.
struct DelayedUpdateEntry {
  float* history;
  const float* amax;  // this step's (possibly all-reduced) amax; may point at history[0]
  float* scale;
  float* scale_inv;
  math::DelayedUpdate update;
};
cudaError_t delayed_scaling_update(const DelayedUpdateEntry* entries, int64_t count, cudaStream_t stream);

// *into = fmax(*into, *amax) (one thread): a cached FP8 weight's amax recorded into its meta's history.
cudaError_t fold_amax(const float* amax, float* into, cudaStream_t stream);

// *scale = f(*amax) and, when scale_inv is not null, *scale_inv = 1 / *scale (one thread).
cudaError_t scale_from_amax(const float* amax, float* scale, float* scale_inv, const math::ScaleFromAmax& f,
                            cudaStream_t stream);

struct QuantizeArgs {
  const float* scale = nullptr;                 // required: q = fp8(x * *scale)
  float* scale_inv = nullptr;                   // optional: receives 1 / *scale
  float* amax = nullptr;                        // optional: receives amax(x) of the input
  Fp8Saturation sat = Fp8Saturation::Saturate;  // NoSaturate: overflow -> NaN (E4M3) or Inf (E5M2)
  bool amax_ignore_nan = false;                 // the amax skips NaN elements (TE's fmaxf reduction)
  bool amax_accumulate = false;                 // *amax is max-ed into (no zeroing launch): amax_history[0]
  // quantize_transpose only, optional: [math::dbias_tiles(rows), cols] f32, receives each 32-row tile's column sums
  // (the fused bias gradient's first half; dbias_finish gives the sums).
  float* dbias_partial = nullptr;
  // Quantize gelu(x) rounded to x's dtype instead of x (math::quantize_input), the amax too; not with dbias_partial.
  bool gelu = false;
};

// q[i] = fp8(x[i] * scale) for i < n.
template <class Q, class T>
cudaError_t quantize(const T* x, Q* q, int64_t n, const QuantizeArgs& args, cudaStream_t stream);

// x [rows, cols] row-major -> q [rows, cols] and qt [cols, rows] = q's transpose, one pass through 32 x 32
// shared-memory tiles.
template <class Q, class T>
cudaError_t quantize_transpose(const T* x, Q* q, Q* qt, math::Dims2 dims, const QuantizeArgs& args,
                               cudaStream_t stream);

// partial [math::dbias_tiles(dims.rows), dims.cols] = each 32-row tile's column sums of x, top to bottom in FP32
// (the bias gradient's first half where no quantization pass reads x; dbias_finish gives the sums).
template <class T>
cudaError_t column_partials(const T* x, math::Dims2 dims, float* partial, cudaStream_t stream);

// out[c] = sum over the tiles of partial [math::dbias_tiles(dims.rows), dims.cols] (quantize_transpose's
// dbias_partial), in math::partial_groups' two levels, rounded once to Out: the fused bias gradient, bit for bit
// cpu::column_sums_tiled.
template <class Out>
cudaError_t dbias_finish(const float* partial, math::Dims2 dims, Out* out, cudaStream_t stream);

// Block quantization (layout in kernels/math/quantize.h): one warp per 1x128 block, one 256-thread block
// per 128x128 tile; scale_inv[block] = 1 / scaling(amax(block)), q = fp8(x * scale) saturating. gelu (1x128 only):
// of gelu(x) instead (QuantizeArgs::gelu's prologue).
template <class Q, class T>
cudaError_t quantize_blockwise(const T* x, Q* q, float* scale_inv, const math::BlockScaleLayout& layout,
                               const math::ScaleFromAmax& scaling, cudaStream_t stream, bool gelu = false);

// 128x128 block quantization (layout.block_rows 128) that also writes the codes' transpose qt [cols, rows] and the
// scales' transpose scale_inv_t [ceil(cols/128), ceil(rows/128)] (an FP8-block weight's W^T for dgrad, sharing its
// tile scales): quantize_blockwise's q and scale_inv, and their transposed copies' bits, in one launch.
template <class Q, class T>
cudaError_t quantize_blockwise_128x128_both(const T* x, Q* q, float* scale_inv, Q* qt, float* scale_inv_t,
                                            const math::BlockScaleLayout& layout, const math::ScaleFromAmax& scaling,
                                            cudaStream_t stream);

// 1x128 block quantization of x^T for x [rows, cols] row-major: q [cols, rows] and scale_inv
// [cols, ceil(rows/128)], bit for bit quantize_blockwise of the contiguous transpose (cpu::
// quantize_blockwise_1x128_transposed's result) without materialising it: one 256-thread block per 128 x 32 tile
// of x, staged in shared memory; a warp per column quantizes its 128 rows. dbias_partial (optional,
// [math::dbias_tiles(rows), cols]) receives each 32-row tile's column sums from the same pass (the fused bias
// gradient's first half, as quantize_transpose's; dbias_finish gives the sums). gelu: of gelu(x)^T instead (no
// dbias then).
template <class Q, class T>
cudaError_t quantize_blockwise_1x128_transposed(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv,
                                                const math::ScaleFromAmax& scaling, cudaStream_t stream,
                                                float* dbias_partial = nullptr, bool gelu = false);

// x's 1x128 codes (q [rows, cols], scale_inv [rows, ceil(cols/128)]: quantize_blockwise's) and x^T's (qt, scale_inv_t:
// quantize_blockwise_1x128_transposed's, with its dbias partials and gelu) from one read of x: one 256-thread block
// per 128 x 128 tile of x, staged in dynamic shared memory. Bit for bit the two launches'. dgelu_aux (optional, x's
// shape; not with gelu): quantize x * gelu'(dgelu_aux) rounded to T (math::dgelu_input, the gelu_backward kernel's
// bits) instead of x, the dbias partials of it.
template <class Q, class T>
cudaError_t quantize_blockwise_1x128_both(const T* x, int64_t rows, int64_t cols, Q* q, float* scale_inv, Q* qt,
                                          float* scale_inv_t, const math::ScaleFromAmax& scaling, cudaStream_t stream,
                                          float* dbias_partial = nullptr, bool gelu = false,
                                          const T* dgelu_aux = nullptr);

// out[i] = Out(float(q[i]) * *scale_inv).
template <class Out, class Q>
cudaError_t dequantize(const Q* q, Out* out, int64_t n, const float* scale_inv, cudaStream_t stream);

// out[r, c] = Out(float(q[r, c]) * scale_inv[layout.scale_index(r, c)]).
template <class Out, class Q>
cudaError_t dequantize_blockwise(const Q* q, Out* out, const float* scale_inv, const math::BlockScaleLayout& layout,
                                 cudaStream_t stream);

}  // namespace mpt::kernels::cuda
