// kernels/cpu/map.h: applies an elementwise functor over contiguous arrays (OpenMP above a size threshold).
#pragma once

#include <cstdint>

#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

inline constexpr int64_t kParallelThreshold = 1 << 15;

// out[i] = f(in[i]...), each input loaded into opmath (float, or double for double) and the result stored
// back as Out. `f` is the same functor the CUDA kernel applies.
template <class Out, class F, class... In>
void map(Out* out, int64_t n, F f, const In*... in) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) out[i] = math::store<Out>(f(math::load(in[i])...));
}

// out[i] += f(in[i]...) when accumulate, else out[i] = f(in[i]...): backward kernels accumulate into gradients.
template <class Out, class F, class... In>
void map_accumulate(Out* out, int64_t n, bool accumulate, F f, const In*... in) {
  if (!accumulate) return map(out, n, f, in...);
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) out[i] = math::store<Out>(math::load(out[i]) + f(math::load(in[i])...));
}

}  // namespace mpt::kernels::cpu
