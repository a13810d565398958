// kernels/cuda/map.cuh: the elementwise CUDA kernel: a functor from kernels/math over contiguous arrays, with
// 16-byte vector loads and stores when every pointer is aligned (include only from .cu files).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {

namespace map_detail {

inline constexpr int kThreads = 256;

// o[k] = f(v[k]...) (+ o[k] when kAccumulate) over one 16-byte vector of each array.
template <bool kAccumulate, class Out, class F, class... In>
MPT_DEVICE MPT_INLINE void apply_vec(Vec16<Out>& o, const F& f, const Vec16<In>&... v) {
#pragma unroll
  for (int k = 0; k < Vec16<Out>::kSize; ++k) {
    auto r = f(math::load(v.v[k])...);
    if constexpr (kAccumulate) r += math::load(o.v[k]);
    o.v[k] = math::store<Out>(r);
  }
}

// Each thread handles kWidth consecutive elements per grid-stride step: one Vec16 per array when kVec.
template <bool kVec, bool kAccumulate, class Out, class F, class... In>
__global__ void __launch_bounds__(kThreads) map_kernel(Out* out, int64_t n, F f, const In*... in) {
  constexpr int kWidth = kVec ? Vec16<Out>::kSize : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kWidth;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kWidth; i < n; i += stride) {
    if constexpr (kVec) {
      Vec16<Out> o;
      if constexpr (kAccumulate) o = load16(out + i);
      apply_vec<kAccumulate>(o, f, load16(in + i)...);
      store16(out + i, o);
    } else {
      auto v = f(math::load(in[i])...);
      if constexpr (kAccumulate) v += math::load(out[i]);
      out[i] = math::store<Out>(v);
    }
  }
}

template <bool kAccumulate, class Out, class F, class... In>
cudaError_t launch_map(Out* out, int64_t n, F f, cudaStream_t stream, const In*... in) {
  constexpr int kWidth = Vec16<Out>::kSize;
  // Vectorise when every array is aligned, all element types have the same size (decided at compile time: no
  // vector kernel exists for mixed sizes), and n is a whole number of vectors; otherwise the scalar kernel does all.
  constexpr bool kSameSize = ((sizeof(In) == sizeof(Out)) && ...);
  const bool vec = kSameSize && n % kWidth == 0 && is_aligned16(out) && (is_aligned16(in) && ...);
  const int64_t units = vec ? n / kWidth : n;
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  // Each input once, plus out when accumulating; out written once.
  const uint64_t elems = static_cast<uint64_t>(n);
  const uint64_t read_bytes = elems * (uint64_t{0} + ... + sizeof(In)) + (kAccumulate ? elems * sizeof(Out) : 0);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8)), dim3(kThreads), 0,
                            stream, read_bytes, elems * sizeof(Out)};
  if constexpr (kSameSize) {
    if (vec) return launch(map_kernel<true, kAccumulate, Out, F, In...>, config, out, n, f, in...);
  }
  return launch(map_kernel<false, kAccumulate, Out, F, In...>, config, out, n, f, in...);
}

// Two outputs from one read of the inputs: o0[k] = f0(v[k]...), o1[k] = f1(v[k]...).
template <class Out, class F0, class F1, class... In>
MPT_DEVICE MPT_INLINE void apply_vec2(Vec16<Out>& o0, Vec16<Out>& o1, const F0& f0, const F1& f1,
                                      const Vec16<In>&... v) {
#pragma unroll
  for (int k = 0; k < Vec16<Out>::kSize; ++k) {
    o0.v[k] = math::store<Out>(f0(math::load(v.v[k])...));
    o1.v[k] = math::store<Out>(f1(math::load(v.v[k])...));
  }
}

template <bool kVec, class Out, class F0, class F1, class... In>
__global__ void __launch_bounds__(kThreads) map2_kernel(Out* out0, Out* out1, int64_t n, F0 f0, F1 f1,
                                                         const In*... in) {
  constexpr int kWidth = kVec ? Vec16<Out>::kSize : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kWidth;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kWidth; i < n; i += stride) {
    if constexpr (kVec) {
      Vec16<Out> o0, o1;
      apply_vec2(o0, o1, f0, f1, load16(in + i)...);
      store16(out0 + i, o0);
      store16(out1 + i, o1);
    } else {
      out0[i] = math::store<Out>(f0(math::load(in[i])...));
      out1[i] = math::store<Out>(f1(math::load(in[i])...));
    }
  }
}

}  // namespace map_detail

// out[i] = f(in[i]...) (or += when accumulate), asynchronous on `stream`.
template <class Out, class F, class... In>
cudaError_t map(Out* out, int64_t n, bool accumulate, F f, cudaStream_t stream, const In*... in) {
  if (n < 0 || (n > 0 && out == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  return accumulate ? map_detail::launch_map<true>(out, n, f, stream, in...)
                    : map_detail::launch_map<false>(out, n, f, stream, in...);
}

// out0[i] = f0(in[i]...) and out1[i] = f1(in[i]...) in one pass over the inputs (both overwritten), asynchronous on
// `stream`: the bits of two map calls, the inputs read once.
template <class Out, class F0, class F1, class... In>
cudaError_t map2(Out* out0, Out* out1, int64_t n, F0 f0, F1 f1, cudaStream_t stream, const In*... in) {
  using namespace map_detail;
  if (n < 0 || (n > 0 && (out0 == nullptr || out1 == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  constexpr int kWidth = Vec16<Out>::kSize;
  constexpr bool kSameSize = ((sizeof(In) == sizeof(Out)) && ...);
  const bool vec = kSameSize && n % kWidth == 0 && is_aligned16(out0) && is_aligned16(out1) &&
                   (is_aligned16(in) && ...);
  const int64_t units = vec ? n / kWidth : n;
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  const uint64_t elems = static_cast<uint64_t>(n);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8)), dim3(kThreads), 0,
                            stream, elems * (uint64_t{0} + ... + sizeof(In)), 2 * elems * sizeof(Out)};
  if constexpr (kSameSize) {
    if (vec) return launch(map2_kernel<true, Out, F0, F1, In...>, config, out0, out1, n, f0, f1, in...);
  }
  return launch(map2_kernel<false, Out, F0, F1, In...>, config, out0, out1, n, f0, f1, in...);
}

}  // namespace mpt::kernels::cuda
