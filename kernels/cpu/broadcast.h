// kernels/cpu/broadcast.h: out[i] = f(a[i], b[i % period]) over contiguous arrays on the CPU (OpenMP, vectorised, the
// baseline / AVX2+FMA / AVX-512 clone chosen at run time like kernels/cpu/map.h's).
#pragma once

#include <algorithm>
#include <cstdint>

#include "kernels/cpu/map.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

namespace broadcast_detail {

// One contiguous segment o[k] (+)= f(a[k], b[k]), compiled once per ISA (functors spell their FMAs out: without the
// AVX2+FMA or AVX-512 clone, fma_op is a libm call per element).
#define MPT_SEGMENT_LOOP(ATTR, SUFFIX)                                                                \
  template <bool kAccumulate, class Out, class T, class F>                                          \
  ATTR void segment##SUFFIX(const T* a, const T* b, Out* o, int64_t len, F f) {                     \
    _Pragma("omp simd")                                                                             \
    for (int64_t k = 0; k < len; ++k) {                                                             \
      auto v = f(math::load(a[k]), math::load(b[k]));                                               \
      if constexpr (kAccumulate) v = math::add_rn(math::load(o[k]), v);                             \
      o[k] = math::store<Out>(v);                                                                   \
    }                                                                                               \
  }
MPT_SEGMENT_LOOP(, _generic)
MPT_SEGMENT_LOOP(__attribute__((target("avx2,fma"))), _avx2)
MPT_SEGMENT_LOOP(__attribute__((target("avx512f,avx512bw,avx512vl"))), _avx512)
#undef MPT_SEGMENT_LOOP

}  // namespace broadcast_detail

// Work is cut into fixed chunks of the flat index; inside a chunk the loop runs over contiguous segments that do not
// wrap around b, so each inner loop is a plain vectorisable pass over three arrays. With kAccumulate, out += f(...).
// Out may differ from T (comparisons store u8).
template <bool kAccumulate, class Out, class T, class F>
void broadcast_map(const T* a, const T* b, Out* out, const math::BinaryShape& s, F f) {
  namespace bd = broadcast_detail;
  constexpr int64_t kSpan = 1 << 14;
  const int64_t n = s.n, period = s.b_period;
  const int64_t chunks = (n + kSpan - 1) / kSpan;
  const MapIsa isa = map_isa();
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t end = std::min(n, (c + 1) * kSpan);
    int64_t i = c * kSpan, j = i % period;
    while (i < end) {
      const int64_t len = std::min(end - i, period - j);
      if (isa == MapIsa::Avx512) {
        bd::segment_avx512<kAccumulate>(a + i, b + j, out + i, len, f);
      } else if (isa == MapIsa::Avx2Fma) {
        bd::segment_avx2<kAccumulate>(a + i, b + j, out + i, len, f);
      } else {
        bd::segment_generic<kAccumulate>(a + i, b + j, out + i, len, f);
      }
      i += len;
      j = 0;
    }
  }
}

// broadcast_map with s.accumulate chosen at run time; nothing to do for n <= 0. Same-shape operands (period n) take
// kernels/cpu/map.h's loop, which widens f16/bf16 in chunks with the vectorised conversions.
template <class Out, class T, class F>
void binary_map(const T* a, const T* b, Out* out, const math::BinaryShape& s, F f) {
  if (s.n <= 0) return;
  if (s.b_period == s.n) return map_accumulate(out, s.n, s.accumulate, f, a, b);
  if (s.accumulate) {
    broadcast_map<true>(a, b, out, s, f);
  } else {
    broadcast_map<false>(a, b, out, s, f);
  }
}

}  // namespace mpt::kernels::cpu
