// tests/support/cuda_emu/include/cublasLt.h: in emulation builds, the cuBLASLt 13.1 subset mptrain uses (the toolkit's names and values), run by a float64 CPU double.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_emu/runtime_api.h"
#include "library_types.h"

// Everything lives in mpt::cuda_emu (C++ linkage, so nothing collides with a real libcublasLt linked into the same
// program) and is brought into the global namespace below, where CUDA code expects it. Enumerator values are the
// toolkit's (cublas_api.h, cublasLt.h). The descriptor structs are incomplete: create descriptors with the *Create
// functions (the *Init functions for pre-allocated space are not provided).
namespace mpt::cuda_emu {

enum cublasStatus_t : int {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,
  CUBLAS_STATUS_LICENSE_ERROR = 16,
};

enum cublasOperation_t : int { CUBLAS_OP_N = 0, CUBLAS_OP_T = 1, CUBLAS_OP_C = 2, CUBLAS_OP_HERMITAN = 2, CUBLAS_OP_CONJG = 3 };

enum cublasComputeType_t : int {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_16F_PEDANTIC = 65,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32I = 72,
  CUBLAS_COMPUTE_32I_PEDANTIC = 73,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
};

struct cublasLtContext;
using cublasLtHandle_t = cublasLtContext*;
struct cublasLtMatrixLayoutOpaque_t;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
struct cublasLtMatmulDescOpaque_t;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
struct cublasLtMatmulPreferenceOpaque_t;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;

// Semi-opaque, trivially copyable (the real layout): the double stores the problem's signature in it.
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};

enum cublasLtMatmulMatrixScale_t : int {
  CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F = 0,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC16_UE4M3 = 1,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC32_UE8M0 = 2,
  CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F = 3,
  CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F = 4,
  CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F = 5,
  CUBLASLT_MATMUL_MATRIX_SCALE_END,
};

enum cublasLtPointerMode_t : int {
  CUBLASLT_POINTER_MODE_HOST = 0,
  CUBLASLT_POINTER_MODE_DEVICE = 1,
  CUBLASLT_POINTER_MODE_DEVICE_VECTOR = 2,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_ZERO = 3,
  CUBLASLT_POINTER_MODE_ALPHA_DEVICE_VECTOR_BETA_HOST = 4,
};

enum cublasLtOrder_t : int {
  CUBLASLT_ORDER_COL = 0,
  CUBLASLT_ORDER_ROW = 1,
  CUBLASLT_ORDER_COL32 = 2,
  CUBLASLT_ORDER_COL4_4R2_8C = 3,
  CUBLASLT_ORDER_COL32_2R_4R4 = 4,
};

enum cublasLtBatchMode_t : int { CUBLASLT_BATCH_MODE_STRIDED = 0, CUBLASLT_BATCH_MODE_POINTER_ARRAY = 1 };

// Attribute value types (sizes are checked): TYPE uint32, ORDER int32, ROWS/COLS uint64, LD int64, BATCH_COUNT
// int32, STRIDED_BATCH_OFFSET int64, PLANE_OFFSET int64, BATCH_MODE uint32.
enum cublasLtMatrixLayoutAttribute_t : int {
  CUBLASLT_MATRIX_LAYOUT_TYPE = 0,
  CUBLASLT_MATRIX_LAYOUT_ORDER = 1,
  CUBLASLT_MATRIX_LAYOUT_ROWS = 2,
  CUBLASLT_MATRIX_LAYOUT_COLS = 3,
  CUBLASLT_MATRIX_LAYOUT_LD = 4,
  CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5,
  CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6,
  CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET = 7,
  CUBLASLT_MATRIX_LAYOUT_BATCH_MODE = 8,
};

// Value types as in the toolkit header: pointers are void* (8 bytes), *_TYPE / TRANS* / SCALE_MODE / POINTER_MODE /
// SM_COUNT_TARGET int32, EPILOGUE uint32, LDs and strides int64, FAST_ACCUM int8.
enum cublasLtMatmulDescAttributes_t : int {
  CUBLASLT_MATMUL_DESC_COMPUTE_TYPE = 0,
  CUBLASLT_MATMUL_DESC_SCALE_TYPE = 1,
  CUBLASLT_MATMUL_DESC_POINTER_MODE = 2,
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_TRANSC = 5,
  CUBLASLT_MATMUL_DESC_FILL_MODE = 6,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE = 10,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER = 11,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD = 12,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE = 13,
  CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE = 14,
  CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET = 15,
  CUBLASLT_MATMUL_DESC_A_SCALE_POINTER = 17,
  CUBLASLT_MATMUL_DESC_B_SCALE_POINTER = 18,
  CUBLASLT_MATMUL_DESC_C_SCALE_POINTER = 19,
  CUBLASLT_MATMUL_DESC_D_SCALE_POINTER = 20,
  CUBLASLT_MATMUL_DESC_AMAX_D_POINTER = 21,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE = 22,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER = 23,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER = 24,
  CUBLASLT_MATMUL_DESC_FAST_ACCUM = 25,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
  CUBLASLT_MATMUL_DESC_A_SCALE_MODE = 31,
  CUBLASLT_MATMUL_DESC_B_SCALE_MODE = 32,
  CUBLASLT_MATMUL_DESC_C_SCALE_MODE = 33,
  CUBLASLT_MATMUL_DESC_D_SCALE_MODE = 34,
  CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE = 35,
  CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER = 36,
  CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE = 37,
  CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR = 38,
};

enum cublasLtEpilogue_t : int {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_RELU = 2,
  CUBLASLT_EPILOGUE_RELU_AUX = 2 | 128,
  CUBLASLT_EPILOGUE_BIAS = 4,
  CUBLASLT_EPILOGUE_RELU_BIAS = 2 | 4,
  CUBLASLT_EPILOGUE_RELU_AUX_BIAS = 2 | 128 | 4,
  CUBLASLT_EPILOGUE_DRELU = 8 | 128,
  CUBLASLT_EPILOGUE_DRELU_BGRAD = 8 | 128 | 16,
  CUBLASLT_EPILOGUE_GELU = 32,
  CUBLASLT_EPILOGUE_GELU_AUX = 32 | 128,
  CUBLASLT_EPILOGUE_GELU_BIAS = 32 | 4,
  CUBLASLT_EPILOGUE_GELU_AUX_BIAS = 32 | 128 | 4,
  CUBLASLT_EPILOGUE_DGELU = 64 | 128,
  CUBLASLT_EPILOGUE_DGELU_BGRAD = 64 | 128 | 16,
  CUBLASLT_EPILOGUE_BGRADA = 256,
  CUBLASLT_EPILOGUE_BGRADB = 512,
};

enum cublasLtReductionScheme_t : int {
  CUBLASLT_REDUCTION_SCHEME_NONE = 0,
  CUBLASLT_REDUCTION_SCHEME_INPLACE = 1,
  CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE = 2,
  CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE = 4,
  CUBLASLT_REDUCTION_SCHEME_MASK = 0x7,
};

// SEARCH_MODE uint32, MAX_WORKSPACE_BYTES uint64, REDUCTION_SCHEME_MASK uint32, MIN_ALIGNMENT_* uint32,
// MAX_WAVES_COUNT float, IMPL_MASK uint64.
enum cublasLtMatmulPreferenceAttributes_t : int {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK = 3,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
  CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT = 9,
  CUBLASLT_MATMUL_PREF_IMPL_MASK = 12,
};

struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
};

// Handles, versions, statuses. A null handle gives NOT_INITIALIZED; a destroyed one throws MisuseError.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle);
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle);
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);
size_t cublasLtGetVersion();
size_t cublasLtGetCudartVersion();

// Descriptors. A null descriptor gives INVALID_VALUE; a destroyed one throws MisuseError. Set/Get check buf and
// the attribute's size (INVALID_VALUE); Get with sizeInBytes 0 reports the size through sizeWritten.
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout);
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten);
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc);
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes);
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten);
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes);
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten);

// preference may be null (defaults). Problems the double refuses: see CublasLtSwitches::refusal.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);

// Runs on `stream` through run_on_stream (cuda_emu/device_work.h): every matrix, scale, amax, bias, aux and the
// workspace is a checked device access; misuse throws MisuseError. algo == nullptr runs an implicit heuristic.
cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

// ---- Emulation controls (not cuBLASLt API). Each [U] of vendor-semantics.md is a switch; defaults are the most
// likely real behaviour. Process-wide; tests set them and restore the defaults (CublasLtSwitches{}).
enum class LtRefusal : uint8_t {
  NotSupported,      // heuristic returns CUBLAS_STATUS_NOT_SUPPORTED, count 0 (R2.4, observed)
  SuccessNoResults,  // heuristic returns SUCCESS with count 0 (R6.2: allowed by the header)
  InvalidValue,      // heuristic returns CUBLAS_STATUS_INVALID_VALUE, count 0 (observed for M=63)
};
struct CublasLtSwitches {
  LtRefusal refusal = LtRefusal::NotSupported;
  // R2.4 [U]: scale, amax and aux-type settings the combination does not support (a D scale on a BF16 D, any
  // scale on a non-FP8 GEMM, ...): false = cublasLtMatmul returns INVALID_VALUE (the header), true = the heuristic
  // refuses them already.
  bool scale_errors_in_heuristic = false;
  // R2.4 [O]: FP8 needs m % 16 == 0 (observed) on top of the documented 16-byte rules.
  bool fp8_m_multiple_of_16 = true;
  // R1.4 [U]: every layout must have D's BATCH_COUNT; false = only D's count is used.
  bool equal_batch_counts = true;
  // R5 [U]: DGELU(_BGRAD) computes (alpha AB + beta C) * gelu'(aux); false = alpha AB * gelu'(aux).
  bool dgelu_includes_beta_c = true;
  // R5 [U]: DGELU_BGRAD's bgrad sums the post-dGELU values; false = the matmul values before dGELU.
  bool dgelu_bgrad_after_dgelu = true;
  // R5 [U]: BGRADA / BGRADB multiply their sums by alpha.
  bool bgrad_scaled_by_alpha = false;
  // R3 [U]: FP8 D overflow saturates to +-max; false = NaN (E4M3) or Inf (E5M2).
  bool fp8_output_saturates = true;
  // Workspace each heuristic result asks for when it fits MAX_WORKSPACE_BYTES (results without workspace follow).
  size_t algo_workspace_bytes = 0;
  // A/B/C/D/bias/aux pointers less aligned than the algo was chosen for: true = MisuseError (a GPU may fault),
  // false = INVALID_VALUE.
  bool misaligned_pointer_throws = true;
  // What cublasLtCreate returns (CUBLAS_STATUS_NOT_INITIALIZED emulates a machine without a driver).
  cublasStatus_t create_status = CUBLAS_STATUS_SUCCESS;
};
CublasLtSwitches cublaslt_switches();
void set_cublaslt_switches(const CublasLtSwitches& switches);
// Why this thread's last cuBLASLt call failed or refused a problem ("" after a success): the rule, in words.
const char* cublaslt_last_failure();
// The REDUCTION_SCHEME_MASK of this thread's last cublasLtMatmulAlgoGetHeuristic call (every bit set when its
// preference left the default: all schemes allowed). The double's algorithms with workspace stand for split-K ones: a mask
// without any scheme (NONE) leaves only the algorithm without workspace.
uint32_t cublaslt_last_reduction_mask();
// cublasLtMatmul calls that ran with CUBLASLT_MATMUL_DESC_FAST_ACCUM set, since the process started (the double
// computes them exactly like the others: it has no reduced-precision accumulator).
uint64_t cublaslt_fast_accum_matmuls();

}  // namespace mpt::cuda_emu

using enum mpt::cuda_emu::cublasStatus_t;
using enum mpt::cuda_emu::cublasLtReductionScheme_t;
using enum mpt::cuda_emu::cublasOperation_t;
using enum mpt::cuda_emu::cublasComputeType_t;
using enum mpt::cuda_emu::cublasLtMatmulMatrixScale_t;
using enum mpt::cuda_emu::cublasLtPointerMode_t;
using enum mpt::cuda_emu::cublasLtOrder_t;
using enum mpt::cuda_emu::cublasLtBatchMode_t;
using enum mpt::cuda_emu::cublasLtMatrixLayoutAttribute_t;
using enum mpt::cuda_emu::cublasLtMatmulDescAttributes_t;
using enum mpt::cuda_emu::cublasLtEpilogue_t;
using enum mpt::cuda_emu::cublasLtMatmulPreferenceAttributes_t;
using mpt::cuda_emu::cublasComputeType_t;
using mpt::cuda_emu::cublasLtBatchMode_t;
using mpt::cuda_emu::cublasLtContext;
using mpt::cuda_emu::cublasLtEpilogue_t;
using mpt::cuda_emu::cublasLtHandle_t;
using mpt::cuda_emu::cublasLtMatmulAlgo_t;
using mpt::cuda_emu::cublasLtMatmulDesc_t;
using mpt::cuda_emu::cublasLtMatmulDescAttributes_t;
using mpt::cuda_emu::cublasLtMatmulDescOpaque_t;
using mpt::cuda_emu::cublasLtMatmulHeuristicResult_t;
using mpt::cuda_emu::cublasLtMatmulMatrixScale_t;
using mpt::cuda_emu::cublasLtMatmulPreference_t;
using mpt::cuda_emu::cublasLtMatmulPreferenceAttributes_t;
using mpt::cuda_emu::cublasLtMatmulPreferenceOpaque_t;
using mpt::cuda_emu::cublasLtMatrixLayout_t;
using mpt::cuda_emu::cublasLtMatrixLayoutAttribute_t;
using mpt::cuda_emu::cublasLtMatrixLayoutOpaque_t;
using mpt::cuda_emu::cublasLtOrder_t;
using mpt::cuda_emu::cublasLtPointerMode_t;
using mpt::cuda_emu::cublasOperation_t;
using mpt::cuda_emu::cublasStatus_t;
using mpt::cuda_emu::cublasLtCreate;
using mpt::cuda_emu::cublasLtDestroy;
using mpt::cuda_emu::cublasLtGetCudartVersion;
using mpt::cuda_emu::cublasLtGetStatusName;
using mpt::cuda_emu::cublasLtGetStatusString;
using mpt::cuda_emu::cublasLtGetVersion;
using mpt::cuda_emu::cublasLtMatmul;
using mpt::cuda_emu::cublasLtMatmulAlgoGetHeuristic;
using mpt::cuda_emu::cublasLtMatmulDescCreate;
using mpt::cuda_emu::cublasLtMatmulDescDestroy;
using mpt::cuda_emu::cublasLtMatmulDescGetAttribute;
using mpt::cuda_emu::cublasLtMatmulDescSetAttribute;
using mpt::cuda_emu::cublasLtMatmulPreferenceCreate;
using mpt::cuda_emu::cublasLtMatmulPreferenceDestroy;
using mpt::cuda_emu::cublasLtMatmulPreferenceGetAttribute;
using mpt::cuda_emu::cublasLtMatmulPreferenceSetAttribute;
using mpt::cuda_emu::cublasLtMatrixLayoutCreate;
using mpt::cuda_emu::cublasLtMatrixLayoutDestroy;
using mpt::cuda_emu::cublasLtMatrixLayoutGetAttribute;
using mpt::cuda_emu::cublasLtMatrixLayoutSetAttribute;
