// kernels/cpu/reduction.cpp: the canonical summation order of kernels/math/reduce_ops.h as OpenMP loops.
#include "kernels/cpu/reduction.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"
#include "kernels/math/reduce_ops.h"

namespace mpt::kernels::cpu {
namespace {

using math::kReduceChunk;
using math::kReduceLanes;

// Columns one work item reduces together when inner > 1: wide, so each item streams whole rows (narrow
// blocks of a wide row touch a new page per row and stall on the TLB), but split further when there are
// too few items for the threads. Blocking only partitions the columns: each column's order is fixed.
constexpr int64_t kMaxColumns = 1024;
constexpr int64_t kMinColumns = 64;
constexpr int64_t kWantedItems = 16;

int64_t column_block(int64_t inner, int64_t items_per_block) {
  const int64_t split = std::max<int64_t>(1, kWantedItems / std::max<int64_t>(1, items_per_block));
  const int64_t width = (inner + split - 1) / split;
  return std::clamp((width + 15) / 16 * 16, kMinColumns, kMaxColumns);
}

// reduce32 (kernels/math/reduce_ops.h) of f(x[0]), ..., f(x[m - 1]).
template <class F, class In, class Op>
F reduce32(const In* x, int64_t m, Op f) {
  F lane[kReduceLanes] = {};
  int64_t i = 0;
  for (; i + kReduceLanes <= m; i += kReduceLanes) {
#pragma omp simd
    for (int j = 0; j < kReduceLanes; ++j) lane[j] = math::add_rn(lane[j], f(static_cast<F>(math::load(x[i + j]))));
  }
  for (int j = 0; i + j < m; ++j) lane[j] = math::add_rn(lane[j], f(static_cast<F>(math::load(x[i + j]))));
  return math::combine_lanes(lane);
}

// reduce32 of m rows (row stride `stride`) for `width` adjacent columns at once; lanes holds
// kReduceLanes * width accumulators.
// Lanes no row reached stay +0 and would add exactly nothing in the butterfly (a lane is never -0: it starts at +0
// and +0 + -0 = +0), so with m < kReduceLanes only the `used` lanes are cleared and combined: the same bits, and
// short axes (a bias or position gradient summed over a small batch) cost their rows, not 32 lanes.
template <class F, class In, class Op>
void reduce32_columns(const In* x, int64_t m, int64_t stride, int64_t width, Op f, F* lanes, F* result) {
  const int used = static_cast<int>(std::min<int64_t>(m, kReduceLanes));
  if (used == 0) {
    std::fill(result, result + width, F(0));
    return;
  }
  std::fill(lanes, lanes + used * width, F(0));
  for (int64_t l0 = 0; l0 < m; l0 += kReduceLanes) {
    const int rows = static_cast<int>(std::min<int64_t>(kReduceLanes, m - l0));
    for (int j = 0; j < rows; ++j) {
      const In* row = x + (l0 + j) * stride;
      F* acc = lanes + j * width;
#pragma omp simd
      for (int64_t w = 0; w < width; ++w) acc[w] = math::add_rn(acc[w], f(static_cast<F>(math::load(row[w]))));
    }
  }
  int live = used;
  for (int s = kReduceLanes / 2; s > 0; s /= 2) {
    for (int j = 0; j < s && j + s < live; ++j) {
      F* dst = lanes + j * width;
      const F* src = lanes + (j + s) * width;
#pragma omp simd
      for (int64_t w = 0; w < width; ++w) dst[w] = math::add_rn(dst[w], src[w]);
    }
    live = std::min(live, s);
  }
  std::copy(lanes, lanes + width, result);
}

// Uninitialised room for the lanes reduce32_columns uses on an axis of m rows (it clears what it uses).
template <class F>
std::unique_ptr<F[]> lane_buffer(int64_t m, int64_t width) {
  return std::unique_ptr<F[]>(new F[static_cast<size_t>(std::min<int64_t>(m, kReduceLanes) * width)]);
}

template <class T, class F>
void finish(T* out, F sum, F divisor, bool accumulate) {
  F v = sum / divisor;
  if (accumulate) v = math::add_rn(math::load(*out), v);
  *out = math::store<T>(v);
}

// Rows (inner == 1): one item per (row, chunk), then one reduce32 over each row's chunk partials.
template <class T, class Op, class Emit>
void reduce_rows(const T* x, int64_t outer, int64_t len, Op f, Emit emit) {
  using F = math::opmath_t<T>;
  const int64_t chunks = math::reduce_chunks(len);
  const bool parallel = outer * len > kParallelThreshold;
  if (chunks == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t o = 0; o < outer; ++o) emit(o, reduce32<F>(x + o * len, len, f));
    return;
  }
  std::vector<F> partial(static_cast<size_t>(outer * chunks));
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t item = 0; item < outer * chunks; ++item) {
    const int64_t o = item / chunks, c = item % chunks;
    const int64_t begin = c * kReduceChunk;
    partial[item] = reduce32<F>(x + o * len + begin, std::min(kReduceChunk, len - begin), f);
  }
#pragma omp parallel for schedule(static) if (outer * chunks > kParallelThreshold)
  for (int64_t o = 0; o < outer; ++o) emit(o, reduce32<F>(partial.data() + o * chunks, chunks, math::IdentityOp{}));
}

// Columns (inner > 1): items of (row block, chunk, column block); the second pass reads float partials
// laid out as [outer, chunks, inner].
template <class T, class TO>
void reduce_columns(const T* x, TO* out, const ReduceShape& s, math::opmath_t<T> divisor, bool accumulate) {
  using F = math::opmath_t<T>;
  const int64_t chunks = math::reduce_chunks(s.len);
  const int64_t cols = column_block(s.inner, s.outer * chunks);
  const int64_t blocks = (s.inner + cols - 1) / cols;
  const bool parallel = s.outer * s.len * s.inner > kParallelThreshold;
  auto write = [&](int64_t o, int64_t i0, int64_t width, const F* sums) {
    for (int64_t w = 0; w < width; ++w) finish(out + o * s.inner + i0 + w, sums[w], divisor, accumulate);
  };
  if (chunks == 1) {
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t item = 0; item < s.outer * blocks; ++item) {
      const int64_t o = item / blocks, i0 = item % blocks * cols, width = std::min(cols, s.inner - i0);
      const auto lanes = lane_buffer<F>(s.len, width);
      std::vector<F> sums(static_cast<size_t>(width));
      reduce32_columns(x + o * s.len * s.inner + i0, s.len, s.inner, width, math::IdentityOp{}, lanes.get(), sums.data());
      write(o, i0, width, sums.data());
    }
    return;
  }
  std::vector<F> partial(static_cast<size_t>(s.outer * chunks * s.inner));
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t item = 0; item < s.outer * chunks * blocks; ++item) {
    const int64_t o = item / (chunks * blocks), c = item / blocks % chunks, i0 = item % blocks * cols;
    const int64_t width = std::min(cols, s.inner - i0), begin = c * kReduceChunk;
    const auto lanes = lane_buffer<F>(kReduceChunk, width);
    reduce32_columns(x + (o * s.len + begin) * s.inner + i0, std::min(kReduceChunk, s.len - begin), s.inner, width,
                     math::IdentityOp{}, lanes.get(), partial.data() + (o * chunks + c) * s.inner + i0);
  }
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t item = 0; item < s.outer * blocks; ++item) {
    const int64_t o = item / blocks, i0 = item % blocks * cols, width = std::min(cols, s.inner - i0);
    const auto lanes = lane_buffer<F>(chunks, width);
    std::vector<F> sums(static_cast<size_t>(width));
    reduce32_columns(partial.data() + o * chunks * s.inner + i0, chunks, s.inner, width, math::IdentityOp{}, lanes.get(),
                     sums.data());
    write(o, i0, width, sums.data());
  }
}

template <class T, class TO>
void sum_axis_into(const T* x, TO* out, const ReduceShape& s, double divisor, bool accumulate) {
  using F = math::opmath_t<T>;
  if (s.outer <= 0 || s.inner <= 0) return;
  const F d = static_cast<F>(divisor);
  if (s.len == 0) {
    for (int64_t i = 0; i < s.outer * s.inner; ++i) finish(out + i, F(0), d, accumulate);
  } else if (s.inner == 1) {
    reduce_rows(x, s.outer, s.len, math::IdentityOp{}, [&](int64_t o, F sum) { finish(out + o, sum, d, accumulate); });
  } else {
    reduce_columns(x, out, s, d, accumulate);
  }
}

}  // namespace

template <class T>
void sum_axis(const T* x, T* out, const ReduceShape& s, double divisor, bool accumulate) {
  sum_axis_into(x, out, s, divisor, accumulate);
}

template <class T>
void sum_axis_f32(const T* x, float* out, const ReduceShape& s, bool accumulate) {
  sum_axis_into(x, out, s, 1.0, accumulate);
}

template <class T>
std::conditional_t<std::is_same_v<T, double>, double, float> sum_squares(const T* x, int64_t n) {
  math::opmath_t<T> result = 0;
  if (n > 0) reduce_rows(x, 1, n, math::SquareOp{}, [&](int64_t, math::opmath_t<T> sum) { result = sum; });
  return result;
}

template <class T>
bool all_finite(const T* x, int64_t n) {
  int bad = 0;  // no early exit: a branch-free scan vectorises and the common answer is "all finite"
#pragma omp parallel for simd schedule(static) reduction(| : bad) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) bad |= math::is_finite_bits(x[i]) ? 0 : 1;
  return bad == 0;
}

#define MPT_INSTANTIATE(T)                                                          \
  template void sum_axis<T>(const T*, T*, const ReduceShape&, double, bool);        \
  template std::conditional_t<std::is_same_v<T, double>, double, float> sum_squares<T>(const T*, int64_t); \
  template bool all_finite<T>(const T*, int64_t);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
template void sum_axis_f32<float>(const float*, float*, const ReduceShape&, bool);
template void sum_axis_f32<bf16>(const bf16*, float*, const ReduceShape&, bool);
template void sum_axis_f32<f16>(const f16*, float*, const ReduceShape&, bool);

}  // namespace mpt::kernels::cpu
