// src/backend/cuda/check.cpp: status names and descriptions for the CUDA runtime, cuBLASLt, cuDNN and NCCL.
#include "backend/cuda/check.h"

#include <fmt/format.h>

namespace mpt::cuda_backend {
namespace {

const char* nccl_status_name(ncclResult_t status) {
  switch (status) {
    case ncclSuccess: return "ncclSuccess";
    case ncclUnhandledCudaError: return "ncclUnhandledCudaError";
    case ncclSystemError: return "ncclSystemError";
    case ncclInternalError: return "ncclInternalError";
    case ncclInvalidArgument: return "ncclInvalidArgument";
    case ncclInvalidUsage: return "ncclInvalidUsage";
    case ncclRemoteError: return "ncclRemoteError";
    case ncclInProgress: return "ncclInProgress";
    default: return "ncclUnknownResult";
  }
}

}  // namespace

std::string cuda_status_text(cudaError_t status) {
  return fmt::format("{} ({}): {}", cudaGetErrorName(status), static_cast<int>(status), cudaGetErrorString(status));
}

std::string cublas_status_text(cublasStatus_t status) {
  return fmt::format("{} ({}): {}", cublasLtGetStatusName(status), static_cast<int>(status),
                     cublasLtGetStatusString(status));
}

std::string cudnn_status_text(cudnnStatus_t status) {
  return fmt::format("{} ({})", cudnnGetErrorString(status), static_cast<int>(status));
}

std::string cudnn_failure_text(cudnnStatus_t status) {
  char detail[512] = {};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string text = cudnn_status_text(status);
  if (detail[0] != '\0') text += fmt::format(": {}", detail);
  return text;
}

std::string nccl_status_text(ncclResult_t status) {
  return fmt::format("{} ({}): {}", nccl_status_name(status), static_cast<int>(status), ncclGetErrorString(status));
}

void throw_status(const char* file, int line, const char* expr, const char* tag, const std::string& text) {
  ::mpt::detail::throw_error(file, line, expr, fmt::format("{} {}", tag, text));
}

void throw_cuda_status(const char* file, int line, const char* expr, cudaError_t status) {
  (void)cudaGetLastError();
  throw_status(file, line, expr, "[cuda]", cuda_status_text(status));
}

}  // namespace mpt::cuda_backend
