// tests/emu_backend/test_cublaslt_double.cpp: the cuBLASLt double against vendor-semantics.md's worked examples (E1-E5), statuses and switches, through the raw cuBLASLt API.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace {

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

std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> r;
  for (float x : v) r.push_back(mpt::float_to_bf16_bits(x));
  return r;
}
std::vector<float> from_bf16(const std::vector<uint16_t>& v) {
  std::vector<float> r;
  for (uint16_t x : v) r.push_back(mpt::bf16_bits_to_float(x));
  return r;
}
std::vector<uint8_t> e4m3(size_t n, float x) { return std::vector<uint8_t>(n, mpt::float_to_e4m3_bits(x, mpt::Fp8Saturation::Saturate)); }
float from_e4m3(uint8_t b) { return mpt::e4m3_bits_to_float(b); }

// ---- Descriptors ----
struct Mat {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t order = CUBLASLT_ORDER_COL;
  int32_t batch = 1;
  int64_t stride = 0;
};

cublasLtMatrixLayout_t make_layout(const Mat& m) {
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

// ---- §1: math, layouts, batching ----
TEST_F(LtDouble, E1_1_ColumnMajorAlphaBeta) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(kA), b(kB), c(kOnes), d(4);
  ASSERT_EQ(g.run(2, a.p, b.p, 3, c.p, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), (std::vector<float>{11, 23, 13, 25}));
}

TEST_F(LtDouble, E1_2_TransposedA) {
  Gemm g(handle, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  g.trans(true, false);
  Dev<float> a(std::vector<float>{1, 2, 3, 4, 5, 6}), b(kB), c(kOnes), d(4);
  ASSERT_EQ(g.run(2, a.p, b.p, 3, c.p, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<float>{11, 23, 13, 25}));
}

TEST_F(LtDouble, E1_1_RowOrderAndPaddedLd) {
  // A in ORDER_ROW (ld = cols) and B with ld 4 (one padding element per column): the same D.
  Gemm g(handle, {CUDA_R_32F, 2, 3, 3, CUBLASLT_ORDER_ROW}, {CUDA_R_32F, 3, 2, 4}, {CUDA_R_32F, 2, 2, 2},
         {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(std::vector<float>{1, 2, 3, 4, 5, 6}), b(std::vector<float>{1, 0, 1, -99, 0, 1, 1}), c(kOnes), d(4);
  ASSERT_EQ(g.run(2, a.p, b.p, 3, c.p, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<float>{11, 23, 13, 25}));
}

TEST_F(LtDouble, E1_3_RowMajorUserProduct) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(std::vector<float>{1, 0, 0, 1, 1, 1}), b(std::vector<float>{1, 2, 3, 4, 5, 6}), d(4);
  ASSERT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);  // beta 0: C is never read
  EXPECT_EQ(d.get(), (std::vector<float>{4, 5, 10, 11}));
}

TEST_F(LtDouble, E1_4_BatchStridesAndBroadcast) {
  {
    Gemm g(handle, {CUDA_R_32F, 1, 1, 1, 0, 2, 1}, {CUDA_R_32F, 1, 1, 1, 0, 2, 1}, {CUDA_R_32F, 1, 1, 1, 0, 2, 1},
           {CUDA_R_32F, 1, 1, 1, 0, 2, 1});
    Dev<float> a(std::vector<float>{2, 3}), b(std::vector<float>{5, 7}), c(std::vector<float>{1, 1}), d(2);
    ASSERT_EQ(g.run(1, a.p, b.p, 1, c.p, d.p), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(d.get(), (std::vector<float>{11, 22}));
  }
  {
    Gemm g(handle, {CUDA_R_32F, 1, 1, 1, 0, 2, 1}, {CUDA_R_32F, 1, 1, 1, 0, 2, 0}, {CUDA_R_32F, 1, 1, 1, 0, 2, 1},
           {CUDA_R_32F, 1, 1, 1, 0, 2, 1});
    Dev<float> a(std::vector<float>{2, 3}), b(std::vector<float>{5}), c(std::vector<float>{1, 1}), d(2);
    ASSERT_EQ(g.run(1, a.p, b.p, 1, c.p, d.p), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(d.get(), (std::vector<float>{11, 16}));
  }
  {  // ldc = 0 broadcasts one column of C
    Gemm g(handle, {CUDA_R_32F, 2, 1, 2}, {CUDA_R_32F, 1, 3, 1}, {CUDA_R_32F, 2, 3, 0}, {CUDA_R_32F, 2, 3, 2});
    Dev<float> a(std::vector<float>{0, 0}), b(std::vector<float>{0, 0, 0}), c(std::vector<float>{10, 20}), d(6);
    ASSERT_EQ(g.run(0, a.p, b.p, 1, c.p, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
    EXPECT_EQ(d.get(), (std::vector<float>{10, 20, 10, 20, 10, 20}));
  }
}

TEST_F(LtDouble, LayoutRulesRefusedByTheHeuristic) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  {  // lda below rows
    Gemm g(handle, {CUDA_R_32F, 2, 3, 1}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
    EXPECT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(count, 0);
  }
  {  // op(A) k != op(B) k
    Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
    EXPECT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  {  // unequal batch counts [U]: refused by default, D's count used with the switch
    Gemm g(handle, {CUDA_R_32F, 1, 1, 1, 0, 1, 0}, {CUDA_R_32F, 1, 1, 1, 0, 2, 1}, {CUDA_R_32F, 1, 1, 1, 0, 2, 1},
           {CUDA_R_32F, 1, 1, 1, 0, 2, 1});
    EXPECT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
    switches([](CublasLtSwitches& s) { s.equal_batch_counts = false; });
    EXPECT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
    Dev<float> a(std::vector<float>{2}), b(std::vector<float>{5, 7}), d(2);
    ASSERT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
    EXPECT_EQ(d.get(), (std::vector<float>{10, 14}));
  }
}

// ---- §2: type table and statuses ----
// FP8 16x16x16, TN: A stored k x m, B stored k x n, C/D m x n.
struct Fp8Shape {
  uint64_t m = 16, n = 16, k = 16;
  cudaDataType_t a = CUDA_R_8F_E4M3, b = CUDA_R_8F_E4M3, c = CUDA_R_16BF, d = CUDA_R_16BF;
};
std::unique_ptr<Gemm> fp8_gemm(cublasLtHandle_t h, const Fp8Shape& s, bool tn = true) {
  const Mat A = tn ? Mat{s.a, s.k, s.m, int64_t(s.k)} : Mat{s.a, s.m, s.k, int64_t(s.m)};
  auto g = std::make_unique<Gemm>(h, A, Mat{s.b, s.k, s.n, int64_t(s.k)}, Mat{s.c, s.m, s.n, int64_t(s.m)},
                                  Mat{s.d, s.m, s.n, int64_t(s.m)});
  g->trans(tn, false);
  return g;
}

TEST_F(LtDouble, E2_1_to_E2_4_Fp8Rules) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  EXPECT_EQ(fp8_gemm(handle, {})->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);  // E2.1
  EXPECT_GE(count, 1);
  EXPECT_EQ(r[0].state, CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(fp8_gemm(handle, {}, false)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // E2.2
  EXPECT_EQ(count, 0);
  Fp8Shape m8;
  m8.m = 8;
  EXPECT_EQ(fp8_gemm(handle, m8)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // E2.3 (observed rule)
  switches([](CublasLtSwitches& s) { s.fp8_m_multiple_of_16 = false; });
  EXPECT_EQ(fp8_gemm(handle, m8)->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);  // 8 BF16 rows = 16 bytes
  Fp8Shape k8;
  k8.k = 8;  // lda = 8 bytes breaks the documented 16-byte rule
  EXPECT_EQ(fp8_gemm(handle, k8)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  Fp8Shape e5;
  e5.a = e5.b = CUDA_R_8F_E5M2;
  EXPECT_EQ(fp8_gemm(handle, e5)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // E2.4
  e5.a = CUDA_R_8F_E4M3;
  e5.d = CUDA_R_8F_E5M2;  // mixed pairs may write E5M2
  EXPECT_EQ(fp8_gemm(handle, e5)->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  Fp8Shape f32;
  f32.c = f32.d = CUDA_R_32F;
  EXPECT_EQ(fp8_gemm(handle, f32)->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  f32.d = CUDA_R_8F_E4M3;  // C F32 allows only D F32
  EXPECT_EQ(fp8_gemm(handle, f32)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  {  // FP8 needs COMPUTE_32F exactly
    auto g = fp8_gemm(handle, {});
    g->set(CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, int32_t(CUBLAS_COMPUTE_32F_FAST_TF32));
    EXPECT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  }
  mpt::cuda_emu::set_compute_capability(0, 80);
  EXPECT_EQ(fp8_gemm(handle, {})->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  mpt::cuda_emu::set_compute_capability(0, 100);  // TN-only is an 8.9 / 9.0 / 12.x rule
  EXPECT_EQ(fp8_gemm(handle, {}, false)->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  mpt::cuda_emu::set_compute_capability(0, 120);
  EXPECT_EQ(fp8_gemm(handle, {}, false)->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(LtDouble, E2_4_FastTf32NeedsF32AndNonFp8Table) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  const Mat bf{CUDA_R_16BF, 16, 16, 16}, f{CUDA_R_32F, 16, 16, 16};
  EXPECT_EQ(Gemm(handle, bf, bf, bf, bf, CUBLAS_COMPUTE_32F_FAST_TF32).heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  EXPECT_EQ(Gemm(handle, f, f, f, f, CUBLAS_COMPUTE_32F_FAST_TF32).heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(Gemm(handle, bf, bf, f, f).heuristic(&count, r), CUBLAS_STATUS_SUCCESS);  // BF16 -> F32
  EXPECT_EQ(Gemm(handle, bf, bf, bf, f).heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // C != D
  EXPECT_EQ(Gemm(handle, f, f, bf, bf).heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);   // F32 -> BF16
  EXPECT_EQ(Gemm(handle, bf, f, f, f).heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);    // A != B
}

TEST_F(LtDouble, HeuristicStatusesAndRefusalSwitch) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  Gemm ok(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  EXPECT_EQ(ok.heuristic(&count, r, nullptr, 0), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(ok.heuristic(&count, r, nullptr, -1), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(ok.heuristic(&count, r, nullptr, 1), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(count, 1);
  EXPECT_EQ(r[0].workspaceSize, 0u);
  EXPECT_EQ(cublasLtMatmulAlgoGetHeuristic(nullptr, ok.desc, ok.a, ok.b, ok.c, ok.d, nullptr, 1, r, &count),
            CUBLAS_STATUS_NOT_INITIALIZED);
  auto bad = fp8_gemm(handle, {}, false);
  switches([](CublasLtSwitches& s) { s.refusal = LtRefusal::SuccessNoResults; });
  EXPECT_EQ(bad->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(count, 0);
  switches([](CublasLtSwitches& s) { s.refusal = LtRefusal::InvalidValue; });
  EXPECT_EQ(bad->heuristic(&count, r), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(count, 0);
  EXPECT_NE(std::string(mpt::cuda_emu::cublaslt_last_failure()).find("TN"), std::string::npos);
}

TEST_F(LtDouble, MatmulRevalidatesAndImplicitHeuristic) {
  auto g = fp8_gemm(handle, {}, false);
  Dev<uint8_t> a(e4m3(256, 1)), b(e4m3(256, 1));
  Dev<uint16_t> d(256);
  EXPECT_EQ(g->run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_NOT_SUPPORTED);  // implicit heuristic refuses
  Fp8Shape bad_align;
  auto ok = fp8_gemm(handle, bad_align);
  Dev<uint8_t> a2(e4m3(272, 1));
  // A 8 bytes into its allocation: FP8 needs 16-byte aligned operands, the implicit heuristic sees the pointer.
  EXPECT_EQ(ok->run(1, a2.p + 8, b.p, 0, nullptr, d.p), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(ok->run(1, a2.p + 16, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
}

TEST_F(LtDouble, ScaleOnNonFp8TensorSwitch) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  auto g = fp8_gemm(handle, {});
  Dev<float> s(std::vector<float>{1});
  g->set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<void*>(s.p));  // D is BF16
  ASSERT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_SUCCESS);  // default: the header's INVALID_VALUE at run time
  Dev<uint8_t> a(e4m3(256, 1)), b(e4m3(256, 1));
  Dev<uint16_t> d(256);
  EXPECT_EQ(g->run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo), CUBLAS_STATUS_INVALID_VALUE);
  switches([](CublasLtSwitches& sw) { sw.scale_errors_in_heuristic = true; });
  EXPECT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  // Any scale on a non-FP8 GEMM.
  switches([](CublasLtSwitches& sw) { sw.scale_errors_in_heuristic = false; });
  Gemm f(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  f.set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(s.p));
  Dev<float> fa(kA), fb(kB), fd(4);
  EXPECT_EQ(f.run(1, fa.p, fb.p, 0, nullptr, fd.p), CUBLAS_STATUS_INVALID_VALUE);
}

TEST_F(LtDouble, WorkspaceRules) {
  switches([](CublasLtSwitches& s) { s.algo_workspace_bytes = 1024; });
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  int count = 0;
  cublasLtMatmulHeuristicResult_t r[4];
  ASSERT_EQ(g.heuristic(&count, r, pref), CUBLAS_STATUS_SUCCESS);  // MAX_WORKSPACE_BYTES defaults to 0
  ASSERT_EQ(count, 1);
  EXPECT_EQ(r[0].workspaceSize, 0u);
  const uint64_t max_ws = 4096;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_ws, 8),
            CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(g.heuristic(&count, r, pref), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(count, 2);
  EXPECT_EQ(r[0].workspaceSize, 1024u);
  EXPECT_EQ(r[1].workspaceSize, 0u);
  Dev<float> a(kA), b(kB), d(4);
  Dev<uint8_t> ws(4096);
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo, ws.p, 512), CUBLAS_STATUS_INVALID_VALUE);  // too small
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo, ws.p + 16, 2048), CUBLAS_STATUS_INVALID_VALUE);  // misaligned
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo, nullptr, 1024), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo, ws.p, 1024), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[1].algo), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<float>{4, 10, 5, 11}));
  cublasLtMatmulPreferenceDestroy(pref);
}

TEST_F(LtDouble, AttributesAndHandles) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  const int64_t ld64 = 4;
  const int32_t ld32 = 4;
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_LD, &ld32, 4), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_LD, nullptr, 8), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasLtMatrixLayoutSetAttribute(nullptr, CUBLASLT_MATRIX_LAYOUT_LD, &ld64, 8), CUBLAS_STATUS_INVALID_VALUE);
  const int64_t epi64 = CUBLASLT_EPILOGUE_BIAS;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi64, 8), CUBLAS_STATUS_INVALID_VALUE);
  const int8_t fast = 1;
  EXPECT_EQ(cublasLtMatmulDescSetAttribute(g.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, 1), CUBLAS_STATUS_SUCCESS);
  size_t written = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(written, sizeof(void*));
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(g.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, nullptr, 0, nullptr),
            CUBLAS_STATUS_INVALID_VALUE);
  int32_t compute = 0;
  EXPECT_EQ(cublasLtMatmulDescGetAttribute(g.desc, CUBLASLT_MATMUL_DESC_COMPUTE_TYPE, &compute, 4, &written),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(compute, CUBLAS_COMPUTE_32F);
  uint64_t rows = 0;
  EXPECT_EQ(cublasLtMatrixLayoutGetAttribute(g.a, CUBLASLT_MATRIX_LAYOUT_ROWS, &rows, 8, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(rows, 2u);
  EXPECT_STREQ(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STREQ(cublasLtGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED), "the library was not initialized");
  Dev<float> a(kA), b(kB), d(4);
  EXPECT_EQ(cublasLtMatmul(nullptr, g.desc, &kA[0], a.p, g.a, b.p, g.b, &kA[0], nullptr, g.c, d.p, g.d, nullptr, nullptr,
                           0, nullptr),
            CUBLAS_STATUS_NOT_INITIALIZED);
  switches([](CublasLtSwitches& s) { s.create_status = CUBLAS_STATUS_NOT_INITIALIZED; });
  cublasLtHandle_t h2 = nullptr;
  EXPECT_EQ(cublasLtCreate(&h2), CUBLAS_STATUS_NOT_INITIALIZED);
}

TEST_F(LtDouble, AlgoTiedToItsProblem) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  int count = 0;
  cublasLtMatmulHeuristicResult_t r[4];
  ASSERT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  Dev<float> a(kA), b(kB), d(4);
  cublasLtMatmulAlgo_t garbage{};
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &garbage), CUBLAS_STATUS_INVALID_VALUE);
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_RELU));
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo), CUBLAS_STATUS_INVALID_VALUE);
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_DEFAULT));
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p, &r[0].algo), CUBLAS_STATUS_SUCCESS);
}

// ---- §3: FP8 tensorwide scaling ----
// E3.1: 16x16x16 TN, A = 1, B = 0.5 (E4M3), sA = 2, sB = 0.25, alpha 1, C = 3 (BF16), sC = 2, beta 0.5, sD = 16.
struct E31 {
  Dev<uint8_t> a{e4m3(256, 1.0f)}, b{e4m3(256, 0.5f)}, d{256};
  Dev<uint16_t> c{to_bf16(std::vector<float>(256, 3.0f))};
  Dev<float> sa{std::vector<float>{2}}, sb{std::vector<float>{0.25f}}, sc{std::vector<float>{2}},
      sd{std::vector<float>{16}}, amax{std::vector<float>{-1}};
  std::unique_ptr<Gemm> g;
  E31(cublasLtHandle_t h) {
    Fp8Shape s;
    s.d = CUDA_R_8F_E4M3;
    g = fp8_gemm(h, s);
    g->set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(sa.p));
    g->set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<void*>(sb.p));
    g->set(CUBLASLT_MATMUL_DESC_C_SCALE_POINTER, static_cast<void*>(sc.p));
    g->set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<void*>(sd.p));
    g->set(CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(amax.p));
  }
  cublasStatus_t run() { return g->run(1, a.p, b.p, 0.5f, c.p, d.p); }
};

TEST_F(LtDouble, E3_1_AmaxBeforeScaleD) {
  E31 t(handle);
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(t.amax.get()[0], 7.0f);
  for (uint8_t v : t.d.get()) ASSERT_EQ(from_e4m3(v), 112.0f);
}

TEST_F(LtDouble, E3_2_NegativeScaleAndAmaxAfterEpilogue) {
  E31 t(handle);
  Dev<float> neg(std::vector<float>{-2});
  t.g->set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(neg.p));
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(t.amax.get()[0], 1.0f);
  EXPECT_EQ(from_e4m3(t.d.get()[0]), -16.0f);
  t.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_RELU));
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(t.amax.get()[0], 0.0f);
  EXPECT_EQ(from_e4m3(t.d.get()[0]), 0.0f);
}

TEST_F(LtDouble, E3_3_BiasBf16) {
  E31 t(handle);
  Dev<uint16_t> bias(to_bf16(std::vector<float>(16, 1.0f)));
  t.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
  t.g->set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(t.amax.get()[0], 8.0f);
  for (uint8_t v : t.d.get()) ASSERT_EQ(from_e4m3(v), 128.0f);
}

TEST_F(LtDouble, Fp8OutputOverflowSwitch) {
  E31 t(handle);
  Dev<float> big(std::vector<float>{100});  // D_temp 7 -> 700 > 448
  t.g->set(CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<void*>(big.p));
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(from_e4m3(t.d.get()[0]), 448.0f);
  switches([](CublasLtSwitches& s) { s.fp8_output_saturates = false; });
  ASSERT_EQ(t.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_TRUE(std::isnan(from_e4m3(t.d.get()[0])));
}

// ---- §4: block scaling (sm_90 only) ----
TEST_F(LtDouble, E4_1_Vec128IsMMajor) {
  Fp8Shape s;
  s.k = 256;
  auto g = fp8_gemm(handle, s);
  std::vector<float> sa(32, 1.0f), sb(32, 1.0f);
  sa[1] = 2;
  for (int i = 16; i < 32; ++i) sa[i] = 0.5f, sb[i] = 2.0f;
  Dev<float> dsa(sa), dsb(sb);
  Dev<uint8_t> a(e4m3(16 * 256, 1)), b(e4m3(16 * 256, 1));
  Dev<uint16_t> d(256);
  g->set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  g->set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(dsa.p));
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<void*>(dsb.p));
  ASSERT_EQ(g->run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  const std::vector<float> out = from_bf16(d.get());
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(out[0 + 16 * j], 256.0f);
    EXPECT_EQ(out[1 + 16 * j], 384.0f);
  }
  mpt::cuda_emu::set_compute_capability(0, 89);
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  EXPECT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
}

TEST_F(LtDouble, E4_2_Blk128x128IsKMajorPadded) {
  Fp8Shape s;
  s.m = 256;
  s.k = 384;
  auto g = fp8_gemm(handle, s);
  Dev<float> dsa(std::vector<float>{1, 2, 4, -1000, 8, 16, 32, -1000}), dsb(std::vector<float>(48, 1.0f));
  Dev<uint8_t> a(e4m3(256 * 384, 1)), b(e4m3(16 * 384, 1));
  Dev<uint16_t> d(256 * 16);
  g->set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F));
  g->set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(dsa.p));
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<void*>(dsb.p));
  ASSERT_EQ(g->run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  const std::vector<float> out = from_bf16(d.get());
  EXPECT_EQ(out[0], 896.0f);
  EXPECT_EQ(out[127 + 256 * 15], 896.0f);
  EXPECT_EQ(out[128], 7168.0f);
  EXPECT_EQ(out[255 + 256 * 15], 7168.0f);
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F));
  EXPECT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // BLK x BLK
  g->set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, int32_t(CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F));
  EXPECT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);  // block x tensorwide
}

// ---- §5: epilogues ----
// A 1-column GEMM whose matmul result is x: D (m x 1) = A (m x 1) * [1].
struct Column {
  std::unique_ptr<Gemm> g;
  Dev<float> a, b{std::vector<float>{1}}, d;
  Column(cublasLtHandle_t h, const std::vector<float>& x)
      : a(x), d(x.size()) {
    const uint64_t m = x.size();
    g = std::make_unique<Gemm>(h, Mat{CUDA_R_32F, m, 1, int64_t(m)}, Mat{CUDA_R_32F, 1, 1, 1},
                               Mat{CUDA_R_32F, m, 1, int64_t(m)}, Mat{CUDA_R_32F, m, 1, int64_t(m)});
  }
  cublasStatus_t run() { return g->run(1, a.p, b.p, 0, nullptr, d.p); }
};

TEST_F(LtDouble, E5_1_BiasBroadcastsAlongColumns) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(kA), b(kB), d(4), bias(std::vector<float>{100, 200});  // D_temp = E1.1's AB = [[4,5],[10,11]]
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_INVALID_VALUE);  // no BIAS_POINTER
  g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
  ASSERT_EQ(g.run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<float>{104, 210, 105, 211}));
}

TEST_F(LtDouble, E5_2_TanhGeluAndItsDerivative) {
  Column c(handle, {1, -1, 2});
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU));
  ASSERT_EQ(c.run(), CUBLAS_STATUS_SUCCESS);
  const std::vector<float> y = c.d.get();
  EXPECT_NEAR(y[0], 0.841192, 5e-5);
  EXPECT_NEAR(y[1], -0.158808, 5e-5);
  EXPECT_NEAR(y[2], 1.954598, 5e-5);
  Column g(handle, {1, 1});  // DGELU with aux = [1, -1]: D = 1 * gelu'(aux)
  Dev<float> aux(std::vector<float>{1, -1, 0, 0, 0, 0, 0, 0});
  g.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_DGELU));
  g.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.p));
  g.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8));
  ASSERT_EQ(g.run(), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_NEAR(g.d.get()[0], 1.082964, 5e-5);
  EXPECT_NEAR(g.d.get()[1], -0.082964, 5e-5);
}

TEST_F(LtDouble, E5_3_GeluAuxBiasStoresThePreActivation) {
  Column c(handle, {1});
  Dev<float> bias(std::vector<float>{1}), aux(8);
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_AUX_BIAS));
  c.g->set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.p));
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(4));  // not a multiple of 8
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  EXPECT_EQ(c.g->heuristic(&count, r), CUBLAS_STATUS_NOT_SUPPORTED);
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8));
  ASSERT_EQ(c.run(), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(aux.get()[0], 2.0f);
  EXPECT_NEAR(c.d.get()[0], 1.954598, 5e-5);
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_AUX));  // aux = matmul, no bias
  ASSERT_EQ(c.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(aux.get()[0], 1.0f);
  EXPECT_NEAR(c.d.get()[0], 0.841192, 5e-5);
}

// E5.4: matmul G = [[1,2],[3,4]] (A = G, B = I), aux = [[1,1],[-1,-1]] (ld 8).
struct E54 {
  std::unique_ptr<Gemm> g;
  Dev<float> a{std::vector<float>{1, 3, 2, 4}}, b{std::vector<float>{1, 0, 0, 1}}, c{std::vector<float>{1, 1, 1, 1}},
      d{4}, bias{2}, aux{std::vector<float>{1, -1, 0, 0, 0, 0, 0, 0, 1, -1}};
  E54(cublasLtHandle_t h) {
    const Mat m{CUDA_R_32F, 2, 2, 2};
    g = std::make_unique<Gemm>(h, m, m, m, m);
    g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_DGELU_BGRAD));
    g->set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
    g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, static_cast<void*>(aux.p));
    g->set(CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, int64_t(8));
  }
};

TEST_F(LtDouble, E5_4_DgeluBgrad) {
  E54 t(handle);
  ASSERT_EQ(t.g->run(1, t.a.p, t.b.p, 0, nullptr, t.d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  const std::vector<float> d = t.d.get(), bg = t.bias.get();
  const std::vector<double> want = {1.082964, -0.248892, 2.165928, -0.331856};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(d[i], want[i], 5e-5) << i;
  EXPECT_NEAR(bg[0], 3.248892, 5e-5);
  EXPECT_NEAR(bg[1], -0.580749, 5e-5);
  switches([](CublasLtSwitches& s) { s.dgelu_bgrad_after_dgelu = false; });  // bgrad of the pre-dGELU values
  ASSERT_EQ(t.g->run(1, t.a.p, t.b.p, 0, nullptr, t.d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(t.bias.get(), (std::vector<float>{3, 7}));
}

TEST_F(LtDouble, DgeluBetaCSwitch) {
  E54 t(handle);
  t.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_DGELU));
  ASSERT_EQ(t.g->run(1, t.a.p, t.b.p, 1, t.c.p, t.d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_NEAR(t.d.get()[0], 2 * 1.082964, 1e-4);  // (G + C) * gelu'(1)
  switches([](CublasLtSwitches& s) { s.dgelu_includes_beta_c = false; });
  ASSERT_EQ(t.g->run(1, t.a.p, t.b.p, 1, t.c.p, t.d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_NEAR(t.d.get()[0], 1.082964, 5e-5);
}

TEST_F(LtDouble, E5_5_BgradAAndBgradB) {
  const Mat m{CUDA_R_32F, 2, 2, 2};
  Gemm g(handle, m, m, m, m);
  Dev<float> x(std::vector<float>{1, 3, 2, 4}), d(4), bias(2);
  g.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BGRADA));
  ASSERT_EQ(g.run(1, x.p, x.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(bias.get(), (std::vector<float>{3, 7}));
  g.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BGRADB));
  ASSERT_EQ(g.run(1, x.p, x.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bias.get(), (std::vector<float>{4, 6}));
  ASSERT_EQ(g.run(2, x.p, x.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bias.get(), (std::vector<float>{4, 6}));  // alpha does not scale bias gradients by default [U]
  switches([](CublasLtSwitches& s) { s.bgrad_scaled_by_alpha = true; });
  ASSERT_EQ(g.run(2, x.p, x.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(bias.get(), (std::vector<float>{8, 12}));
}

// ---- §6: reuse, pointers, misuse, threads ----
TEST_F(LtDouble, DescriptorsReusableAfterOthersDestroyedAndHostAlphaFreed) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(kA), b(kB), c(kOnes), d(4);
  {
    Gemm other(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
    ASSERT_EQ(other.run(1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  }
  auto alpha = std::make_unique<float>(2.0f), beta = std::make_unique<float>(3.0f);
  ASSERT_EQ(cublasLtMatmul(handle, g.desc, alpha.get(), a.p, g.a, b.p, g.b, beta.get(), c.p, g.c, d.p, g.d, nullptr,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  alpha.reset();  // host scalars are read before cublasLtMatmul returns
  beta.reset();
  EXPECT_EQ(d.get(), (std::vector<float>{11, 23, 13, 25}));
  g.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t(CUBLASLT_POINTER_MODE_DEVICE));
  Dev<float> dalpha(std::vector<float>{1}), dbeta(std::vector<float>{0});
  ASSERT_EQ(cublasLtMatmul(handle, g.desc, dalpha.p, a.p, g.a, b.p, g.b, dbeta.p, c.p, g.c, d.p, g.d, nullptr, nullptr,
                           0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<float>{4, 10, 5, 11}));
  g.set(CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t(CUBLASLT_POINTER_MODE_HOST));
  EXPECT_THROW(cublasLtMatmul(handle, g.desc, dalpha.p, a.p, g.a, b.p, g.b, dbeta.p, c.p, g.c, d.p, g.d, nullptr,
                              nullptr, 0, nullptr),
               MisuseError);  // device scalars in host pointer mode
}

TEST_F(LtDouble, MisuseThrows) {
  Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
  Dev<float> a(kA), b(kB), d(4), small(5);
  std::vector<float> host_a = kA;
  EXPECT_THROW(g.run(1, host_a.data(), b.p, 0, nullptr, d.p), MisuseError);  // host pointer
  EXPECT_THROW(g.run(1, small.p, b.p, 0, nullptr, d.p), MisuseError);         // A needs 6 floats
  EXPECT_THROW(g.run(1, a.p, b.p, 0, nullptr, a.p), MisuseError);             // D overlaps A
  cublasLtMatrixLayout_t dead = nullptr;
  ASSERT_EQ(cublasLtMatrixLayoutCreate(&dead, CUDA_R_32F, 2, 2, 2), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtMatrixLayoutDestroy(dead), CUBLAS_STATUS_SUCCESS);
  EXPECT_THROW(cublasLtMatrixLayoutDestroy(dead), MisuseError);
  // Alignment: the algo is chosen for the default 256-byte alignment, then run on an 8-byte aligned D.
  int count = 0;
  cublasLtMatmulHeuristicResult_t r[4];
  ASSERT_EQ(g.heuristic(&count, r), CUBLAS_STATUS_SUCCESS);
  Dev<float> d2(6);
  EXPECT_THROW(g.run(1, a.p, b.p, 0, nullptr, d2.p + 2, &r[0].algo), MisuseError);
  switches([](CublasLtSwitches& s) { s.misaligned_pointer_throws = false; });
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d2.p + 2, &r[0].algo), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(g.run(1, a.p, b.p, 0, nullptr, d2.p + 2), CUBLAS_STATUS_SUCCESS);  // implicit heuristic adapts
}

TEST_F(LtDouble, ThreadsShareAHandle) {
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      Gemm g(handle, {CUDA_R_32F, 2, 3, 2}, {CUDA_R_32F, 3, 2, 3}, {CUDA_R_32F, 2, 2, 2}, {CUDA_R_32F, 2, 2, 2});
      Dev<float> a(kA), b(kB), c(kOnes), d(4);
      for (int i = 0; i < 20; ++i)
        if (g.run(2, a.p, b.p, 3, c.p, d.p) != CUBLAS_STATUS_SUCCESS) return;
      ok[t] = d.get() == std::vector<float>{11, 23, 13, 25};
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(ok, (std::vector<int>{1, 1, 1, 1}));
}

}  // namespace
