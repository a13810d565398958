// kernels/cpu/rope.cpp: rotary position embedding rows on the CPU (OpenMP over rows, the pairs vectorised in the
// baseline / AVX2+FMA / AVX-512 clone that kernels/cpu/map.h picks).
#include "kernels/cpu/rope.h"

#include <cstring>

#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

namespace {

// One row's D / 2 pairs; rope_pair's fused multiply-adds need the FMA clones to be instructions, not libm calls.
#define MPT_ROPE_ROW(ATTR, SUFFIX)                                                                         \
  template <class T, class F>                                                                            \
  ATTR void rope_row##SUFFIX(const T* x, T* y, const F* c, const F* s, F sign, int64_t half) {            \
    _Pragma("omp simd")                                                                                  \
    for (int64_t i = 0; i < half; ++i) {                                                                 \
      F y1, y2;                                                                                          \
      math::rope_pair<F>(math::load(x[i]), math::load(x[i + half]), c[i], sign * s[i], y1, y2);          \
      y[i] = math::store<T>(y1);                                                                         \
      y[i + half] = math::store<T>(y2);                                                                  \
    }                                                                                                    \
  }
MPT_ROPE_ROW(, _generic)
MPT_ROPE_ROW(__attribute__((target("avx2,fma"))), _avx2)
MPT_ROPE_ROW(__attribute__((target("avx512f,avx512bw,avx512vl"))), _avx512)
#undef MPT_ROPE_ROW

}  // namespace

template <class T, class F>
void rope(const T* x, T* y, const F* cos, const F* sin, const RopeShape& s) {
  const int64_t half = s.head_dim / 2;
  const F sign = s.inverse ? F(-1) : F(1);
  const MapIsa isa = map_isa();
#pragma omp parallel for schedule(static) if (s.rows * s.head_dim > kParallelThreshold)
  for (int64_t r = 0; r < s.rows; ++r) {
    const int64_t t = (r / s.heads) % s.seq;
    const F* c = cos + (t + s.position0) * s.table_ld;
    const F* sn = sin + (t + s.position0) * s.table_ld;
    const T* xr = x + math::rope_row_offset(s, r, s.x_ld);
    T* yr = y + math::rope_row_offset(s, r, s.y_ld);
    if (!math::rope_row_rotated(s, r)) {
      std::memcpy(yr, xr, static_cast<size_t>(s.head_dim) * sizeof(T));
    } else if (isa == MapIsa::Avx512) {
      rope_row_avx512(xr, yr, c, sn, sign, half);
    } else if (isa == MapIsa::Avx2Fma) {
      rope_row_avx2(xr, yr, c, sn, sign, half);
    } else {
      rope_row_generic(xr, yr, c, sn, sign, half);
    }
  }
}

template void rope<float, float>(const float*, float*, const float*, const float*, const RopeShape&);
template void rope<double, double>(const double*, double*, const double*, const double*, const RopeShape&);
template void rope<f16, float>(const f16*, f16*, const float*, const float*, const RopeShape&);
template void rope<bf16, float>(const bf16*, bf16*, const float*, const float*, const RopeShape&);

}  // namespace mpt::kernels::cpu
