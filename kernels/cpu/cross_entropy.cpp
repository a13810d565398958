// kernels/cpu/cross_entropy.cpp: softmax + cross-entropy rows on the CPU, the math from kernels/math/cross_entropy.h.
#include "kernels/cpu/cross_entropy.h"

#include <cmath>
#include <type_traits>

#include "kernels/cpu/row_convert.h"
#include "kernels/cpu/row_math.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kParallelElements = 1 << 15;

}  // namespace

template <class T, class I>
void cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p) {
  using F = math::opmath_t<T>;
  if (p.rows <= 0 || p.vocab <= 0) return;
  const int64_t n = p.vocab, stride = math::ce_row_stride(p);  // the op checked stride >= vocab
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> row(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const F* x = row.load(p.logits + r * stride, n);
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
  const int64_t n = p.vocab, stride = math::ce_row_stride(p);  // the op checked stride >= vocab
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    OpmathRow<T> xrow(n), drow(n), oldrow(n);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) {
      const F* x = xrow.load(p.logits + r * stride, n);
      T* dst = p.dlogits + r * stride;
      const F* old = p.accumulate ? oldrow.load(dst, n) : nullptr;
      F* d = drow.out(dst);
      const F scale = math::ce_grad_scale(p, r), lse = p.lse[r];
      const int64_t t = static_cast<int64_t>(p.targets[r]);
      rowmath::ce_dlogits(x, old, d, n, lse, t, scale);
      drow.store(dst, n);
      // The padding columns take no part in the softmax: their gradient is 0 (kept as they are when accumulating).
      if (!p.accumulate) {
        for (int64_t c = n; c < stride; ++c) dst[c] = math::store<T>(F(0));
      }
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
