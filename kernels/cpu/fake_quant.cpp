// kernels/cpu/fake_quant.cpp: group-wise fake quantization on the CPU: one group's amax, scale, then its codes and values.
#include "kernels/cpu/fake_quant.h"

#include "kernels/math/quantize.h"

namespace mpt::kernels::cpu {

template <class T>
void fake_quantize(const T* x, T* y, int64_t groups, int64_t group_size, const math::FakeQuant& fq, float* scales,
                   int8_t* codes) {
#pragma omp parallel for schedule(static) if (groups * group_size > (1 << 16) && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const T* xg = x + g * group_size;
    uint32_t m = 0;
    for (int64_t i = 0; i < group_size; ++i) m = math::AmaxBitsMax{}(m, math::abs_bits(xg[i]));
    const float s = fq.scale(math::amax_from_bits(m));
    scales[g] = s;
    if (y != nullptr) {
      T* yg = y + g * group_size;
      for (int64_t i = 0; i < group_size; ++i) yg[i] = scalar_cast<T>(fq.value(scalar_cast<float>(xg[i]), s));
    }
    if (codes != nullptr) {
      int8_t* cg = codes + g * group_size;
      for (int64_t i = 0; i < group_size; ++i) cg[i] = fq.code_byte(scalar_cast<float>(xg[i]), s);
    }
  }
}

template <class T>
void learned_quantize(const T* x, T* y, int8_t* codes, int64_t groups, int64_t group_size, const float* scales,
                      const math::LearnedQuant& lq) {
#pragma omp parallel for schedule(static) if (groups * group_size > (1 << 16) && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const float s = scales[g];
    for (int64_t i = g * group_size; i < (g + 1) * group_size; ++i) {
      const float xv = scalar_cast<float>(x[i]);
      if (y != nullptr) y[i] = scalar_cast<T>(lq.value(xv, s));
      if (codes != nullptr) codes[i] = lq.code_byte(xv, s);
    }
  }
}

template <class T>
void learned_quantize_backward(const T* x, const T* dy, T* dx, float* dscales, int64_t groups, int64_t group_size,
                               const float* scales, const math::LearnedQuant& lq, float grad_scale) {
#pragma omp parallel for schedule(static) if (groups * group_size > (1 << 16) && groups > 1)
  for (int64_t g = 0; g < groups; ++g) {
    const float s = scales[g];
    float sum = 0.0f;
    for (int64_t i = g * group_size; i < (g + 1) * group_size; ++i) {
      const float xv = scalar_cast<float>(x[i]), d = scalar_cast<float>(dy[i]);
      if (dx != nullptr) dx[i] = scalar_cast<T>(d * lq.grad_x(xv, s));
      sum += d * lq.grad_s(xv, s);
    }
    if (dscales != nullptr) dscales[g] = grad_scale * sum;
  }
}

#define MPT_LSQ_CPU(T)                                                                                               \
  template void learned_quantize<T>(const T*, T*, int8_t*, int64_t, int64_t, const float*,                    \
                                     const math::LearnedQuant&);       \
  template void learned_quantize_backward<T>(const T*, const T*, T*, float*, int64_t, int64_t, const float*,       \
                                             const math::LearnedQuant&, float);
MPT_LSQ_CPU(float)
MPT_LSQ_CPU(f16)
MPT_LSQ_CPU(bf16)
#undef MPT_LSQ_CPU

template void fake_quantize<float>(const float*, float*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);
template void fake_quantize<f16>(const f16*, f16*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);
template void fake_quantize<bf16>(const bf16*, bf16*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);

}  // namespace mpt::kernels::cpu
