// kernels/cuda/quantized_gemm.h: the dequantizing epilogue of the CUDA quantized GEMMs (INT8 x INT8 -> INT32 and FP8 x FP8 -> FP32 on cuBLASLt); the CPU twin is kernels/cpu/quantized_gemm.h.
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

}  // namespace mpt::kernels::cuda
