// kernels/cuda/lib/gemm_cublaslt.h: the CUDA GEMM through cuBLASLt: row-major problems, plan/heuristic cache,
// caller-owned workspace, bias/GELU/dGELU/bias-gradient epilogues, FP8 with per-tensor and block scales.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "kernels/cuda/lib/gemm_layout.h"

namespace mpt::kernels::cuda {

// Operand scales (FP8 only): device pointers to f32, read when the GEMM runs (keep them alive until the stream
// gets there). PerTensor: one float, null means 1. Block modes: the CONVERTED arrays in cuBLASLt's layout
// (block_scales_to_lt, kernels/cuda/gemm_scales.h), 16-byte aligned, required; a batched operand (stride != 0)
// has one array of lt_scale_count(mode, rows, k) floats per batch entry, consecutive.
struct LtScale {
  GemmScaleMode mode = GemmScaleMode::PerTensor;
  const float* ptr = nullptr;
};

// Everything but the three matrix pointers. The problem is row-major (GemmShape, gemm_layout.h):
//   C = epilogue(alpha * dequant(op(A)) dequant(op(B)) + beta * C), rounded once to c_type; C is also the output.
// Types (R2.1, R2.3), compute always FP32 accumulation:
//   a = b in {F32, F16, BF16}: c = a, or F32 for F16/BF16 inputs. F32 x F32 uses TF32 tensor cores only when
//     allow_tf32 (CUBLAS_COMPUTE_32F_FAST_TF32), else exact FP32 (CUBLAS_COMPUTE_32F).
//   a, b in {E4M3, E5M2}, not both E5M2; c in {F32, BF16, F16, E4M3} (E5M2 too for mixed pairs). Needs the TN
//     layout (is_fp8_tn). An FP8 c needs beta == 0 and takes out_scale (null means 1) and out_amax (optional).
//   a = b = I8 (CUDA_R_8I), c = I32 (CUDA_R_32I): exact INT32 sums on the IMMA tensor cores (CUBLAS_COMPUTE_32I,
//     scale type CUDA_R_32I: alpha and beta must be integers, passed as int32). Needs int8_gemm_shape_ok (TN, n, k
//     and leading dimensions multiples of 4), 4-byte aligned pointers, no epilogue and no scales.
struct LtGemmParams {
  GemmShape shape;
  float alpha = 1.0f, beta = 0.0f;
  cudaDataType_t a_type = CUDA_R_32F, b_type = CUDA_R_32F, c_type = CUDA_R_32F;
  bool allow_tf32 = false;      // F32 only: TF32 tensor cores (10-bit mantissa inputs, FP32 accumulation)
  bool fp8_fast_accum = false;  // FP8 only: CUBLASLT_MATMUL_DESC_FAST_ACCUM (no periodic FP32 promotion)
  // No split-K: the heuristic is asked with REDUCTION_SCHEME_MASK = NONE, so each output's dot product is one
  // sequence whatever the workspace, and with the plan cache pinning the algorithm per problem repeated calls give
  // the same bits (mpt::set_deterministic). Costs speed on problems with a long K and few output tiles.
  bool deterministic = false;

  // Epilogue (gemm_layout.h has the row-major meaning). bias: length epilogue_bias_length, packed, read by the
  // Bias/Gelu*Bias epilogues and written by the BGrad ones. bias_type defaults to c_type, except BF16 for FP8
  // inputs with an F32 or FP8 c (R2.3; an FP8 c's unused C layout takes this type too). aux: row-major m x n with
  // row stride aux_ld (a multiple of 8, >= n), aux_type defaults to c_type. Epilogues other than None and Bias
  // need batch == 1 (Bias shares one vector over the batch).
  GemmEpilogue epilogue = GemmEpilogue::None;
  void* bias = nullptr;
  std::optional<cudaDataType_t> bias_type{};
  void* aux = nullptr;
  int64_t aux_ld = 0;
  std::optional<cudaDataType_t> aux_type{};

  LtScale scale_a{}, scale_b{};      // FP8 operands only
  const float* out_scale = nullptr;  // FP8 c only: stored codes = saturate(D * out_scale[0])
  float* out_amax = nullptr;         // FP8 c only, optional: max |D| before out_scale, over the whole batch
};

// Caller-owned scratch for cuBLASLt's split-K and similar algorithms: 256-byte aligned (null with bytes 0 is
// allowed and restricts the choice to algorithms without workspace). Use one workspace per stream that runs
// GEMMs concurrently (R6.4): the op layer keeps one per (device, stream).
struct LtWorkspace {
  void* ptr = nullptr;
  size_t bytes = 0;
};

// 32 MiB on Hopper and later (cuBLAS's own recommendation there), 4 MiB before.
size_t recommended_workspace_bytes(int cc_major);

enum class LtCode : uint8_t {
  Ok,
  InvalidArgument,  // the parameters break a documented rule; LtResult::detail says which
  NeedsTnLayout,    // FP8 and INT8 operands need trans_a == false, trans_b == true: pass transposed copies
  NoAlgorithm,      // the heuristic found none (NOT_SUPPORTED, INVALID_VALUE or 0 results; status says which)
  CublasError,      // any other cuBLASLt failure (status); e.g. NOT_INITIALIZED when there is no driver
};

struct LtResult {
  LtCode code = LtCode::Ok;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  const char* detail = "";  // a static string: the broken rule, or the cuBLASLt call that failed
  bool ok() const { return code == LtCode::Ok; }
};

// Checks the parameters against the rules above without touching the GPU (the first step of cublaslt_gemm).
LtResult validate_cublaslt_gemm(const LtGemmParams& p, const void* a, const void* b, const void* c,
                                const LtWorkspace& ws);

// The compute type the call uses (CUBLAS_COMPUTE_32F, _32F_FAST_TF32, or _32I for INT8) and its scale type
// (CUDA_R_32F, CUDA_R_32I for INT8).
cublasComputeType_t lt_compute_type(const LtGemmParams& p);
cudaDataType_t lt_scale_type(const LtGemmParams& p);

// Runs the GEMM on `stream` (asynchronous) with device pointers a, b and c on `device` (the plan cache and the
// handle are per device; the caller makes `device` current). m == 0 or n == 0 is a no-op; k == 0 is refused
// (InvalidArgument: the op layer scales or zeroes C itself). Block-scaled batches run one call per entry.
// Thread-safe. Nothing is thrown: every cuBLASLt status is checked and returned.
LtResult cublaslt_gemm(int device, const LtGemmParams& p, const void* a, const void* b, void* c,
                       const LtWorkspace& ws, cudaStream_t stream);

// "cuBLASLt has no algorithm for ...": the code, the rule or call, the cuBLAS status name and description, and
// the problem (row-major m, n, k, transposes, leading dimensions, batch, dtypes, epilogue, scale modes).
std::string describe(const LtResult& r, const LtGemmParams& p);
const char* lt_dtype_name(cudaDataType_t t);

// The plan cache: one entry per (device, dtypes, compute type, shape, transposes, leading dimensions, batch and
// strides, epilogue and its types and aux ld, scale modes, which optional pointers are set, the alignment of
// every pointer (up to 256 bytes), workspace size). Least recently used entries go beyond `capacity` (256).
struct LtPlanCacheStats {
  int64_t hits = 0, misses = 0, size = 0, capacity = 0;
};
LtPlanCacheStats cublaslt_plan_cache_stats();
void set_cublaslt_plan_cache_capacity(size_t capacity);  // evicts down to it; 0 disables caching

}  // namespace mpt::kernels::cuda
