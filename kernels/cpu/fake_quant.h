// kernels/cpu/fake_quant.h: group-wise fake quantization on the CPU (the math is kernels/math/fake_quant.h; the CUDA twin is kernels/cuda/fake_quant.h).
#pragma once

#include <cstdint>

#include "kernels/math/fake_quant.h"

namespace mpt::kernels::cpu {

// x holds `groups` contiguous groups of `group_size` elements. For each group: scales[g] = fq.scale(amax of the
// group) (amax NaN-propagating); y[i] = fq.value(x[i], s) rounded to T when y is not null; codes[i] =
// fq.code_byte(x[i], s) when codes is not null. T in {float, f16, bf16}. OpenMP over groups.
template <class T>
void fake_quantize(const T* x, T* y, int64_t groups, int64_t group_size, const math::FakeQuant& fq, float* scales,
                   int8_t* codes);

// LSQ with given scales (math::LearnedQuant): y[i] = lq.value(x[i], scales[g]) rounded to T and codes[i] = its
// integer code (each when not null), for `groups` contiguous groups of `group_size`.
template <class T>
void learned_quantize(const T* x, T* y, int8_t* codes, int64_t groups, int64_t group_size, const float* scales,
                      const math::LearnedQuant& lq);

// Its backward: dx[i] = dy[i] * lq.grad_x (rounded to T) and dscales[g] = grad_scale * sum_i dy[i] * lq.grad_s, the
// sum in FP32 in element order. Either output may be null.
template <class T>
void learned_quantize_backward(const T* x, const T* dy, T* dx, float* dscales, int64_t groups, int64_t group_size,
                               const float* scales, const math::LearnedQuant& lq, float grad_scale);

}  // namespace mpt::kernels::cpu
