// kernels/cuda/lib/gemm_cublaslt_describe.cpp: the error text of the cuBLASLt GEMM (problem, rule or call, status).
#include <string>

#include "kernels/cuda/lib/gemm_cublaslt.h"

namespace mpt::kernels::cuda {

const char* lt_dtype_name(cudaDataType_t t) {
  switch (t) {
    case CUDA_R_32F: return "f32";
    case CUDA_R_16F: return "f16";
    case CUDA_R_16BF: return "bf16";
    case CUDA_R_8F_E4M3: return "f8e4m3";
    case CUDA_R_8F_E5M2: return "f8e5m2";
    case CUDA_R_64F: return "f64";
    case CUDA_R_8I: return "i8";
    case CUDA_R_32I: return "i32";
    default: return "unsupported cudaDataType_t";
  }
}

namespace {

bool is_fp8(cudaDataType_t t) { return t == CUDA_R_8F_E4M3 || t == CUDA_R_8F_E5M2; }

const char* epilogue_name(GemmEpilogue e) {
  constexpr const char* kNames[] = {"none",     "bias",        "gelu",   "gelu+bias", "gelu+aux",
                                    "gelu+aux+bias", "dgelu", "dgelu+bgrad", "bgrad_a", "bgrad_b"};
  return kNames[static_cast<int>(e)];
}

const char* scale_name(GemmScaleMode m) {
  return m == GemmScaleMode::Block1x128 ? "1x128" : m == GemmScaleMode::Block128x128 ? "128x128" : "per-tensor";
}

const char* code_text(LtCode c) {
  switch (c) {
    case LtCode::Ok: return "ok";
    case LtCode::InvalidArgument: return "invalid cuBLASLt GEMM arguments";
    case LtCode::NeedsTnLayout: return "FP8/INT8 GEMM layout unsupported";
    case LtCode::NoAlgorithm: return "cuBLASLt has no algorithm";
    case LtCode::CublasError: return "cuBLASLt call failed";
  }
  return "?";
}

}  // namespace

std::string describe(const LtResult& r, const LtGemmParams& p) {
  const GemmShape& s = p.shape;
  std::string out = std::string(code_text(r.code)) + " for m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) +
                    " k=" + std::to_string(s.k) + " (row-major" + (s.trans_a ? ", trans_a" : "") +
                    (s.trans_b ? ", trans_b" : "") + ", lda=" + std::to_string(s.lda) + " ldb=" + std::to_string(s.ldb) +
                    " ldc=" + std::to_string(s.ldc) + ", batch=" + std::to_string(s.batch) + "), a " +
                    lt_dtype_name(p.a_type) + ", b " + lt_dtype_name(p.b_type) + ", c " + lt_dtype_name(p.c_type) +
                    (lt_compute_type(p) == CUBLAS_COMPUTE_32F_FAST_TF32 ? " (tf32)" : "") + ", epilogue " +
                    epilogue_name(p.epilogue);
  if (is_fp8(p.a_type))
    out += std::string(", scales a ") + scale_name(p.scale_a.mode) + " b " + scale_name(p.scale_b.mode);
  out += std::string(": ") + r.detail;
  if (r.code == LtCode::NoAlgorithm || r.code == LtCode::CublasError)
    out += std::string(" (") + cublasLtGetStatusName(r.status) + ": " + cublasLtGetStatusString(r.status) + ")";
  if (r.code == LtCode::NoAlgorithm && is_fp8(p.a_type))
    out += "; FP8 needs compute capability 8.9+, 16-byte aligned pointers, leading dimensions that are multiples of "
           "16 bytes and (observed) m and n multiples of 16; block scaling needs sm_90 and m, n multiples of 4";
  if (r.code == LtCode::NoAlgorithm && p.a_type == CUDA_R_8I)
    out += "; INT8 needs IMMA tensor cores (compute capability 7.5+) and the TN layout";
  return out;
}

}  // namespace mpt::kernels::cuda
