// tests/kernels/test_cublaslt_wrapper.cpp: the cuBLASLt GEMM wrapper's host-side rules (validation, compute type,
// error text, the no-driver path); numerics need a GPU or the cuBLASLt CPU double and are not checked here.
#include <gtest/gtest.h>

#if defined(MPT_WITH_CUDA)

#include <cuda_runtime_api.h>

#include <string>

#include "kernels/cuda/lib/gemm_cublaslt.h"

namespace {

namespace kc = mpt::kernels::cuda;
using kc::LtCode;

// Fake device addresses: validation only looks at their values (alignment, null).
const void* const kA = reinterpret_cast<const void*>(uintptr_t{0x10000});
const void* const kB = reinterpret_cast<const void*>(uintptr_t{0x20000});
void* const kC = reinterpret_cast<void*>(uintptr_t{0x30000});
const float* const kScale = reinterpret_cast<const float*>(uintptr_t{0x40000});

// An FP8 Linear forward: y (32 x 48) = x (32 x 64) W^T, W stored 48 x 64, BF16 output.
kc::LtGemmParams fp8_linear() {
  kc::LtGemmParams p;
  p.shape = {.m = 32, .n = 48, .k = 256, .trans_b = true, .lda = 256, .ldb = 256, .ldc = 48};
  p.a_type = p.b_type = CUDA_R_8F_E4M3;
  p.c_type = CUDA_R_16BF;
  return p;
}

LtCode check(const kc::LtGemmParams& p, kc::LtWorkspace ws = {}) {
  return kc::validate_cublaslt_gemm(p, kA, kB, kC, ws).code;
}

TEST(CublasLtWrapper, Fp8NeedsTheTnLayout) {
  kc::LtGemmParams p = fp8_linear();
  EXPECT_EQ(check(p), LtCode::Ok);
  p.shape.trans_b = false, p.shape.ldb = 48;  // dx = dy W without a transposed copy
  EXPECT_EQ(check(p), LtCode::NeedsTnLayout);
  const kc::LtResult r = kc::validate_cublaslt_gemm(p, kA, kB, kC, {});
  EXPECT_NE(std::string(r.detail).find("transposed copies"), std::string::npos) << r.detail;
}

TEST(CublasLtWrapper, Fp8TypeRules) {
  kc::LtGemmParams p = fp8_linear();
  p.a_type = p.b_type = CUDA_R_8F_E5M2;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // E5M2 x E5M2
  p.a_type = CUDA_R_8F_E4M3;
  p.c_type = CUDA_R_8F_E5M2;
  EXPECT_EQ(check(p), LtCode::Ok);  // mixed pair -> E5M2 output is allowed
  p.b_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // E4M3 x E4M3 -> E5M2 is not
  p.c_type = CUDA_R_8F_E4M3;
  p.beta = 1.0f;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // an FP8 output cannot accumulate
  p.beta = 0.0f;
  p.b_type = CUDA_R_16BF;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // FP8 x BF16
}

TEST(CublasLtWrapper, ScaleRules) {
  kc::LtGemmParams p = fp8_linear();
  p.out_scale = kScale;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // a D scale on a BF16 output (R2.4)
  p.c_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(check(p), LtCode::Ok);
  p = fp8_linear();
  p.scale_a = {kc::GemmScaleMode::Block1x128, kScale};
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // block scaling on one operand only
  p.scale_b = {kc::GemmScaleMode::Block128x128, kScale + 1024};
  EXPECT_EQ(check(p), LtCode::Ok);  // activations 1x128, weights 128x128
  p.scale_a.mode = kc::GemmScaleMode::Block128x128;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // BLK x BLK
  p.scale_a = {kc::GemmScaleMode::Block1x128, kScale + 1};
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // 4-byte aligned scale array
  p.scale_a.ptr = kScale;
  p.c_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // FP8 output with block scaling
  kc::LtGemmParams bf = fp8_linear();
  bf.a_type = bf.b_type = CUDA_R_16BF;
  bf.scale_a.ptr = kScale;
  EXPECT_EQ(check(bf), LtCode::InvalidArgument);  // scales on non-FP8 operands
}

TEST(CublasLtWrapper, EpilogueAndWorkspaceRules) {
  kc::LtGemmParams p = fp8_linear();
  p.a_type = p.b_type = p.c_type = CUDA_R_16BF;
  p.epilogue = kc::GemmEpilogue::GeluAuxBias;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // no bias, no aux
  p.bias = kC;
  p.aux = kC;
  p.aux_ld = 52;  // >= n = 48 but not a multiple of 8
  EXPECT_EQ(check(p), LtCode::InvalidArgument);
  p.aux_ld = 56;
  EXPECT_EQ(check(p), LtCode::Ok);
  p.shape.batch = 2, p.shape.stride_c = 32 * 48;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // GELU epilogues need batch == 1
  p.epilogue = kc::GemmEpilogue::Bias;
  EXPECT_EQ(check(p), LtCode::Ok);  // one bias shared over the batch
  p.shape.stride_c = 32 * 48 - 1;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // overlapping C matrices
  p.shape.stride_c = 32 * 48;
  EXPECT_EQ(check(p, {reinterpret_cast<void*>(uintptr_t{0x50080}), 1 << 20}), LtCode::InvalidArgument);
  EXPECT_EQ(check(p, {reinterpret_cast<void*>(uintptr_t{0x50100}), 1 << 20}), LtCode::Ok);
  p.shape.lda = 255;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // lda < k for an untransposed A
}

// W8A8: x codes (32 x 256) times W codes (48 x 256, stored [out, in]) into exact INT32 sums.
kc::LtGemmParams int8_linear() {
  kc::LtGemmParams p;
  p.shape = {.m = 32, .n = 48, .k = 256, .trans_b = true, .lda = 256, .ldb = 256, .ldc = 48};
  p.a_type = p.b_type = CUDA_R_8I;
  p.c_type = CUDA_R_32I;
  return p;
}

TEST(CublasLtWrapper, Int8Rules) {
  kc::LtGemmParams p = int8_linear();
  EXPECT_EQ(check(p), LtCode::Ok);
  EXPECT_EQ(kc::lt_compute_type(p), CUBLAS_COMPUTE_32I);
  EXPECT_EQ(kc::lt_scale_type(p), CUDA_R_32I);
  EXPECT_EQ(kc::lt_scale_type(fp8_linear()), CUDA_R_32F);
  p.shape.m = 3;  // our m (cuBLASLt's n) is free
  EXPECT_EQ(check(p), LtCode::Ok);
  p.alpha = 2.0f, p.beta = -1.0f;  // integer scalars
  EXPECT_EQ(check(p), LtCode::Ok);
  p.alpha = 0.5f;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);
  p = int8_linear();
  p.c_type = CUDA_R_32F;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);  // the IMMA row writes i32
  p = int8_linear();
  p.b_type = CUDA_R_8F_E4M3;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);
  p = int8_linear();
  p.shape.trans_b = false, p.shape.ldb = 48;
  EXPECT_EQ(check(p), LtCode::NeedsTnLayout);
  for (auto edit : {+[](kc::GemmShape& s) { s.n = 46, s.ldc = 46; }, +[](kc::GemmShape& s) { s.k = 254, s.lda = s.ldb = 254; },
                    +[](kc::GemmShape& s) { s.lda = 258; }, +[](kc::GemmShape& s) { s.ldc = 50; }}) {
    p = int8_linear();
    edit(p.shape);
    EXPECT_FALSE(kc::int8_gemm_shape_ok(p.shape));
    const kc::LtResult r = kc::validate_cublaslt_gemm(p, kA, kB, kC, {});
    EXPECT_EQ(r.code, LtCode::InvalidArgument);
    EXPECT_NE(std::string(r.detail).find("multiples of 4"), std::string::npos) << r.detail;
  }
  p = int8_linear();
  p.epilogue = kc::GemmEpilogue::Bias, p.bias = kC;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);
  p = int8_linear();
  p.scale_a.ptr = kScale;
  EXPECT_EQ(check(p), LtCode::InvalidArgument);
  p = int8_linear();
  const auto* odd = reinterpret_cast<const void*>(uintptr_t{0x10002});
  EXPECT_EQ(kc::validate_cublaslt_gemm(p, odd, kB, kC, {}).code, LtCode::InvalidArgument);  // 2-byte aligned codes
  const std::string text = kc::describe(kc::LtResult{LtCode::NoAlgorithm, CUBLAS_STATUS_NOT_SUPPORTED, "x"}, int8_linear());
  EXPECT_NE(text.find("a i8, b i8, c i32"), std::string::npos) << text;
  EXPECT_NE(text.find("IMMA"), std::string::npos) << text;
}

TEST(CublasLtWrapper, Tf32OnlyForF32WhenAllowed) {
  kc::LtGemmParams p;
  p.shape = {.m = 4, .n = 4, .k = 4, .lda = 4, .ldb = 4, .ldc = 4};
  EXPECT_EQ(kc::lt_compute_type(p), CUBLAS_COMPUTE_32F);
  p.allow_tf32 = true;
  EXPECT_EQ(kc::lt_compute_type(p), CUBLAS_COMPUTE_32F_FAST_TF32);
  p.a_type = p.b_type = CUDA_R_16BF;
  EXPECT_EQ(kc::lt_compute_type(p), CUBLAS_COMPUTE_32F);  // FAST_TF32 is F32-only (R2.1)
  EXPECT_EQ(kc::recommended_workspace_bytes(9), size_t{32} << 20);
  EXPECT_EQ(kc::recommended_workspace_bytes(8), size_t{4} << 20);
}

TEST(CublasLtWrapper, DescribeNamesTheProblem) {
  const kc::LtGemmParams p = fp8_linear();
  const std::string s =
      kc::describe({LtCode::NoAlgorithm, CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic"}, p);
  for (const char* part : {"cuBLASLt has no algorithm", "m=32 n=48 k=256", "trans_b", "a f8e4m3", "c bf16",
                           "CUBLAS_STATUS_NOT_SUPPORTED", "scales a per-tensor"})
    EXPECT_NE(s.find(part), std::string::npos) << part << " missing from: " << s;
}

// Without a driver (this machine), the handle cannot be created: the status comes back, nothing is cached.
TEST(CublasLtWrapper, NoDriverReturnsTheHandleStatus) {
  int count = 0;
  if (cudaGetDeviceCount(&count) == cudaSuccess && count > 0)
    GTEST_SKIP() << "a GPU is present: the no-driver path cannot be exercised";
  (void)cudaGetLastError();
  kc::LtGemmParams p = fp8_linear();
  p.shape.m = 0;
  EXPECT_EQ(kc::cublaslt_gemm(0, p, kA, kB, kC, {}, nullptr).code, LtCode::Ok);  // empty: no cuBLASLt call
  p = fp8_linear();
  const kc::LtPlanCacheStats before = kc::cublaslt_plan_cache_stats();
  const kc::LtResult r = kc::cublaslt_gemm(0, p, kA, kB, kC, {}, nullptr);
  EXPECT_EQ(r.code, LtCode::CublasError);
  EXPECT_EQ(r.status, CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_NE(std::string(r.detail).find("cublasLtCreate"), std::string::npos) << r.detail;
  const kc::LtPlanCacheStats after = kc::cublaslt_plan_cache_stats();
  EXPECT_EQ(after.size, before.size);
  EXPECT_EQ(after.misses, before.misses);
  EXPECT_EQ(kc::cublaslt_gemm(-1, p, kA, kB, kC, {}, nullptr).code, LtCode::InvalidArgument);
}

}  // namespace

#else

TEST(CublasLtWrapper, NeedsTheCudaBuild) {
  GTEST_SKIP() << "built without CUDA (MPT_WITH_CUDA off): the cuBLASLt wrapper is not compiled";
}

#endif
