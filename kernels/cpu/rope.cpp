// kernels/cpu/rope.cpp: rotary position embedding rows on the CPU (OpenMP over rows, the pairs vectorised).
#include "kernels/cpu/rope.h"

#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

template <class T, class F>
void rope(const T* x, T* y, const F* cos, const F* sin, const RopeShape& s) {
  const int64_t half = s.head_dim / 2;
  const F sign = s.inverse ? F(-1) : F(1);
#pragma omp parallel for schedule(static) if (s.rows * s.head_dim > kParallelThreshold)
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t t = (r / s.heads) % s.seq;
    const F* c = cos + (t + s.position0) * s.table_ld;
    const F* sn = sin + (t + s.position0) * s.table_ld;
    const T* xr = x + r * s.head_dim;
    T* yr = y + r * s.head_dim;
#pragma omp simd
    for (int64_t i = 0; i < half; ++i) {
      F y1, y2;
      math::rope_pair<F>(math::load(xr[i]), math::load(xr[i + half]), c[i], sign * sn[i], y1, y2);
      yr[i] = math::store<T>(y1);
      yr[i + half] = math::store<T>(y2);
    }
  }
}

template void rope<float, float>(const float*, float*, const float*, const float*, const RopeShape&);
template void rope<double, double>(const double*, double*, const double*, const double*, const RopeShape&);
template void rope<f16, float>(const f16*, f16*, const float*, const float*, const RopeShape&);
template void rope<bf16, float>(const bf16*, bf16*, const float*, const float*, const RopeShape&);

}  // namespace mpt::kernels::cpu
