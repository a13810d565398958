// kernels/cpu/softmax.cpp: row softmax forward, OpenMP over rows, the per-element math from kernels/math/softmax.h.
#include "kernels/cpu/softmax.h"

#include <cmath>

#include "kernels/math/numerics.h"
#include "kernels/math/softmax.h"

namespace mpt::kernels::cpu {

template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  if (rows <= 0 || cols <= 0) return;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    float row_max = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) row_max = math::softmax_max(row_max, math::softmax_load(xr[c]));
    float sum = 0.0f;
    for (int64_t c = 0; c < cols; ++c) sum += math::softmax_exp(math::softmax_load(xr[c]), row_max);
    const auto row = math::SoftmaxRow::from_max_and_sum(row_max, sum);
    for (int64_t c = 0; c < cols; ++c) yr[c] = row.output<T>(math::softmax_load(xr[c]));
  }
}

template void softmax_rows<float>(const float*, float*, int64_t, int64_t);
template void softmax_rows<f16>(const f16*, f16*, int64_t, int64_t);
template void softmax_rows<bf16>(const bf16*, bf16*, int64_t, int64_t);

}  // namespace mpt::kernels::cpu
