// kernels/cpu/broadcast.h: out[i] = f(a[i], b[i % period]) over contiguous arrays on the CPU (OpenMP, vectorised).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/map.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

// Work is cut into fixed chunks of the flat index; inside a chunk the loop runs over contiguous segments that do not
// wrap around b, so each inner loop is a plain vectorisable pass over three arrays. With kAccumulate, out += f(...).
// Out may differ from T (comparisons store u8).
template <bool kAccumulate, class Out, class T, class F>
void broadcast_map(const T* a, const T* b, Out* out, const math::BinaryShape& s, F f) {
  constexpr int64_t kSpan = 1 << 14;
  const int64_t n = s.n, period = s.b_period;
  const int64_t chunks = (n + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kSpan);
    int64_t i = c * kSpan, j = i % period;
    while (i < end) {
      const int64_t len = std::min(end - i, period - j);
      const T* ai = a + i;
      const T* bj = b + j;
      Out* oi = out + i;
#pragma omp simd
      for (int64_t k = 0; k < len; ++k) {
        auto v = f(math::load(ai[k]), math::load(bj[k]));
        if constexpr (kAccumulate) v = math::add_rn(math::load(oi[k]), v);
        oi[k] = math::store<Out>(v);
      }
      i += len;
      j = 0;
    }
  }
}

// broadcast_map with s.accumulate chosen at run time; nothing to do for n <= 0.
template <class Out, class T, class F>
void binary_map(const T* a, const T* b, Out* out, const math::BinaryShape& s, F f) {
  if (s.n <= 0) return;
  if (s.accumulate) {
    broadcast_map<true>(a, b, out, s, f);
  } else {
    broadcast_map<false>(a, b, out, s, f);
  }
}

}  // namespace mpt::kernels::cpu
