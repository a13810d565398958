// kernels/math/layernorm.h: LayerNorm row math and kernel parameters, written once for CPU and CUDA.
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels/math/common.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::math {

// y = (x - mean) * rstd * weight + bias over each row of `cols` elements; statistics in opmath (float,
// double for double). With `rms` it is RMSNorm: mean is taken as 0 (and saved as 0), rstd = 1 / sqrt(mean(x^2) +
// eps). With `residual`, the row normalised is s = x + residual, rounded to T and written to `sum` first: the
// statistics come from the rounded s, so the saved (s, mean, rstd) are consistent for backward. bias may be null
// (no bias). T is the activation type, P the parameter type (T or float), Y the output's (T, or f16/bf16 beside
// float T: the normalised row rounded once, straight to the dtype of the GEMM that reads it). X is x's: T, or with a
// residual f16/bf16 beside float T (a low-precision sublayer output entering an f32 residual stream: widened
// exactly, then added).
template <class T, class P, class Y = T, class X = T>
struct LayerNormForwardParams {
  const X* x = nullptr;         // (rows, cols)
  const T* residual = nullptr;  // (rows, cols) or null
  T* sum = nullptr;             // (rows, cols): x + residual, when residual is given
  const P* weight = nullptr;    // (cols)
  const P* bias = nullptr;      // (cols) or null
  Y* y = nullptr;               // (rows, cols)
  opmath_t<T>* mean = nullptr;  // (rows)
  opmath_t<T>* rstd = nullptr;  // (rows)
  int64_t rows = 0;
  int64_t cols = 0;
  double eps = 1e-5;  // rounded to opmath (float) before use, except for double
  bool rms = false;
  // Y = f8e4m3 only (beside float T): y = e4m3(norm * *y_scale), saturating, and max |norm| over the rows (NaN
  // skipped) folded into *y_amax (a non-negative float, raised with an integer max of its bits: atomically on CUDA):
  // the per-tensor delayed-scaling quantization of the FP8 GEMM that reads y, bit for bit that of the float norm.
  // y null: max |norm| only, nothing else of y written (y_scale unused): current scaling's first pass, whose scale
  // the second one (y_amax null: no amax folded) quantizes with.
  const float* y_scale = nullptr;
  float* y_amax = nullptr;
};

// dx, dweight, dbias of y = xhat * weight + bias, xhat = (x - mean) * rstd. Each output is overwritten, or
// added to when its accumulate flag is set (backward accumulates into gradients). dbias may be null. G is dy's type:
// T, or the f16/bf16 of a forward that wrote Y = G (widened exactly to float as it is read). For a fused residual
// sum, dx_add (the gradient reaching the sum directly) is added to dx, and dx_half, when given, receives dx rounded to
// X as well (the gradient of a forward's f16/bf16 x; X is T otherwise). D is dweight's and dbias's type: P, or bf16
// for f32 parameters whose gradients are kept in BF16 (autograd::set_grad_dtype; the float sums rounded once to D).
template <class T, class P, class G = T, class X = T, class D = P>
struct LayerNormBackwardParams {
  const G* dy = nullptr;              // (rows, cols)
  const T* x = nullptr;               // (rows, cols): the normalised input (s for the fused residual add)
  const P* weight = nullptr;          // (cols)
  const opmath_t<T>* mean = nullptr;  // (rows)
  const opmath_t<T>* rstd = nullptr;  // (rows)
  T* dx = nullptr;                    // (rows, cols)
  const T* dx_add = nullptr;          // (rows, cols) or null; not with accumulate_dx
  X* dx_half = nullptr;               // (rows, cols) or null
  D* dweight = nullptr;               // (cols)
  D* dbias = nullptr;                 // (cols) or null
  int64_t rows = 0;
  int64_t cols = 0;
  bool accumulate_dx = false;
  bool accumulate_dweight = false;
  bool accumulate_dbias = false;
  bool rms = false;  // RMSNorm: mean is 0 and the mean(g) term of dx drops out
};

// The (T, P, Y, X) quadruples the CPU and CUDA kernels are built for (the CPU adds double), as X(T, P, Y, X): each
// activation type with its own parameters, f16/bf16 activations with f32 parameters, and an f32 residual stream whose
// norm is written for (and its gradient read back from) an f16/bf16 GEMM and which takes a sublayer's f16/bf16 output
// (its gradient written in its dtype too).
#define MPT_LAYER_NORM_TYPES(X)                                                                             \
  X(float, float, float, float) X(f16, f16, f16, f16) X(bf16, bf16, bf16, bf16) X(f16, float, f16, f16)     \
  X(bf16, float, bf16, bf16) X(float, float, f16, float) X(float, float, bf16, float)                       \
  X(float, float, f16, f16) X(float, float, bf16, bf16) X(float, float, float, f16) X(float, float, float, bf16)

// The backward's (T, P, G, X) with f32 parameters, built with D = bf16 as well (BF16 gradients of FP32 norms).
#define MPT_LAYER_NORM_BF16_GRAD_TYPES(X)                                                                   \
  X(float, float, float, float) X(f16, float, f16, f16) X(bf16, float, bf16, bf16) X(float, float, f16, float) \
  X(float, float, bf16, float) X(float, float, f16, f16) X(float, float, bf16, bf16) X(float, float, float, f16) \
  X(float, float, float, bf16)

// The forward's FP8 outputs (a residual stream's norm quantized for an FP8 GEMM): an f32 stream with x f32 or the
// f16/bf16 beside it, or an f16/bf16 stream (amp::Policy::residual) with f32 parameters.
#define MPT_LAYER_NORM_FP8_TYPES(X)                                                                         \
  X(float, float, f8e4m3, float) X(float, float, f8e4m3, f16) X(float, float, f8e4m3, bf16)                \
  X(f16, float, f8e4m3, f16) X(bf16, float, f8e4m3, bf16)

template <class Y>
inline constexpr bool kFp8Output = std::is_same_v<Y, f8e4m3>;

template <class F>
MPT_HD MPT_INLINE F layer_norm_rstd(F var, F eps) {
#if defined(__CUDA_ARCH__)
  return F(1) / ::sqrt(var + eps);
#else
  return F(1) / std::sqrt(var + eps);
#endif
}

// The forward output of one element: (x - mean) * rstd * w + b.
template <class F>
MPT_HD MPT_INLINE F layer_norm_output(F x, F mean, F rstd, F w, F b) {
  return (x - mean) * rstd * w + b;
}

// dx_j = rstd * (g_j - mean(g) - xhat_j * mean(g * xhat)), g = dy * w. `g_mean` and `gx_mean` are
// the row means of g and g * xhat (RMSNorm: g_mean = 0).
template <class F>
MPT_HD MPT_INLINE F layer_norm_dx(F g, F xhat, F rstd, F g_mean, F gx_mean) {
  return rstd * (g - g_mean - xhat * gx_mean);
}

}  // namespace mpt::kernels::math
