// tests/support/cuda_emu/cudart_copy.cpp: the cudart double's copies and memsets in every direction, checked against the copy kind and tracked per stream.
#include <cstring>
#include <string>

#include "cudart_state.h"

namespace mpt::cuda_emu {

using namespace detail;

namespace {

// Access of one side of a copy: device memory is checked and tracked, host memory must not be device memory.
void check_host_side(State& s, const void* p, const char* api, const char* what) {
  if (const Allocation* a = find_allocation(s, p); a != nullptr && a->device >= 0) {
    throw MisuseError(std::string("[cuda_emu] ") + api + ": '" + what + "' is device memory (" + describe(*a) +
                      ") but the copy kind says host memory");
  }
}

cudaError_t copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream, const char* api,
                 bool synchronous) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return fail(cudaErrorInvalidValue);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (kind == cudaMemcpyDefault) {
    const Allocation* d = find_allocation(s, dst);
    const Allocation* sr = find_allocation(s, src);
    const bool dd = d != nullptr && d->device >= 0, sd = sr != nullptr && sr->device >= 0;
    kind = dd ? (sd ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
              : (sd ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  }
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDeviceToDevice) return fail(cudaErrorInvalidMemcpyDirection);
  const bool dst_dev = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
  const bool src_dev = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
  if (!dst_dev) check_host_side(s, dst, api, "dst");
  if (!src_dev) check_host_side(s, src, api, "src");
  wait_all(lock, st->waits, api);
  const OpId op = issue(s, *st);
  const Access acc[2] = {Access{dst_dev ? dst : nullptr, bytes, true, "dst"},
                         Access{src_dev ? src : nullptr, bytes, false, "src"}};
  check_and_record(s, *st, op, api, acc, /*cross_device=*/true);  // copies may cross devices (staged, UVA)
  lock.unlock();
  {
    const DeviceAccessScope access;
    const DeviceCodeMark device_code;
    std::memmove(dst, src, bytes);
  }
  // Returning after the copy completed (synchronous calls; copies into pageable host memory, R8.3) orders it, and
  // everything before it on the stream, before the host's next calls.
  if (synchronous || kind == cudaMemcpyDeviceToHost) {
    lock.lock();
    merge(host_clock(), st->full());
  }
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t bytes, cudaStream_t stream, const char* api) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (bytes == 0) return cudaSuccess;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  wait_all(lock, st->waits, api);
  const OpId op = issue(s, *st);
  const Access acc{dst, bytes, true, "devPtr"};
  check_and_record(s, *st, op, api, std::span(&acc, 1));
  lock.unlock();
  const DeviceAccessScope access;
  const DeviceCodeMark device_code;
  std::memset(dst, value, bytes);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, "cudaMemcpy", true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, "cudaMemcpyAsync", false);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  const int n = static_cast<int>(s.devices.size());
  if (dst_device < 0 || dst_device >= n || src_device < 0 || src_device >= n) return fail(cudaErrorInvalidDevice);
  if (bytes == 0) return cudaSuccess;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  const Allocation* d = find_allocation(s, dst);
  const Allocation* sr = find_allocation(s, src);
  if (d == nullptr || sr == nullptr || d->device != dst_device || sr->device != src_device) {
    throw MisuseError("[cuda_emu] cudaMemcpyPeerAsync: dst must be memory of cuda:" + std::to_string(dst_device) +
                      " and src memory of cuda:" + std::to_string(src_device));
  }
  wait_all(lock, st->waits, "cudaMemcpyPeerAsync");
  const OpId op = issue(s, *st);
  const Access acc[2] = {Access{dst, bytes, true, "dst"}, Access{src, bytes, false, "src"}};
  check_and_record(s, *st, op, "cudaMemcpyPeerAsync", acc, true);
  lock.unlock();
  const DeviceAccessScope access;
  const DeviceCodeMark device_code;
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  const cudaError_t e = fill(dst, value, bytes, nullptr, "cudaMemset");
  if (e == cudaSuccess) return cudaDeviceSynchronize();
  return e;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return fill(dst, value, bytes, stream, "cudaMemsetAsync");
}
}  // namespace mpt::cuda_emu
