// kernels/cuda/quantized_gemm.h: the CUDA quantized GEMMs' own kernels: the dequantizing epilogue of the codes x codes GEMMs on cuBLASLt and the weight-only decoding GEMV; the CPU twin is kernels/cpu/quantized_gemm.h.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/fake_quant.h"

namespace mpt::kernels::cuda {

// y[i, j] = math::dequantize_accumulator(acc[i, j], sa[i], sb[j], bias, j) rounded to Out, for acc [m, n] row-major
// (the GEMM's INT32 or FP32 sums of code products), sa [m] (the input's per-token scales), sb [n] (the weight's
// per-channel scales), bias [n] optional. Acc in {int32_t, float}; Out in {float, bf16, f16}. Asynchronous;
// cudaErrorInvalidValue for negative sizes or a missing required pointer.
template <class Acc, class Out>
cudaError_t dequantize_accumulators(const Acc* acc, int64_t m, int64_t n, const float* sa, const float* sb,
                                    const float* bias, Out* y, cudaStream_t stream);

// The decoding GEMV with the weight read as codes (weight-only INT4 / INT8 / E4M3, 1 byte per weight instead of 2-4,
// and no dequantized copy): y [m, w.n] = x [m, w.k] W^T + bias for m <= kWeightOnlyGemvMaxRows rows, W's values
// code * scale formed in registers (the GEMM's prologue). One warp per output column j: each lane reads 4 codes at
// a time, sums x * code over them and multiplies by their group's scale into one FP32 accumulator per row; the
// lanes are added by a butterfly; bias (f32, optional) last, one rounding to T. T in {float, bf16, f16}. Needs
// weight_only_gemv_ok(m, w) (w.k and w.group multiples of 4); cudaErrorInvalidValue otherwise.
inline constexpr int64_t kWeightOnlyGemvMaxRows = 16;
inline bool weight_only_gemv_ok(int64_t m, const math::GroupWeights& w) {
  return m >= 0 && m <= kWeightOnlyGemvMaxRows && w.k % 4 == 0 && w.group > 0 && w.group % 4 == 0;
}
template <class T>
cudaError_t weight_only_gemv(const T* x, int64_t m, const math::GroupWeights& w, const float* bias, T* y,
                             cudaStream_t stream);

}  // namespace mpt::kernels::cuda
