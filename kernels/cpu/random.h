// kernels/cpu/random.h: uniform and normal fills from the Philox stream (bit-identical to kernels/cuda/random.cu).
#pragma once

#include <cstdint>

namespace mpt::kernels::cpu {

// out[i] = element i of the stream (seed, offset), i in [0, n): uniform in [low, high), computed in
// float and rounded once to T (so 16-bit results may round up to high). The fill consumes
// math::philox_offset_increment(n) counters (see kernels/math/philox.h); the result does not depend
// on the number of OpenMP threads. T: float, double, mpt::f16, mpt::bf16 (kernels/math/numerics.h).
template <class T>
void fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, float low, float high);

// out[i] = mean + std * z_i with z_i standard normal (Box-Muller, kernels/math/random.h), computed in
// float and rounded once to T; same stream and offset semantics as fill_uniform.
template <class T>
void fill_normal(T* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float std);

}  // namespace mpt::kernels::cpu
