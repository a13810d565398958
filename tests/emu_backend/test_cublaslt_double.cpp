// tests/emu_backend/test_cublaslt_double.cpp: the cuBLASLt double against vendor-semantics.md §1-§3 (E1-E3): layouts, batching, type rules and statuses, FP8 tensorwide scaling, through the raw API.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "cublaslt_test_util.h"
#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace {

using namespace mpt::lt_test;

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

}  // namespace
