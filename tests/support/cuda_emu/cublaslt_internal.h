// tests/support/cuda_emu/cublaslt_internal.h: the cuBLASLt double's descriptor state, problem snapshot and validation interface (shared by its cublaslt_*.cpp files).
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "cublasLt.h"
#include "cuda_emu/device_work.h"

namespace mpt::cuda_emu {

// ---- Descriptor contents (plain values; the opaque structs add a mutex) ----
struct LayoutState {
  cudaDataType_t type = CUDA_R_32F;
  int32_t order = CUBLASLT_ORDER_COL;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
  int32_t batch_count = 1;
  int64_t batch_stride = 0;  // elements
  int64_t plane_offset = 0;
  uint32_t batch_mode = CUBLASLT_BATCH_MODE_STRIDED;
  bool operator==(const LayoutState&) const = default;
};

struct DescState {
  int32_t compute = CUBLAS_COMPUTE_32F;
  int32_t scale_type = CUDA_R_32F;
  int32_t pointer_mode = CUBLASLT_POINTER_MODE_HOST;
  int32_t trans_a = CUBLAS_OP_N, trans_b = CUBLAS_OP_N, trans_c = CUBLAS_OP_N;
  int32_t fill_mode = 2;  // CUBLAS_FILL_MODE_FULL
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  void* bias = nullptr;
  int64_t bias_batch_stride = 0;
  void* aux = nullptr;
  int64_t aux_ld = 0, aux_batch_stride = 0, alpha_vector_batch_stride = 0;
  int32_t sm_count_target = 0;
  void* scale_a = nullptr;
  void* scale_b = nullptr;
  void* scale_c = nullptr;
  void* scale_d = nullptr;
  void* amax_d = nullptr;
  int32_t aux_type = -1;  // -1: D's type
  void* aux_scale = nullptr;
  void* aux_amax = nullptr;
  int8_t fast_accum = 0;
  int32_t bias_type = -1;  // -1: the default of R2.1 / R2.3
  int32_t scale_mode_a = 0, scale_mode_b = 0, scale_mode_c = 0, scale_mode_d = 0, scale_mode_aux = 0;
  void* d_out_scale = nullptr;
  int32_t d_out_scale_mode = 0;
  void* emulation_desc = nullptr;
};

struct PrefState {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;
  uint32_t reduction_mask = 0xFFFFFFFFu;
  uint32_t min_align[4] = {256, 256, 256, 256};  // A, B, C, D
  float max_waves = 0.0f;
  uint64_t impl_mask = ~uint64_t{0};
};

// ---- Liveness: every handle and descriptor the double created and has not destroyed ----
enum class LtObject : uint8_t { Handle, Layout, Desc, Pref };
void register_object(const void* p, LtObject kind);
void unregister_object(const void* p, LtObject kind, const char* api);  // throws MisuseError if unknown
void require_live(const void* p, LtObject kind, const char* api, const char* what);  // throws MisuseError

// Copies of the descriptors' contents, taken under their mutexes.
LayoutState snapshot(cublasLtMatrixLayout_t l);
DescState snapshot(cublasLtMatmulDesc_t d);
PrefState snapshot(cublasLtMatmulPreference_t p);

// The thread's failure text (cublaslt_last_failure) and a helper that sets it and returns the status.
void set_failure(std::string text);
cublasStatus_t fail(cublasStatus_t status, std::string text);

// ---- One problem, validated ----
struct Problem {
  DescState desc;
  LayoutState a, b, c, d;
  int cc = 90;  // compute capability of the current device
  // Derived by validate().
  int64_t m = 0, n = 0, k = 0, batch = 1;
  bool ta = false, tb = false;  // op(A) = A^T, op(B) = B^T
  cudaDataType_t bias_type = CUDA_R_32F, aux_type = CUDA_R_32F;
  bool fp8 = false;
  bool int8 = false;  // the IMMA row: COMPUTE_32I, scale 32I, A/B 8I, C/D 32I
};

// Where a broken rule surfaces: Unsupported in the heuristic (and NOT_SUPPORTED from cublasLtMatmul), Invalid only
// from cublasLtMatmul (INVALID_VALUE).
enum class Verdict : uint8_t { Ok, Unsupported, Invalid };
struct Check {
  Verdict verdict = Verdict::Ok;
  std::string why;
};

// Alignments the heuristic may assume (preference or actual pointers), A, B, C, D in bytes.
struct Alignments {
  uint32_t abcd[4] = {256, 256, 256, 256};
};

// Every type, layout, epilogue, scale and architecture rule that does not need the call's data pointers.
Check validate(Problem& p, const Alignments& align);
// The rules checked only when the GEMM runs: scale/amax/aux-type combinations (unless the switch moves them to the
// heuristic), required pointers, in-place layouts.
Check validate_at_run(const Problem& p);

// The algo the heuristic returns: a signature of the problem, the workspace it needs and the alignments it assumes.
struct AlgoInfo {
  uint64_t signature = 0;
  uint64_t workspace = 0;
  uint8_t align_log2[6] = {};  // A, B, C, D, bias, aux
  uint32_t variant = 0;
};
// The snapshot of a call's descriptors (Cdesc null means Ddesc) on the current device.
Problem make_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d);
// The alignment (a power of two, capped at 256) that holds for p and every batch entry `stride_bytes` apart.
uint32_t pointer_alignment(const void* p, int64_t stride_bytes);
uint64_t problem_signature(const Problem& p);
cublasLtMatmulAlgo_t encode_algo(const AlgoInfo& info);
bool decode_algo(const cublasLtMatmulAlgo_t& algo, AlgoInfo* info);
AlgoInfo make_algo(const Problem& p, const Alignments& align, uint64_t workspace, uint32_t variant);
int current_compute_capability();

// ---- Sizes and the arithmetic (cublaslt_compute.cpp) ----
int64_t dtype_size(cudaDataType_t t);
bool is_fp8_type(cudaDataType_t t);
// Element (r, c) of batch entry b, in elements from the layout's base pointer.
int64_t element_offset(const LayoutState& l, int64_t r, int64_t c, int64_t b);
// Bytes a layout spans over `batch` instances, counted from its base pointer (0 for an empty matrix).
uint64_t layout_bytes(const LayoutState& l, int64_t batch);
// The bytes a GEMM moves for the matrix: its elements (a column block of a wider matrix, ld > rows, is read without
// the columns beside it), or its span when that is smaller (a batch broadcast with stride 0 is read once).
uint64_t layout_traffic_bytes(const LayoutState& l, int64_t batch);
uint64_t scale_bytes(int32_t mode, int64_t outer, int64_t k);  // one operand's scale array (0: no scale)
uint64_t bias_bytes(const Problem& p);
uint64_t aux_bytes(const Problem& p);

struct MatmulArgs {
  double alpha = 1.0, beta = 0.0;  // host mode, read by scale type (an int32 scale is exact in a double)
  const void* alpha_dev = nullptr;  // device pointer mode: read when the GEMM runs
  const void* beta_dev = nullptr;
  const void *a = nullptr, *b = nullptr, *c = nullptr;
  void* d = nullptr;
};
// Computes D (and amax, aux, bias gradients) in float64 from device memory; runs inside run_on_stream's work.
void compute_matmul(const Problem& p, const MatmulArgs& args);
// The int8 row (cublaslt_compute_int8.cpp): exact integer GEMM, D stored as int32 with wrap-around.
void compute_matmul_int8(const Problem& p, const MatmulArgs& args);

}  // namespace mpt::cuda_emu
