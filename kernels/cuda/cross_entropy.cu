// kernels/cuda/cross_entropy.cu: softmax + cross-entropy, one block per row, math from kernels/math/cross_entropy.h.
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_io.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kReduceThreads = 1024;

// A row as [0, head) scalar elements, [head, body_end) whole 16-byte vectors, [body_end, n) scalar
// elements. Without kVec everything is scalar (head = n).
struct RowSplit {
  int64_t head;
  int64_t body_end;
};

template <class T, bool kVec>
MPT_DEVICE MPT_INLINE RowSplit split_row(const T* row, int64_t n) {
  if constexpr (!kVec) {
    return {n, n};
  } else {
    constexpr int64_t kWidth = Vec16<T>::kSize;
    int64_t head = static_cast<int64_t>((16 - reinterpret_cast<uintptr_t>(row) % 16) % 16 / sizeof(T));
    if (head > n) head = n;
    return {head, head + (n - head) / kWidth * kWidth};
  }
}

// f(c, value) for every element of the row this thread owns; f(c, pack) receives whole vectors.
template <class T, bool kVec, class Scalar, class Vector>
MPT_DEVICE MPT_INLINE void for_row(const T* row, int64_t n, Scalar scalar, Vector vector) {
  const RowSplit s = split_row<T, kVec>(row, n);
  const int64_t tid = threadIdx.x, threads = blockDim.x;
  for (int64_t c = tid; c < s.head; c += threads) scalar(c);
  if constexpr (kVec) {
    constexpr int64_t kWidth = Vec16<T>::kSize;
    for (int64_t c = s.head + tid * kWidth; c < s.body_end; c += threads * kWidth) vector(c);
    for (int64_t c = s.body_end + tid; c < n; c += threads) scalar(c);
  }
}

// The row's logsumexp, in every thread of the block: each thread's online (max, sum) over its share of the row,
// then the block's max and sum (the same order for the forward and the fused kernel: the same bits).
template <class T, bool kVec>
MPT_DEVICE MPT_INLINE float block_row_lse(const T* x, int64_t n, float* scratch) {
  math::OnlineLogSumExp<float> acc;
  for_row<T, kVec>(
      x, n, [&](int64_t c) { acc.add(math::load(x[c])); },
      [&](int64_t c) {
        const RowPack<T, true> v = RowPack<T, true>::load(x + c);
#pragma unroll
        for (int k = 0; k < RowPack<T, true>::kWidth; ++k) acc.add(v.v[k]);
      });
  const float row_max = math::block_allreduce(acc.max, math::MaxOp{}, -INFINITY, scratch);
  const float sum = math::block_allreduce(acc.sum_at(row_max), math::SumOp{}, 0.0f, scratch);
  return row_max + math::log_op(sum);
}

template <class T, class I, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_forward_kernel(const math::CrossEntropyForwardParams<T, I> p) {
  __shared__ float scratch[math::kBlockReduceScratch];
  const int64_t n = p.vocab;
  const T* x = p.logits + static_cast<int64_t>(blockIdx.x) * math::ce_row_stride(p);
  const float lse = block_row_lse<T, kVec>(x, n, scratch);
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(p.targets[blockIdx.x]);
    p.lse[blockIdx.x] = lse;
    p.loss[blockIdx.x] = t == p.ignore_index              ? 0.0f
                         : math::ce_target_in_range(t, n) ? math::ce_row_loss(lse, math::load(x[t]))
                                                          : NAN;
  }
}

// The forward and the backward of a row in one kernel (math::CrossEntropyFusedParams): the row is read for the
// online max and sum, then again (a 100 KB row of GPT-2's bf16 logits is still in L2) to write its gradient, which
// may overwrite it: the target's logit is read before the block reductions, and every read of the first pass
// happens before them.
// kRead: the first pass's vector loads (as cross_entropy_forward takes them: the same sums, so the same lse); kWrite:
// the gradient pass's (as cross_entropy_backward, needing x and d to share their alignment).
template <class T, class I, bool kRead, bool kWrite>
__global__ void __launch_bounds__(kMaxThreads, 1)
    cross_entropy_forward_backward_kernel(const math::CrossEntropyFusedParams<T, I> p) {
  __shared__ float scratch[math::kBlockReduceScratch];
  const int64_t n = p.forward.vocab, stride = math::ce_row_stride(p.forward);
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * stride;
  const T* x = p.forward.logits + offset;
  __shared__ float target_logit;  // read before any write; shared, so no thread holds it through the passes
  if (threadIdx.x == 0) {
    const int64_t t = static_cast<int64_t>(p.forward.targets[blockIdx.x]);
    target_logit = math::ce_target_in_range(t, n) ? math::load(x[t]) : 0.0f;
  }
  const float lse = block_row_lse<T, kRead>(x, n, scratch);
  const int64_t t = static_cast<int64_t>(p.forward.targets[blockIdx.x]);
  if (threadIdx.x == 0) {
    p.forward.lse[blockIdx.x] = lse;
    p.forward.loss[blockIdx.x] = t == p.forward.ignore_index        ? 0.0f
                                 : math::ce_target_in_range(t, n) ? math::ce_row_loss(lse, target_logit)
                                                                  : NAN;
  }
  const float scale = math::ce_grad_scale(p, blockIdx.x);
  T* d = p.dlogits + offset;
  // Every column as a non-target first (no comparison with the target in the loop), then the target's own element
  // from the saved logit, once every thread has written its share. The row is split at d (with kWrite, x and d share
  // their alignment: the same split), so nothing of the first pass's split stays live through the reductions.
  for_row<T, kWrite>(
      d, n, [&](int64_t c) { d[c] = math::store<T>(math::ce_dlogit(math::load(x[c]), lse, false, scale)); },
      [&](int64_t c) {
        using Pack = RowPack<T, true>;
        Pack v = Pack::load(x + c);
#pragma unroll
        for (int k = 0; k < Pack::kWidth; ++k) v.v[k] = math::ce_dlogit(v.v[k], lse, false, scale);
        v.store(d + c);
      });
  for (int64_t c = n + threadIdx.x; c < stride; c += blockDim.x) d[c] = math::store<T>(0.0f);
  __syncthreads();
  if (threadIdx.x == 0 && math::ce_target_in_range(t, n)) {
    d[t] = math::store<T>(math::ce_dlogit(target_logit, lse, true, scale));
  }
}

struct MinOp {
  MPT_HD MPT_INLINE int64_t operator()(int64_t a, int64_t b) const { return a < b ? a : b; }
};

// One block strides over the rows; the per-thread partials are combined by block reductions, so the order
// is fixed by the block size, which depends on rows alone.
template <class T, class I>
__global__ void __launch_bounds__(kReduceThreads)
    cross_entropy_reduce_kernel(const math::CrossEntropyReduceParams<T, I> p) {
  __shared__ float fscratch[math::kBlockReduceScratch];
  __shared__ int64_t iscratch[math::kBlockReduceScratch];
  constexpr int64_t kNone = INT64_MAX;
  float total = 0.0f;
  int64_t count = 0, bad = kNone;
  for (int64_t r = threadIdx.x; r < p.rows; r += blockDim.x) {
    const int64_t t = static_cast<int64_t>(p.targets[r]);
    if (t == p.ignore_index) continue;
    if (!math::ce_target_in_range(t, p.vocab) && bad == kNone) bad = r;
    ++count;
    if (p.row_loss != nullptr) total += p.row_loss[r];
  }
  total = math::block_allreduce(total, math::SumOp{}, 0.0f, fscratch);
  count = math::block_allreduce(count, math::SumOp{}, int64_t{0}, iscratch);
  bad = math::block_allreduce(bad, MinOp{}, kNone, iscratch);
  if (threadIdx.x == 0) {
    *p.count = static_cast<float>(count);
    *p.bad_row = bad == kNone ? -1 : bad;
    if (bad != kNone) p.errors.report(bad, static_cast<int64_t>(p.targets[bad]), p.vocab);
    if (p.reduction == math::CrossEntropyReduction::Sum) *p.loss = total;
    if (p.reduction == math::CrossEntropyReduction::Mean) *p.loss = total / static_cast<float>(count);
  }
}

// dlogits and logits rows share their alignment (the launcher checks), so one split serves both. The padding
// columns [vocab, stride) get 0 unless accumulating.
template <class T, class I, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    cross_entropy_backward_kernel(const math::CrossEntropyBackwardParams<T, I> p) {
  const int64_t n = p.vocab, stride = math::ce_row_stride(p), offset = static_cast<int64_t>(blockIdx.x) * stride;
  const T* x = p.logits + offset;
  T* d = p.dlogits + offset;
  const float scale = math::ce_grad_scale(p, blockIdx.x), lse = p.lse[blockIdx.x];
  const int64_t t = static_cast<int64_t>(p.targets[blockIdx.x]);
  for_row<T, kVec>(
      x, n,
      [&](int64_t c) {
        float v = math::ce_dlogit(math::load(x[c]), lse, c == t, scale);
        if (p.accumulate) v += math::load(d[c]);
        d[c] = math::store<T>(v);
      },
      [&](int64_t c) {
        using Pack = RowPack<T, true>;
        Pack v = Pack::load(x + c);
        Pack old;
        if (p.accumulate) old = Pack::load(d + c);
#pragma unroll
        for (int k = 0; k < Pack::kWidth; ++k) {
          v.v[k] = math::ce_dlogit(v.v[k], lse, c + k == t, scale);
          if (p.accumulate) v.v[k] += old.v[k];
        }
        v.store(d + c);
      });
  if (!p.accumulate) {
    for (int64_t c = n + threadIdx.x; c < stride; c += blockDim.x) d[c] = math::store<T>(0.0f);
  }
}

bool bad_shape(int64_t rows, int64_t vocab, int64_t row_stride) {
  return rows < 0 || vocab < 1 || rows > 2147483647 || (row_stride != 0 && row_stride < vocab);
}

template <class T>
int row_threads(int64_t vocab) {
  return row_block_threads((vocab + Vec16<T>::kSize - 1) / Vec16<T>::kSize, kMaxThreads);
}

}  // namespace

template <class T, class I>
cudaError_t cross_entropy_forward(const math::CrossEntropyForwardParams<T, I>& p, cudaStream_t stream) {
  if (bad_shape(p.rows, p.vocab, p.row_stride)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.logits == nullptr || p.targets == nullptr || p.loss == nullptr || p.lse == nullptr)
    return cudaErrorInvalidValue;
  // Every row can be split into aligned vectors as long as the elements themselves are aligned: each block finds
  // its own row's scalar head (split_row), so any row stride (padded or not, a multiple of 16 bytes or not) works.
  const bool vec = reinterpret_cast<uintptr_t>(p.logits) % sizeof(T) == 0;
  const uint64_t rows = static_cast<uint64_t>(p.rows);
  // logits (the vocab columns of each row; the padding is never read) and targets in; the loss and lse per row out.
  const LaunchConfig config{dim3(static_cast<unsigned>(p.rows)), dim3(static_cast<unsigned>(row_threads<T>(p.vocab))),
                            0, stream, rows * static_cast<uint64_t>(p.vocab) * sizeof(T) + rows * sizeof(I),
                            2 * rows * sizeof(math::opmath_t<T>)};
  return vec ? launch(cross_entropy_forward_kernel<T, I, true>, config, p)
             : launch(cross_entropy_forward_kernel<T, I, false>, config, p);
}

template <class T, class I>
cudaError_t cross_entropy_forward_backward(const math::CrossEntropyFusedParams<T, I>& p, cudaStream_t stream) {
  const math::CrossEntropyForwardParams<T, I>& f = p.forward;
  if (bad_shape(f.rows, f.vocab, f.row_stride)) return cudaErrorInvalidValue;
  if (f.rows == 0) return cudaSuccess;
  if (f.logits == nullptr || f.targets == nullptr || f.loss == nullptr || f.lse == nullptr || p.dloss == nullptr ||
      p.dlogits == nullptr)
    return cudaErrorInvalidValue;
  const auto x = reinterpret_cast<uintptr_t>(f.logits), d = reinterpret_cast<uintptr_t>(p.dlogits);
  const bool read_vec = x % sizeof(T) == 0;                                        // as cross_entropy_forward
  const bool write_vec = read_vec && (x > d ? x - d : d - x) % 16 == 0;           // as cross_entropy_backward
  // The forward's bytes (the row's second read, for the gradient, is counted once: it comes from L2), dloss and the
  // divisor; written: the loss and lse per row and every dlogits row in full (the padding gets 0).
  using F = math::opmath_t<T>;
  const uint64_t rows = static_cast<uint64_t>(f.rows);
  const uint64_t read_bytes = rows * static_cast<uint64_t>(f.vocab) * sizeof(T) + rows * sizeof(I) + sizeof(F) +
                              (p.divisor != nullptr ? sizeof(F) : 0);
  const uint64_t written_bytes =
      2 * rows * sizeof(F) + rows * static_cast<uint64_t>(math::ce_row_stride(f)) * sizeof(T);
  const LaunchConfig config{dim3(static_cast<unsigned>(f.rows)), dim3(static_cast<unsigned>(row_threads<T>(f.vocab))),
                            0, stream, read_bytes, written_bytes};
  if (write_vec) return launch(cross_entropy_forward_backward_kernel<T, I, true, true>, config, p);
  return read_vec ? launch(cross_entropy_forward_backward_kernel<T, I, true, false>, config, p)
                  : launch(cross_entropy_forward_backward_kernel<T, I, false, false>, config, p);
}

template <class T, class I>
cudaError_t cross_entropy_reduce(const math::CrossEntropyReduceParams<T, I>& p, cudaStream_t stream) {
  if (p.rows < 0 || p.vocab < 1) return cudaErrorInvalidValue;
  if (p.targets == nullptr || p.count == nullptr || p.bad_row == nullptr ||
      (p.reduction != math::CrossEntropyReduction::None && (p.loss == nullptr || p.row_loss == nullptr)))
    return cudaErrorInvalidValue;
  const int threads = row_block_threads(p.rows > 0 ? p.rows : 1, kReduceThreads);
  // row_loss and targets in; count, bad_row and (unless None) the loss out. The error sink's report of a bad
  // target happens only on bad data and is not counted.
  const uint64_t rows = static_cast<uint64_t>(p.rows);
  const uint64_t read_bytes = rows * ((p.row_loss != nullptr ? sizeof(math::opmath_t<T>) : 0) + sizeof(I));
  const uint64_t written_bytes = sizeof(math::opmath_t<T>) + sizeof(int64_t) +
                                 (p.reduction != math::CrossEntropyReduction::None ? sizeof(math::opmath_t<T>) : 0);
  return launch(cross_entropy_reduce_kernel<T, I>,
                LaunchConfig{dim3(1), dim3(static_cast<unsigned>(threads)), 0, stream, read_bytes, written_bytes}, p);
}

template <class T, class I>
cudaError_t cross_entropy_backward(const math::CrossEntropyBackwardParams<T, I>& p, cudaStream_t stream) {
  if (bad_shape(p.rows, p.vocab, p.row_stride)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.logits == nullptr || p.targets == nullptr || p.lse == nullptr || p.dloss == nullptr || p.dlogits == nullptr ||
      (p.accumulate && static_cast<const void*>(p.dlogits) == static_cast<const void*>(p.logits)))
    return cudaErrorInvalidValue;
  const auto x = reinterpret_cast<uintptr_t>(p.logits), d = reinterpret_cast<uintptr_t>(p.dlogits);
  // Row r of logits and of dlogits start at x + r * stride and d + r * stride: their distance, hence their relative
  // alignment, is the same on every row whatever the stride, and each block splits its own row (split_row), so the
  // vector path needs only aligned elements and a distance that is a multiple of 16 bytes.
  const bool vec = x % sizeof(T) == 0 && (x > d ? x - d : d - x) % 16 == 0;
  // logits (and dlogits when accumulating; the vocab columns), then per row the target, lse and dloss (one shared
  // when the stride is 0; counted for every row although ignored rows skip theirs), and the divisor when given.
  // Written: every dlogits row in full (the padding gets 0), or only its vocab columns when accumulating.
  const uint64_t rows = static_cast<uint64_t>(p.rows), elems = rows * static_cast<uint64_t>(p.vocab);
  const uint64_t written = p.accumulate ? elems : rows * static_cast<uint64_t>(math::ce_row_stride(p));
  using F = math::opmath_t<T>;
  const uint64_t read_bytes = elems * sizeof(T) * (p.accumulate ? 2 : 1) + rows * (sizeof(I) + sizeof(F)) +
                              (p.dloss_stride == 0 ? 1 : rows) * sizeof(F) + (p.divisor != nullptr ? sizeof(F) : 0);
  const LaunchConfig config{dim3(static_cast<unsigned>(p.rows)), dim3(static_cast<unsigned>(row_threads<T>(p.vocab))),
                            0, stream, read_bytes, written * sizeof(T)};
  return vec ? launch(cross_entropy_backward_kernel<T, I, true>, config, p)
             : launch(cross_entropy_backward_kernel<T, I, false>, config, p);
}

#define MPT_INSTANTIATE(T, I)                                                                                   \
  template cudaError_t cross_entropy_forward<T, I>(const math::CrossEntropyForwardParams<T, I>&, cudaStream_t); \
  template cudaError_t cross_entropy_reduce<T, I>(const math::CrossEntropyReduceParams<T, I>&, cudaStream_t);   \
  template cudaError_t cross_entropy_forward_backward<T, I>(const math::CrossEntropyFusedParams<T, I>&,          \
                                                            cudaStream_t);                                       \
  template cudaError_t cross_entropy_backward<T, I>(const math::CrossEntropyBackwardParams<T, I>&, cudaStream_t);
#define MPT_INSTANTIATE_TARGETS(T) MPT_INSTANTIATE(T, int32_t) MPT_INSTANTIATE(T, int64_t)
MPT_INSTANTIATE_TARGETS(float)
MPT_INSTANTIATE_TARGETS(f16)
MPT_INSTANTIATE_TARGETS(bf16)
#undef MPT_INSTANTIATE_TARGETS
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
