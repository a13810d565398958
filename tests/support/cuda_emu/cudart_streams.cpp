// tests/support/cuda_emu/cudart_streams.cpp: the cudart double's device, stream and event API (eager execution, ordering tracked by clocks).
#include <chrono>
#include <string>

#include "cudart_state.h"

namespace mpt::cuda_emu {

using namespace detail;

namespace {

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

EventState* resolve_event(State& s, cudaEvent_t e) {
  for (const auto& ev : s.events)
    if (reinterpret_cast<cudaEvent_t>(ev.get()) == e) return ev->destroyed ? nullptr : ev.get();
  return nullptr;
}

void prune(std::vector<std::shared_ptr<PendingImpl>>& waits) {
  std::erase_if(waits, [](const auto& p) { return p->done(); });
}

// The host waited for st: everything st did is now ordered before the host's next calls.
void host_synchronized_with(StreamState& st) { host_learns(state(), st.full(), "a synchronisation"); }

}  // namespace

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return fail(cudaErrorInvalidValue);
  *version = 13000;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.devices.empty()) return fail(cudaErrorNoDevice);
  *count = static_cast<int>(s.devices.size());
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (prop == nullptr) return fail(cudaErrorInvalidValue);
  if (device < 0 || device >= static_cast<int>(s.devices.size())) return fail(cudaErrorInvalidDevice);
  *prop = s.devices[static_cast<size_t>(device)].prop;
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaSetDevice(int device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (device < 0 || device >= static_cast<int>(s.devices.size())) return fail(cudaErrorInvalidDevice);
  current_device() = device;
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaGetDevice(int* device) {
  if (device == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  *device = current_device();
  return sticky_or(s, cudaSuccess);
}

cudaError_t detail::synchronize_device(const char* who) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  const int d = current_device();
  for (const auto& st : s.streams) {
    if (st->device != d || st->destroyed || !st->capture) continue;
    return refuse_in_capture(s, st.get(), cudaErrorStreamCaptureUnsupported,
                             std::string(who) + " synchronises with a capturing stream");
  }
  if (const cudaError_t e = refuse_unsafe(s, who); e != cudaSuccess) return e;
  for (size_t i = 0; i < s.streams.size(); ++i) {
    StreamState& st = *s.streams[i];
    if (st.device != d || st.destroyed) continue;
    wait_all(lock, st.waits, who);
    host_synchronized_with(st);
  }
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  const cudaError_t e = synchronize_device("cudaDeviceSynchronize");
  if (e == cudaSuccess) count(&Counters::device_syncs);
  return e;
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute attr, int value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 ||
      static_cast<size_t>(value) > s.devices.at(static_cast<size_t>(current_device())).prop.sharedMemPerBlockOptin)
    return fail(cudaErrorInvalidValue);
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || (flags & ~cudaStreamNonBlocking) != 0) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  auto st = std::make_unique<StreamState>();
  st->id = static_cast<uint32_t>(s.streams.size() + 1);
  st->device = current_device();
  st->blocking = (flags & cudaStreamNonBlocking) == 0;
  merge(st->clock, host_clock());
  *stream = reinterpret_cast<cudaStream_t>(st.get());
  s.streams.push_back(std::move(st));
  return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  StreamState* st = resolve(s, stream);
  if (st == nullptr || st->legacy) return fail(cudaErrorInvalidResourceHandle);
  st->destroyed = true;  // work already issued still completes (it has: execution is eager)
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = refuse_in_capture(s, st, cudaErrorStreamCaptureUnsupported,
                                              "cudaStreamSynchronize of a capturing stream");
      e != cudaSuccess)
    return e;
  wait_all(lock, st->waits, "cudaStreamSynchronize");
  host_synchronized_with(*st);
  count(&Counters::stream_syncs);
  return cudaSuccess;
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e =
          refuse_in_capture(s, st, cudaErrorStreamCaptureUnsupported, "cudaStreamQuery of a capturing stream");
      e != cudaSuccess)
    return e;
  prune(st->waits);
  if (!st->waits.empty()) return cudaErrorNotReady;  // not an error: the last-error slot is left alone
  host_synchronized_with(*st);
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  EventState* ev = resolve_event(s, event);
  if (st == nullptr || ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (flags != 0) return fail(cudaErrorInvalidValue);
  // A wait on an event recorded in an active capture joins that capture (fork); an origin waiting on a joined
  // stream's last recorded work joins it back.
  std::shared_ptr<Capture> from = ev->captured_in.lock();
  if (from && !from->active) from.reset();
  if (from && !st->capture) {
    st->capture = from;
    st->capture_ops = 0;
    st->capture_unjoined = false;
    from->members.push_back(st);
  }
  if (from && from == st->capture && ev->captured_on != st && ev->captured_ops == ev->captured_on->capture_ops)
    ev->captured_on->capture_unjoined = false;
  cudaError_t status = cudaSuccess;
  if (captured(
          s, *st, "cudaStreamWaitEvent", [event](cudaStream_t t) { return cudaStreamWaitEvent(t, event, 0); }, &status))
    return status;
  count(&Counters::stream_waits);
  if (!ev->recorded) return cudaSuccess;  // an event never recorded is complete: the wait is a no-op (R8.2)
  merge(st->clock, ev->snapshot);
  prune(ev->waits);
  st->waits.insert(st->waits.end(), ev->waits.begin(), ev->waits.end());
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
    return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  auto ev = std::make_unique<EventState>();
  ev->device = current_device();
  ev->flags = flags;
  *event = reinterpret_cast<cudaEvent_t>(ev.get());
  s.events.push_back(std::move(ev));
  return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  EventState* ev = resolve_event(s, event);
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  ev->destroyed = true;
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  EventState* ev = resolve_event(s, event);
  if (st == nullptr || ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (st->device != ev->device) return fail(cudaErrorInvalidResourceHandle);
  if (st->capture) {  // an event node: the event itself changes when the graph runs
    ev->captured_in = st->capture;
    ev->captured_on = st;
    ev->captured_ops = st->capture_ops;
  }
  cudaError_t status = cudaSuccess;
  const auto replay = [event](cudaStream_t t) { return cudaEventRecord(event, t); };
  if (captured(s, *st, "cudaEventRecord", replay, &status, /*counts_as_work=*/false)) return status;
  // The snapshot is the stream's work so far; waits issued before a re-record keep the old one (R8.2, E8.2).
  merge(st->clock, host_clock());
  ev->snapshot = st->full();
  prune(st->waits);
  ev->waits = st->waits;
  ev->recorded = true;
  ev->time_ms = now_ms();
  count(&Counters::event_records);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  EventState* ev = resolve_event(s, event);
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  wait_all(lock, ev->waits, "cudaEventSynchronize");
  host_learns(s, ev->snapshot, "cudaEventSynchronize");
  count(&Counters::event_syncs);
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  EventState* ev = resolve_event(s, event);
  if (ev == nullptr) return fail(cudaErrorInvalidResourceHandle);
  prune(ev->waits);
  if (!ev->waits.empty()) return cudaErrorNotReady;
  host_learns(s, ev->snapshot, "cudaEventQuery");
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (ms == nullptr) return fail(cudaErrorInvalidValue);
  EventState* a = resolve_event(s, start);
  EventState* b = resolve_event(s, end);
  if (a == nullptr || b == nullptr || !a->recorded || !b->recorded || (a->flags & cudaEventDisableTiming) != 0 ||
      (b->flags & cudaEventDisableTiming) != 0)
    return fail(cudaErrorInvalidResourceHandle);
  prune(a->waits);
  prune(b->waits);
  if (!a->waits.empty() || !b->waits.empty()) return cudaErrorNotReady;
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return cudaSuccess;
}

}  // namespace mpt::cuda_emu
