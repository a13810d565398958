// tests/emu_backend/cublaslt_test_util.h: the cuBLASLt double tests' helpers: device buffers, layouts, a GEMM under construction, the fixture.
#pragma once

#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace mpt::lt_test {

using mpt::cuda_emu::CublasLtSwitches;
using mpt::cuda_emu::LtRefusal;
using mpt::cuda_emu::MisuseError;

// ---- Device buffers ----
template <class T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  explicit Dev(size_t count) : n(count) { EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p), n * sizeof(T)), cudaSuccess); }
  explicit Dev(const std::vector<T>& host) : Dev(host.size()) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), n * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  Dev(const Dev&) = delete;
  ~Dev() { cudaFree(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    EXPECT_EQ(cudaMemcpy(h.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return h;
  }
};

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> r;
  for (float x : v) r.push_back(mpt::float_to_bf16_bits(x));
  return r;
}
inline std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> r;
  for (uint16_t x : v) r.push_back(mpt::bf16_bits_to_float(x));
  return r;
}
inline std::vector<uint8_t> e4m3(size_t n, float x) { return std::vector<uint8_t>(n, mpt::float_to_e4m3_bits(x, mpt::Fp8Saturation::Saturate)); }
inline float from_e4m3(uint8_t b) { return mpt::e4m3_bits_to_float(b); }

// ---- Descriptors ----
struct Mat {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
};

inline cublasLtMatrixLayout_t make_layout(const Mat& m) {
  cublasLtMatrixLayout_t l = nullptr;
  EXPECT_EQ(cublasLtMatrixLayoutCreate(&l, m.type, m.rows, m.cols, m.ld), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_ORDER, &m.order, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &m.batch, 4), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &m.stride, 8),
            CUBLAS_STATUS_SUCCESS);
  return l;
}

// One GEMM's descriptors (C and D share nothing unless the test passes the same Mat).
struct Gemm {
  cublasLtHandle_t h;
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a, b, c, d;
  Gemm(cublasLtHandle_t handle, Mat A, Mat B, Mat C, Mat D, cublasComputeType_t compute = CUBLAS_COMPUTE_32F)
      : h(handle), a(make_layout(A)), b(make_layout(B)), c(make_layout(C)), d(make_layout(D)) {
    EXPECT_EQ(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), CUBLAS_STATUS_SUCCESS);
  }
  Gemm(const Gemm&) = delete;
  ~Gemm() {
    cublasLtMatmulDescDestroy(desc);
    for (auto l : {a, b, c, d}) cublasLtMatrixLayoutDestroy(l);
  }
  template <class T>
  void set(cublasLtMatmulDescAttributes_t attr, T v) {
    ASSERT_EQ(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof v), CUBLAS_STATUS_SUCCESS) << attr;
  }
  void trans(bool ta, bool tb) {
    set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(ta ? CUBLAS_OP_T : CUBLAS_OP_N));
    set(CUBLASLT_MATMUL_DESC_TRANSB, int32_t(tb ? CUBLAS_OP_T : CUBLAS_OP_N));
  }
  cublasStatus_t heuristic(int* count, cublasLtMatmulHeuristicResult_t* r, cublasLtMatmulPreference_t pref = nullptr,
                           int requested = 4) {
    return cublasLtMatmulAlgoGetHeuristic(h, desc, a, b, c, d, pref, requested, r, count);
  }
  cublasStatus_t run(float alpha, const void* A, const void* B, float beta, const void* C, void* D,
                     const cublasLtMatmulAlgo_t* algo = nullptr, void* ws = nullptr, size_t ws_bytes = 0) {
    return cublasLtMatmul(h, desc, &alpha, A, a, B, b, &beta, C, c, D, d, algo, ws, ws_bytes, nullptr);
  }
};

class LtDouble : public ::testing::Test {
 protected:
  void SetUp() override {
    mpt::cuda_emu::set_cublaslt_switches(CublasLtSwitches{});
    mpt::cuda_emu::set_compute_capability(0, 90);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
  }
  void TearDown() override {
    cublasLtDestroy(handle);
    mpt::cuda_emu::set_cublaslt_switches(CublasLtSwitches{});
    mpt::cuda_emu::set_compute_capability(0, 90);
  }
  static void switches(void (*edit)(CublasLtSwitches&)) {
    CublasLtSwitches s = mpt::cuda_emu::cublaslt_switches();
    edit(s);
    mpt::cuda_emu::set_cublaslt_switches(s);
  }
  cublasLtHandle_t handle = nullptr;
};

// E1.1's operands: A 2x3 (ld 2), B 3x2 (ld 3), C and D 2x2.
const std::vector<float> kA = {1, 4, 2, 5, 3, 6}, kB = {1, 0, 1, 0, 1, 1}, kOnes = {1, 1, 1, 1};

// FP8 16x16x16, TN: A stored k x m, B stored k x n, C/D m x n.
struct Fp8Shape {
  uint64_t m = 16, n = 16, k = 16;
  cudaDataType_t a = CUDA_R_8F_E4M3, b = CUDA_R_8F_E4M3, c = CUDA_R_16BF, d = CUDA_R_16BF;
};
inline std::unique_ptr<Gemm> fp8_gemm(cublasLtHandle_t h, const Fp8Shape& s, bool tn = true) {
  const Mat A = tn ? Mat{s.a, s.k, s.m, int64_t(s.k)} : Mat{s.a, s.m, s.k, int64_t(s.m)};
  auto g = std::make_unique<Gemm>(h, A, Mat{s.b, s.k, s.n, int64_t(s.k)}, Mat{s.c, s.m, s.n, int64_t(s.m)},
                                  Mat{s.d, s.m, s.n, int64_t(s.m)});
  g->trans(tn, false);
  return g;
}


}  // namespace mpt::lt_test
