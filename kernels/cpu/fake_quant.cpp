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

template void fake_quantize<float>(const float*, float*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);
template void fake_quantize<f16>(const f16*, f16*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);
template void fake_quantize<bf16>(const bf16*, bf16*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*);

}  // namespace mpt::kernels::cpu
