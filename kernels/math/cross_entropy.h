// kernels/math/cross_entropy.h: fused softmax + cross-entropy row math and kernel parameters, for CPU and CUDA.
#pragma once

#include <cmath>
#include <cstdint>

#include "kernels/math/common.h"
#include "kernels/math/device_errors.h"
#include "kernels/math/exp.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::math {

// loss_r = logsumexp(logits_r) - logits_r[target_r] over rows of `vocab` logits; a row whose target is
// ignore_index has loss 0 and no gradient; a target outside [0, vocab) (and not ignore_index) gives a NaN
// loss and NaN gradients and is reported by the reduction step (bad_row), never read out of bounds.
// Statistics in opmath (float; double for double logits). Only logsumexp is saved for backward:
// exp(x - lse) <= 1 cannot overflow, so the row max is not needed again.
//
// Padded vocabularies (llm.c pads GPT-2's 50257 classes to 50304 for aligned GEMMs): `vocab` is always the
// number of classes, the columns [0, vocab) that take part in the softmax and that a target may name;
// `row_stride` is the number of elements between the starts of consecutive rows of logits (and dlogits),
// 0 meaning `vocab` (dense rows), otherwise >= vocab. The padding columns [vocab, row_stride) are never read;
// the backward writes 0 to them unless it accumulates (then it leaves them as they are).
template <class T, class I>
struct CrossEntropyForwardParams {
  const T* logits = nullptr;    // (rows, row_stride): columns [0, vocab) are read
  const I* targets = nullptr;   // (rows)
  opmath_t<T>* loss = nullptr;  // (rows)
  opmath_t<T>* lse = nullptr;   // (rows)
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t ignore_index = -100;
  int64_t row_stride = 0;       // elements from one row of logits to the next; 0: vocab
};

// The elements from one row to the next: row_stride, or vocab when it is 0 (either params struct).
template <class P>
MPT_HD MPT_INLINE int64_t ce_row_stride(const P& p) {
  return p.row_stride == 0 ? p.vocab : p.row_stride;
}

enum class CrossEntropyReduction : uint8_t { None, Mean, Sum };

// The per-batch step after the row kernel: count of non-ignored rows, the reduced loss (sum, or sum / count
// for Mean: 0 / 0 = NaN when every row is ignored), and the first row with an out-of-range target (-1 if none).
template <class T, class I>
struct CrossEntropyReduceParams {
  const opmath_t<T>* row_loss = nullptr;  // (rows), from the forward; null: only count and bad_row (reduction None)
  const I* targets = nullptr;             // (rows)
  opmath_t<T>* loss = nullptr;            // (1), written unless reduction is None
  opmath_t<T>* count = nullptr;           // (1): rows whose target is not ignore_index
  int64_t* bad_row = nullptr;             // (1)
  DeviceErrorSink errors;                 // CUDA: an out-of-range target is also reported here (deferred error)
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t ignore_index = -100;
  CrossEntropyReduction reduction = CrossEntropyReduction::Mean;
};

// dlogits_rj = (exp(logits_rj - lse_r) - [j == target_r]) * g_r with g_r = dloss[r * dloss_stride]
// (divided by *divisor when divisor is given: the Mean reduction's count), 0 for ignored rows. dlogits may
// be logits itself (the gradient overwrites the logits, llm.c's memory saving; accumulate must be false).
// With row_stride > vocab the padding columns [vocab, row_stride) of every dlogits row are set to 0 when not
// accumulating (so a fresh or in-place padded gradient is exact) and left untouched when accumulating.
template <class T, class I>
struct CrossEntropyBackwardParams {
  const T* logits = nullptr;              // (rows, row_stride): columns [0, vocab) are read
  const I* targets = nullptr;             // (rows)
  const opmath_t<T>* lse = nullptr;       // (rows)
  const opmath_t<T>* dloss = nullptr;     // (1) or (rows)
  const opmath_t<T>* divisor = nullptr;   // (1) or null
  T* dlogits = nullptr;                   // (rows, row_stride)
  int64_t dloss_stride = 0;               // 0: one dloss for every row, 1: one per row
  int64_t rows = 0;
  int64_t vocab = 0;
  int64_t ignore_index = -100;
  bool accumulate = false;                // dlogits += ... instead of =
  int64_t row_stride = 0;                 // elements from one row of logits / dlogits to the next; 0: vocab
};

// The forward and the backward in one pass over each row, for a loss whose upstream gradient is known before its
// forward (llm.c's fused classifier: the trainer's 1 / micro-batches x loss scale): the forward's loss and lse per
// row, and dlogits = (softmax - onehot) * *dloss (/ *divisor) as the backward params would write it, with the same
// bits. Mean's divisor is the count of counted rows, so it comes from a reduction over the targets run before
// (CrossEntropyReduceParams with row_loss null). dlogits may be forward.logits (in place: each row is read before
// it is overwritten); it is never accumulated into, and its padding columns get 0.
template <class T, class I>
struct CrossEntropyFusedParams {
  CrossEntropyForwardParams<T, I> forward;
  const opmath_t<T>* dloss = nullptr;    // (1): the loss's upstream gradient
  const opmath_t<T>* divisor = nullptr;  // (1) or null
  T* dlogits = nullptr;                  // (rows, row_stride)
};

template <class F>
MPT_HD MPT_INLINE F ce_exp(F x) {
  return exp_op(x);
}

MPT_HD MPT_INLINE bool ce_target_in_range(int64_t target, int64_t vocab) { return target >= 0 && target < vocab; }

// A running (max, sum of exp(x - max)) over a stream of values: logsumexp = max + log(sum). -inf entries
// (masked logits) add nothing; a NaN makes the sum NaN; a row of only -inf gives sum 0 and lse -inf.
template <class F>
struct OnlineLogSumExp {
  F max = -INFINITY;
  F sum = 0;

  MPT_HD MPT_INLINE void add(F x) {
    if (x > max) {
      sum = sum * ce_exp(max - x) + F(1);
      max = x;
    } else if (!(x == -INFINITY)) {
      sum += ce_exp(x - max);
    }
  }

  // This partial's sum rescaled to a larger max (the row's), 0 when it saw nothing finite.
  MPT_HD MPT_INLINE F sum_at(F row_max) const { return sum == F(0) ? F(0) : sum * ce_exp(max - row_max); }
};

template <class F>
MPT_HD MPT_INLINE F ce_row_loss(F lse, F target_logit) {
  return lse - target_logit;
}

// g_r of a row whose target is `target`: 0 when ignored, NaN when out of range, else dloss (/ *divisor).
template <class F>
MPT_HD MPT_INLINE F ce_row_grad_scale(int64_t target, int64_t ignore_index, int64_t vocab, F dloss,
                                      const F* divisor) {
  if (target == ignore_index) return F(0);
  if (!ce_target_in_range(target, vocab)) return F(NAN);
  if (divisor != nullptr) dloss /= *divisor;
  return dloss;
}

template <class T, class I>
MPT_HD MPT_INLINE opmath_t<T> ce_grad_scale(const CrossEntropyBackwardParams<T, I>& p, int64_t row) {
  return ce_row_grad_scale(static_cast<int64_t>(p.targets[row]), p.ignore_index, p.vocab,
                           p.dloss[row * p.dloss_stride], p.divisor);
}

template <class T, class I>
MPT_HD MPT_INLINE opmath_t<T> ce_grad_scale(const CrossEntropyFusedParams<T, I>& p, int64_t row) {
  const CrossEntropyForwardParams<T, I>& f = p.forward;
  return ce_row_grad_scale(static_cast<int64_t>(f.targets[row]), f.ignore_index, f.vocab, *p.dloss, p.divisor);
}

// One gradient element: (softmax_j - onehot_j) * scale.
template <class F>
MPT_HD MPT_INLINE F ce_dlogit(F x, F lse, bool is_target, F scale) {
  return (ce_exp(x - lse) - (is_target ? F(1) : F(0))) * scale;
}

}  // namespace mpt::kernels::math
