// src/backend/cuda/check.h: MPT_CUDA_CHECK and friends: CUDA, cuBLAS(Lt), cuDNN and NCCL statuses as mpt::Error.
// Included only by CUDA-backend code (it pulls in the toolkit headers); public headers never include it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn_graph.h>
#include <nccl.h>

#include <string>

#include "mpt/core/error.h"

namespace mpt::cuda_backend {

// "cudaErrorInvalidValue (1): invalid argument", "CUBLAS_STATUS_NOT_INITIALIZED (1): the library was not
// initialized", ...: the status name, its number and the library's description. None needs a GPU or driver.
std::string cuda_status_text(cudaError_t status);
std::string cublas_status_text(cublasStatus_t status);
std::string cudnn_status_text(cudnnStatus_t status);
std::string nccl_status_text(ncclResult_t status);
// cudnn_status_text plus cuDNN's thread-local description of the last failure (cudnnGetLastErrorString).
std::string cudnn_failure_text(cudnnStatus_t status);

// Throws mpt::Error "<tag> <status text> (check `<expr>` failed at file:line)".
[[noreturn]] void throw_status(const char* file, int line, const char* expr, const char* tag, const std::string& text);
// Also clears the runtime's last-error slot, so a later cudaGetLastError does not report this failure again.
[[noreturn]] void throw_cuda_status(const char* file, int line, const char* expr, cudaError_t status);

}  // namespace mpt::cuda_backend

#define MPT_CUDA_CHECK(expr)                                                                   \
  do {                                                                                         \
    const cudaError_t mpt_status_ = (expr);                                                    \
    if (mpt_status_ != cudaSuccess) [[unlikely]]                                               \
      ::mpt::cuda_backend::throw_cuda_status(__FILE__, __LINE__, #expr, mpt_status_);          \
  } while (0)

// After a kernel launch: reports launch-configuration errors (and sticky errors of earlier work).
#define MPT_CUDA_CHECK_LAST() MPT_CUDA_CHECK(cudaGetLastError())

#define MPT_CUBLAS_CHECK(expr)                                                                 \
  do {                                                                                         \
    const cublasStatus_t mpt_status_ = (expr);                                                 \
    if (mpt_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                                     \
      ::mpt::cuda_backend::throw_status(__FILE__, __LINE__, #expr, "[cublas]",                 \
                                        ::mpt::cuda_backend::cublas_status_text(mpt_status_)); \
  } while (0)

#define MPT_CUDNN_CHECK(expr)                                                                  \
  do {                                                                                         \
    const cudnnStatus_t mpt_status_ = (expr);                                                  \
    if (mpt_status_ != CUDNN_STATUS_SUCCESS) [[unlikely]]                                      \
      ::mpt::cuda_backend::throw_status(__FILE__, __LINE__, #expr, "[cudnn]",                  \
                                        ::mpt::cuda_backend::cudnn_failure_text(mpt_status_)); \
  } while (0)

#define MPT_NCCL_CHECK(expr)                                                                   \
  do {                                                                                         \
    const ncclResult_t mpt_status_ = (expr);                                                   \
    if (mpt_status_ != ncclSuccess) [[unlikely]]                                               \
      ::mpt::cuda_backend::throw_status(__FILE__, __LINE__, #expr, "[nccl]",                   \
                                        ::mpt::cuda_backend::nccl_status_text(mpt_status_));   \
  } while (0)
