// kernels/cpu/cross_entropy.cpp: softmax + cross-entropy rows on the CPU, the math from kernels/math/cross_entropy.h.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>

#include "kernels/cpu/row_convert.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kParallelElements = 1 << 15;

// The row loops, as templates over F (float or double) compiled for the baseline ISA and, for float, cloned for
// AVX-512 (chosen at load time). The kernels are built with -ffp-contract=off, so the elementwise results are the
// same bits in every clone; the double sum's order differs with the vector width (far below float rounding).
template <class F>
MPT_INLINE F row_max(const F* x, int64_t n) {
  F max = -INFINITY;
#pragma omp simd reduction(max : max)
  for (int64_t c = 0; c < n; ++c) max = x[c] > max ? x[c] : max;
  return max;
}

// The exps are opmath; their sum is double, so its rounding error does not grow with the vocabulary.
template <class F>
MPT_INLINE double row_sum_exp(const F* x, int64_t n, F max) {
  double sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int64_t c = 0; c < n; ++c) sum += static_cast<double>(math::ce_exp(x[c] - max));
  return sum;
}

// d[c] = old[c] + dlogit (old may be null); one read of x[c] and old[c] before the write of d[c], which may alias
// either (in place, or accumulating in F).
template <class F>
MPT_INLINE void row_dlogits(const F* x, const F* old, F* d, int64_t n, F lse, int64_t t, F scale) {
  if (old != nullptr) {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) d[c] = old[c] + math::ce_dlogit(x[c], lse, c == t, scale);
  } else {
#pragma omp simd
    for (int64_t c = 0; c < n; ++c) d[c] = math::ce_dlogit(x[c], lse, c == t, scale);
  }
}

#define MPT_CE_CLONES __attribute__((target_clones("avx512f", "default")))
MPT_CE_CLONES float row_max_f(const float* x, int64_t n) { return row_max(x, n); }
MPT_CE_CLONES double row_sum_exp_f(const float* x, int64_t n, float max) { return row_sum_exp(x, n, max); }
MPT_CE_CLONES void row_dlogits_f(const float* x, const float* old, float* d, int64_t n, float lse, int64_t t,
                                 float scale) {
  row_dlogits(x, old, d, n, lse, t, scale);
}
#undef MPT_CE_CLONES

float row_max_of(const float* x, int64_t n) { return row_max_f(x, n); }
double row_max_of(const double* x, int64_t n) { return row_max(x, n); }
double row_sum_exp_of(const float* x, int64_t n, float max) { return row_sum_exp_f(x, n, max); }
double row_sum_exp_of(const double* x, int64_t n, double max) { return row_sum_exp(x, n, max); }
void row_dlogits_of(const float* x, const float* old, float* d, int64_t n, float lse, int64_t t, float scale) {
  row_dlogits_f(x, old, d, n, lse, t, scale);
}
void row_dlogits_of(const double* x, const double* old, double* d, int64_t n, double lse, int64_t t, double scale) {
  row_dlogits(x, old, d, n, lse, t, scale);
}

}  // namespace

template <class T, class I>
void cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p) {
  using F = math::opmath_t<T>;
  if (p.rows <= 0 || p.vocab <= 0) return;
  const int64_t n = p.vocab;
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> row(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const F* x = row.load(p.logits + r * n, n);
      const F max = row_max_of(x, n);
      const double sum = row_sum_exp_of(x, n, max);
      const F lse = max + math::log_op(static_cast<F>(sum));
      const int64_t t = static_cast<int64_t>(p.targets[r]);
      p.lse[r] = lse;
      p.loss[r] = t == p.ignore_index                   ? F(0)
                  : math::ce_target_in_range(t, n) ? math::ce_row_loss(lse, x[t])
                                                        : F(NAN);
    }
  }
}

template <class T, class I>
void cross_entropy_reduce(const math::CrossEntropyReduceParams<T, I>& p) {
  using F = math::opmath_t<T>;
  double total = 0;
  int64_t count = 0, bad = -1;
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t t = static_cast<int64_t>(p.targets[r]);
    if (t == p.ignore_index) continue;
    if (!math::ce_target_in_range(t, p.vocab) && bad < 0) bad = r;
    ++count;
    total += static_cast<double>(p.row_loss[r]);
  }
  *p.count = static_cast<F>(count);
  *p.bad_row = bad;
  if (p.reduction == math::CrossEntropyReduction::Sum) *p.loss = static_cast<F>(total);
  if (p.reduction == math::CrossEntropyReduction::Mean) *p.loss = static_cast<F>(total / static_cast<double>(count));
}

template <class T, class I>
void cross_entropy_backward(const math::CrossEntropyBackwardParams<T, I>& p) {
  using F = math::opmath_t<T>;
  if (p.rows <= 0 || p.vocab <= 0) return;
  const int64_t n = p.vocab;
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> xrow(n), drow(n), oldrow(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const F* x = xrow.load(p.logits + r * n, n);
      const F* old = p.accumulate ? oldrow.load(p.dlogits + r * n, n) : nullptr;
      F* d = drow.out(p.dlogits + r * n);
      const F scale = math::ce_grad_scale(p, r), lse = p.lse[r];
      const int64_t t = static_cast<int64_t>(p.targets[r]);
      row_dlogits_of(x, old, d, n, lse, t, scale);
      drow.store(p.dlogits + r * n, n);
    }
  }
}

#define MPT_INSTANTIATE(T, I)                                                                 \
  template void cross_entropy_forward<T, I>(const math::CrossEntropyForwardParams<T, I>&); \
  template void cross_entropy_reduce<T, I>(const math::CrossEntropyReduceParams<T, I>&);   \
  template void cross_entropy_backward<T, I>(const math::CrossEntropyBackwardParams<T, I>&);
#define MPT_INSTANTIATE_TARGETS(T) MPT_INSTANTIATE(T, int32_t) MPT_INSTANTIATE(T, int64_t)
MPT_INSTANTIATE_TARGETS(float)
MPT_INSTANTIATE_TARGETS(double)
MPT_INSTANTIATE_TARGETS(f16)
MPT_INSTANTIATE_TARGETS(bf16)
#undef MPT_INSTANTIATE_TARGETS
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
