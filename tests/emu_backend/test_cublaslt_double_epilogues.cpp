// tests/emu_backend/test_cublaslt_double_epilogues.cpp: the cuBLASLt double against vendor-semantics.md §4-§6: block scaling (E4), epilogues (E5), reuse, misuse and threads, through the raw API.
#include <cublasLt.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <thread>
#include <vector>

#include "cublaslt_test_util.h"
#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace {

using namespace mpt::lt_test;

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
  mpt::cuda_emu::reset_counters();
  ASSERT_EQ(c.run(), CUBLAS_STATUS_SUCCESS) << mpt::cuda_emu::cublaslt_last_failure();
  EXPECT_EQ(aux.get()[0], 2.0f);
  EXPECT_NEAR(c.d.get()[0], 1.954598, 5e-5);
  // The device-work proxy counts the epilogue's traffic: A, B, D 4 bytes each, the bias read and the aux written.
  EXPECT_EQ(mpt::cuda_emu::counters().matmul_bytes, 12u + 4u + 4u);
  c.g->set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t(CUBLASLT_EPILOGUE_GELU_AUX));  // aux = matmul, no bias
  mpt::cuda_emu::reset_counters();
  ASSERT_EQ(c.run(), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(mpt::cuda_emu::counters().matmul_bytes, 12u + 4u);
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
