// kernels/cpu/optim.cpp: the optimizer math of kernels/math/optim.h over lists of tensors (OpenMP inside each).
#include "kernels/cpu/optim.h"

#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/map.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

namespace {

bool skipped(const math::StepGuards& guards) { return guards.found_inf != nullptr && *guards.found_inf != 0.0f; }

// The compute copy of elements [begin, end), from the parameters just updated (still in cache): the vectorised
// conversion (kernels/cpu/convert.h), whose bits are math::store's, so the same as the CUDA kernels' per-element store.
template <class P, class G, class M>
void write_compute_copy(const math::AdamWTensor<P, G, M>& t, int64_t begin, int64_t end) {
  if constexpr (std::is_same_v<P, float>) {
    const auto n = static_cast<size_t>(end - begin);
    if (t.copy_bf16 != nullptr) convert(t.param + begin, t.copy_bf16 + begin, n);
    if (t.copy_f16 != nullptr) convert(t.param + begin, t.copy_f16 + begin, n);
  }
}

constexpr int64_t kCopyChunk = 4096;  // elements updated, then converted into the compute copy, per piece

// The FP8 codes of parameters [begin, end) as they now stand (t.codes set; math::store_fp8_code per element, the
// CUDA kernels' bits), their amax bits folded into m.
template <class P, class G, class M>
void write_fp8_codes(const math::AdamWTensor<P, G, M>& t, int64_t begin, int64_t end, uint32_t& m) {
  if constexpr (std::is_same_v<P, float>) {
    const float scale = *t.code_scale;
    for (int64_t i = begin; i < end; ++i) math::store_fp8_code(t, i, t.param[i], scale, m);
  }
}

// A tensor's whole FP8 codes, scale_inv and amax (the last folded into *code_amax), from its parameters as they stand;
// `update(begin, end)` first updates each chunk of parameters (nothing for a skipped step).
template <class P, class G, class M, class Update>
void with_fp8_codes(const math::AdamWTensor<P, G, M>& t, int64_t chunk, int64_t threshold, Update&& update) {
  const int64_t chunks = (t.n + chunk - 1) / chunk;
  uint32_t m = 0;
#pragma omp parallel for schedule(static) reduction(max : m) if (t.n > threshold)
  for (int64_t k = 0; k < chunks; ++k) {
    const int64_t begin = k * chunk, end = t.n - begin < chunk ? t.n : begin + chunk;
    update(begin, end);
    if (t.codes != nullptr) write_fp8_codes(t, begin, end, m);
  }
  if (t.codes != nullptr) {
    *t.code_scale_inv = math::reciprocal(*t.code_scale);
    uint32_t old;
    std::memcpy(&old, t.code_amax, sizeof old);
    const uint32_t folded = math::canonical_amax_bits(m) > old ? math::canonical_amax_bits(m) : old;
    std::memcpy(t.code_amax, &folded, sizeof folded);
  }
}

template <class P, class G, class M>
void adamw_dense(const math::AdamWTensor<P, G, M>& t, const math::AdamWCoefficients<math::opmath_t<P>>& c,
                 const float* grad_scale_inv) {
  using F = math::opmath_t<P>;
  const bool scaled = grad_scale_inv != nullptr;
  const F scale = scaled ? F(*grad_scale_inv) : F(1);
  with_fp8_codes(t, kCopyChunk, kParallelThreshold, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      F g = math::load(t.grad[i]);
      if (scaled) g = math::optim_detail::mul(g, scale);
      F m = math::load(t.exp_avg[i]), v = math::load(t.exp_avg_sq[i]);
      math::adamw_moments(c, g, m, v);
      t.param[i] = math::adamw_param(c, F(t.param[i]), m, v);
      t.exp_avg[i] = math::store<M>(m);
      t.exp_avg_sq[i] = math::store<M>(v);
    }
    write_compute_copy(t, begin, end);
  });
}

// The codes of one block's new moments (`valid` lanes): math::quantize_*_state lane by lane. Each lane's bisection is
// a chain of dependent loads and compares (~50 ns per element and thread), so with AVX-512 16 lanes run at once below.
void quantize_lanes_generic(const float* m, const float* v, int64_t valid, float absmax_m, float absmax_v, uint8_t* qm,
                            uint8_t* qv) {
  for (int64_t j = 0; j < valid; ++j) {
    qm[j] = math::quantize_signed_state(math::kDynamicMapSigned, m[j], absmax_m);
    qv[j] = math::quantize_unsigned_state(math::kDynamicMapUnsigned, v[j], absmax_v);
  }
}

#define MPT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))

// code[index] for 16 lanes (the masked form: GCC's unmasked one starts from an undefined vector it then warns about).
MPT_AVX512 __m512 gather16(const float* code, __m512i index) {
  return _mm512_mask_i32gather_ps(_mm512_setzero_ps(), __mmask16(0xffff), index, code, 4);
}

// math::quantize_dynamic for 16 lanes: the same bisection steps and midpoint rule with the same comparisons
// (ordered, so a NaN compares false as in C++), the map entries gathered, the midpoint added then halved (no FMA).
template <bool kSigned>
MPT_AVX512 __m512i quantize_dynamic16(const float* code, __m512 x) {
  __m512i pivot = _mm512_set1_epi32(127), upper_pivot = _mm512_set1_epi32(255), lower_pivot = _mm512_setzero_si512();
  __m512 lower = _mm512_set1_ps(kSigned ? -1.0f : 0.0f), upper = _mm512_set1_ps(1.0f), val = _mm512_set1_ps(code[127]);
  for (int step = 64; step > 0; step >>= 1) {
    const __mmask16 above = _mm512_cmp_ps_mask(x, val, _CMP_GT_OQ);
    lower_pivot = _mm512_mask_mov_epi32(lower_pivot, above, pivot);
    lower = _mm512_mask_mov_ps(lower, above, val);
    upper_pivot = _mm512_mask_mov_epi32(pivot, above, upper_pivot);
    upper = _mm512_mask_mov_ps(val, above, upper);
    const __m512i s = _mm512_set1_epi32(step);
    pivot = _mm512_mask_add_epi32(_mm512_sub_epi32(pivot, s), above, pivot, s);
    val = gather16(code, pivot);
  }
  const __mmask16 above = _mm512_cmp_ps_mask(x, val, _CMP_GT_OQ);
  const __m512 side = _mm512_mask_mov_ps(lower, above, upper);
  const __m512 midpoint = _mm512_mul_ps(_mm512_add_ps(side, val), _mm512_set1_ps(0.5f));
  const __m512i up = _mm512_mask_mov_epi32(pivot, _mm512_cmp_ps_mask(x, midpoint, _CMP_GT_OQ), upper_pivot);
  const __m512i down = _mm512_mask_mov_epi32(pivot, _mm512_cmp_ps_mask(x, midpoint, _CMP_LT_OQ), lower_pivot);
  return _mm512_mask_mov_epi32(down, above, up);
}

// x = value / absmax (0 for a zero absmax), as quantize_*_state divides.
MPT_AVX512 __m512 scaled16(__m512 value, float absmax) {
  return absmax > 0.0f ? _mm512_div_ps(value, _mm512_set1_ps(absmax)) : _mm512_setzero_ps();
}

MPT_AVX512 void quantize_lanes_avx512(const float* m, const float* v, int64_t valid, float absmax_m, float absmax_v,
                                      uint8_t* qm, uint8_t* qv) {
  const __m512i sign = _mm512_set1_epi32(static_cast<int>(0x80000000u));
  for (int64_t j = 0; j < valid; j += 16) {
    const __mmask16 live = valid - j >= 16 ? __mmask16(0xffff) : __mmask16((1u << (valid - j)) - 1);
    const __m512 mj = _mm512_maskz_loadu_ps(live, m + j), vj = _mm512_maskz_loadu_ps(live, v + j);
    __m512i q = quantize_dynamic16<true>(math::kDynamicMapSigned, scaled16(mj, absmax_m));
    // bitsandbytes' sign fix: a code whose entry's sign differs from m's moves one step towards m's side.
    const __m512 entry = gather16(math::kDynamicMapSigned, q);
    const __m512i bits = _mm512_xor_si512(_mm512_castps_si512(entry), _mm512_castps_si512(mj));
    const __m512i differ = _mm512_and_si512(bits, sign);
    const __mmask16 fix = _mm512_test_epi32_mask(differ, differ);
    const __mmask16 positive = _mm512_cmp_ps_mask(mj, _mm512_setzero_ps(), _CMP_GT_OQ);
    q = _mm512_mask_add_epi32(q, fix & positive, q, _mm512_set1_epi32(1));
    q = _mm512_mask_sub_epi32(q, fix & ~positive, q, _mm512_set1_epi32(1));
    _mm512_mask_cvtepi32_storeu_epi8(qm + j, live, q);
    const __m512i qv_lanes = quantize_dynamic16<false>(math::kDynamicMapUnsigned, scaled16(vj, absmax_v));
    _mm512_mask_cvtepi32_storeu_epi8(qv + j, live, qv_lanes);
  }
}

#undef MPT_AVX512

// One block of kQuantBlock elements: dequantize, update the moments, new absmax over all 256 lanes (pad lanes
// included), update the parameters, requantize. The CUDA kernel runs the same phases with one thread per lane.
template <class G>
void adamw_8bit_block(const math::AdamWTensor<float, G, uint8_t>& t, int64_t block,
                      const math::AdamWCoefficients<float>& c, const float* grad_scale_inv, bool avx512) {
  using namespace math;
  const int64_t begin = block * kQuantBlock;
  const int64_t valid = t.n - begin < kQuantBlock ? t.n - begin : kQuantBlock;
  const float old_absmax_m = t.exp_avg_absmax[block], old_absmax_v = t.exp_avg_sq_absmax[block];
  float m[kQuantBlock], v[kQuantBlock];
  bool update[kQuantBlock];
  float absmax_m = 0.0f, absmax_v = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    const bool real = j < valid;
    float g = real ? load(t.grad[begin + j]) : 0.0f;
    if (real && grad_scale_inv != nullptr) g = optim_detail::mul(g, *grad_scale_inv);
    const Adam8bitLane lane = adam8bit_moments(c, kDynamicMapSigned, kDynamicMapUnsigned, g,
                                               real ? t.exp_avg[begin + j] : kSignedPadCode,
                                               real ? t.exp_avg_sq[begin + j] : kUnsignedPadCode, old_absmax_m,
                                               old_absmax_v);
    m[j] = lane.m;
    v[j] = lane.v;
    update[j] = lane.update;
    absmax_m = abs_max(absmax_m, lane.m);
    absmax_v = abs_max(absmax_v, lane.v);
  }
  for (int64_t j = 0; j < valid; ++j)
    if (update[j]) t.param[begin + j] = adamw_param(c, t.param[begin + j], m[j], v[j]);
  write_compute_copy(t, begin, begin + valid);  // a lane not updated converts to the copy it already has
  if (avx512) {
    quantize_lanes_avx512(m, v, valid, absmax_m, absmax_v, t.exp_avg + begin, t.exp_avg_sq + begin);
  } else {
    quantize_lanes_generic(m, v, valid, absmax_m, absmax_v, t.exp_avg + begin, t.exp_avg_sq + begin);
  }
  t.exp_avg_absmax[block] = absmax_m;
  t.exp_avg_sq_absmax[block] = absmax_v;
}

}  // namespace

template <class P, class G, class M>
void adamw_step(const math::AdamWTensor<P, G, M>* tensors, int64_t count, const math::AdamWHyper& h, int64_t step,
                math::StepGuards guards) {
  if (skipped(guards)) {  // the FP8 codes are still made: their scale may have moved
    for (int64_t k = 0; k < count; ++k) {
      if (tensors[k].codes == nullptr) continue;
      with_fp8_codes(tensors[k], kCopyChunk, kParallelThreshold, [](int64_t, int64_t) {});
    }
    return;
  }
  for (int64_t k = 0; k < count; ++k) {
    const auto& t = tensors[k];
    const auto cf = math::adamw_coefficients(h, math::step_of(t, step)).template to<math::opmath_t<P>>();
    if constexpr (std::is_same_v<M, uint8_t>) {
      const bool avx512 = map_isa() == MapIsa::Avx512;
      with_fp8_codes(t, math::kQuantBlock, kParallelThreshold / 4, [&](int64_t begin, int64_t) {
        adamw_8bit_block(t, begin / math::kQuantBlock, cf, guards.grad_scale_inv, avx512);
      });
    } else {
      adamw_dense(t, cf, guards.grad_scale_inv);
    }
    if (t.step != nullptr) ++*t.step;
  }
}

template <class P, class G>
void sgd_step(const math::SgdTensor<P, G>* tensors, int64_t count, const math::SgdCoefficients<double>& c,
              math::StepGuards guards) {
  using F = math::opmath_t<P>;
  if (skipped(guards)) return;
  const bool scaled = guards.grad_scale_inv != nullptr;
  const F scale = scaled ? F(*guards.grad_scale_inv) : F(1);
  for (int64_t k = 0; k < count; ++k) {
    const auto& t = tensors[k];
    auto cf = c.to<F>();
    if (t.step != nullptr) cf.first_step = cf.first_step || *t.step == 0;
#pragma omp parallel for schedule(static) if (t.n > kParallelThreshold)
    for (int64_t i = 0; i < t.n; ++i) {
      F g = math::load(t.grad[i]);
      if (scaled) g = math::optim_detail::mul(g, scale);
      F buf = t.momentum_buffer != nullptr ? F(t.momentum_buffer[i]) : F(0);
      t.param[i] = math::sgd_update(cf, F(t.param[i]), g, buf);
      if (t.momentum_buffer != nullptr) t.momentum_buffer[i] = buf;
    }
    if (t.step != nullptr) ++*t.step;
  }
}

template <class G>
void unscale_check(G* const* grads, const int64_t* sizes, int64_t count, const float* inv_scale, float* found_inf) {
  const float inv = *inv_scale;
  bool found = false;
  for (int64_t k = 0; k < count; ++k) {
    G* g = grads[k];
    const int64_t n = sizes[k];
#pragma omp parallel for schedule(static) if (n > kParallelThreshold) reduction(|| : found)
    for (int64_t i = 0; i < n; ++i) {
      bool bad = false;
      const auto v = math::unscale_value(math::load(g[i]), math::opmath_t<G>(inv), bad);
      found = found || bad;
      if (inv != 1.0f) g[i] = math::store<G>(v);
    }
  }
  if (found) *found_inf = 1.0f;
}

template <class G>
void add_multi(G* const* dst, const G* const* src, const int64_t* sizes, int64_t count) {
  for (int64_t k = 0; k < count; ++k) {
    G* d = dst[k];
    const G* s = src[k];
    const int64_t n = sizes[k];
#pragma omp parallel for schedule(static) if (n > kParallelThreshold)
    for (int64_t i = 0; i < n; ++i) d[i] = math::store<G>(math::AddOp{}(math::load(d[i]), math::load(s[i])));
  }
}

void grad_scaler_update(const math::ScalerUpdate& u, const float* const* found_inf, int64_t count, float* scale,
                        float* inv, int32_t* trackers) {
  float found = 0.0f;
  for (int64_t k = 0; k < count; ++k) found += *found_inf[k];
  math::grad_scaler_update(u, found, scale, inv, trackers);
}

#define MPT_INSTANTIATE_ADAMW(P, G, M)                                                                   \
  template void adamw_step<P, G, M>(const math::AdamWTensor<P, G, M>*, int64_t, const math::AdamWHyper&, int64_t, \
                                    math::StepGuards);
#define MPT_INSTANTIATE_FLOAT_PARAMS(G) \
  MPT_INSTANTIATE_ADAMW(float, G, float)  \
  MPT_INSTANTIATE_ADAMW(float, G, bf16)   \
  MPT_INSTANTIATE_ADAMW(float, G, uint8_t) \
  template void sgd_step<float, G>(const math::SgdTensor<float, G>*, int64_t, const math::SgdCoefficients<double>&, \
                                   math::StepGuards);
MPT_INSTANTIATE_FLOAT_PARAMS(float)
MPT_INSTANTIATE_FLOAT_PARAMS(bf16)
MPT_INSTANTIATE_FLOAT_PARAMS(f16)
MPT_INSTANTIATE_ADAMW(double, double, double)
template void sgd_step<double, double>(const math::SgdTensor<double, double>*, int64_t,
                                       const math::SgdCoefficients<double>&, math::StepGuards);
template void unscale_check<float>(float* const*, const int64_t*, int64_t, const float*, float*);
template void unscale_check<double>(double* const*, const int64_t*, int64_t, const float*, float*);
template void unscale_check<bf16>(bf16* const*, const int64_t*, int64_t, const float*, float*);
template void unscale_check<f16>(f16* const*, const int64_t*, int64_t, const float*, float*);
template void add_multi<float>(float* const*, const float* const*, const int64_t*, int64_t);
template void add_multi<double>(double* const*, const double* const*, const int64_t*, int64_t);
template void add_multi<bf16>(bf16* const*, const bf16* const*, const int64_t*, int64_t);
template void add_multi<f16>(f16* const*, const f16* const*, const int64_t*, int64_t);
#undef MPT_INSTANTIATE_FLOAT_PARAMS
#undef MPT_INSTANTIATE_ADAMW

}  // namespace mpt::kernels::cpu
