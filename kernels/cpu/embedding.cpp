// kernels/cpu/embedding.cpp: row gathers for the lookup; per-token sums in position order for the gradient.
#include "kernels/cpu/embedding.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {
namespace {

// Channels one backward work item accumulates (its float accumulators stay in L1).
constexpr int64_t kChannelBlock = 256;

}  // namespace

template <class T, class I>
int64_t embedding_forward(const I* ids, const T* table, T* out, int64_t n, int64_t vocab, int64_t channels) {
  int64_t first_bad = n;
#pragma omp parallel for schedule(static) reduction(min : first_bad) if (n * channels > kParallelThreshold)
  for (int64_t p = 0; p < n; ++p) {
    const int64_t id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= vocab) {
      first_bad = std::min(first_bad, p);
      continue;
    }
    std::memcpy(out + p * channels, table + id * channels, static_cast<size_t>(channels) * sizeof(T));
  }
  return first_bad == n ? -1 : first_bad;
}

template <class I>
int64_t embedding_buckets(const I* ids, int64_t n, int64_t vocab, EmbeddingBuckets& b) {
  std::vector<int64_t> count(static_cast<size_t>(vocab) + 1, 0);
  for (int64_t p = 0; p < n; ++p) {
    const int64_t id = static_cast<int64_t>(ids[p]);
    if (id < 0 || id >= vocab) return p;
    ++count[static_cast<size_t>(id)];
  }
  b.tokens.clear();
  b.starts.assign(1, 0);
  std::vector<int64_t> next(static_cast<size_t>(vocab));  // write cursor of each token's bucket
  for (int64_t v = 0; v < vocab; ++v) {
    if (count[static_cast<size_t>(v)] == 0) continue;
    next[static_cast<size_t>(v)] = b.starts.back();
    b.tokens.push_back(v);
    b.starts.push_back(b.starts.back() + count[static_cast<size_t>(v)]);
  }
  b.positions.resize(static_cast<size_t>(n));
  for (int64_t p = 0; p < n; ++p) b.positions[static_cast<size_t>(next[static_cast<size_t>(ids[p])]++)] = p;
  return -1;
}

template <class T, class O>
void embedding_backward(const EmbeddingBuckets& b, const T* dout, O* dtable, int64_t channels) {
  using F = math::opmath_t<T>;
  const int64_t tokens = static_cast<int64_t>(b.tokens.size());
  const int64_t blocks = (channels + kChannelBlock - 1) / kChannelBlock;
  const int64_t n = static_cast<int64_t>(b.positions.size());
  // Dynamic scheduling balances frequent tokens; every item owns its output, so the order of items is free.
#pragma omp parallel for schedule(dynamic, 4) if (n * channels > kParallelThreshold)
  for (int64_t item = 0; item < tokens * blocks; ++item) {
    const int64_t k = item / blocks, c0 = item % blocks * kChannelBlock;
    const int64_t width = std::min(kChannelBlock, channels - c0);
    F acc[kChannelBlock] = {};
    for (int64_t q = b.starts[static_cast<size_t>(k)]; q < b.starts[static_cast<size_t>(k) + 1]; ++q) {
      const T* row = dout + b.positions[static_cast<size_t>(q)] * channels + c0;
#pragma omp simd
      for (int64_t c = 0; c < width; ++c) acc[c] += math::load(row[c]);
    }
    O* dst = dtable + b.tokens[static_cast<size_t>(k)] * channels + c0;
#pragma omp simd
    for (int64_t c = 0; c < width; ++c) dst[c] = math::store<O>(math::load(dst[c]) + acc[c]);
  }
}

#define MPT_INSTANTIATE_T(T)                                                                         \
  template int64_t embedding_forward<T, int32_t>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t); \
  template int64_t embedding_forward<T, int64_t>(const int64_t*, const T*, T*, int64_t, int64_t, int64_t); \
  template void embedding_backward<T>(const EmbeddingBuckets&, const T*, T*, int64_t);
MPT_INSTANTIATE_T(float)
MPT_INSTANTIATE_T(double)
MPT_INSTANTIATE_T(f16)
MPT_INSTANTIATE_T(bf16)
#undef MPT_INSTANTIATE_T
template void embedding_backward<float, bf16>(const EmbeddingBuckets&, const float*, bf16*, int64_t);
template void embedding_backward<float, f16>(const EmbeddingBuckets&, const float*, f16*, int64_t);
template int64_t embedding_buckets<int32_t>(const int32_t*, int64_t, int64_t, EmbeddingBuckets&);
template int64_t embedding_buckets<int64_t>(const int64_t*, int64_t, int64_t, EmbeddingBuckets&);

}  // namespace mpt::kernels::cpu
