// kernels/math/optim.h: optimizer update math (AdamW, SGD, AMP unscale) and the bitsandbytes 8-bit dynamic map,
// written once for the CPU loops and the CUDA kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/math/common.h"
#include "kernels/math/opmath.h"
#include "kernels/math/quantize.h"
#include "kernels/math/rounded.h"

// Bit-identity between the CPU and the GPU. Every float operation below is an explicitly rounded +, -, *, / or
// sqrt (IEEE round-to-nearest-even on both sides) and no product is left for a compiler to fuse: nvcc contracts
// `a * b + c` into an FMA by default, so device code uses __fmul_rn / __fadd_rn / __fdiv_rn / __fsqrt_rn, which
// are never contracted and keep their rounding under --use_fast_math. The host side is g++ in ISO C++ mode
// (-ffp-contract=off). The emulation tests compile the device code with g++, where these helpers are plain
// operators: an emulated match proves the order of operations is the same, not that nvcc kept it; the
// intrinsics are what carry the guarantee to a GPU (to be confirmed on one).
namespace mpt::kernels::math {

namespace optim_detail {

// The explicitly rounded operations of kernels/math/rounded.h, under the short names the updates below use.
template <class F>
MPT_HD MPT_INLINE F mul(F a, F b) { return mul_rn(a, b); }
template <class F>
MPT_HD MPT_INLINE F add(F a, F b) { return add_rn(a, b); }
template <class F>
MPT_HD MPT_INLINE F sub(F a, F b) { return sub_rn(a, b); }
template <class F>
MPT_HD MPT_INLINE F div(F a, F b) { return div_rn(a, b); }

// Classification by bits: the same answer on host and device, whatever the math library.
MPT_HD MPT_INLINE uint32_t bits_of(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  return u;
}
MPT_HD MPT_INLINE bool is_finite(float x) { return (bits_of(x) & 0x7F800000u) != 0x7F800000u; }
MPT_HD MPT_INLINE bool is_finite(double x) {
  uint64_t u;
  memcpy(&u, &x, sizeof u);
  return (u & 0x7FF0000000000000ull) != 0x7FF0000000000000ull;
}
MPT_HD MPT_INLINE bool sign_bit(float x) { return (bits_of(x) >> 31) != 0; }

}  // namespace optim_detail

// ---- the tensors one multi-tensor call updates (raw pointers; n elements each) ----

// One parameter of an AdamW step. M = float or bf16: exp_avg / exp_avg_sq hold the moments and the absmax
// pointers are null. M = uint8_t: they hold bitsandbytes codes (signed map for m, unsigned for v) with one f32
// absmax per block of kQuantBlock elements (ceil(n / 256) each). P = double (with G = M = double) is the CPU
// float64 reference path.
template <class P, class G, class M>
struct AdamWTensor {
  P* param;
  const G* grad;
  M* exp_avg;
  M* exp_avg_sq;
  float* exp_avg_absmax;
  float* exp_avg_sq_absmax;
  int64_t n;
  // Optional: the parameter's step count on the same device (steps taken before this one). The kernel then uses
  // *step + 1 instead of the call's host step and advances *step unless the guards skip the step, so a step
  // skipped on the device (found_inf) does not count, without the host reading anything.
  int64_t* step = nullptr;
  // Optional (at most one): the parameter's FP16/BF16 compute copy, its first n elements rewritten with each updated
  // parameter rounded to the copy's dtype (the cast a later forward would otherwise make of the whole tensor).
  bf16* copy_bf16 = nullptr;
  f16* copy_f16 = nullptr;
  // Optional: the parameter's FP8 weight codes under delayed scaling (TransformerEngine's FP8 parameters): codes[i] =
  // e4m3(p * *code_scale), saturating (quantize_value's bits), for each parameter after the step, max |p| (NaN
  // ignored, as amax bits) folded into *code_amax, and *code_scale_inv = reciprocal(*code_scale). Written on a step
  // that found_inf skips too, from the unchanged parameters: the scale they are made with may have moved.
  f8e4m3* codes = nullptr;
  const float* code_scale = nullptr;
  float* code_amax = nullptr;
  float* code_scale_inv = nullptr;
};

// Writes the updated parameter value p of element i into t's compute copy, if it has one.
template <class P, class G, class M, class F>
MPT_HD MPT_INLINE void store_compute_copy(const AdamWTensor<P, G, M>& t, int64_t i, F p) {
  if (t.copy_bf16 != nullptr) t.copy_bf16[i] = store<bf16>(static_cast<float>(p));
  if (t.copy_f16 != nullptr) t.copy_f16[i] = store<f16>(static_cast<float>(p));
}

// The FP8 code of parameter value p under t's code scale (t.codes set), and p's amax bits folded into m.
template <class P, class G, class M>
MPT_HD MPT_INLINE void store_fp8_code(const AdamWTensor<P, G, M>& t, int64_t i, float p, float scale, uint32_t& m) {
  t.codes[i] = quantize_value<f8e4m3>(p, scale, Fp8Saturation::Saturate);
  const uint32_t b = amax_bits(p, true);
  m = b > m ? b : m;
}

// One parameter of an SGD step; momentum_buffer is null when momentum == 0.
template <class P, class G>
struct SgdTensor {
  P* param;
  const G* grad;
  P* momentum_buffer;
  int64_t n;
  int64_t* step = nullptr;  // optional, as AdamWTensor::step: *step == 0 also makes this the first step
};

// What the GradScaler hands a step (device pointers on CUDA, so nothing syncs with the host): when
// grad_scale_inv is set every gradient is multiplied by *grad_scale_inv; when found_inf is set and
// *found_inf != 0 the step writes nothing.
struct StepGuards {
  const float* grad_scale_inv = nullptr;
  const float* found_inf = nullptr;
};

// ---- AdamW (torch.optim.AdamW, amsgrad=False, maximize=False) ----

// The hyperparameters of one AdamW call (the group's, in double).
struct AdamWHyper {
  double lr, beta1, beta2, eps, weight_decay;
  // When set, {lr, weight_decay} are read here instead (device memory a captured CUDA graph refreshes each replay).
  const double* lr_wd = nullptr;
};

// The per-step scalars, computed in double from the hyperparameters and the step (adamw_coefficients) and
// narrowed to the math type F (float, or double for the CPU reference path).
template <class F>
struct AdamWCoefficients {
  F beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  F decay;                  // 1 - lr * weight_decay
  F step_size;              // lr / (1 - beta1^step)
  F bias_correction2_sqrt;  // sqrt(1 - beta2^step)

  template <class G>
  MPT_HD AdamWCoefficients<G> to() const {
    return {G(beta1), G(one_minus_beta1), G(beta2), G(one_minus_beta2), G(eps), G(decay), G(step_size),
            G(bias_correction2_sqrt)};
  }
};

// b^n for n >= 0 by binary exponentiation: a fixed sequence of correctly rounded double products, so the CPU
// and a GPU (which computes the coefficients per tensor from a device-resident step) get the same bits, where
// std::pow and CUDA's pow may differ in the last place. Within a few ulp of the exact power.
MPT_HD MPT_INLINE double pow_steps(double b, int64_t n) {
  using optim_detail::mul;
  double r = 1.0;
  while (n > 0) {
    if (n & 1) r = mul(r, b);
    b = mul(b, b);
    n >>= 1;
  }
  return r;
}

// step counts from 1 (the value of PyTorch's state["step"] after its increment).
MPT_HD MPT_INLINE AdamWCoefficients<double> adamw_coefficients(const AdamWHyper& h, int64_t step) {
  using namespace optim_detail;
  const double bc1 = sub(1.0, pow_steps(h.beta1, step));
  const double bc2 = sub(1.0, pow_steps(h.beta2, step));
  const double lr = h.lr_wd != nullptr ? h.lr_wd[0] : h.lr, wd = h.lr_wd != nullptr ? h.lr_wd[1] : h.weight_decay;
  return {h.beta1, sub(1.0, h.beta1), h.beta2, sub(1.0, h.beta2), h.eps, sub(1.0, mul(lr, wd)), div(lr, bc1),
          sqrt_rn(bc2)};
}
inline AdamWCoefficients<double> adamw_coefficients(double lr, double beta1, double beta2, double eps,
                                                    double weight_decay, int64_t step) {
  return adamw_coefficients(AdamWHyper{lr, beta1, beta2, eps, weight_decay}, step);
}

// The step a tensor takes: its own count + 1 when it carries one, else the call's.
template <class T>
MPT_HD MPT_INLINE int64_t step_of(const T& t, int64_t call_step) {
  return t.step != nullptr ? *t.step + 1 : call_step;
}

// m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g   (PyTorch's fused/foreach order)
template <class F>
MPT_HD MPT_INLINE void adamw_moments(const AdamWCoefficients<F>& c, F g, F& m, F& v) {
  using namespace optim_detail;
  m = add(mul(c.beta1, m), mul(c.one_minus_beta1, g));
  v = add(mul(c.beta2, v), mul(mul(c.one_minus_beta2, g), g));
}

// p *= 1 - lr wd (decoupled decay first); p -= step_size * (m / (sqrt(v) / sqrt(bc2) + eps))
template <class F>
MPT_HD MPT_INLINE F adamw_param(const AdamWCoefficients<F>& c, F p, F m, F v) {
  using namespace optim_detail;
  p = mul(p, c.decay);
  const F denom = add(div(sqrt_rn(v), c.bias_correction2_sqrt), c.eps);
  return sub(p, mul(c.step_size, div(m, denom)));
}

// ---- SGD with momentum (torch.optim.SGD, maximize=False) ----

template <class F>
struct SgdCoefficients {
  F lr, momentum, one_minus_dampening, weight_decay;
  bool nesterov;
  bool first_step;  // the momentum buffer is initialised to the gradient (PyTorch: buffer is None)

  template <class G>
  MPT_HD SgdCoefficients<G> to() const {
    return {G(lr), G(momentum), G(one_minus_dampening), G(weight_decay), nesterov, first_step};
  }
};

// g += wd p; buf = first ? g : momentum buf + (1 - dampening) g; g = nesterov ? g + momentum buf : buf;
// p -= lr g. With momentum == 0 there is no buffer (buf is left untouched).
template <class F>
MPT_HD MPT_INLINE F sgd_update(const SgdCoefficients<F>& c, F p, F g, F& buf) {
  using namespace optim_detail;
  if (c.weight_decay != F(0)) g = add(g, mul(c.weight_decay, p));
  if (c.momentum != F(0)) {
    buf = c.first_step ? g : add(mul(c.momentum, buf), mul(c.one_minus_dampening, g));
    g = c.nesterov ? add(g, mul(c.momentum, buf)) : buf;
  }
  return sub(p, mul(c.lr, g));
}

// ---- AMP: fused unscale + non-finite check (PyTorch _amp_foreach_non_finite_check_and_unscale_) ----

// Returns the unscaled value; `found` becomes true when v is inf or NaN (tested before the multiply).
// inv_scale == 1 leaves the value alone (the caller then keeps the stored bits untouched).
// F is the opmath type (float; double for float64 gradients).
template <class F>
MPT_HD MPT_INLINE F unscale_value(F v, F inv_scale, bool& found) {
  if (!optim_detail::is_finite(v)) found = true;
  return optim_detail::mul(v, inv_scale);
}

// ---- the GradScaler's scale update (torch's _amp_update_scale_, with hysteresis and a floor) ----

struct ScalerUpdate {
  double growth_factor, backoff_factor;
  double min_scale;         // 0: no floor
  int32_t growth_interval;  // finite updates in a row before the scale grows
  int32_t hysteresis;       // overflowing updates per backoff
};

// The scaler's device-resident state, updated in place: scale and its inverse (f32), and
// trackers = {growth tracker, overflows left before the next backoff, backoffs that ended at the floor}.
// found: the sum of the step's found_inf flags. Scales are products in double narrowed to f32 and the inverse is
// float(1 / double(scale)), as torch computes them; the floor is 2^-24 (the smallest f16 subnormal) or min_scale.
MPT_HD MPT_INLINE bool scale_at_floor(float s, double min_scale) {
  return s < 0x1p-24f || (min_scale > 0.0 && s <= static_cast<float>(min_scale));
}
MPT_HD MPT_INLINE void grad_scaler_update(const ScalerUpdate& u, float found, float* scale, float* inv,
                                          int32_t* trackers) {
  using optim_detail::div;
  using optim_detail::mul;
  if (found != 0.0f) {
    trackers[0] = 0;
    if (--trackers[1] <= 0) {
      trackers[1] = u.hysteresis;
      float s = static_cast<float>(mul(static_cast<double>(*scale), u.backoff_factor));
      if (u.min_scale > 0.0 && s < static_cast<float>(u.min_scale)) s = static_cast<float>(u.min_scale);
      *scale = s;
      *inv = static_cast<float>(div(1.0, static_cast<double>(s)));
      if (scale_at_floor(s, u.min_scale)) ++trackers[2];
    }
    return;
  }
  const int32_t t = trackers[0] + 1;
  if (t != u.growth_interval) {  // equality, like torch: a tracker already past a lowered interval keeps counting
    trackers[0] = t;
    return;
  }
  const float s = static_cast<float>(mul(static_cast<double>(*scale), u.growth_factor));
  if (optim_detail::is_finite(s)) {
    *scale = s;
    *inv = static_cast<float>(div(1.0, static_cast<double>(s)));
  }
  trackers[0] = 0;
  trackers[1] = u.hysteresis;
}

// ---- gradient clipping (torch.nn.utils.clip_grad_norm_) ----

// clamp(max_norm / (total + 1e-6), max = 1) in F (f32 from an f32 norm, as torch's tensor math): an infinite norm
// gives 0, a NaN norm NaN (the clamp keeps it).
template <class F>
MPT_HD MPT_INLINE F clip_coefficient(F total, F max_norm) {
  using namespace optim_detail;
  const F c = div(max_norm, add(total, F(1e-6)));
  return c > F(1) ? F(1) : c;
}

// ---- bitsandbytes blockwise 8-bit states (Adam8bit: kOptimizerStatic8bit2StateBlockwise) ----

inline constexpr int kQuantBlock = 256;       // elements per absmax block
inline constexpr uint8_t kSignedPadCode = 128;  // the code bitsandbytes loads for lanes past the end (m)
inline constexpr uint8_t kUnsignedPadCode = 0;  // (v)

// One step of quantize_dynamic's bisection: move the pivot by `step` towards x, keeping the bracketing entries.
struct DynamicBisection {
  int pivot, upper_pivot, lower_pivot;
  float lower, upper, val;
};
MPT_HD MPT_INLINE void bisect_dynamic(DynamicBisection& b, const float* code, float x, int step) {
  const bool above = x > b.val;
  b.lower_pivot = above ? b.pivot : b.lower_pivot;
  b.lower = above ? b.val : b.lower;
  b.upper_pivot = above ? b.upper_pivot : b.pivot;
  b.upper = above ? b.upper : b.val;
  b.pivot += above ? step : -step;
  b.val = code[b.pivot];
}

// bitsandbytes' quantize_2D: bisection over the sorted 256-entry map, then the nearer of the two neighbours by
// the midpoint rule (a tie keeps the bisection's own pivot). `code` is kDynamicMapSigned or kDynamicMapUnsigned.
// Selects instead of branches (each step's direction depends on the data: as branches about half were mispredicted).
// kernels/cpu/optim.cpp runs the same steps on 16 lanes at once with AVX-512 gathers (quantize_dynamic16).
template <bool kSigned>
MPT_HD MPT_INLINE uint8_t quantize_dynamic(const float* code, float x) {
  DynamicBisection b{127, 255, 0, kSigned ? -1.0f : 0.0f, 1.0f, code[127]};
  bisect_dynamic(b, code, x, 64);
  bisect_dynamic(b, code, x, 32);
  bisect_dynamic(b, code, x, 16);
  bisect_dynamic(b, code, x, 8);
  bisect_dynamic(b, code, x, 4);
  bisect_dynamic(b, code, x, 2);
  bisect_dynamic(b, code, x, 1);
  const bool above = x > b.val;
  const float midpoint = optim_detail::mul(optim_detail::add(above ? b.upper : b.lower, b.val), 0.5f);
  const int up = x > midpoint ? b.upper_pivot : b.pivot, down = x < midpoint ? b.lower_pivot : b.pivot;
  return static_cast<uint8_t>(above ? up : down);
}

// The code of m in a block whose new absmax is `absmax`: nearest map entry of m / absmax, then bitsandbytes'
// sign fix (a tiny m never flips sign by rounding to the neighbouring entry across zero). A block whose
// absmax is 0 decodes to zeros whatever its codes: it stores the code of 0 (bitsandbytes divides 0 by 0 there).
MPT_HD MPT_INLINE uint8_t quantize_signed_state(const float* code, float m, float absmax) {
  const float x = absmax > 0.0f ? optim_detail::div(m, absmax) : 0.0f;
  int q = quantize_dynamic<true>(code, x);
  if (optim_detail::sign_bit(code[q]) != optim_detail::sign_bit(m)) q += m > 0.0f ? 1 : -1;
  return static_cast<uint8_t>(q);
}

MPT_HD MPT_INLINE uint8_t quantize_unsigned_state(const float* code, float v, float absmax) {
  const float x = absmax > 0.0f ? optim_detail::div(v, absmax) : 0.0f;
  return quantize_dynamic<false>(code, x);
}

MPT_HD MPT_INLINE float dequantize_state(const float* code, uint8_t q, float absmax) {
  return optim_detail::mul(code[q], absmax);
}

// One lane of an 8-bit block update: dequantize m and v, apply the AdamW moment update. A lane whose gradient
// is inf or NaN gets m = v = 0 and no parameter update (bitsandbytes' rule). Lanes past the end of the
// tensor use g = 0 and the pad codes, as bitsandbytes' loads do, and count towards the block's new absmax.
struct Adam8bitLane {
  float m, v;
  bool update;
};

MPT_HD MPT_INLINE Adam8bitLane adam8bit_moments(const AdamWCoefficients<float>& c, const float* code_m,
                                                const float* code_v, float g, uint8_t qm, uint8_t qv,
                                                float absmax_m, float absmax_v) {
  if (!optim_detail::is_finite(g)) return {0.0f, 0.0f, false};
  float m = dequantize_state(code_m, qm, absmax_m), v = dequantize_state(code_v, qv, absmax_v);
  adamw_moments(c, g, m, v);
  return {m, v, true};
}

MPT_HD MPT_INLINE float abs_max(float a, float b) { return fmaxf(a, fabsf(b)); }

// The maps of bitsandbytes.functional.create_dynamic_map(signed, max_exponent_bits=7, total_bits=8): for
// i = 0..6, the midpoints of torch.linspace(0.1, 1, n_i) (n_i = 2^i + 1 signed, 2^(i+1) + 1 unsigned) times
// 10^(i-6) (and their negatives when signed), plus 0 and 1, sorted. The exact float bits depend on how
// torch.linspace rounds; these are the ones PyTorch 1.13.1 produces on its default x86 AVX2 path (Debian's
// python3-torch running bitsandbytes' create_dynamic_map code). Other builds (the generic path, AVX-512)
// differ in the last bit or two of a few dozen entries; every entry is within 2 ulp of the exact value
// (checked in tests/ops/test_optim.cpp).
inline constexpr float kDynamicMapSigned[256] = {
    -0x1.fc6666p-1f, -0x1.f53332p-1f, -0x1.eep-1f, -0x1.e6ccccp-1f, -0x1.df9998p-1f, -0x1.d86666p-1f,
    -0x1.d13334p-1f, -0x1.cap-1f, -0x1.c2ccccp-1f, -0x1.bb9998p-1f, -0x1.b46666p-1f, -0x1.ad3332p-1f,
    -0x1.a6p-1f, -0x1.9eccccp-1f, -0x1.979998p-1f, -0x1.906666p-1f, -0x1.893334p-1f, -0x1.82p-1f,
    -0x1.7acccep-1f, -0x1.73999ap-1f, -0x1.6c6668p-1f, -0x1.653334p-1f, -0x1.5ep-1f, -0x1.56cccep-1f,
    -0x1.4f999ap-1f, -0x1.486666p-1f, -0x1.413334p-1f, -0x1.3ap-1f, -0x1.32ccccp-1f, -0x1.2b999ap-1f,
    -0x1.246668p-1f, -0x1.1d3334p-1f, -0x1.16p-1f, -0x1.0eccccp-1f, -0x1.07999ap-1f, -0x1.006666p-1f,
    -0x1.f26668p-2f, -0x1.e4p-2f, -0x1.d59998p-2f, -0x1.c73334p-2f, -0x1.b8ccccp-2f, -0x1.aa6664p-2f,
    -0x1.9cp-2f, -0x1.8d9998p-2f, -0x1.7f3334p-2f, -0x1.70ccccp-2f, -0x1.626664p-2f, -0x1.54p-2f,
    -0x1.459998p-2f, -0x1.373334p-2f, -0x1.28ccccp-2f, -0x1.1a6668p-2f, -0x1.0cp-2f, -0x1.fb3334p-3f,
    -0x1.de6668p-3f, -0x1.c1999ap-3f, -0x1.a4ccccp-3f, -0x1.88p-3f, -0x1.6b3332p-3f, -0x1.4e6666p-3f,
    -0x1.31999ap-3f, -0x1.14ccccp-3f, -0x1.fp-4f, -0x1.b66668p-4f, -0x1.93d70ap-4f, -0x1.8851eap-4f,
    -0x1.7ccccep-4f, -0x1.7147aep-4f, -0x1.65c29p-4f, -0x1.5a3d7p-4f, -0x1.4eb85p-4f, -0x1.433334p-4f,
    -0x1.37ae14p-4f, -0x1.2c28f6p-4f, -0x1.20a3d6p-4f, -0x1.151ebap-4f, -0x1.09999ap-4f, -0x1.fc28f4p-5f,
    -0x1.e51ebap-5f, -0x1.ce147ap-5f, -0x1.b70a3ep-5f, -0x1.ap-5f, -0x1.88f5c2p-5f, -0x1.71eb86p-5f,
    -0x1.5ae146p-5f, -0x1.43d70ap-5f, -0x1.2ccccep-5f, -0x1.15c28ep-5f, -0x1.fd70a4p-6f, -0x1.cf5c26p-6f,
    -0x1.a147aep-6f, -0x1.733334p-6f, -0x1.451eb8p-6f, -0x1.170a3ep-6f, -0x1.d1eb86p-7f, -0x1.75c29p-7f,
    -0x1.3e76c8p-7f, -0x1.2c083p-7f, -0x1.19999ap-7f, -0x1.072b02p-7f, -0x1.e978d4p-8f, -0x1.c49ba6p-8f,
    -0x1.9fbe76p-8f, -0x1.7ae148p-8f, -0x1.56041ap-8f, -0x1.3126e8p-8f, -0x1.0c49bap-8f, -0x1.ced914p-9f,
    -0x1.851eb8p-9f, -0x1.3b645ap-9f, -0x1.e353f8p-10f, -0x1.4fdf3ap-10f, -0x1.eecbfep-11f, -0x1.b3d07cp-11f,
    -0x1.78d5p-11f, -0x1.3dd982p-11f, -0x1.02de02p-11f, -0x1.8fc506p-12f, -0x1.19ce0ap-12f, -0x1.47ae16p-13f,
    -0x1.743e96p-14f, -0x1.15df66p-14f, -0x1.6f0068p-15f, -0x1.64840cp-16f, -0x1.040bfep-17f, -0x1.b43528p-19f,
    -0x1.27476ep-21f, 0.0f, 0x1.27476ep-21f, 0x1.b43528p-19f, 0x1.040bfep-17f, 0x1.64840cp-16f,
    0x1.6f0068p-15f, 0x1.15df66p-14f, 0x1.743e96p-14f, 0x1.47ae16p-13f, 0x1.19ce0ap-12f, 0x1.8fc506p-12f,
    0x1.02de02p-11f, 0x1.3dd982p-11f, 0x1.78d5p-11f, 0x1.b3d07cp-11f, 0x1.eecbfep-11f, 0x1.4fdf3ap-10f,
    0x1.e353f8p-10f, 0x1.3b645ap-9f, 0x1.851eb8p-9f, 0x1.ced914p-9f, 0x1.0c49bap-8f, 0x1.3126e8p-8f,
    0x1.56041ap-8f, 0x1.7ae148p-8f, 0x1.9fbe76p-8f, 0x1.c49ba6p-8f, 0x1.e978d4p-8f, 0x1.072b02p-7f,
    0x1.19999ap-7f, 0x1.2c083p-7f, 0x1.3e76c8p-7f, 0x1.75c29p-7f, 0x1.d1eb86p-7f, 0x1.170a3ep-6f,
    0x1.451eb8p-6f, 0x1.733334p-6f, 0x1.a147aep-6f, 0x1.cf5c26p-6f, 0x1.fd70a4p-6f, 0x1.15c28ep-5f,
    0x1.2ccccep-5f, 0x1.43d70ap-5f, 0x1.5ae146p-5f, 0x1.71eb86p-5f, 0x1.88f5c2p-5f, 0x1.ap-5f,
    0x1.b70a3ep-5f, 0x1.ce147ap-5f, 0x1.e51ebap-5f, 0x1.fc28f4p-5f, 0x1.09999ap-4f, 0x1.151ebap-4f,
    0x1.20a3d6p-4f, 0x1.2c28f6p-4f, 0x1.37ae14p-4f, 0x1.433334p-4f, 0x1.4eb85p-4f, 0x1.5a3d7p-4f,
    0x1.65c29p-4f, 0x1.7147aep-4f, 0x1.7ccccep-4f, 0x1.8851eap-4f, 0x1.93d70ap-4f, 0x1.b66668p-4f,
    0x1.fp-4f, 0x1.14ccccp-3f, 0x1.31999ap-3f, 0x1.4e6666p-3f, 0x1.6b3332p-3f, 0x1.88p-3f,
    0x1.a4ccccp-3f, 0x1.c1999ap-3f, 0x1.de6668p-3f, 0x1.fb3334p-3f, 0x1.0cp-2f, 0x1.1a6668p-2f,
    0x1.28ccccp-2f, 0x1.373334p-2f, 0x1.459998p-2f, 0x1.54p-2f, 0x1.626664p-2f, 0x1.70ccccp-2f,
    0x1.7f3334p-2f, 0x1.8d9998p-2f, 0x1.9cp-2f, 0x1.aa6664p-2f, 0x1.b8ccccp-2f, 0x1.c73334p-2f,
    0x1.d59998p-2f, 0x1.e4p-2f, 0x1.f26668p-2f, 0x1.006666p-1f, 0x1.07999ap-1f, 0x1.0eccccp-1f,
    0x1.16p-1f, 0x1.1d3334p-1f, 0x1.246668p-1f, 0x1.2b999ap-1f, 0x1.32ccccp-1f, 0x1.3ap-1f,
    0x1.413334p-1f, 0x1.486666p-1f, 0x1.4f999ap-1f, 0x1.56cccep-1f, 0x1.5ep-1f, 0x1.653334p-1f,
    0x1.6c6668p-1f, 0x1.73999ap-1f, 0x1.7acccep-1f, 0x1.82p-1f, 0x1.893334p-1f, 0x1.906666p-1f,
    0x1.979998p-1f, 0x1.9eccccp-1f, 0x1.a6p-1f, 0x1.ad3332p-1f, 0x1.b46666p-1f, 0x1.bb9998p-1f,
    0x1.c2ccccp-1f, 0x1.cap-1f, 0x1.d13334p-1f, 0x1.d86666p-1f, 0x1.df9998p-1f, 0x1.e6ccccp-1f,
    0x1.eep-1f, 0x1.f53332p-1f, 0x1.fc6666p-1f, 0x1p+0f,
};
inline constexpr float kDynamicMapUnsigned[256] = {
    0.0f, 0x1.5cf754p-22f, 0x1.a0133p-21f, 0x1.1d367p-19f, 0x1.2599ecp-18f, 0x1.bc98a2p-18f,
    0x1.29cbaap-17f, 0x1.0624dcp-16f, 0x1.c2e34p-16f, 0x1.3fd0dp-15f, 0x1.9e3p-15f, 0x1.fc8f34p-15f,
    0x1.2d7732p-14f, 0x1.5ca6c8p-14f, 0x1.8bd662p-14f, 0x1.0cb296p-13f, 0x1.82a994p-13f, 0x1.f8a09p-13f,
    0x1.374bc8p-12f, 0x1.724744p-12f, 0x1.ad42c4p-12f, 0x1.e83e44p-12f, 0x1.119ce2p-11f, 0x1.2f1aap-11f,
    0x1.4c986p-11f, 0x1.6a162p-11f, 0x1.8793dep-11f, 0x1.a511ap-11f, 0x1.c28f5ep-11f, 0x1.e00d1cp-11f,
    0x1.fd8adcp-11f, 0x1.2b020cp-10f, 0x1.74bc6ap-10f, 0x1.be76c8p-10f, 0x1.041892p-9f, 0x1.28f5c2p-9f,
    0x1.4dd2fp-9f, 0x1.72b01ep-9f, 0x1.978d4ep-9f, 0x1.bc6a7cp-9f, 0x1.e147aep-9f, 0x1.03126ep-8f,
    0x1.158104p-8f, 0x1.27ef9ep-8f, 0x1.3a5e34p-8f, 0x1.4cccccp-8f, 0x1.5f3b64p-8f, 0x1.71a9fap-8f,
    0x1.841894p-8f, 0x1.968728p-8f, 0x1.a8f5c2p-8f, 0x1.bb645cp-8f, 0x1.cdd2fp-8f, 0x1.e0418ap-8f,
    0x1.f2b01ep-8f, 0x1.028f5cp-7f, 0x1.0bc6a6p-7f, 0x1.14fdf2p-7f, 0x1.1e354p-7f, 0x1.276c8ap-7f,
    0x1.30a3d6p-7f, 0x1.39db2p-7f, 0x1.43126ep-7f, 0x1.5eb854p-7f, 0x1.8ccccep-7f, 0x1.bae146p-7f,
    0x1.e8f5c4p-7f, 0x1.0b851ep-6f, 0x1.228f5cp-6f, 0x1.39999ap-6f, 0x1.50a3d6p-6f, 0x1.67ae16p-6f,
    0x1.7eb854p-6f, 0x1.95c29p-6f, 0x1.accccep-6f, 0x1.c3d70ep-6f, 0x1.dae146p-6f, 0x1.f1eb86p-6f,
    0x1.047aep-5f, 0x1.1p-5f, 0x1.1b851ep-5f, 0x1.270a3ep-5f, 0x1.328f5ep-5f, 0x1.3e147ap-5f,
    0x1.49999ap-5f, 0x1.551eb6p-5f, 0x1.60a3d6p-5f, 0x1.6c28f6p-5f, 0x1.77ae14p-5f, 0x1.833334p-5f,
    0x1.8eb854p-5f, 0x1.9a3d7p-5f, 0x1.a5c29p-5f, 0x1.b147aep-5f, 0x1.bccccep-5f, 0x1.c851eep-5f,
    0x1.d3d70ep-5f, 0x1.df5c2ap-5f, 0x1.eae146p-5f, 0x1.f66666p-5f, 0x1.00f5c4p-4f, 0x1.06b852p-4f,
    0x1.0c7ae2p-4f, 0x1.123d72p-4f, 0x1.18p-4f, 0x1.1dc29p-4f, 0x1.23852p-4f, 0x1.2947aep-4f,
    0x1.2f0a3ep-4f, 0x1.34cccep-4f, 0x1.3a8f5ep-4f, 0x1.4051ecp-4f, 0x1.46147ap-4f, 0x1.4bd70ap-4f,
    0x1.51999ap-4f, 0x1.575c28p-4f, 0x1.5d1eb8p-4f, 0x1.62e146p-4f, 0x1.68a3d6p-4f, 0x1.6e6666p-4f,
    0x1.7428f6p-4f, 0x1.79eb86p-4f, 0x1.7fae14p-4f, 0x1.8570a4p-4f, 0x1.8b3334p-4f, 0x1.90f5c2p-4f,
    0x1.96b852p-4f, 0x1.a8p-4f, 0x1.c4ccccp-4f, 0x1.e1999ap-4f, 0x1.fe6666p-4f, 0x1.0d9998p-3f,
    0x1.1cp-3f, 0x1.2a6668p-3f, 0x1.38ccccp-3f, 0x1.473334p-3f, 0x1.559998p-3f, 0x1.64p-3f,
    0x1.726668p-3f, 0x1.80ccccp-3f, 0x1.8f3334p-3f, 0x1.9d9998p-3f, 0x1.acp-3f, 0x1.ba6668p-3f,
    0x1.c8ccccp-3f, 0x1.d73334p-3f, 0x1.e5999cp-3f, 0x1.f4p-3f, 0x1.013334p-2f, 0x1.086666p-2f,
    0x1.0f999ap-2f, 0x1.16cccep-2f, 0x1.1ep-2f, 0x1.253334p-2f, 0x1.2c6668p-2f, 0x1.33999ap-2f,
    0x1.3acccep-2f, 0x1.42p-2f, 0x1.493334p-2f, 0x1.506666p-2f, 0x1.579998p-2f, 0x1.5eccccp-2f,
    0x1.66p-2f, 0x1.6d3332p-2f, 0x1.746666p-2f, 0x1.7b9998p-2f, 0x1.82ccccp-2f, 0x1.8ap-2f,
    0x1.913334p-2f, 0x1.986666p-2f, 0x1.9f9998p-2f, 0x1.a6ccccp-2f, 0x1.aep-2f, 0x1.b53332p-2f,
    0x1.bc6666p-2f, 0x1.c3999ap-2f, 0x1.caccccp-2f, 0x1.d2p-2f, 0x1.d93334p-2f, 0x1.e06666p-2f,
    0x1.e7999ap-2f, 0x1.eeccccp-2f, 0x1.f6p-2f, 0x1.fd3332p-2f, 0x1.023334p-1f, 0x1.05ccccp-1f,
    0x1.096664p-1f, 0x1.0dp-1f, 0x1.109998p-1f, 0x1.143334p-1f, 0x1.17ccccp-1f, 0x1.1b6668p-1f,
    0x1.1fp-1f, 0x1.22999ap-1f, 0x1.263334p-1f, 0x1.29ccccp-1f, 0x1.2d6668p-1f, 0x1.31p-1f,
    0x1.34999ap-1f, 0x1.383334p-1f, 0x1.3bccccp-1f, 0x1.3f6666p-1f, 0x1.43p-1f, 0x1.469998p-1f,
    0x1.4a3334p-1f, 0x1.4dccccp-1f, 0x1.516668p-1f, 0x1.55p-1f, 0x1.58999cp-1f, 0x1.5c3334p-1f,
    0x1.5fccccp-1f, 0x1.636668p-1f, 0x1.67p-1f, 0x1.6a999cp-1f, 0x1.6e3334p-1f, 0x1.71ccccp-1f,
    0x1.756668p-1f, 0x1.79p-1f, 0x1.7c9998p-1f, 0x1.803334p-1f, 0x1.83ccccp-1f, 0x1.876668p-1f,
    0x1.8bp-1f, 0x1.8e9998p-1f, 0x1.923334p-1f, 0x1.95ccccp-1f, 0x1.996664p-1f, 0x1.9dp-1f,
    0x1.a09998p-1f, 0x1.a43334p-1f, 0x1.a7ccccp-1f, 0x1.ab6668p-1f, 0x1.afp-1f, 0x1.b2999ap-1f,
    0x1.b63334p-1f, 0x1.b9ccccp-1f, 0x1.bd6668p-1f, 0x1.c1p-1f, 0x1.c4999ap-1f, 0x1.c83334p-1f,
    0x1.cbccccp-1f, 0x1.cf6666p-1f, 0x1.d3p-1f, 0x1.d69998p-1f, 0x1.da3334p-1f, 0x1.ddccccp-1f,
    0x1.e16668p-1f, 0x1.e5p-1f, 0x1.e8999cp-1f, 0x1.ec3334p-1f, 0x1.efccccp-1f, 0x1.f36668p-1f,
    0x1.f7p-1f, 0x1.fa999cp-1f, 0x1.fe3334p-1f, 0x1p+0f,
};

}  // namespace mpt::kernels::math
