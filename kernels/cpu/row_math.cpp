// kernels/cpu/row_math.cpp: the row primitives of kernels/cpu/row_math.h, one template body, float clones per ISA.
#include "kernels/cpu/row_math.h"

#include <cmath>

#include "kernels/math/cross_entropy.h"
#include "kernels/math/exp.h"

namespace mpt::kernels::cpu::rowmath {

namespace {

template <class F>
MPT_INLINE F max_t(const F* x, int64_t n) {
  F m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < n; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

template <class S, class F>
MPT_INLINE S sum_exp_t(const F* x, int64_t n, F shift) {
  S sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c) sum += static_cast<S>(math::exp_op(x[c] - shift));
  return sum;
}

template <class F>
MPT_INLINE void exp_scale_t(const F* x, F* y, int64_t n, F shift, F mul) {
#pragma omp simd
  for (int64_t c = 0; c < n; ++c) y[c] = math::exp_op(x[c] - shift) * mul;
}

template <class F>
MPT_INLINE void ce_dlogits_t(const F* x, const F* old, F* d, int64_t n, F lse, int64_t t, F scale) {
  if (old != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) d[c] = old[c] + math::ce_dlogit(x[c], lse, c == t, scale);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) d[c] = math::ce_dlogit(x[c], lse, c == t, scale);
  }
}

}  // namespace

// GCC's function multi-versioning: an ifunc picks the clone once, when the library is loaded.
#define MPT_ROW_CLONES __attribute__((target_clones("avx512f", "arch=haswell", "default")))

MPT_ROW_CLONES float max(const float* x, int64_t n) { return max_t(x, n); }
MPT_ROW_CLONES float sum_exp(const float* x, int64_t n, float shift) { return sum_exp_t<float>(x, n, shift); }
MPT_ROW_CLONES double sum_exp_f64(const float* x, int64_t n, float shift) { return sum_exp_t<double>(x, n, shift); }
MPT_ROW_CLONES void exp_scale(const float* x, float* y, int64_t n, float shift, float mul) {
  exp_scale_t(x, y, n, shift, mul);
}
MPT_ROW_CLONES void ce_dlogits(const float* x, const float* old, float* d, int64_t n, float lse, int64_t target,
                               float scale) {
  ce_dlogits_t(x, old, d, n, lse, target, scale);
}

#undef MPT_ROW_CLONES

double max(const double* x, int64_t n) { return max_t(x, n); }
double sum_exp(const double* x, int64_t n, double shift) { return sum_exp_t<double>(x, n, shift); }
void exp_scale(const double* x, double* y, int64_t n, double shift, double mul) { exp_scale_t(x, y, n, shift, mul); }
void ce_dlogits(const double* x, const double* old, double* d, int64_t n, double lse, int64_t target, double scale) {
  ce_dlogits_t(x, old, d, n, lse, target, scale);
}

}  // namespace mpt::kernels::cpu::rowmath
