// kernels/cpu/optim.cpp: the optimizer math of kernels/math/optim.h over lists of tensors (OpenMP inside each).
#include "kernels/cpu/optim.h"

#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

namespace {

bool skipped(const math::StepGuards& guards) { return guards.found_inf != nullptr && *guards.found_inf != 0.0f; }

template <class P, class G, class M>
void adamw_dense(const math::AdamWTensor<P, G, M>& t, const math::AdamWCoefficients<math::opmath_t<P>>& c,
                 const float* grad_scale_inv) {
  using F = math::opmath_t<P>;
  const bool scaled = grad_scale_inv != nullptr;
  const F scale = scaled ? F(*grad_scale_inv) : F(1);
#pragma omp parallel for schedule(static) if (t.n > kParallelThreshold)
  for (int64_t i = 0; i < t.n; ++i) {
    F g = math::load(t.grad[i]);
    if (scaled) g = math::optim_detail::mul(g, scale);
    F m = math::load(t.exp_avg[i]), v = math::load(t.exp_avg_sq[i]);
    math::adamw_moments(c, g, m, v);
    t.param[i] = math::adamw_param(c, F(t.param[i]), m, v);
    t.exp_avg[i] = math::store<M>(m);
    t.exp_avg_sq[i] = math::store<M>(v);
  }
}

// One block of kQuantBlock elements: dequantize, update the moments, new absmax over all 256 lanes (pad lanes
// included), update the parameters, requantize. The CUDA kernel runs the same phases with one thread per lane.
template <class G>
void adamw_8bit_block(const math::AdamWTensor<float, G, uint8_t>& t, int64_t block,
                      const math::AdamWCoefficients<float>& c, const float* grad_scale_inv) {
  using namespace math;
  const int64_t begin = block * kQuantBlock;
  const int64_t valid = t.n - begin < kQuantBlock ? t.n - begin : kQuantBlock;
  const float old_absmax_m = t.exp_avg_absmax[block], old_absmax_v = t.exp_avg_sq_absmax[block];
  Adam8bitLane lanes[kQuantBlock];
  float absmax_m = 0.0f, absmax_v = 0.0f;
  for (int j = 0; j < kQuantBlock; ++j) {
    const bool real = j < valid;
    float g = real ? load(t.grad[begin + j]) : 0.0f;
    if (real && grad_scale_inv != nullptr) g = optim_detail::mul(g, *grad_scale_inv);
    lanes[j] = adam8bit_moments(c, kDynamicMapSigned, kDynamicMapUnsigned, g,
                                real ? t.exp_avg[begin + j] : kSignedPadCode,
                                real ? t.exp_avg_sq[begin + j] : kUnsignedPadCode, old_absmax_m, old_absmax_v);
    absmax_m = abs_max(absmax_m, lanes[j].m);
    absmax_v = abs_max(absmax_v, lanes[j].v);
  }
  for (int64_t j = 0; j < valid; ++j) {
    const Adam8bitLane& l = lanes[j];
    if (l.update) t.param[begin + j] = adamw_param(c, t.param[begin + j], l.m, l.v);
    t.exp_avg[begin + j] = quantize_signed_state(kDynamicMapSigned, l.m, absmax_m);
    t.exp_avg_sq[begin + j] = quantize_unsigned_state(kDynamicMapUnsigned, l.v, absmax_v);
  }
  t.exp_avg_absmax[block] = absmax_m;
  t.exp_avg_sq_absmax[block] = absmax_v;
}

}  // namespace

template <class P, class G, class M>
void adamw_step(const math::AdamWTensor<P, G, M>* tensors, int64_t count, const math::AdamWHyper& h, int64_t step,
                math::StepGuards guards) {
  if (skipped(guards)) return;
  for (int64_t k = 0; k < count; ++k) {
    const auto& t = tensors[k];
    const auto cf = math::adamw_coefficients(h, math::step_of(t, step)).template to<math::opmath_t<P>>();
    if constexpr (std::is_same_v<M, uint8_t>) {
      const int64_t blocks = (t.n + math::kQuantBlock - 1) / math::kQuantBlock;
#pragma omp parallel for schedule(static) if (t.n > kParallelThreshold / 4)
      for (int64_t b = 0; b < blocks; ++b) adamw_8bit_block(t, b, cf, guards.grad_scale_inv);
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
#undef MPT_INSTANTIATE_FLOAT_PARAMS
#undef MPT_INSTANTIATE_ADAMW

}  // namespace mpt::kernels::cpu
