// kernels/cpu/map.h: applies an elementwise functor over contiguous arrays (AVX-512 clone, OpenMP above a size threshold).
#pragma once

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "kernels/cpu/convert.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

inline constexpr int64_t kParallelThreshold = 1 << 15;

// Which clone of the elementwise loops runs (detected once; the baseline when the vector paths are switched off
// with kernels/cpu/convert.h's set_vector_conversions). All clones compute the same bits: the kernels are built
// with -ffp-contract=off and the functors spell their fused multiply-adds out (math::fma_op), which the baseline
// clone evaluates with libm's exact fmaf (slowly: it exists for CPUs older than Haswell).
enum class MapIsa : uint8_t { Baseline, Avx2Fma, Avx512 };
MapIsa map_isa();

namespace detail {

// One loop body, compiled three times: for the baseline ISA, AVX2+FMA and AVX-512 (16 float lanes).
#define MPT_MAP_LOOPS(ATTR, SUFFIX)                                                                       \
  template <class Out, class F, class... In>                                                            \
  ATTR void map##SUFFIX(Out* out, int64_t n, F f, const In*... in) {                                    \
    _Pragma("omp parallel for simd schedule(static) if (n > kParallelThreshold)")                       \
    for (int64_t i = 0; i < n; ++i) out[i] = math::store<Out>(f(math::load(in[i])...));                 \
  }                                                                                                     \
  template <bool kAccumulate, class Out, class F, class... In>                                          \
  ATTR void map_block##SUFFIX(Out* out, int64_t n, F f, const In*... in) {                              \
    _Pragma("omp simd")                                                                                 \
    for (int64_t i = 0; i < n; ++i) {                                                                   \
      const auto v = f(math::load(in[i])...);                                                           \
      out[i] = math::store<Out>(kAccumulate ? math::load(out[i]) + v : v);                              \
    }                                                                                                   \
  }                                                                                                     \
  template <class Out, class F, class... In>                                                            \
  ATTR void map_acc##SUFFIX(Out* out, int64_t n, F f, const In*... in) {                                \
    _Pragma("omp parallel for simd schedule(static) if (n > kParallelThreshold)")                       \
    for (int64_t i = 0; i < n; ++i) out[i] = math::store<Out>(math::load(out[i]) + f(math::load(in[i])...)); \
  }

MPT_MAP_LOOPS(, _generic)
MPT_MAP_LOOPS(__attribute__((target("avx2,fma"))), _avx2)
MPT_MAP_LOOPS(__attribute__((target("avx512f,avx512bw,avx512vl"))), _avx512)
#undef MPT_MAP_LOOPS

template <class T>
inline constexpr bool kIsOpmath = std::is_same_v<T, math::opmath_t<T>>;

template <bool kAccumulate, class Out, class F, class... In>
void map_direct(Out* out, int64_t n, F f, const In*... in) {
  const MapIsa isa = map_isa();
  if constexpr (kAccumulate) {
    if (isa == MapIsa::Avx512) return map_acc_avx512(out, n, f, in...);
    if (isa == MapIsa::Avx2Fma) return map_acc_avx2(out, n, f, in...);
    map_acc_generic(out, n, f, in...);
  } else {
    if (isa == MapIsa::Avx512) return map_avx512(out, n, f, in...);
    if (isa == MapIsa::Avx2Fma) return map_avx2(out, n, f, in...);
    map_generic(out, n, f, in...);
  }
}

// f16/bf16 operands: chunks of kChunk elements are widened into float buffers with the vectorised conversions of
// kernels/cpu/convert.h (the same bits as math::load and math::store), mapped on floats, and rounded back once.
inline constexpr int64_t kChunk = 2048;

template <class T>
const math::opmath_t<T>* widened(const T* src, int64_t n, math::opmath_t<T>* buf) {
  if constexpr (kIsOpmath<T>) {
    return src;
  } else {
    convert(src, buf, static_cast<size_t>(n));
    return buf;
  }
}

// Each buffer is padded by 80 bytes so that no two of them start a multiple of 4 KiB apart (the loads of one and
// the stores to another would otherwise alias in the store buffer and stall: 4K aliasing).
template <class F, int64_t kSize>
struct PaddedBuffer {
  alignas(64) F v[kSize];
};
// The widened copy of an input of type T (no storage when T is its own opmath type: it is read in place).
template <class T>
using Buffer = PaddedBuffer<math::opmath_t<T>, kIsOpmath<T> ? 1 : kChunk + 80 / sizeof(math::opmath_t<T>)>;

template <bool kAccumulate, class Out, class F, class... In>
void map_chunked(Out* out, int64_t n, F f, const In*... in) {
  using O = math::opmath_t<Out>;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, len = n - begin < kChunk ? n - begin : kChunk;
    PaddedBuffer<O, kChunk + 80 / sizeof(O)> out_buf;
    O* acc = out_buf.v;
    std::tuple<Buffer<In>...> bufs;
    O* dst = kIsOpmath<Out> ? reinterpret_cast<O*>(out + begin) : acc;
    if constexpr (kAccumulate && !kIsOpmath<Out>) convert(out + begin, acc, static_cast<size_t>(len));
    [&]<size_t... I>(std::index_sequence<I...>) {
      const MapIsa isa = map_isa();
      if (isa == MapIsa::Avx512) {
        map_block_avx512<kAccumulate>(dst, len, f, widened(in + begin, len, std::get<I>(bufs).v)...);
      } else if (isa == MapIsa::Avx2Fma) {
        map_block_avx2<kAccumulate>(dst, len, f, widened(in + begin, len, std::get<I>(bufs).v)...);
      } else {
        map_block_generic<kAccumulate>(dst, len, f, widened(in + begin, len, std::get<I>(bufs).v)...);
      }
    }(std::index_sequence_for<In...>{});
    if constexpr (!kIsOpmath<Out>) convert(acc, out + begin, static_cast<size_t>(len));
  }
}

}  // namespace detail

// out[i] = f(in[i]...), each input loaded into opmath (float, or double for double) and the result stored
// back as Out. `f` is the same functor the CUDA kernel applies.
template <class Out, class F, class... In>
void map(Out* out, int64_t n, F f, const In*... in) {
  if constexpr (detail::kIsOpmath<Out> && (detail::kIsOpmath<In> && ...)) {
    detail::map_direct<false>(out, n, f, in...);
  } else {
    detail::map_chunked<false>(out, n, f, in...);
  }
}

// out[i] += f(in[i]...) when accumulate, else out[i] = f(in[i]...): backward kernels accumulate into gradients.
template <class Out, class F, class... In>
void map_accumulate(Out* out, int64_t n, bool accumulate, F f, const In*... in) {
  if (!accumulate) return map(out, n, f, in...);
  if constexpr (detail::kIsOpmath<Out> && (detail::kIsOpmath<In> && ...)) {
    detail::map_direct<true>(out, n, f, in...);
  } else {
    detail::map_chunked<true>(out, n, f, in...);
  }
}

}  // namespace mpt::kernels::cpu
