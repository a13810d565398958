// kernels/cpu/elementwise.cpp: OpenMP loops over the functors of kernels/math/elementwise.h.
#include "kernels/cpu/elementwise.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/map.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {
namespace {

// Below this many Philox groups (4 elements each) a parallel region costs more than it saves.
constexpr int64_t kParallelGroups = 4096;
// Philox groups whose keep bits are computed together (structure of arrays, so the rounds vectorise).
constexpr int kBatch = 64;

// keep[4 l + j] = bit j of math::dropout_keep4(seed, offset, g0 + l, p) for l < kBatch (one word per
// element): the same Philox4x32-10 rounds as kernels/math/philox.h, lane by lane. Cloned for AVX-512 and AVX2 (chosen at load time); integer math only,
// so every clone gives the same bits.
__attribute__((target_clones("avx512f", "avx2", "default"))) void keep_bits_batch(uint64_t seed, uint64_t offset,
                                                                                  int64_t g0, float p,
                                                                                  uint32_t* keep) {
  namespace px = math::philox_detail;
  uint32_t c0[kBatch], c1[kBatch], c2[kBatch], c3[kBatch];
  for (int l = 0; l < kBatch; ++l) {
    const uint64_t counter = offset + static_cast<uint64_t>(g0 + l);
    c0[l] = static_cast<uint32_t>(counter);
    c1[l] = static_cast<uint32_t>(counter >> 32);
    c2[l] = 0;
    c3[l] = 0;
  }
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int r = 0; r < 10; ++r) {
#pragma omp simd
    for (int l = 0; l < kBatch; ++l) {
      const uint64_t p0 = static_cast<uint64_t>(px::kMul0) * c0[l], p1 = static_cast<uint64_t>(px::kMul1) * c2[l];
      const uint32_t n0 = static_cast<uint32_t>(p1 >> 32) ^ c1[l] ^ k0;
      const uint32_t n2 = static_cast<uint32_t>(p0 >> 32) ^ c3[l] ^ k1;
      c1[l] = static_cast<uint32_t>(p1);
      c3[l] = static_cast<uint32_t>(p0);
      c0[l] = n0;
      c2[l] = n2;
    }
    k0 += px::kWeyl0;
    k1 += px::kWeyl1;
  }
#pragma omp simd
  for (int l = 0; l < kBatch; ++l) {
    keep[4 * l] = math::dropout_keep_word(c0[l], p);
    keep[4 * l + 1] = math::dropout_keep_word(c1[l], p);
    keep[4 * l + 2] = math::dropout_keep_word(c2[l], p);
    keep[4 * l + 3] = math::dropout_keep_word(c3[l], p);
  }
}

// v where keep is 1, +0 where it is 0 (math::dropout_apply's select), written as a bit mask so the loop
// vectorises (GCC does not if-convert the select at -O2).
template <class F>
F keep_or_zero(F v, uint32_t keep) {
  using Bits = std::conditional_t<sizeof(F) == 8, uint64_t, uint32_t>;
  Bits b;
  std::memcpy(&b, &v, sizeof b);
  b &= Bits(0) - Bits(keep);
  std::memcpy(&v, &b, sizeof v);
  return v;
}

// Batches of kBatch groups: keep flags first, then one vectorisable pass over the batch's 4 * kBatch elements.
template <bool kAccumulate, class T>
void dropout_groups(const T* in, T* out, int64_t n, const DropoutArgs& args) {
  using F = math::opmath_t<T>;
  const F scale = F(1) / (F(1) - F(args.p));
  constexpr int64_t kSpan = 4 * kBatch;
  const int64_t batches = (n + kSpan - 1) / kSpan;
#pragma omp parallel for schedule(static) if (batches * kBatch >= kParallelGroups)
  for (int64_t b = 0; b < batches; ++b) {
    uint32_t keep[kSpan];
    keep_bits_batch(args.seed, args.offset, b * kBatch, args.p, keep);
    const int64_t base = b * kSpan;
    const int64_t count = std::min(kSpan, n - base);
    const T* src = in + base;
    T* dst = out + base;
#pragma omp simd
    for (int64_t i = 0; i < count; ++i) {
      F v = keep_or_zero(math::mul_rn(math::load(src[i]), scale), keep[i]);
      if constexpr (kAccumulate) v = math::add_rn(math::load(dst[i]), v);
      dst[i] = math::store<T>(v);
    }
  }
}

}  // namespace

template <class T>
void add(const T* a, const T* b, T* out, const BinaryShape& shape, double alpha) {
  using F = math::opmath_t<T>;
  if (alpha == 1.0) {
    binary_map(a, b, out, shape, math::AddOp{});
  } else {
    binary_map(a, b, out, shape, math::AddScaledOp<F>{static_cast<F>(alpha)});
  }
}

template <class T>
void mul(const T* a, const T* b, T* out, const BinaryShape& shape) {
  binary_map(a, b, out, shape, math::MulOp{});
}

template <class T>
void scale(const T* x, T* out, int64_t n, double alpha, bool accumulate) {
  using F = math::opmath_t<T>;
  map_accumulate(out, n, accumulate, math::ScaleOp<F>{static_cast<F>(alpha)}, x);
}

template <class T>
void widen_sum(const T* a, const T* b, const T* c, float* out, int64_t n) {
  if (c != nullptr) {
    map_accumulate(out, n, false, math::WidenSum3{}, a, b, c);
  } else {
    map_accumulate(out, n, false, math::WidenSum2{}, a, b);
  }
}

template <class T>
void dropout(const T* in, T* out, int64_t n, const DropoutArgs& args) {
  if (n <= 0) return;
  if (args.accumulate) {
    dropout_groups<true>(in, out, n, args);
  } else {
    dropout_groups<false>(in, out, n, args);
  }
}

#define MPT_INSTANTIATE(T)                                                     \
  template void add<T>(const T*, const T*, T*, const BinaryShape&, double);    \
  template void mul<T>(const T*, const T*, T*, const BinaryShape&);            \
  template void scale<T>(const T*, T*, int64_t, double, bool);                 \
  template void dropout<T>(const T*, T*, int64_t, const DropoutArgs&);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
template void widen_sum<f16>(const f16*, const f16*, const f16*, float*, int64_t);
template void widen_sum<bf16>(const bf16*, const bf16*, const bf16*, float*, int64_t);
template void widen_sum<float>(const float*, const float*, const float*, float*, int64_t);

}  // namespace mpt::kernels::cpu
