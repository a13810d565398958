// tests/support/cuda_emu/cudart_copy.cpp: the cudart double's copies and memsets in every direction, checked against the copy kind, tracked per stream and counted.
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

bool pinned(State& s, const void* p) {
  const Allocation* a = find_allocation(s, p);
  return a != nullptr && a->device == -1;
}

// Counts one copy that ran; host_waited: the call returned only after the copy (and its stream's earlier work).
void count_copy(cudaMemcpyKind kind, size_t bytes, bool pageable, bool host_waited) {
  if (kind == cudaMemcpyHostToDevice) {
    count(&Counters::h2d);
    count(&Counters::h2d_bytes, bytes);
  } else if (kind == cudaMemcpyDeviceToHost) {
    count(&Counters::d2h);
    count(&Counters::d2h_bytes, bytes);
  } else if (kind == cudaMemcpyDeviceToDevice) {
    count(&Counters::d2d);
    count(&Counters::d2d_bytes, bytes);
  }
  if (pageable) count(&Counters::pageable_copies);
  if (host_waited) count(&Counters::sync_copies);
}

// Runs a copy already issued and checked on st (lock held on entry, released for the copy itself). A copy the host
// waits for orders it, and everything before it on the stream, before the host's next calls.
void run_copy(std::unique_lock<std::mutex>& lock, StreamState& st, void* dst, const void* src, size_t bytes,
              cudaMemcpyKind kind, bool pageable, bool host_waits) {
  lock.unlock();
  {
    const DeviceAccessScope access;
    const DeviceCodeMark device_code;
    if (!(record_only() && kind == cudaMemcpyDeviceToDevice && bytes > kRecordOnlyCopyBytes)) std::memmove(dst, src, bytes);
  }
  if (host_waits) {
    lock.lock();
    host_learns(state(), st.full(), "a blocking copy");
  }
  count_copy(kind, bytes, pageable, host_waits);
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
  const bool pageable = dst_dev != src_dev && !pinned(s, dst_dev ? src : dst);
  // The call returns after the copy completed: synchronous calls, and copies into pageable host memory (R8.3).
  const bool host_waits = synchronous || (kind == cudaMemcpyDeviceToHost && pageable);
  if (st->capture && pageable)
    return refuse_in_capture(s, st, cudaErrorStreamCaptureUnsupported,
                             std::string(api) + ": a copy to or from pageable host memory cannot be captured; use "
                                                "pinned memory (cudaMallocHost)");
  if (synchronous) {
    if (const cudaError_t e = refuse_synchronous(s, st, api); e != cudaSuccess) return e;
  }
  cudaError_t status = cudaSuccess;
  if (captured(
          s, *st, api, [=](cudaStream_t t) { return cudaMemcpyAsync(dst, src, bytes, kind, t); }, &status))
    return status;
  wait_all(lock, st->waits, api);
  const OpId op = issue(s, *st);
  const Access acc[2] = {Access{dst_dev ? dst : nullptr, bytes, true, "dst"},
                         Access{src_dev ? src : nullptr, bytes, false, "src"}};
  check_and_record(s, *st, op, api, acc, /*cross_device=*/true);  // copies may cross devices (staged, UVA)
  if (kind == cudaMemcpyHostToDevice && !pageable && !host_waits && bytes <= kPinnedReadBytes) {
    const auto* p = static_cast<const unsigned char*>(src);
    s.pinned_reads.push_back({p, std::vector<unsigned char>(p, p + bytes), op, api});
  }
  run_copy(lock, *st, dst, src, bytes, kind, pageable, host_waits);
  return cudaSuccess;
}

cudaError_t fill(void* dst, int value, size_t bytes, cudaStream_t stream, const char* api, bool synchronous) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (bytes == 0) return cudaSuccess;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (synchronous) {
    if (const cudaError_t e = refuse_synchronous(s, st, api); e != cudaSuccess) return e;
  }
  cudaError_t status = cudaSuccess;
  if (captured(
          s, *st, api, [=](cudaStream_t t) { return cudaMemsetAsync(dst, value, bytes, t); }, &status))
    return status;
  wait_all(lock, st->waits, api);
  const OpId op = issue(s, *st);
  const Access acc{dst, bytes, true, "devPtr"};
  check_and_record(s, *st, op, api, std::span(&acc, 1));
  lock.unlock();
  {
    const DeviceAccessScope access;
    const DeviceCodeMark device_code;
    if (!record_only()) std::memset(dst, value, bytes);
  }
  count(&Counters::memsets);
  return cudaSuccess;
}

cudaError_t peer_copy(void* dst, int dst_device, const void* src, int src_device, size_t bytes, cudaStream_t stream,
                      const char* api, bool synchronous) {
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
    throw MisuseError(std::string("[cuda_emu] ") + api + ": dst must be memory of cuda:" + std::to_string(dst_device) +
                      " and src memory of cuda:" + std::to_string(src_device));
  }
  if (synchronous) {
    if (const cudaError_t e = refuse_synchronous(s, st, api); e != cudaSuccess) return e;
  }
  cudaError_t status = cudaSuccess;
  const auto replay = [=](cudaStream_t t) {
    return cudaMemcpyPeerAsync(dst, dst_device, src, src_device, bytes, t);
  };
  if (captured(s, *st, api, replay, &status)) return status;
  wait_all(lock, st->waits, api);
  const OpId op = issue(s, *st);
  const Access acc[2] = {Access{dst, bytes, true, "dst"}, Access{src, bytes, false, "src"}};
  check_and_record(s, *st, op, api, acc, true);
  run_copy(lock, *st, dst, src, bytes, cudaMemcpyDeviceToDevice, false, synchronous);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, "cudaMemcpy", true);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, "cudaMemcpyAsync", false);
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes) {
  return peer_copy(dst, dst_device, src, src_device, bytes, nullptr, "cudaMemcpyPeer", true);
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream) {
  return peer_copy(dst, dst_device, src, src_device, bytes, stream, "cudaMemcpyPeerAsync", false);
}

// The double synchronises the device after a cudaMemset (a real one need not); that is not counted as a sync.
cudaError_t cudaMemset(void* dst, int value, size_t bytes) {
  const cudaError_t e = fill(dst, value, bytes, nullptr, "cudaMemset", true);
  if (e == cudaSuccess) return synchronize_device("cudaMemset");
  return e;
}

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return fill(dst, value, bytes, stream, "cudaMemsetAsync", false);
}
}  // namespace mpt::cuda_emu
