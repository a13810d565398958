// kernels/cpu/softmax.cpp: row softmax forward and backward, OpenMP over rows, the math from kernels/math/softmax.h.
#include "kernels/cpu/softmax.h"

#include <cmath>

#include "kernels/cpu/row_convert.h"
#include "kernels/cpu/row_math.h"
#include "kernels/math/numerics.h"
#include "kernels/math/opmath.h"
#include "kernels/math/softmax.h"

namespace mpt::kernels::cpu {

template <class T>
void softmax_rows(const T* x, T* y, int64_t rows, int64_t cols) {
  using F = math::opmath_t<T>;
  if (rows <= 0 || cols <= 0) return;
#pragma omp parallel if (rows * cols > (1 << 15))
  {
    OpmathRow<T> in(cols), out(cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const F* xr = in.load(x + r * cols, cols);
      // The max is exact in any order; the sum's order is this CPU's (kernels/cpu/row_math.h).
      const F row_max = rowmath::max(xr, cols);
      const auto row = math::SoftmaxRowOf<F>::from_max_and_sum(row_max, rowmath::sum_exp(xr, cols, row_max));
      rowmath::exp_scale(xr, out.out(y + r * cols), cols, row.row_max, row.inv_sum);
      out.store(y + r * cols, cols);
    }
  }
}

template <class T>
void softmax_backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool accumulate) {
  using F = decltype(math::softmax_load(T{}));
  if (rows <= 0 || cols <= 0) return;
#pragma omp parallel for schedule(static) if (rows * cols > (1 << 15))
  for (int64_t r = 0; r < rows; ++r) {
    const T* dyr = dy + r * cols;
    const T* yr = y + r * cols;
    T* dxr = dx + r * cols;
    F dot = 0;
#pragma omp simd reduction(+ : dot)
    for (int64_t c = 0; c < cols; ++c) dot += math::softmax_load(dyr[c]) * math::softmax_load(yr[c]);
    for (int64_t c = 0; c < cols; ++c) {
      F v = math::softmax_backward(math::softmax_load(yr[c]), math::softmax_load(dyr[c]), dot);
      if (accumulate) v += math::softmax_load(dxr[c]);
      dxr[c] = static_cast<T>(v);
    }
  }
}

#define MPT_INSTANTIATE(T)                                                    \
  template void softmax_rows<T>(const T*, T*, int64_t, int64_t);              \
  template void softmax_backward_rows<T>(const T*, const T*, T*, int64_t, int64_t, bool);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
