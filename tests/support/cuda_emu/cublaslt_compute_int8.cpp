// tests/support/cuda_emu/cublaslt_compute_int8.cpp: the cuBLASLt double's int8 row (COMPUTE_32I, scale 32I, A/B 8I, C/D 32I): an exact integer GEMM, stored to D as int32.
#include <cstdint>
#include <vector>

#include "cublaslt_internal.h"

namespace mpt::cuda_emu {
namespace {

// alpha and beta are int32 (scale type CUDA_R_32I): host mode read them into args before the call returned (a double
// holds every int32 exactly); device mode reads them now, when the GEMM runs.
int64_t scalar(const void* dev, double host) {
  return dev != nullptr ? int64_t{*static_cast<const int32_t*>(dev)} : static_cast<int64_t>(host);
}

}  // namespace

void compute_matmul_int8(const Problem& p, const MatmulArgs& args) {
  const int64_t alpha = scalar(args.alpha_dev, args.alpha), beta = scalar(args.beta_dev, args.beta);
  if (beta != 0 && args.c == nullptr) throw MisuseError("cublasLtMatmul: beta != 0 but C is null");
  const int64_t m = p.m, n = p.n, k = p.k;
  const auto* a = static_cast<const int8_t*>(args.a);
  const auto* b = static_cast<const int8_t*>(args.b);
  const auto* c = static_cast<const int32_t*>(args.c);
  auto* d = static_cast<int32_t*>(args.d);
  std::vector<int64_t> opa(static_cast<size_t>(m * k)), opb(static_cast<size_t>(k * n));
  for (int64_t bt = 0; bt < p.batch; ++bt) {
    for (int64_t i = 0; i < m; ++i)  // op(A)[i, l], row-major m x k
      for (int64_t l = 0; l < k; ++l) opa[i * k + l] = a[element_offset(p.a, p.ta ? l : i, p.ta ? i : l, bt)];
    for (int64_t l = 0; l < k; ++l)  // op(B)[l, j], row-major k x n
      for (int64_t j = 0; j < n; ++j) opb[l * n + j] = b[element_offset(p.b, p.tb ? j : l, p.tb ? l : j, bt)];
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        // |sum| <= k * 2^14 < 2^46 for any int32 k: exact in int64 (a double is exact only below 2^53).
        int64_t sum = 0;
        for (int64_t l = 0; l < k; ++l) sum += opa[i * k + l] * opb[l * n + j];
        // alpha * sum + beta * C can exceed int64; unsigned arithmetic wraps (defined), and the low 32 bits, which
        // are all D keeps, are the same as those of the exact value.
        uint64_t x = static_cast<uint64_t>(alpha) * static_cast<uint64_t>(sum);
        if (beta != 0) x += static_cast<uint64_t>(beta) * static_cast<uint64_t>(int64_t{c[element_offset(p.c, i, j, bt)]});
        // [U] A result outside int32 wraps (two's complement) here; the docs do not say whether the IMMA kernels
        // wrap or saturate.
        d[element_offset(p.d, i, j, bt)] = static_cast<int32_t>(static_cast<uint32_t>(x));
      }
  }
}

}  // namespace mpt::cuda_emu
