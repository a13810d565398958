// mpt/core/stream.h: thin RAII streams and events (CUDA streams/events; synchronous no-ops on the CPU).
#pragma once

#include <memory>

#include "mpt/core/device.h"

namespace mpt {

class Stream;
namespace detail {
// A handle to `stream` that does not keep it alive (core/stream_resources.h): what a per-stream cache allocates with.
Stream unowned_stream(const Stream& stream);
}  // namespace detail

// A CUDA stream, or a placeholder on the CPU (all CPU work is synchronous).
// Streams made by the constructor are non-blocking (cudaStreamNonBlocking): they do not synchronize
// implicitly with the legacy default stream, so work on them can overlap with work on
// Stream::current(). Order work across streams with Event::record + Event::wait.
// Storage allocated on a stream keeps that stream's handle alive until the memory is freed. When the last owner
// lets go, what the library cached for the stream (its cuBLASLt workspace, its cuDNN handle) is released with it.
class Stream {
 public:
  explicit Stream(Device device);
  // The device's current stream on this thread: the innermost StreamGuard's for `device`, else (non-owning) the
  // legacy default stream, cudaStreamLegacy, of `device`. Either way `device` becomes the calling thread's current
  // CUDA device.
  static Stream current(Device device);
  ~Stream() = default;
  Stream(Stream&& other) noexcept = default;
  Stream& operator=(Stream&& other) noexcept = default;
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  Device device() const { return device_; }
  void* native() const { return handle_.get(); }  // cudaStream_t on CUDA, null on the CPU
  // Shares ownership of the native handle (what Storage keeps so its stream-ordered free stays valid).
  const std::shared_ptr<void>& shared_native() const { return handle_; }
  void synchronize() const;

 private:
  Stream(Device device, std::shared_ptr<void> handle) : device_(device), handle_(std::move(handle)) {}
  friend class StreamGuard;
  friend Stream detail::unowned_stream(const Stream& stream);
  Device device_;
  std::shared_ptr<void> handle_;
};

// Makes `stream` the current stream of its device on this thread for the guard's lifetime (torch.cuda.stream): the
// ops issued meanwhile run on it; the previous current stream comes back at the end. It orders nothing by itself:
// work on the two streams is ordered only by events (Event::record / wait), as CudaGraph does around its stream.
// Memory allocated on the guarded stream is freed on it too. Guards nest; a guard for a CPU stream does nothing.
class StreamGuard {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  bool active_ = false;
};

// A CUDA event, or on the CPU a wall-clock timestamp taken at record().
class Event {
 public:
  explicit Event(Device device, bool timing = false);
  ~Event();
  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  void record(const Stream& stream);
  void wait(const Stream& stream) const;  // future work on `stream` waits for this event
  void synchronize() const;
  bool ready() const;                     // true when the recorded work is done (or nothing was recorded)
  // Milliseconds from this event to `end`; both created with timing=true and recorded.
  float elapsed_ms(const Event& end) const;
  Device device() const { return device_; }
  void* native() const { return handle_; }  // cudaEvent_t on CUDA, null on the CPU

 private:
  Device device_;
  void* handle_ = nullptr;
  bool timing_ = false;
  bool recorded_ = false;
  double cpu_time_ms_ = 0;
};

}  // namespace mpt
