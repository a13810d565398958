// kernels/cuda/fake_quant.h: group-wise fake quantization on a CUDA stream (the CPU twin is kernels/cpu/fake_quant.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/math/fake_quant.h"

namespace mpt::kernels::cuda {

// cpu::fake_quantize on device pointers, bit for bit: scales[groups] (required) receives each group's scale, y (the
// values) and codes (the code bytes) are written when not null. One warp per group; a single group of more than
// 16384 elements (per-tensor scaling) takes three launches instead: the amax reduction, its scale, the elementwise
// pass. T in {float, f16, bf16}. Asynchronous; cudaErrorInvalidValue for a negative size or a missing required
// pointer.
template <class T>
cudaError_t fake_quantize(const T* x, T* y, int64_t groups, int64_t group_size, const math::FakeQuant& fq,
                          float* scales, int8_t* codes, cudaStream_t stream);

// out[i] = math::code_value(codes[i]) * scales[i / group] rounded to Out (cpu::dequantize_groups, bit for bit): the
// weight of a quantized Linear for a plain GEMM. Out in {float, bf16, f16}.
template <class Out>
cudaError_t dequantize_groups(const math::GroupWeights& w, Out* out, cudaStream_t stream);

// cpu::learned_quantize and its backward on device pointers (LSQ, math::LearnedQuant): the forward elementwise (the
// CPU's bits); the backward one warp per group, dscales[g] summed by the warp (FP32, another order than the CPU's).
template <class T>
cudaError_t learned_quantize(const T* x, T* y, int8_t* codes, int64_t groups, int64_t group_size,
                             const float* scales, const math::LearnedQuant& lq, cudaStream_t stream);
template <class T>
cudaError_t learned_quantize_backward(const T* x, const T* dy, T* dx, float* dscales, int64_t groups,
                                      int64_t group_size, const float* scales, const math::LearnedQuant& lq,
                                      float grad_scale, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
