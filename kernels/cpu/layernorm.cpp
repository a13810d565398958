// kernels/cpu/layernorm.cpp: LayerNorm rows on the CPU (OpenMP over rows), the math from kernels/math/layernorm.h.
#include "kernels/cpu/layernorm.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/row_convert.h"

namespace mpt::kernels::cpu {

namespace {

constexpr int64_t kParallelElements = 1 << 15;
// dweight/dbias partial sums: a fixed chunk count keeps the summation order independent of the threads.
constexpr int64_t kGradChunks = 32;

template <class T, class Y, class X>
struct ForwardRows {
  OpmathRow<X> x;
  OpmathRow<T> residual, out, sum;
  OpmathRow<Y> y;
  explicit ForwardRows(int64_t n) : x(n), residual(n), out(n), sum(n), y(n) {}
};

template <class T, class P, class Y, class X, class F>
void forward_row(const math::LayerNormForwardParams<T, P, Y, X>& p, int64_t r, const F* w, const F* b,
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
  F* y = rows.y.out(p.y + offset);
  if (b != nullptr) {
    for (int64_t c = 0; c < n; ++c) y[c] = math::layer_norm_output(x[c], mean, rstd, w[c], b[c]);
  } else {
    for (int64_t c = 0; c < n; ++c) y[c] = math::layer_norm_output(x[c], mean, rstd, w[c], F(0));
  }
  rows.y.store(p.y + offset, n);
  p.mean[r] = mean;
  p.rstd[r] = rstd;
}

template <class T, class G, class X>
struct BackwardRows {
  OpmathRow<T> x, dx, old;
  OpmathRow<G> dy;
  OpmathRow<X> dx_half;
  explicit BackwardRows(int64_t n) : x(n), dx(n), old(n), dy(n), dx_half(n) {}
};

// dx for row r; adds dy * xhat and dy into the chunk's partials pw, pb.
template <class T, class P, class G, class X, class F>
void backward_row(const math::LayerNormBackwardParams<T, P, G, X>& p, int64_t r, const F* w, F* pw, F* pb,
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
#pragma omp parallel if (p.rows * p.cols > kParallelElements)
  {
    ForwardRows<T, Y, X> rows(p.cols);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < p.rows; ++r) forward_row(p, r, w, b, rows);
  }
}

template <class T, class P, class G, class X>
void layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X>& p) {
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

}  // namespace mpt::kernels::cpu
