// src/backend/cuda/graph.cpp: CUDA graph capture of a stream's work, instantiation and replay (mpt::CudaGraph).
#include "backend/cuda/check.h"
#include "backend/cuda/device_guard.h"
#include "core/backend.h"

namespace mpt::cuda_backend {

bool stream_capturing(void* stream) {
  if (stream == nullptr || stream == static_cast<void*>(cudaStreamLegacy)) return false;
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  MPT_CUDA_CHECK(cudaStreamIsCapturing(static_cast<cudaStream_t>(stream), &status));
  return status != cudaStreamCaptureStatusNone;
}

void capture_begin(int device, void* stream) {
  DeviceGuard guard(device);
  // Global mode: any unsafe call (a synchronisation, cudaMalloc) from any thread while the step is captured fails
  // loudly instead of silently leaving the graph.
  MPT_CUDA_CHECK(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeGlobal));
}

void* capture_end(int device, void* stream) {
  DeviceGuard guard(device);
  cudaGraph_t graph = nullptr;
  MPT_CUDA_CHECK(cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
  MPT_CUDA_CHECK(e);
  return exec;
}

void graph_launch(int device, void* exec, void* stream) {
  DeviceGuard guard(device);
  MPT_CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)));
}

void graph_destroy(void* exec) noexcept {
  if (exec != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

}  // namespace mpt::cuda_backend
