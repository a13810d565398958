// kernels/cpu/gemm_ref.cpp: the float64 reference GEMM (the CPU backend's f64 dtype; oneDNN has no f64).
#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cpu/gemm.h"

namespace mpt::kernels::cpu {

void gemm_reference(const GemmParams& p, const double* a, const double* b, double* c) {
  check_gemm_params(p);
  if (p.m == 0 || p.n == 0) return;
  std::unique_ptr<double[]> packed(new double[static_cast<size_t>(std::max<int64_t>(1, p.k * p.n))]);
  for (int64_t bi = 0; bi < p.batch; ++bi) {
    const double* ab = a + bi * p.stride_a;
    const double* bb = b + bi * p.stride_b;
    double* cb = c + bi * p.stride_c;
    if (bi == 0 || p.stride_b != 0) {  // op(B) as a contiguous k x n matrix, so the inner loop is unit-stride
      for (int64_t kk = 0; kk < p.k; ++kk)
        for (int64_t j = 0; j < p.n; ++j)
          packed[kk * p.n + j] = p.trans_b ? bb[j * p.ldb + kk] : bb[kk * p.ldb + j];
    }
    const double* bt = packed.get();
#pragma omp parallel
    {
      std::vector<double> acc(static_cast<size_t>(p.n));
#pragma omp for schedule(static)
      for (int64_t i = 0; i < p.m; ++i) {
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t kk = 0; kk < p.k; ++kk) {
          const double aik = p.trans_a ? ab[kk * p.lda + i] : ab[i * p.lda + kk];
          const double* row = bt + kk * p.n;
          for (int64_t j = 0; j < p.n; ++j) acc[j] += aik * row[j];
        }
        double* ci = cb + i * p.ldc;
        const double alpha = p.alpha, beta = p.beta;
        for (int64_t j = 0; j < p.n; ++j)
          ci[j] = alpha * acc[j] + (p.bias != nullptr ? double{p.bias[j]} : 0.0) + (beta == 0 ? 0.0 : beta * ci[j]);
      }
    }
  }
}

}  // namespace mpt::kernels::cpu
