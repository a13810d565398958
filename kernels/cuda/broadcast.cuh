// kernels/cuda/broadcast.cuh: out[i] = f(a[i], b[i % period]) on a CUDA stream, with 16-byte vectors when aligned
// (include only from .cu files; the CPU twin is kernels/cpu/broadcast.h).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/map.cuh"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {

namespace broadcast_detail {

inline constexpr int kThreads = 256;
inline constexpr int64_t kMaxBlocks = 65535 * 8;

inline unsigned grid_for(int64_t units) {
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

template <class Out, class T, class F>
struct Params {
  Out* out;
  const T* a;
  const T* b;
  int64_t n;
  int64_t period;
  F f;
};

// out[i] (+)= f(a[i], b[i % period]); with kVec each thread takes one 16-byte vector of each array (period is then a
// multiple of the vector width, so the b vector never wraps, and Out has T's size).
template <bool kVec, bool kAccumulate, class Out, class T, class F>
__global__ void __launch_bounds__(kThreads) broadcast_kernel(Params<Out, T, F> p) {
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kWidth;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kWidth; i < p.n; i += stride) {
    const int64_t j = i % p.period;
    if constexpr (kVec) {
      const Vec16<T> va = load16(p.a + i), vb = load16(p.b + j);
      Vec16<Out> o;
      if constexpr (kAccumulate) o = load16(p.out + i);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        auto v = p.f(math::load(va.v[k]), math::load(vb.v[k]));
        if constexpr (kAccumulate) v = math::add_rn(math::load(o.v[k]), v);
        o.v[k] = math::store<Out>(v);
      }
      store16(p.out + i, o);
    } else {
      auto v = p.f(math::load(p.a[i]), math::load(p.b[j]));
      if constexpr (kAccumulate) v = math::add_rn(math::load(p.out[i]), v);
      p.out[i] = math::store<Out>(v);
    }
  }
}

template <bool kAccumulate, class Out, class T, class F>
cudaError_t launch_broadcast(const Params<Out, T, F>& p, cudaStream_t stream) {
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = sizeof(Out) == sizeof(T) && p.period % kWidth == 0 && is_aligned16(p.out) && is_aligned16(p.a) &&
                   is_aligned16(p.b);
  // a once, b's period once (re-read through the cache, counted once), out too when accumulating.
  const uint64_t n = static_cast<uint64_t>(p.n);
  const uint64_t read_bytes =
      n * sizeof(T) + static_cast<uint64_t>(p.period) * sizeof(T) + (kAccumulate ? n * sizeof(Out) : 0);
  const LaunchConfig config{dim3(grid_for(vec ? p.n / kWidth : p.n)), dim3(kThreads), 0, stream, read_bytes,
                            n * sizeof(Out)};
  if constexpr (sizeof(Out) == sizeof(T)) {
    if (vec) return launch(broadcast_kernel<true, kAccumulate, Out, T, F>, config, p);
  }
  return launch(broadcast_kernel<false, kAccumulate, Out, T, F>, config, p);
}

}  // namespace broadcast_detail

// out (+)= f(a, b[i % b_period]) for s.n elements, asynchronous on `stream`.
template <class Out, class T, class F>
cudaError_t binary_map(const T* a, const T* b, Out* out, const math::BinaryShape& s, F f, cudaStream_t stream) {
  if (s.n < 0 || s.b_period < 1 || (s.n > 0 && s.n % s.b_period != 0)) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaSuccess;
  if (a == nullptr || b == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (s.b_period == s.n) return map(out, s.n, s.accumulate, f, stream, a, b);
  const broadcast_detail::Params<Out, T, F> p{out, a, b, s.n, s.b_period, f};
  return s.accumulate ? broadcast_detail::launch_broadcast<true>(p, stream)
                      : broadcast_detail::launch_broadcast<false>(p, stream);
}

}  // namespace mpt::kernels::cuda
