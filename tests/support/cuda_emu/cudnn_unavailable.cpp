// tests/support/cuda_emu/cudnn_unavailable.cpp: emulation builds: cuDNN is not emulated; every call says so, so attention takes its fallback.
#include <cstdio>
#include <cstring>

#include <cudnn_graph.h>

namespace mpt::cuda_emu {
namespace {
constexpr const char* kWhy = "cuDNN is not emulated: the CUDA emulation build has no cuDNN (its paths run only on a GPU)";
}  // namespace

size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED_CUDART: return "CUDNN_STATUS_EXECUTION_FAILED_CUDART";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message != nullptr && max_size > 0) std::snprintf(message, max_size, "%s", kWhy);
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle != nullptr) *handle = nullptr;
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnSetStream(cudnnHandle_t, cudaStream_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnGetStream(cudnnHandle_t, cudaStream_t*) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t, cudnnBackendDescriptor_t* d) {
  if (d != nullptr) *d = nullptr;
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t) { return CUDNN_STATUS_SUCCESS; }
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t) { return CUDNN_STATUS_NOT_SUPPORTED; }
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, const void*) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t, cudnnBackendAttributeName_t,
                                       cudnnBackendAttributeType_t, int64_t, int64_t* count, void*) {
  if (count != nullptr) *count = 0;
  return CUDNN_STATUS_NOT_SUPPORTED;
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t, cudnnBackendDescriptor_t, cudnnBackendDescriptor_t) {
  return CUDNN_STATUS_NOT_SUPPORTED;
}

}  // namespace mpt::cuda_emu
