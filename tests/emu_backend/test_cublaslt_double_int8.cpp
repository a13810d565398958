// tests/emu_backend/test_cublaslt_double_int8.cpp: the cuBLASLt double's int8 row (COMPUTE_32I / scale 32I / A=B 8I / C=D 32I, vendor-semantics R2.1) and its IMMA rules (TN, ORDER_COL, multiples of 4, 4-byte alignment), through the raw API.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cublaslt_test_util.h"
#include "cuda_emu/device_work.h"

namespace {

using namespace mpt::lt_test;

// An int8 GEMM: A stored k x m (TRANSA = T), B stored k x n, C and D m x n, all ORDER_COL.
struct Int8Shape {
  uint64_t m = 4, n = 2, k = 4;
  int64_t lda = 4, ldb = 4, ldc = 4;
  int32_t batch = 1;
  int64_t stride_a = 0, stride_b = 0, stride_c = 0;
  cudaDataType_t ab = CUDA_R_8I, cd = CUDA_R_32I;
  cublasComputeType_t compute = CUBLAS_COMPUTE_32I;
  int32_t scale = CUDA_R_32I;
};

std::unique_ptr<Gemm> int8_gemm(cublasLtHandle_t h, const Int8Shape& s) {
  const Mat c{s.cd, s.m, s.n, s.ldc, CUBLASLT_ORDER_COL, s.batch, s.stride_c};
  auto g = std::make_unique<Gemm>(h, Mat{s.ab, s.k, s.m, s.lda, CUBLASLT_ORDER_COL, s.batch, s.stride_a},
                                  Mat{s.ab, s.k, s.n, s.ldb, CUBLASLT_ORDER_COL, s.batch, s.stride_b}, c, c, s.compute);
  g->set(CUBLASLT_MATMUL_DESC_SCALE_TYPE, s.scale);
  g->trans(true, false);
  return g;
}

// Host pointer mode: alpha and beta are int32 values (scale type CUDA_R_32I).
cublasStatus_t run_i32(Gemm& g, int32_t alpha, const void* A, const void* B, int32_t beta, const void* C, void* D,
                       const cublasLtMatmulAlgo_t* algo = nullptr) {
  return cublasLtMatmul(g.h, g.desc, &alpha, A, g.a, B, g.b, &beta, C, g.c, D, g.d, algo, nullptr, 0, nullptr);
}

// The heuristic refuses: NOT_SUPPORTED with 0 results; returns the reason.
std::string refused(Gemm& g, cublasLtMatmulPreference_t pref = nullptr) {
  int count = -1;
  cublasLtMatmulHeuristicResult_t r[4];
  EXPECT_EQ(g.heuristic(&count, r, pref), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(count, 0);
  return mpt::cuda_emu::cublaslt_last_failure();
}

TEST_F(LtDouble, Int8WorkedExampleTN) {
  // A stored k x m (ld 4): column i of the buffer is row i of op(A). B stored k x n (ld 4).
  //   op(A) = [[1, 2, 3, 4], [-1, 0, 1, 2], [5, -5, 5, -5], [-128, 0, 0, 127]]
  //   op(B) = columns [1, 1, 1, 1] and [2, -1, 0, 3]
  //   op(A) op(B) = [[10, 12], [2, 4], [0, 0], [-1, 125]]   (row 3, col 1: -256 + 381)
  //   C = [[100, -1], [200, -2], [300, -3], [400, -4]]
  //   D = 2 * AB + 1 * C = [[120, 23], [204, 6], [300, -3], [398, 246]]
  //   Dbuf (column-major, ld 4) = [120, 204, 300, 398, 23, 6, -3, 246]
  auto g = int8_gemm(handle, {});
  Dev<int8_t> a(std::vector<int8_t>{1, 2, 3, 4, -1, 0, 1, 2, 5, -5, 5, -5, -128, 0, 0, 127});
  Dev<int8_t> b(std::vector<int8_t>{1, 1, 1, 1, 2, -1, 0, 3});
  Dev<int32_t> c(std::vector<int32_t>{100, 200, 300, 400, -1, -2, -3, -4}), d(8);
  int count = 0;
  cublasLtMatmulHeuristicResult_t r[4];
  ASSERT_EQ(g->heuristic(&count, r), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  ASSERT_GE(count, 1);
  ASSERT_EQ(run_i32(*g, 2, a.p, b.p, 1, c.p, d.p, &r[0].algo), CUBLAS_STATUS_SUCCESS)
      << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), (std::vector<int32_t>{120, 204, 300, 398, 23, 6, -3, 246}));
  // beta 0 with no C: D = 2 * AB only (implicit heuristic).
  ASSERT_EQ(run_i32(*g, 2, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), (std::vector<int32_t>{20, 4, 0, -2, 24, 8, 0, 250}));
}

TEST_F(LtDouble, Int8RandomBatchedMatchesInt64Reference) {
  // m = 8, n = 5, k = 36, two batch entries; lda 40 pads each stored column of A by 4 bytes.
  const int64_t m = 8, n = 5, k = 36, lda = 40, ldb = 36, ldc = 8, batch = 2;
  const int64_t sa = lda * m, sb = ldb * n, sc = ldc * n;
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int> i8(-127, 127), i32(-100000, 100000);
  std::vector<int8_t> ha(static_cast<size_t>(sa * batch)), hb(static_cast<size_t>(sb * batch));
  std::vector<int32_t> hc(static_cast<size_t>(sc * batch));
  for (auto& v : ha) v = static_cast<int8_t>(i8(rng));
  for (auto& v : hb) v = static_cast<int8_t>(i8(rng));
  for (auto& v : hc) v = i32(rng);
  const int32_t alpha = 3, beta = -2;
  std::vector<int32_t> want(hc.size());
  for (int64_t bt = 0; bt < batch; ++bt)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        int64_t sum = 0;
        for (int64_t l = 0; l < k; ++l) sum += int64_t{ha[bt * sa + l + i * lda]} * int64_t{hb[bt * sb + l + j * ldb]};
        const int64_t x = alpha * sum + beta * int64_t{hc[bt * sc + i + j * ldc]};
        ASSERT_LT(std::abs(x), int64_t{1} << 31);  // no wrap in this test
        want[bt * sc + i + j * ldc] = static_cast<int32_t>(x);
      }
  for (cublasComputeType_t compute : {CUBLAS_COMPUTE_32I, CUBLAS_COMPUTE_32I_PEDANTIC}) {
    Int8Shape s{uint64_t(m), uint64_t(n), uint64_t(k), lda, ldb, ldc, int32_t(batch), sa, sb, sc};
    s.compute = compute;
    auto g = int8_gemm(handle, s);
    Dev<int8_t> a(ha), b(hb);
    Dev<int32_t> c(hc), d(hc.size());
    // B's batch stride (180 bytes) leaves its second entry 4-byte aligned: tell the heuristic.
    cublasLtMatmulPreference_t pref = nullptr;
    ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
    const uint32_t four = 4;
    ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &four, 4),
              CUBLAS_STATUS_SUCCESS);
    int count = 0;
    cublasLtMatmulHeuristicResult_t r[4];
    ASSERT_EQ(g->heuristic(&count, r, pref), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
    cublasLtMatmulPreferenceDestroy(pref);
    ASSERT_EQ(run_i32(*g, alpha, a.p, b.p, beta, c.p, d.p, &r[0].algo), CUBLAS_STATUS_SUCCESS)
        << mpt::cuda_emu::cublaslt_last_failure();
    EXPECT_EQ(d.get(), want) << "compute " << compute;
    ASSERT_EQ(run_i32(*g, 0, a.p, b.p, 1, c.p, d.p), CUBLAS_STATUS_SUCCESS);  // implicit heuristic; D = C
    EXPECT_EQ(d.get(), hc);
  }
}

TEST_F(LtDouble, Int8ExtremesAndWrap) {
  // All A = B = -128, k = 64: every sum is 64 * 16384 = 1048576 = 2^20, exact.
  Int8Shape s;
  s.m = 4, s.n = 4, s.k = 64, s.lda = 64, s.ldb = 64, s.ldc = 4;
  auto g = int8_gemm(handle, s);
  Dev<int8_t> a(std::vector<int8_t>(64 * 4, -128)), b(std::vector<int8_t>(64 * 4, -128));
  Dev<int32_t> c(std::vector<int32_t>(16, 7)), d(16);
  ASSERT_EQ(run_i32(*g, 1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), std::vector<int32_t>(16, 1048576));
  ASSERT_EQ(run_i32(*g, -2047, a.p, b.p, -1, c.p, d.p), CUBLAS_STATUS_SUCCESS);  // -2047 * 2^20 - 7 fits in int32
  EXPECT_EQ(d.get(), std::vector<int32_t>(16, -2146435079));
  // [U] Past int32 the double wraps (two's complement): 2048 * 2^20 = 2^31 -> INT32_MIN; 4096 * 2^20 + 7 = 2^32 + 7 -> 7.
  ASSERT_EQ(run_i32(*g, 2048, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), std::vector<int32_t>(16, INT32_MIN));
  ASSERT_EQ(run_i32(*g, 4096, a.p, b.p, 1, c.p, d.p), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), std::vector<int32_t>(16, 7));
}

TEST_F(LtDouble, Int8RulesRefusedByTheHeuristic) {
  {  // NN (m = k = 4, so A's stored 4 x 4 shape fits both); TN with OP_C for A is refused too
    auto g = int8_gemm(handle, {});
    g->trans(false, false);
    EXPECT_NE(refused(*g).find("TN"), std::string::npos);
    g->set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t(CUBLAS_OP_C));
    EXPECT_NE(refused(*g).find("TN"), std::string::npos);
  }
  {  // m = 6 (ld 8 keeps the lds legal)
    Int8Shape s;
    s.m = 6, s.ldc = 8;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("m and k multiples of 4"), std::string::npos);
  }
  {  // k = 6 (ld 8)
    Int8Shape s;
    s.k = 6, s.lda = 8, s.ldb = 8;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("m and k multiples of 4"), std::string::npos);
  }
  {  // lda = 6 (not a multiple of 4), and ldc = 6
    Int8Shape s;
    s.lda = 6;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("multiples of 4"), std::string::npos);
    s.lda = 4, s.ldc = 6;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("multiples of 4"), std::string::npos);
  }
  {  // scale type CUDA_R_32F with COMPUTE_32I, C/D 32I
    Int8Shape s;
    s.scale = CUDA_R_32F;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("COMPUTE_32I takes"), std::string::npos);
  }
  {  // C/D CUDA_R_32F with 8I inputs: COMPUTE_32I, and the 32F/32F/8I/32F row (not emulated)
    Int8Shape s;
    s.cd = CUDA_R_32F;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("COMPUTE_32I takes"), std::string::npos);
    s.compute = CUBLAS_COMPUTE_32F, s.scale = CUDA_R_32F;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("not emulated"), std::string::npos);
  }
  {  // the 32I / 32F / 8I / 8I row: not emulated
    Int8Shape s;
    s.scale = CUDA_R_32F, s.cd = CUDA_R_8I;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("not emulated"), std::string::npos);
  }
  {  // FP64 stays refused
    Int8Shape s;
    s.compute = CUBLAS_COMPUTE_64F;
    EXPECT_NE(refused(*int8_gemm(handle, s)).find("FP64"), std::string::npos);
  }
  {  // epilogue BIAS
    auto g = int8_gemm(handle, {});
    Dev<int32_t> bias(std::vector<int32_t>(4, 1));
    g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_BIAS));
    g->set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<void*>(bias.p));
    EXPECT_NE(refused(*g).find("EPILOGUE_DEFAULT"), std::string::npos);
  }
  {  // a scale pointer
    auto g = int8_gemm(handle, {});
    Dev<float> scale(std::vector<float>{1});
    g->set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<void*>(scale.p));
    EXPECT_NE(refused(*g).find("scale"), std::string::npos);
  }
  {  // ORDER_ROW D
    Gemm g(handle, {CUDA_R_8I, 4, 4, 4}, {CUDA_R_8I, 4, 2, 4}, {CUDA_R_32I, 4, 2, 4, CUBLASLT_ORDER_ROW},
           {CUDA_R_32I, 4, 2, 4, CUBLASLT_ORDER_ROW}, CUBLAS_COMPUTE_32I);
    g.set(CUBLASLT_MATMUL_DESC_SCALE_TYPE, int32_t(CUDA_R_32I));
    g.trans(true, false);
    EXPECT_NE(refused(g).find("ORDER_COL"), std::string::npos);
  }
}

TEST_F(LtDouble, Int8AlignmentRules) {
  auto g = int8_gemm(handle, {});
  cublasLtMatmulPreference_t pref = nullptr;
  ASSERT_EQ(cublasLtMatmulPreferenceCreate(&pref), CUBLAS_STATUS_SUCCESS);
  const uint32_t two = 2, four = 4;
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &two, 4),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_NE(refused(*g, pref).find("4-byte aligned"), std::string::npos);  // the heuristic sees MIN_ALIGNMENT_A
  ASSERT_EQ(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &four, 4),
            CUBLAS_STATUS_SUCCESS);
  int count = 0;
  cublasLtMatmulHeuristicResult_t r4[4], r256[4];
  ASSERT_EQ(g->heuristic(&count, r4, pref), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  ASSERT_EQ(g->heuristic(&count, r256), CUBLAS_STATUS_SUCCESS);
  cublasLtMatmulPreferenceDestroy(pref);

  Dev<int8_t> a(std::vector<int8_t>(24, 1)), b(std::vector<int8_t>(16, 1));
  Dev<int32_t> d(8);
  // The implicit heuristic sees the actual pointers: A 2 bytes in is refused, 4 bytes in runs.
  EXPECT_EQ(run_i32(*g, 1, a.p + 2, b.p, 0, nullptr, d.p), CUBLAS_STATUS_NOT_SUPPORTED);
  ASSERT_EQ(run_i32(*g, 1, a.p + 4, b.p, 0, nullptr, d.p), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), std::vector<int32_t>(8, 4));
  ASSERT_EQ(run_i32(*g, 1, a.p + 4, b.p, 0, nullptr, d.p, &r4[0].algo), CUBLAS_STATUS_SUCCESS);  // chosen for 4 bytes
  // An algo chosen for the default 256-byte alignment, run on a 4-byte aligned A.
  EXPECT_THROW(run_i32(*g, 1, a.p + 4, b.p, 0, nullptr, d.p, &r256[0].algo), MisuseError);
  // A batch stride of 2 elements makes the second entry of A 2-byte aligned.
  Int8Shape s;
  s.batch = 2, s.stride_a = 2, s.stride_b = 8, s.stride_c = 8;
  auto batched = int8_gemm(handle, s);
  Dev<int32_t> d2(16);
  EXPECT_EQ(run_i32(*batched, 1, a.p, b.p, 0, nullptr, d2.p), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(LtDouble, Int8NotSupportedFromMatmul) {
  Int8Shape s;
  s.m = 6, s.ldc = 8;
  auto g = int8_gemm(handle, s);
  Dev<int8_t> a(std::vector<int8_t>(24, 1)), b(std::vector<int8_t>(8, 1));
  Dev<int32_t> d(16);
  EXPECT_EQ(run_i32(*g, 1, a.p, b.p, 0, nullptr, d.p), CUBLAS_STATUS_NOT_SUPPORTED);
}

TEST_F(LtDouble, Int8DevicePointerMode) {
  // The worked example with alpha = 2 and beta = 1 read from device memory when the GEMM runs.
  auto g = int8_gemm(handle, {});
  g->set(CUBLASLT_MATMUL_DESC_POINTER_MODE, int32_t(CUBLASLT_POINTER_MODE_DEVICE));
  Dev<int8_t> a(std::vector<int8_t>{1, 2, 3, 4, -1, 0, 1, 2, 5, -5, 5, -5, -128, 0, 0, 127});
  Dev<int8_t> b(std::vector<int8_t>{1, 1, 1, 1, 2, -1, 0, 3});
  Dev<int32_t> c(std::vector<int32_t>{100, 200, 300, 400, -1, -2, -3, -4}), d(8);
  Dev<int32_t> alpha(std::vector<int32_t>{2}), beta(std::vector<int32_t>{1});
  ASSERT_EQ(cublasLtMatmul(handle, g->desc, alpha.p, a.p, g->a, b.p, g->b, beta.p, c.p, g->c, d.p, g->d, nullptr,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS)
      << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(d.get(), (std::vector<int32_t>{120, 204, 300, 398, 23, 6, -3, 246}));
  Dev<int32_t> zero(std::vector<int32_t>{0}), minus(std::vector<int32_t>{-1});
  ASSERT_EQ(cublasLtMatmul(handle, g->desc, minus.p, a.p, g->a, b.p, g->b, zero.p, c.p, g->c, d.p, g->d, nullptr,
                           nullptr, 0, nullptr),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(d.get(), (std::vector<int32_t>{-10, -2, 0, 1, -12, -4, 0, -125}));
}

}  // namespace
