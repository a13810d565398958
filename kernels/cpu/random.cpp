// kernels/cpu/random.cpp: OpenMP loops over the Philox counters; each counter fills 4 consecutive elements.
#include "kernels/cpu/random.h"

#include "kernels/cpu/map.h"

#include "kernels/math/numerics.h"
#include "kernels/math/random.h"

namespace mpt::kernels::cpu {
namespace {

// Below this many counters a parallel region costs more than it saves.
constexpr int64_t kParallelGroups = 4096;

// Calls gen(counter, float[4]) for every counter of the fill and stores the (up to) 4 values it makes.
// Every element is a pure function of its index, so thread count and schedule cannot change the output.
// Compiled twice: the Box-Muller math spells its multiply-adds as fmaf, which the baseline ISA can only call
// into libm for; the AVX2+FMA clone (chosen with kernels/cpu/map.h's map_isa) inlines them. Same bits.
#define MPT_FILL_GROUPS(ATTR, NAME)                                                        \
  template <class T, class Gen>                                                            \
  ATTR void NAME(T* out, int64_t n, uint64_t offset, Gen gen) {                            \
    const int64_t groups = static_cast<int64_t>(math::philox_offset_increment(n));         \
    _Pragma("omp parallel for schedule(static) if (groups >= kParallelGroups)")            \
    for (int64_t g = 0; g < groups; ++g) {                                                 \
      float v[4];                                                                          \
      gen(offset + static_cast<uint64_t>(g), v);                                           \
      const int64_t base = 4 * g;                                                          \
      const int64_t count = n - base < 4 ? n - base : 4;                                   \
      for (int64_t j = 0; j < count; ++j) out[base + j] = static_cast<T>(v[j]);            \
    }                                                                                      \
  }
MPT_FILL_GROUPS(, fill_groups_baseline)
MPT_FILL_GROUPS(__attribute__((target("avx2,fma"))), fill_groups_fma)
#undef MPT_FILL_GROUPS

template <class T, class Gen>
void fill_groups(T* out, int64_t n, uint64_t offset, Gen gen) {
  if (map_isa() != MapIsa::Baseline) return fill_groups_fma(out, n, offset, gen);
  fill_groups_baseline(out, n, offset, gen);
}

}  // namespace

template <class T>
void fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, float low, float high) {
  fill_groups(out, n, offset, [=](uint64_t counter, float* v) { math::uniform4(seed, counter, low, high, v); });
}

template <class T>
void fill_normal(T* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float std) {
  fill_groups(out, n, offset, [=](uint64_t counter, float* v) { math::normal4(seed, counter, mean, std, v); });
}

#define MPT_INSTANTIATE_FILLS(T)                                                              \
  template void fill_uniform<T>(T*, int64_t, uint64_t, uint64_t, float, float);               \
  template void fill_normal<T>(T*, int64_t, uint64_t, uint64_t, float, float);

MPT_INSTANTIATE_FILLS(float)
MPT_INSTANTIATE_FILLS(double)
MPT_INSTANTIATE_FILLS(mpt::f16)
MPT_INSTANTIATE_FILLS(mpt::bf16)

}  // namespace mpt::kernels::cpu
