// tests/ops/matmul_reference.h: the float64 GEMM reference and the derived FP32-accumulation error bound used by
// the matmul tests (test_matmul.cpp, test_matmul_fp8.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"
#include "op_test.h"

namespace mpt::testing {

// A 2-d or 3-d operand as float64 host values, read through op() (its transpose when `trans`). `scale`, when set,
// multiplies element (batch, row of the non-K dimension, K index): FP8 dequantization.
struct HostOperand {
  std::vector<double> v;
  int64_t batch = 1, rows = 0, cols = 0;
  bool trans = false;
  bool k_is_col = true;  // A: op(A)'s columns are K; B: op(B)'s rows are K
  std::function<double(int64_t, int64_t, int64_t)> scale;

  HostOperand(const Tensor& t, bool trans_, bool k_is_col_) : trans(trans_), k_is_col(k_is_col_) {
    v = t.to_vector<double>();  // exact for every floating dtype
    batch = t.dim() == 3 ? t.size(0) : 1;
    rows = t.size(-2);
    cols = t.size(-1);
  }
  double at(int64_t bi, int64_t i, int64_t j) const {  // op(X)[bi, i, j]
    const int64_t b = batch == 1 ? 0 : bi;
    const double x = trans ? v[static_cast<size_t>((b * rows + j) * cols + i)]
                           : v[static_cast<size_t>((b * rows + i) * cols + j)];
    if (!scale) return x;
    return k_is_col ? x * scale(b, i, j) : x * scale(b, j, i);
  }
};

struct GemmReference {
  Tensor value;    // alpha * op(A) op(B) + beta * C0, in float64
  Tensor abs_sum;  // |alpha| * (|op(A)| |op(B)|): what the accumulation error scales with
  int64_t k = 0;
};

// c0 (optional) is C before the call; the result has `out_shape` ((m, n) or (batch, m, n)).
inline GemmReference gemm_reference(const HostOperand& a, const HostOperand& b, double alpha, const Shape& out_shape,
                                    const Tensor& c0 = {}, double beta = 0) {
  const int64_t batch = out_shape.size() == 3 ? out_shape[0] : 1, m = out_shape[out_shape.size() - 2],
                n = out_shape.back(), k = a.trans ? a.rows : a.cols;
  std::vector<double> c = c0.defined() ? c0.to_vector<double>() : std::vector<double>();
  std::vector<double> val(static_cast<size_t>(batch * m * n)), abs(val.size());
  for (int64_t bi = 0; bi < batch; ++bi)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, sa = 0;
        for (int64_t p = 0; p < k; ++p) {
          const double x = a.at(bi, i, p), y = b.at(bi, p, j);
          s += x * y;
          sa += std::abs(x * y);
        }
        const size_t o = static_cast<size_t>((bi * m + i) * n + j);
        val[o] = alpha * s + (beta != 0 ? beta * c[o] : 0.0);
        abs[o] = std::abs(alpha) * sa;
      }
  return {Tensor::from_vector(val, out_shape), Tensor::from_vector(abs, out_shape), k};
}

// gamma_n = n u / (1 - n u): any summation of n terms with unit roundoff u errs by at most gamma_{n-1} sum |terms|.
inline double gamma_n(double n, double u) { return n * u / (1 - n * u); }

// Checks |got - ref| <= gamma_{k + KB + 5} * abs_sum + 2u |beta c0| + atol + rtol |ref| elementwise, with
// (rtol, atol) from the tolerance table for the output dtype (its one rounding) and u the accumulator's unit
// roundoff (2^-24 for FP32, 2^-53 for f64). The k + KB + 5 roundings: k - 1 sums of exact products (FMA or bf16
// products are exact in f32; f32 x f32 products add one rounding each, k in all), for block scaling the scale
// product, its multiplication and KB - 1 block additions, then alpha (with per-tensor scales: two more) and beta.
// `scale_back` divides got (FP8 outputs: codes / out_scale). Returns the worst ratio (<= 1 passes).
inline double expect_gemm_close(const Tensor& got, const GemmReference& ref, DType out_dtype, const std::string& what,
                                double u = 0x1p-24, const Tensor& c0 = {}, double beta = 0, double scale_back = 1) {
  EXPECT_EQ(got.shape(), ref.value.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), r = ref.value.to_vector<double>(),
                            s = ref.abs_sum.to_vector<double>();
  const std::vector<double> c = c0.defined() ? c0.to_vector<double>() : std::vector<double>(g.size(), 0.0);
  const Tolerance tol = tolerance(out_dtype);
  const double gamma = gamma_n(static_cast<double>(ref.k + (ref.k + 127) / 128 + 5), u);
  double worst = 0;
  size_t worst_i = 0;
  for (size_t i = 0; i < g.size() && i < r.size(); ++i) {
    const double x = g[i] / scale_back;
    const double bound = gamma * s[i] + 2 * u * std::abs(beta * c[i]) + tol.atol + tol.rtol * std::abs(r[i]);
    const double ratio = std::isnan(x) ? std::numeric_limits<double>::infinity() : std::abs(x - r[i]) / bound;
    if (ratio > worst) worst = ratio, worst_i = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_i << " got " << g[worst_i] / scale_back << " expected "
                        << r[worst_i] << " (abs-product sum " << s[worst_i] << ", k " << ref.k << ")";
  return worst;
}

}  // namespace mpt::testing
