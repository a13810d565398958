// src/core/stream.cpp: Stream and Event: CPU placeholders, CUDA handles through the backend interface.
#include "mpt/core/stream.h"

#include <chrono>
#include <utility>
#include <vector>

#include "core/backend.h"
#include "core/stream_resources.h"
#include "mpt/core/error.h"

namespace mpt {
namespace {

double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// The StreamGuards of this thread, innermost last: (CUDA device index, stream handle).
thread_local std::vector<std::pair<int, std::shared_ptr<void>>> t_guarded;

}  // namespace

StreamGuard::StreamGuard(const Stream& stream) {
  if (!stream.device().is_cuda()) return;
  t_guarded.emplace_back(stream.device().index(), stream.shared_native());
  active_ = true;
}

StreamGuard::~StreamGuard() {
  if (active_) t_guarded.pop_back();
}

Stream::Stream(Device device) : device_(device) {
  if (device.is_cpu()) return;
  check_device_available(device);
  const int index = device.index();
  // The last owner gone, the caches of the ops let go of what they keep for this stream (its cuBLASLt workspace,
  // freed in its order; its cuDNN handle), as a CudaGraph's stream does at the graph's end; those caches hold it
  // through unowned handles, so they cannot keep it alive themselves.
  handle_ = std::shared_ptr<void>(cuda_backend::stream_create(index), [index](void* s) {
    try {
      detail::release_stream_resources(index, s);
    } catch (const std::exception&) {  // a sticky device error: nothing more to free, the stream still goes
    }
    cuda_backend::stream_destroy(s);
  });
}

Stream detail::unowned_stream(const Stream& stream) {
  // Aliasing an empty owner, as Stream::current's legacy stream: the handle without its ownership.
  return Stream(stream.device_, std::shared_ptr<void>(std::shared_ptr<void>(), stream.native()));
}

Stream Stream::current(Device device) {
  if (device.is_cpu()) return Stream(device, nullptr);
  check_device_available(device);
  // cudaStreamLegacy is the legacy stream of the calling thread's current device: make `device` current, so that
  // work issued on this stream (kernels, copies) runs on it, from any thread.
  cuda_backend::make_current(device.index());
  for (auto it = t_guarded.rbegin(); it != t_guarded.rend(); ++it)
    if (it->first == device.index()) return Stream(device, it->second);
  // Aliasing an empty owner: a non-owning handle without a control block.
  return Stream(device, std::shared_ptr<void>(std::shared_ptr<void>(), cuda_backend::legacy_stream()));
}

void Stream::synchronize() const {
  if (device_.is_cuda()) cuda_backend::stream_synchronize(device_.index(), handle_.get());
}

Event::Event(Device device, bool timing) : device_(device), timing_(timing) {
  if (device.is_cpu()) return;
  check_device_available(device);
  handle_ = cuda_backend::event_create(device.index(), timing);
}

Event::~Event() {
  if (handle_ != nullptr) cuda_backend::event_destroy(handle_);
}

Event::Event(Event&& other) noexcept
    : device_(other.device_),
      handle_(std::exchange(other.handle_, nullptr)),
      timing_(other.timing_),
      recorded_(other.recorded_),
      cpu_time_ms_(other.cpu_time_ms_) {}

Event& Event::operator=(Event&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cuda_backend::event_destroy(handle_);
    device_ = other.device_;
    handle_ = std::exchange(other.handle_, nullptr);
    timing_ = other.timing_;
    recorded_ = other.recorded_;
    cpu_time_ms_ = other.cpu_time_ms_;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  MPT_CHECK(stream.device() == device_, "[event] an event of {} cannot be recorded on a stream of {}", device_,
            stream.device());
  if (device_.is_cuda()) {
    cuda_backend::event_record(device_.index(), handle_, stream.native());
  } else {
    cpu_time_ms_ = now_ms();
  }
  recorded_ = true;
}

void Event::wait(const Stream& stream) const {
  if (device_.is_cpu()) return;  // CPU work completed when it was issued
  if (stream.device().is_cpu()) {
    synchronize();  // the host's later work waits for the GPU
    return;
  }
  cuda_backend::stream_wait_event(stream.device().index(), stream.native(), handle_);
}

void Event::synchronize() const {
  if (device_.is_cuda()) cuda_backend::event_synchronize(handle_);
}

bool Event::ready() const { return device_.is_cpu() || cuda_backend::event_query(handle_); }

float Event::elapsed_ms(const Event& end) const {
  MPT_CHECK(device_ == end.device_, "[event] elapsed_ms between events of {} and {}", device_, end.device_);
  MPT_CHECK(timing_ && end.timing_, "[event] elapsed_ms needs both events created with timing=true");
  MPT_CHECK(recorded_ && end.recorded_, "[event] elapsed_ms needs both events recorded");
  if (device_.is_cuda()) return cuda_backend::event_elapsed_ms(handle_, end.handle_);
  return static_cast<float>(end.cpu_time_ms_ - cpu_time_ms_);
}

}  // namespace mpt
