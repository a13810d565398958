// kernels/cuda/lib/gemm_cublaslt.cpp: the cuBLASLt GEMM: validation, per-device handles, the plan cache and the
// matmul call; host C++ (GPU-only behaviour, verified by the cuBLASLt CPU double and on real GPUs).
#include "kernels/cuda/lib/gemm_cublaslt.h"

#include <array>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace mpt::kernels::cuda {

static_assert(CUBLASLT_EPILOGUE_GELU_BIAS == 36 && CUBLASLT_EPILOGUE_GELU_AUX == 160 &&
              CUBLASLT_EPILOGUE_GELU_AUX_BIAS == 164 && CUBLASLT_EPILOGUE_DGELU == 192 &&
              CUBLASLT_EPILOGUE_DGELU_BGRAD == 208 && CUBLASLT_EPILOGUE_BGRADA == 256 &&
              CUBLASLT_EPILOGUE_BGRADB == 512 && CUBLASLT_EPILOGUE_BIAS == 4 && CUBLASLT_EPILOGUE_GELU == 32 &&
              CUBLASLT_EPILOGUE_DEFAULT == 1,
              "gemm_layout.h's lt_epilogue_value disagrees with cublasLt.h");
static_assert(CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F == 0 && CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F == 4 &&
              CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F == 5,
              "gemm_layout.h's lt_scale_mode_value disagrees with cublasLt.h");

namespace {

#define MPT_LT_TRY(expr)                                                                   \
  do {                                                                                     \
    const cublasStatus_t mpt_lt_status_ = (expr);                                          \
    if (mpt_lt_status_ != CUBLAS_STATUS_SUCCESS)                                           \
      return LtResult{LtCode::CublasError, mpt_lt_status_, #expr};                         \
  } while (0)

LtResult invalid(const char* why) { return LtResult{LtCode::InvalidArgument, CUBLAS_STATUS_INVALID_VALUE, why}; }

bool is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }
bool is_half(cudaDataType_t t) { return t == CUDA_R_16F || t == CUDA_R_16BF; }
bool is_int(cudaDataType_t t) { return t == CUDA_R_8I || t == CUDA_R_32I; }
bool is_int8_gemm(const LtGemmParams& p) { return is_int(p.a_type) || is_int(p.b_type) || is_int(p.c_type); }
bool is_block(const LtScale& s) { return s.mode != GemmScaleMode::PerTensor; }

int64_t dtype_bytes(cudaDataType_t t) { return is_fp8(t) || t == CUDA_R_8I ? 1 : is_half(t) ? 2 : 4; }

// An int32 alpha/beta (INT8 GEMMs take integer scalars).
bool is_int32_value(float v) { return v == static_cast<float>(static_cast<int32_t>(v)) && v >= -2147483648.0f && v < 2147483648.0f; }

// The alignment in bytes (a power of two, at most 256) that holds for ptr and for every batch entry after it.
uint32_t alignment(const void* ptr, int64_t stride_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(ptr) | static_cast<uint64_t>(stride_bytes) | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// The bias (and FP8-output C) type: as given, else c_type, except that FP8 inputs with an F32 or FP8 output
// take BF16 (the only bias type R2.3 allows there).
cudaDataType_t bias_type_of(const LtGemmParams& p) {
  if (p.bias_type) return *p.bias_type;
  return is_fp8(p.a_type) && (p.c_type == CUDA_R_32F || is_fp8(p.c_type)) ? CUDA_R_16BF : p.c_type;
}

// Block-scaled batches run one call per batch entry (cuBLASLt 13.1 has no per-batch scale stride).
bool per_entry_calls(const LtGemmParams& p) { return is_block(p.scale_a) && p.shape.batch > 1; }

// The non-K row count of our A and B (the "rows" of their scales).
int64_t scale_rows_a(const GemmShape& s) { return s.m; }
int64_t scale_rows_b(const GemmShape& s) { return s.n; }

LtResult validate_scales(const LtGemmParams& p) {
  const GemmShape& s = p.shape;
  const bool fp8 = is_fp8(p.a_type);
  if (!fp8 && (is_block(p.scale_a) || is_block(p.scale_b) || p.scale_a.ptr || p.scale_b.ptr))
    return invalid("operand scales apply to FP8 operands only");
  if (!is_fp8(p.c_type) && (p.out_scale || p.out_amax))
    return invalid("out_scale and out_amax apply to an FP8 output only (a D scale on a non-FP8 D is an error)");
  if (!is_block(p.scale_a) && !is_block(p.scale_b)) return {};
  if (is_block(p.scale_a) != is_block(p.scale_b))
    return invalid("block scaling needs both operands block-scaled (1x128 or 128x128 on each)");
  if (p.scale_a.mode == GemmScaleMode::Block128x128 && p.scale_b.mode == GemmScaleMode::Block128x128)
    return invalid("128x128 scales on both operands are not supported by cuBLASLt (BLK x BLK, R4.3)");
  if (is_fp8(p.c_type)) return invalid("an FP8 output is not allowed with block scaling (R2.3)");
  if (!p.scale_a.ptr || !p.scale_b.ptr) return invalid("block scaling needs both scale arrays");
  const bool batched = s.batch > 1;
  const int64_t step_a = s.stride_a != 0 && batched ? lt_scale_count(p.scale_a.mode, scale_rows_a(s), s.k) * 4 : 0;
  const int64_t step_b = s.stride_b != 0 && batched ? lt_scale_count(p.scale_b.mode, scale_rows_b(s), s.k) * 4 : 0;
  if (alignment(p.scale_a.ptr, step_a) < 16 || alignment(p.scale_b.ptr, step_b) < 16)
    return invalid("block scale arrays (and each batch entry's array) must be 16-byte aligned");
  return {};
}

LtResult validate_types(const LtGemmParams& p) {
  const cudaDataType_t a = p.a_type, b = p.b_type, c = p.c_type;
  if (is_int8_gemm(p)) {
    if (a != CUDA_R_8I || b != CUDA_R_8I || c != CUDA_R_32I) return invalid("INT8 GEMMs take i8 operands and an i32 output");
    if (!is_int32_value(p.alpha) || !is_int32_value(p.beta))
      return invalid("INT8 GEMMs take integer alpha and beta (scale type CUDA_R_32I)");
    return {};
  }
  if (is_fp8(a) != is_fp8(b)) return invalid("FP8 and non-FP8 operands cannot be mixed");
  if (!is_fp8(a)) {
    if (a != b || !(a == CUDA_R_32F || is_half(a))) return invalid("operands must be F32, F16 or BF16 alike");
    if (!(c == a || (is_half(a) && c == CUDA_R_32F))) return invalid("output must be the inputs' type, or F32");
    return {};
  }
  if (a == CUDA_R_8F_E5M2 && b == CUDA_R_8F_E5M2) return invalid("E5M2 x E5M2 is not supported (R2.3)");
  const bool mixed = a != b;
  if (!(c == CUDA_R_32F || is_half(c) || c == CUDA_R_8F_E4M3 || (mixed && c == CUDA_R_8F_E5M2)))
    return invalid("FP8 output must be F32, BF16, F16 or E4M3 (E5M2 only for mixed E4M3/E5M2 inputs)");
  if (is_fp8(c) && p.beta != 0.0f) return invalid("an FP8 output cannot accumulate (beta must be 0)");
  return {};
}

LtResult validate_epilogue(const LtGemmParams& p) {
  const GemmEpilogue e = p.epilogue;
  if (epilogue_uses_bias(e) && p.bias == nullptr) return invalid("the epilogue needs a bias vector");
  if (epilogue_uses_aux(e) && (p.aux == nullptr || p.aux_ld < p.shape.n || p.aux_ld % 8 != 0))
    return invalid("the epilogue needs aux with aux_ld a multiple of 8 and >= n");
  if (e != GemmEpilogue::None && e != GemmEpilogue::Bias && p.shape.batch > 1)
    return invalid("GELU and bias-gradient epilogues need batch == 1");
  return {};
}

// Leading dimension >= the stored row length (row-major), at least 1.
bool ld_ok(int64_t ld, int64_t row_length) { return ld >= (row_length > 1 ? row_length : 1); }

}  // namespace

size_t recommended_workspace_bytes(int cc_major) { return cc_major >= 9 ? (size_t{32} << 20) : (size_t{4} << 20); }

cudaDataType_t lt_scale_type(const LtGemmParams& p) { return is_int8_gemm(p) ? CUDA_R_32I : CUDA_R_32F; }

cublasComputeType_t lt_compute_type(const LtGemmParams& p) {
  if (is_int8_gemm(p)) return CUBLAS_COMPUTE_32I;
  const bool all_f32 = p.a_type == CUDA_R_32F && p.b_type == CUDA_R_32F && p.c_type == CUDA_R_32F;
  return all_f32 && p.allow_tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

LtResult validate_cublaslt_gemm(const LtGemmParams& p, const void* a, const void* b, const void* c,
                                const LtWorkspace& ws) {
  const GemmShape& s = p.shape;
  if (s.m < 0 || s.n < 0 || s.k < 0 || s.batch < 1 || s.batch > INT32_MAX)
    return invalid("sizes must be >= 0 and 1 <= batch < 2^31");
  if (!ld_ok(s.lda, s.trans_a ? s.m : s.k) || !ld_ok(s.ldb, s.trans_b ? s.k : s.n) || !ld_ok(s.ldc, s.n))
    return invalid("a leading dimension is smaller than its matrix's stored row length");
  if (s.stride_a < 0 || s.stride_b < 0 || s.stride_c < 0) return invalid("batch strides must be >= 0");
  if (s.batch > 1 && s.m > 0 && s.n > 0 && s.stride_c < (s.m - 1) * s.ldc + s.n)
    return invalid("C needs its own matrix per batch entry (stride_c too small)");
  if (LtResult r = validate_types(p); !r.ok()) return r;
  if ((is_fp8(p.a_type) || is_int8_gemm(p)) && !is_fp8_tn(s))
    return LtResult{LtCode::NeedsTnLayout, CUBLAS_STATUS_NOT_SUPPORTED,
                    "FP8 and INT8 operands need the TN layout: A stored m x k and B stored n x k (trans_a = false, "
                    "trans_b = true); pass transposed copies"};
  if (is_int8_gemm(p)) {
    if (!int8_gemm_shape_ok(s))
      return invalid("INT8 GEMMs (IMMA, regular ordering) need n, k and every leading dimension multiples of 4");
    if (p.epilogue != GemmEpilogue::None) return invalid("INT8 GEMMs take no epilogue");
    const int64_t step = s.batch > 1 ? 1 : 0;
    if (alignment(a, step * s.stride_a) < 4 || alignment(b, step * s.stride_b) < 4 || alignment(c, step * s.stride_c * 4) < 4)
      return invalid("INT8 GEMMs need 4-byte aligned pointers (and batch strides)");
  }
  if (LtResult r = validate_scales(p); !r.ok()) return r;
  if (LtResult r = validate_epilogue(p); !r.ok()) return r;
  if (ws.bytes > 0 && (ws.ptr == nullptr || reinterpret_cast<uintptr_t>(ws.ptr) % 256 != 0))
    return invalid("the workspace must be 256-byte aligned");
  if (s.m == 0 || s.n == 0) return {};
  if (s.k == 0) return invalid("k == 0 is not supported (C = beta * C needs no GEMM)");
  if (a == nullptr || b == nullptr || c == nullptr) return invalid("a, b and c must not be null");
  return {};
}

namespace {

struct DescDeleter {
  void operator()(cublasLtMatmulDescOpaque_t* d) const { (void)cublasLtMatmulDescDestroy(d); }
};
struct LayoutDeleter {
  void operator()(cublasLtMatrixLayoutOpaque_t* l) const { (void)cublasLtMatrixLayoutDestroy(l); }
};
struct PrefDeleter {
  void operator()(cublasLtMatmulPreferenceOpaque_t* p) const { (void)cublasLtMatmulPreferenceDestroy(p); }
};
// Destroy statuses are dropped: a destructor has no one to report to, and destroying a valid descriptor cannot fail.
using Desc = std::unique_ptr<cublasLtMatmulDescOpaque_t, DescDeleter>;
using Layout = std::unique_ptr<cublasLtMatrixLayoutOpaque_t, LayoutDeleter>;
using Pref = std::unique_ptr<cublasLtMatmulPreferenceOpaque_t, PrefDeleter>;

template <class T>
cublasStatus_t set(cublasLtMatmulDesc_t d, cublasLtMatmulDescAttributes_t attr, const T& v) {
  return cublasLtMatmulDescSetAttribute(d, attr, &v, sizeof v);
}
template <class T>
cublasStatus_t set(cublasLtMatrixLayout_t l, cublasLtMatrixLayoutAttribute_t attr, const T& v) {
  return cublasLtMatrixLayoutSetAttribute(l, attr, &v, sizeof v);
}
template <class T>
cublasStatus_t set(cublasLtMatmulPreference_t pr, cublasLtMatmulPreferenceAttributes_t attr, const T& v) {
  return cublasLtMatmulPreferenceSetAttribute(pr, attr, &v, sizeof v);
}

// Handles live for the whole process (destroying them at exit can race the driver's teardown).
LtResult handle_for(int device, cublasLtHandle_t* out) {
  static std::mutex mutex;
  static auto* handles = new std::vector<cublasLtHandle_t>();
  if (device < 0) return invalid("negative device index");
  std::lock_guard<std::mutex> lock(mutex);
  if (handles->size() <= static_cast<size_t>(device)) handles->resize(device + 1, nullptr);
  cublasLtHandle_t& h = (*handles)[device];
  if (h == nullptr) {
    cublasLtHandle_t created = nullptr;
    MPT_LT_TRY(cublasLtCreate(&created));  // NOT_INITIALIZED without a driver; retried on the next call
    h = created;
  }
  *out = h;
  return {};
}

// One call's pointers (per batch entry when block-scaled batches are split).
struct CallPointers {
  const void *a, *b;
  void* c;
  const float *scale_a, *scale_b;
};

// A cached plan. The descriptor is shared by threads; the per-call pointer attributes are set and consumed under
// `mutex` (cublasLtMatmul reads the descriptor before it returns, R6.4).
struct Plan {
  Desc desc;
  Layout a, b, c, d;  // cuBLASLt's A (our B), B (our A), C (separate only for an FP8 output), D
  cublasLtMatmulAlgo_t algo{};
  std::mutex mutex;
};

LtResult make_layout(Layout* out, cudaDataType_t type, const LtMatrix& m, int64_t batch) {
  cublasLtMatrixLayout_t l = nullptr;
  MPT_LT_TRY(cublasLtMatrixLayoutCreate(&l, type, static_cast<uint64_t>(m.rows), static_cast<uint64_t>(m.cols), m.ld));
  out->reset(l);
  if (batch > 1) {
    MPT_LT_TRY(set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, static_cast<int32_t>(batch)));
    MPT_LT_TRY(set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, m.batch_stride));
  }
  return {};
}

// Sets the pointers that change per call. Our A's scale is cuBLASLt's B scale and vice versa.
LtResult set_pointers(cublasLtMatmulDesc_t d, const LtGemmParams& p, const CallPointers& c) {
  if (epilogue_uses_bias(p.epilogue)) MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_BIAS_POINTER, p.bias));
  if (epilogue_uses_aux(p.epilogue)) MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, p.aux));
  if (!is_fp8(p.a_type)) return {};
  MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, static_cast<const void*>(c.scale_b)));
  MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, static_cast<const void*>(c.scale_a)));
  if (is_fp8(p.c_type)) {
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, static_cast<const void*>(p.out_scale)));
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, static_cast<void*>(p.out_amax)));
  }
  return {};
}

LtResult build_descriptor(Plan& plan, const LtGemmParams& p, const LtProblem& lp) {
  cublasLtMatmulDesc_t d = nullptr;
  MPT_LT_TRY(cublasLtMatmulDescCreate(&d, lt_compute_type(p), lt_scale_type(p)));
  plan.desc.reset(d);
  MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(lp.a.op_t ? CUBLAS_OP_T : CUBLAS_OP_N)));
  MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(lp.b.op_t ? CUBLAS_OP_T : CUBLAS_OP_N)));
  MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_EPILOGUE, lt_epilogue_value(p.epilogue)));
  if (epilogue_uses_bias(p.epilogue))
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(bias_type_of(p))));
  if (epilogue_uses_aux(p.epilogue)) {
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, p.aux_ld));
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, static_cast<int32_t>(p.aux_type.value_or(p.c_type))));
  }
  if (is_fp8(p.a_type)) {
    MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_FAST_ACCUM, static_cast<int8_t>(p.fp8_fast_accum ? 1 : 0)));
    if (is_block(p.scale_a)) {  // cuBLASLt's A is our B
      MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, lt_scale_mode_value(p.scale_b.mode)));
      MPT_LT_TRY(set(d, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, lt_scale_mode_value(p.scale_a.mode)));
    }
  }
  return {};
}

LtResult build_plan(Plan& plan, cublasLtHandle_t handle, const LtGemmParams& p, const LtProblem& lp,
                    const CallPointers& first, const LtWorkspace& ws, const uint32_t align[4]) {
  if (LtResult r = build_descriptor(plan, p, lp); !r.ok()) return r;
  if (LtResult r = make_layout(&plan.a, p.b_type, lp.a, lp.batch); !r.ok()) return r;
  if (LtResult r = make_layout(&plan.b, p.a_type, lp.b, lp.batch); !r.ok()) return r;
  if (LtResult r = make_layout(&plan.d, p.c_type, lp.d, lp.batch); !r.ok()) return r;
  if (is_fp8(p.c_type))  // C must then have the bias type (R2.3); it is never read (beta == 0)
    if (LtResult r = make_layout(&plan.c, bias_type_of(p), lp.d, lp.batch); !r.ok()) return r;
  // The heuristic reads the bias and aux pointer values for their alignment (R5): set them first.
  if (LtResult r = set_pointers(plan.desc.get(), p, first); !r.ok()) return r;

  cublasLtMatmulPreference_t pr = nullptr;
  MPT_LT_TRY(cublasLtMatmulPreferenceCreate(&pr));
  const Pref pref(pr);
  MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, static_cast<uint64_t>(ws.bytes)));
  MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, align[0]));
  MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, align[1]));
  MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, align[2]));
  MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, align[3]));
  if (p.deterministic) {  // no split-K reduction of any kind
    MPT_LT_TRY(set(pr, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE)));
  }

  std::array<cublasLtMatmulHeuristicResult_t, 4> results{};
  int count = 0;
  const cublasLtMatrixLayout_t c_layout = plan.c ? plan.c.get() : plan.d.get();
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle, plan.desc.get(), plan.a.get(), plan.b.get(),
                                                           c_layout, plan.d.get(), pref.get(),
                                                           static_cast<int>(results.size()), results.data(), &count);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE)
    return LtResult{LtCode::NoAlgorithm, st, "cublasLtMatmulAlgoGetHeuristic refused the problem"};
  MPT_LT_TRY(st);
  for (int i = 0; i < count && i < static_cast<int>(results.size()); ++i)
    if (results[i].state == CUBLAS_STATUS_SUCCESS && results[i].workspaceSize <= ws.bytes) {
      plan.algo = results[i].algo;
      return {};
    }
  return LtResult{LtCode::NoAlgorithm, CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic returned no algorithm"};
}

constexpr size_t kKeySize = 32;
using PlanKey = std::array<int64_t, kKeySize>;

struct KeyHash {
  size_t operator()(const PlanKey& k) const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the words
    for (int64_t v : k) h = (h ^ static_cast<uint64_t>(v)) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

PlanKey plan_key(int device, const LtGemmParams& p, const LtProblem& lp, const uint32_t align[4],
                 const LtWorkspace& ws) {
  const GemmShape& s = p.shape;
  const int64_t present = (p.scale_a.ptr ? 1 : 0) | (p.scale_b.ptr ? 2 : 0) | (p.out_scale ? 4 : 0) |
                          (p.out_amax ? 8 : 0) | (p.fp8_fast_accum ? 16 : 0);
  const bool batched = lp.batch > 1;
  return PlanKey{device, p.a_type, p.b_type, p.c_type, lt_compute_type(p), s.m, s.n, s.k, s.trans_a, s.trans_b,
                 s.lda, s.ldb, s.ldc, lp.batch, batched ? s.stride_a : 0, batched ? s.stride_b : 0,
                 batched ? s.stride_c : 0, static_cast<int64_t>(p.epilogue), bias_type_of(p),
                 p.aux_type.value_or(p.c_type), epilogue_uses_aux(p.epilogue) ? p.aux_ld : 0,
                 static_cast<int64_t>(p.scale_a.mode), static_cast<int64_t>(p.scale_b.mode), present, align[0],
                 align[1], align[2], align[3], alignment(epilogue_uses_bias(p.epilogue) ? p.bias : nullptr, 0),
                 alignment(epilogue_uses_aux(p.epilogue) ? p.aux : nullptr, 0),
                 static_cast<int64_t>(ws.bytes), p.deterministic ? 1 : 0};
}

class PlanCache {
 public:
  std::shared_ptr<Plan> find(const PlanKey& key) {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto it = index_.find(key);
    if (it == index_.end()) {
      ++misses_;
      return nullptr;
    }
    ++hits_;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  // Returns the cached plan for `key`: `plan`, or the one another thread inserted first.
  std::shared_ptr<Plan> insert(const PlanKey& key, std::shared_ptr<Plan> plan) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = index_.find(key); it != index_.end()) return it->second->second;
    if (capacity_ == 0) return plan;
    lru_.emplace_front(key, std::move(plan));
    index_.emplace(key, lru_.begin());
    evict();
    return lru_.front().second;
  }
  LtPlanCacheStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    return {hits_, misses_, static_cast<int64_t>(lru_.size()), static_cast<int64_t>(capacity_)};
  }
  void set_capacity(size_t capacity) {
    std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = capacity;
    evict();
  }

 private:
  void evict() {  // plans in use elsewhere survive through their shared_ptr
    while (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
  }
  std::mutex mutex_;
  std::list<std::pair<PlanKey, std::shared_ptr<Plan>>> lru_;
  std::unordered_map<PlanKey, decltype(lru_)::iterator, KeyHash> index_;
  size_t capacity_ = 256;
  int64_t hits_ = 0, misses_ = 0;
};

PlanCache& plan_cache() {
  static auto* cache = new PlanCache();  // never destroyed: descriptors must not outlive the library at exit
  return *cache;
}

CallPointers entry_pointers(const LtGemmParams& p, const void* a, const void* b, void* c, int64_t i) {
  const GemmShape& s = p.shape;
  const auto* ab = static_cast<const char*>(a);
  const auto* bb = static_cast<const char*>(b);
  CallPointers e{ab + i * s.stride_a * dtype_bytes(p.a_type), bb + i * s.stride_b * dtype_bytes(p.b_type),
                 static_cast<char*>(c) + i * s.stride_c * dtype_bytes(p.c_type), p.scale_a.ptr, p.scale_b.ptr};
  if (is_block(p.scale_a)) {
    if (s.stride_a != 0) e.scale_a += i * lt_scale_count(p.scale_a.mode, scale_rows_a(s), s.k);
    if (s.stride_b != 0) e.scale_b += i * lt_scale_count(p.scale_b.mode, scale_rows_b(s), s.k);
  }
  return e;
}

}  // namespace

LtResult cublaslt_gemm(int device, const LtGemmParams& p, const void* a, const void* b, void* c,
                       const LtWorkspace& ws, cudaStream_t stream) {
  if (LtResult r = validate_cublaslt_gemm(p, a, b, c, ws); !r.ok()) return r;
  const GemmShape& s = p.shape;
  if (s.m == 0 || s.n == 0) return {};
  cublasLtHandle_t handle = nullptr;
  if (LtResult r = handle_for(device, &handle); !r.ok()) return r;

  const bool split = per_entry_calls(p);
  GemmShape call_shape = s;
  if (split) call_shape.batch = 1;
  const LtProblem lp = to_column_major(call_shape);
  // Every batch entry's pointers must meet the alignment the plan is chosen for. Order: cuBLASLt's A, B, C, D.
  const int64_t steps = s.batch > 1 ? 1 : 0;
  const uint32_t align[4] = {alignment(b, steps * s.stride_b * dtype_bytes(p.b_type)),
                             alignment(a, steps * s.stride_a * dtype_bytes(p.a_type)),
                             alignment(c, steps * s.stride_c * dtype_bytes(p.c_type)),
                             alignment(c, steps * s.stride_c * dtype_bytes(p.c_type))};
  const CallPointers first = entry_pointers(p, a, b, c, 0);
  const PlanKey key = plan_key(device, p, lp, align, ws);

  std::shared_ptr<Plan> plan = plan_cache().find(key);
  if (!plan) {
    auto fresh = std::make_shared<Plan>();
    if (LtResult r = build_plan(*fresh, handle, p, lp, first, ws, align); !r.ok()) return r;
    plan = plan_cache().insert(key, std::move(fresh));
  }

  const float alpha = p.alpha, beta = p.beta;
  const int32_t alpha_i = static_cast<int32_t>(p.alpha), beta_i = static_cast<int32_t>(p.beta);
  const bool int8 = is_int8_gemm(p);
  const void* alpha_p = int8 ? static_cast<const void*>(&alpha_i) : &alpha;
  const void* beta_p = int8 ? static_cast<const void*>(&beta_i) : &beta;
  const cublasLtMatrixLayout_t c_layout = plan->c ? plan->c.get() : plan->d.get();
  std::lock_guard<std::mutex> lock(plan->mutex);
  for (int64_t i = 0; i < (split ? s.batch : 1); ++i) {
    const CallPointers e = entry_pointers(p, a, b, c, i);
    if (LtResult r = set_pointers(plan->desc.get(), p, e); !r.ok()) return r;
    const void* c_in = plan->c ? nullptr : e.c;  // an FP8 output never reads C (beta == 0)
    MPT_LT_TRY(cublasLtMatmul(handle, plan->desc.get(), alpha_p, e.b, plan->a.get(), e.a, plan->b.get(), beta_p, c_in,
                              c_layout, e.c, plan->d.get(), &plan->algo, ws.ptr, ws.bytes, stream));
  }
  return {};
}

LtPlanCacheStats cublaslt_plan_cache_stats() { return plan_cache().stats(); }
void set_cublaslt_plan_cache_capacity(size_t capacity) { plan_cache().set_capacity(capacity); }

}  // namespace mpt::kernels::cuda
