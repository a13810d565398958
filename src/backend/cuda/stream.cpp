// src/backend/cuda/stream.cpp: CUDA streams, events and asynchronous copies behind mpt::Stream / mpt::Event.
#include <cstdio>

#include "backend/cuda/check.h"
#include "backend/cuda/device_guard.h"
#include "core/backend.h"
#include "core/device_errors.h"

namespace mpt::cuda_backend {
namespace {

cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }
cudaEvent_t as_event(void* e) { return static_cast<cudaEvent_t>(e); }

// Destructors cannot throw: a failure is reported, except at process exit when the runtime is gone.
void report_destroy_failure(const char* what, cudaError_t e) {
  if (e == cudaSuccess || e == cudaErrorCudartUnloading) return;
  (void)cudaGetLastError();
  std::fprintf(stderr, "[cuda] %s failed: %s\n", what, cuda_status_text(e).c_str());
}

}  // namespace

void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, int stream_device,
            void* stream) {
  DeviceGuard guard(stream_device);
  if (dst_device.is_cuda() && src_device.is_cuda() && dst_device != src_device) {
    MPT_CUDA_CHECK(
        cudaMemcpyPeerAsync(dst, dst_device.index(), src, src_device.index(), nbytes, as_stream(stream)));
    return;
  }
  const cudaMemcpyKind kind = src_device.is_cpu()   ? cudaMemcpyHostToDevice
                              : dst_device.is_cpu() ? cudaMemcpyDeviceToHost
                                                    : cudaMemcpyDeviceToDevice;
  MPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, as_stream(stream)));
}

void* legacy_stream() { return static_cast<void*>(cudaStreamLegacy); }

void make_current(int device) {
  int current = -1;
  MPT_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) MPT_CUDA_CHECK(cudaSetDevice(device));
}

void* stream_create(int device) {
  DeviceGuard guard(device);
  cudaStream_t s = nullptr;
  MPT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

void stream_destroy(void* stream) noexcept {
  report_destroy_failure("cudaStreamDestroy", cudaStreamDestroy(as_stream(stream)));
}

void stream_synchronize(int device, void* stream) {
  DeviceGuard guard(device);
  MPT_CUDA_CHECK(cudaStreamSynchronize(as_stream(stream)));
  // Every host synchronisation (Stream::synchronize, synchronous copies: item, to_vector, to(cpu)) surfaces the
  // errors kernels reported on this device (core/device_errors.h).
  ::mpt::detail::check_device_errors_after_sync(device, stream);
}

void* event_create(int device, bool timing) {
  DeviceGuard guard(device);
  cudaEvent_t e = nullptr;
  MPT_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
  return e;
}

void event_destroy(void* event) noexcept {
  report_destroy_failure("cudaEventDestroy", cudaEventDestroy(as_event(event)));
}

void event_record(int device, void* event, void* stream) {
  DeviceGuard guard(device);
  MPT_CUDA_CHECK(cudaEventRecord(as_event(event), as_stream(stream)));
}

void stream_wait_event(int device, void* stream, void* event) {
  DeviceGuard guard(device);
  MPT_CUDA_CHECK(cudaStreamWaitEvent(as_stream(stream), as_event(event), 0));
}

void event_synchronize(void* event) { MPT_CUDA_CHECK(cudaEventSynchronize(as_event(event))); }

bool event_query(void* event) {
  const cudaError_t e = cudaEventQuery(as_event(event));
  if (e == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  MPT_CUDA_CHECK(e);
  return true;
}

float event_elapsed_ms(void* start, void* end) {
  float ms = 0;
  MPT_CUDA_CHECK(cudaEventElapsedTime(&ms, as_event(start), as_event(end)));
  return ms;
}

}  // namespace mpt::cuda_backend
