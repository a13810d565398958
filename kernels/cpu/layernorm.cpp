// kernels/cpu/layernorm.cpp: LayerNorm rows on the CPU (OpenMP over rows), the math from kernels/math/layernorm.h.
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "kernels/cpu/row_convert.h"
#include "kernels/math/quantize.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kParallelElements = 1 << 15;
// dweight/dbias partial sums: a fixed chunk count keeps the summation order independent of the threads.
constexpr int64_t kGradChunks = 32;

template <class T, class Y, class X>
struct ForwardRows {
  OpmathRow<X> x;
  OpmathRow<T> residual, out, sum;
  OpmathRow<std::conditional_t<math::kFp8Output<Y>, T, Y>> y;  // unused for FP8 (the float row below)
  std::vector<float> fp8;  // an FP8 output's float row before quantization
  explicit ForwardRows(int64_t n)
      : x(n), residual(n), out(n), sum(n), y(n), fp8(math::kFp8Output<Y> ? static_cast<size_t>(n) : 0) {}
};

// Returns the row's max |y| bits (NaN skipped) for an FP8 Y, whose codes it writes; 0 otherwise.
template <class T, class P, class Y, class X, class F>
uint32_t forward_row(const math::LayerNormForwardParams<T, P, Y, X>& p, int64_t r, const F* w, const F* b,
                     ForwardRows<T, Y, X>& rows) {
  const int64_t n = p.cols, offset = r * n;
  const F* x = rows.x.load(p.x + offset, n);
  if (p.residual != nullptr) {
    const F* res = rows.residual.load(p.residual + offset, n);
    F* s = rows.out.out(p.sum + offset);
    for (int64_t c = 0; c < n; ++c) s[c] = x[c] + res[c];
    rows.out.store(p.sum + offset, n);
    x = rows.sum.load(p.sum + offset, n);  // the sum as rounded to T
  }
  F sum = 0;
  if (!p.rms) {
#pragma omp simd reduction(+ : sum)
    for (int64_t c = 0; c < n; ++c) sum += x[c];
  }
  const F mean = sum / static_cast<F>(n);
  F sq = 0;
#pragma omp simd reduction(+ : sq)
  for (int64_t c = 0; c < n; ++c) sq += (x[c] - mean) * (x[c] - mean);
  const F rstd = math::layer_norm_rstd(sq / static_cast<F>(n), static_cast<F>(p.eps));
  F* y = nullptr;
  if constexpr (math::kFp8Output<Y>) y = rows.fp8.data();
  else y = rows.y.out(p.y + offset);
  if (b != nullptr) {
    for (int64_t c = 0; c < n; ++c) y[c] = math::layer_norm_output(x[c], mean, rstd, w[c], b[c]);
  } else {
    for (int64_t c = 0; c < n; ++c) y[c] = math::layer_norm_output(x[c], mean, rstd, w[c], F(0));
  }
  p.mean[r] = mean;
  p.rstd[r] = rstd;
  if constexpr (math::kFp8Output<Y>) {  // the quantization of the float row (kernels/math/quantize.h's element)
    uint32_t m = 0;
    if (p.y_amax != nullptr) {
      for (int64_t c = 0; c < n; ++c) m = std::max(m, math::amax_bits(y[c], true));
    }
    if (p.y != nullptr) {  // null: the amax-only pass
      const float s = *p.y_scale;
      Y* q = p.y + offset;
      for (int64_t c = 0; c < n; ++c) q[c] = math::quantize_value<Y>(y[c], s, Fp8Saturation::Saturate);
    }
    return m;
  } else {
    rows.y.store(p.y + offset, n);
    return 0;
  }
}

template <class T, class G, class X>
struct BackwardRows {
  OpmathRow<T> x, dx, old;
  OpmathRow<G> dy;
  OpmathRow<X> dx_half;
  explicit BackwardRows(int64_t n) : x(n), dx(n), old(n), dy(n), dx_half(n) {}
};

// dx for row r; adds dy * xhat and dy into the chunk's partials pw, pb.
template <class T, class P, class G, class X, class D, class F>
void backward_row(const math::LayerNormBackwardParams<T, P, G, X, D>& p, int64_t r, const F* w, F* pw, F* pb,
                  BackwardRows<T, G, X>& rows) {
  const int64_t n = p.cols, offset = r * n;
  const F* x = rows.x.load(p.x + offset, n);
  const F* dy = rows.dy.load(p.dy + offset, n);
  const F mean = p.mean[r], rstd = p.rstd[r];
  F sg = 0, sgx = 0;
#pragma omp simd reduction(+ : sg, sgx)
  for (int64_t c = 0; c < n; ++c) {
    const F xhat = (x[c] - mean) * rstd, g = dy[c] * w[c];
    sg += g;
    sgx += g * xhat;
    pw[c] += dy[c] * xhat;
    pb[c] += dy[c];
  }
  const F g_mean = p.rms ? F(0) : sg / static_cast<F>(n), gx_mean = sgx / static_cast<F>(n);
  const T* added = p.accumulate_dx ? p.dx : p.dx_add;
  const F* old = added != nullptr ? rows.old.load(added + offset, n) : nullptr;
  F* dx = rows.dx.out(p.dx + offset);
  for (int64_t c = 0; c < n; ++c) {
    const F d = math::layer_norm_dx(dy[c] * w[c], (x[c] - mean) * rstd, rstd, g_mean, gx_mean);
    dx[c] = old != nullptr ? old[c] + d : d;
  }
  rows.dx.store(p.dx + offset, n);
  if (p.dx_half != nullptr) {  // dx as rounded to T, rounded again to X: the cast a separate pass would make
    const F* rounded = rows.x.load(p.dx + offset, n);
    F* h = rows.dx_half.out(p.dx_half + offset);
    for (int64_t c = 0; c < n; ++c) h[c] = rounded[c];
    rows.dx_half.store(p.dx_half + offset, n);
  }
}

template <class P, class F>
void store_param_grad(P* out, const F* partials, int64_t chunks, int64_t stride, int64_t c, bool accumulate) {
  F s = 0;
  for (int64_t k = 0; k < chunks; ++k) s += partials[k * stride + c];
  if (accumulate) s += F(math::load(out[c]));
  out[c] = math::store<P>(s);
}

}  // namespace

template <class T, class P, class Y, class X>
void layer_norm_forward(const math::LayerNormForwardParams<T, P, Y, X>& p) {
  using F = math::opmath_t<T>;
  if (p.rows <= 0 || p.cols <= 0) return;
  std::vector<F> w_storage, b_storage;
  const F* w = params_as<F>(p.weight, p.cols, w_storage);
  const F* b = params_as<F>(p.bias, p.cols, b_storage);
  uint32_t amax = 0;
#pragma omp parallel if (p.rows * p.cols > kParallelElements) reduction(max : amax)
  {
    ForwardRows<T, Y, X> rows(p.cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) amax = std::max(amax, forward_row(p, r, w, b, rows));
  }
  if constexpr (math::kFp8Output<Y>) {  // folded into *y_amax (non-negative: its bits order like integers)
    if (p.y_amax == nullptr) return;
    const uint32_t old = numerics_detail::bit_cast<uint32_t>(*p.y_amax);
    *p.y_amax = numerics_detail::bit_cast<float>(std::max(old, math::canonical_amax_bits(amax)));
  }
}

template <class T, class P, class G, class X, class D>
void layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X, D>& p) {
  using F = math::opmath_t<T>;
  if (p.rows <= 0 || p.cols <= 0) return;
  const int64_t n = p.cols;
  const int64_t chunks = std::min(p.rows, kGradChunks);
  const int64_t rows_per_chunk = (p.rows + chunks - 1) / chunks;
  std::vector<F> w_storage;
  const F* w = params_as<F>(p.weight, n, w_storage);
  std::vector<F> partials(static_cast<size_t>(chunks * 2 * n), F(0));  // (chunks, 2, cols)
#pragma omp parallel if (p.rows * n > kParallelElements)
  {
    BackwardRows<T, G, X> rows(n);
#pragma omp for schedule(static)
    for (int64_t k = 0; k < chunks; ++k) {
      F* pw = partials.data() + k * 2 * n;
      const int64_t end = std::min(p.rows, (k + 1) * rows_per_chunk);
      for (int64_t r = k * rows_per_chunk; r < end; ++r) backward_row(p, r, w, pw, pw + n, rows);
    }
  }
#pragma omp parallel for schedule(static) if (chunks * n > kParallelElements)
  for (int64_t c = 0; c < n; ++c) {
    store_param_grad(p.dweight, partials.data(), chunks, 2 * n, c, p.accumulate_dweight);
    if (p.dbias != nullptr) store_param_grad(p.dbias, partials.data() + n, chunks, 2 * n, c, p.accumulate_dbias);
  }
}

#define MPT_INSTANTIATE(T, P, Y, X)                                                                \
  template void layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&); \
  template void layer_norm_backward<T, P, Y, X>(const math::LayerNormBackwardParams<T, P, Y, X>&);
MPT_LAYER_NORM_TYPES(MPT_INSTANTIATE)
MPT_INSTANTIATE(double, double, double, double)  // the CPU's float64 reference path
#undef MPT_INSTANTIATE
#define MPT_INSTANTIATE(T, P, Y, X) \
  template void layer_norm_backward<T, P, Y, X, bf16>(const math::LayerNormBackwardParams<T, P, Y, X, bf16>&);
MPT_LAYER_NORM_BF16_GRAD_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
#define MPT_INSTANTIATE(T, P, Y, X) \
  template void layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&);
MPT_LAYER_NORM_FP8_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
