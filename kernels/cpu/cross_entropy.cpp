// kernels/cpu/cross_entropy.cpp: softmax + cross-entropy rows on the CPU, the math from kernels/math/cross_entropy.h.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/row_convert.h"
#include "kernels/cpu/row_math.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kParallelElements = 1 << 15;

// One row's forward from its opmath values x: lse and loss written, lse returned.
template <class T, class I>
math::opmath_t<T> forward_row(const math::CrossEntropyForwardParams<T, I>& p, const math::opmath_t<T>* x, int64_t r) {
  using F = math::opmath_t<T>;
  const int64_t n = p.vocab;
  const F max = rowmath::max(x, n);
  // The exps are opmath; their sum is double, so its rounding error does not grow with the vocabulary.
  double sum;
  if constexpr (std::is_same_v<F, float>) {
    sum = rowmath::sum_exp_f64(x, n, max);
  } else {
    sum = rowmath::sum_exp(x, n, max);
  }
  const F lse = max + math::log_op(static_cast<F>(sum));
  const int64_t t = static_cast<int64_t>(p.targets[r]);
  p.lse[r] = lse;
  p.loss[r] = t == p.ignore_index ? F(0) : math::ce_target_in_range(t, n) ? math::ce_row_loss(lse, x[t]) : F(NAN);
  return lse;
}

// One row's gradient written to dst (stride elements: the padding columns get 0) from its opmath values x.
template <class T>
void gradient_row(const math::opmath_t<T>* x, const math::opmath_t<T>* old, T* dst, OpmathRow<T>& drow, int64_t n,
                  int64_t stride, math::opmath_t<T> lse, int64_t target, math::opmath_t<T> scale) {
  using F = math::opmath_t<T>;
  F* d = drow.out(dst);
  rowmath::ce_dlogits(x, old, d, n, lse, target, scale);
  drow.store(dst, n);
  // The padding columns take no part in the softmax: their gradient is 0 (kept as they are when accumulating).
  if (old == nullptr) {
    for (int64_t c = n; c < stride; ++c) dst[c] = math::store<T>(F(0));
  }
}

}  // namespace

template <class T, class I>
void cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p) {
  if (p.rows <= 0 || p.vocab <= 0) return;
  const int64_t n = p.vocab, stride = math::ce_row_stride(p);  // the op checked stride >= vocab
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> row(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) forward_row(p, row.load(p.logits + r * stride, n), r);
  }
}

template <class T, class I>
void cross_entropy_forward_backward(const math::CrossEntropyFusedParams<T, I>& p) {
  const math::CrossEntropyForwardParams<T, I>& f = p.forward;
  if (f.rows <= 0 || f.vocab <= 0) return;
  const int64_t n = f.vocab, stride = math::ce_row_stride(f);
#pragma omp parallel if (f.rows * n > kParallelElements)
  {
    OpmathRow<T> xrow(n), drow(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < f.rows; ++r) {
      // The row is loaded once (into opmath), so dlogits may be the logits themselves.
      const auto* x = xrow.load(f.logits + r * stride, n);
      const auto lse = forward_row(f, x, r);
      gradient_row(x, static_cast<const math::opmath_t<T>*>(nullptr), p.dlogits + r * stride, drow, n, stride, lse,
                   static_cast<int64_t>(f.targets[r]), math::ce_grad_scale(p, r));
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
    if (p.row_loss != nullptr) total += static_cast<double>(p.row_loss[r]);
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
  const int64_t n = p.vocab, stride = math::ce_row_stride(p);  // the op checked stride >= vocab
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> xrow(n), drow(n), oldrow(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const F* x = xrow.load(p.logits + r * stride, n);
      T* dst = p.dlogits + r * stride;
      const F* old = p.accumulate ? oldrow.load(dst, n) : nullptr;
      gradient_row(x, old, dst, drow, n, stride, p.lse[r], static_cast<int64_t>(p.targets[r]),
                   math::ce_grad_scale(p, r));
    }
  }
}

#define MPT_INSTANTIATE(T, I)                                                                 \
  template void cross_entropy_forward<T, I>(const math::CrossEntropyForwardParams<T, I>&); \
  template void cross_entropy_reduce<T, I>(const math::CrossEntropyReduceParams<T, I>&);   \
  template void cross_entropy_forward_backward<T, I>(const math::CrossEntropyFusedParams<T, I>&); \
  template void cross_entropy_backward<T, I>(const math::CrossEntropyBackwardParams<T, I>&);
#define MPT_INSTANTIATE_TARGETS(T) MPT_INSTANTIATE(T, int32_t) MPT_INSTANTIATE(T, int64_t)
MPT_INSTANTIATE_TARGETS(float)
MPT_INSTANTIATE_TARGETS(double)
MPT_INSTANTIATE_TARGETS(f16)
MPT_INSTANTIATE_TARGETS(bf16)
#undef MPT_INSTANTIATE_TARGETS
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
