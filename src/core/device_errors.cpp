// src/core/device_errors.cpp: the per-device error records of kernels/math/device_errors.h and their host-side check.
#include "core/device_errors.h"

#include <array>
#include <atomic>
#include <mutex>

#include "core/backend.h"
#include "mpt/core/error.h"
#include "mpt/core/stream.h"

namespace mpt {
namespace {

using kernels::DeviceErrorOp;
using kernels::DeviceErrorRecord;

constexpr int kMaxDevices = 64;

std::array<std::atomic<DeviceErrorRecord*>, kMaxDevices>& records() {
  static std::array<std::atomic<DeviceErrorRecord*>, kMaxDevices> r{};
  return r;
}

std::atomic<unsigned long long>& launch_counter() {
  static std::atomic<unsigned long long> next{1};
  return next;
}

// The record's own copies synchronise too: the hook must not read the record inside them.
thread_local bool t_in_check = false;

struct InCheck {
  InCheck() { t_in_check = true; }
  ~InCheck() { t_in_check = false; }
  InCheck(const InCheck&) = delete;
  InCheck& operator=(const InCheck&) = delete;
};

// The op's name, and what its checked value is, in the wording of the CPU's errors.
const char* op_name(int32_t op) {
  switch (static_cast<DeviceErrorOp>(op)) {
    case DeviceErrorOp::Embedding: return "embedding";
    case DeviceErrorOp::EmbeddingBackward: return "embedding_backward";
    case DeviceErrorOp::CrossEntropy: return "cross_entropy";
    case DeviceErrorOp::None: break;
  }
  return "device";
}

const char* value_name(int32_t op) {
  switch (static_cast<DeviceErrorOp>(op)) {
    case DeviceErrorOp::Embedding:
    case DeviceErrorOp::EmbeddingBackward: return "token id";
    case DeviceErrorOp::CrossEntropy: return "target";
    case DeviceErrorOp::None: break;
  }
  return "value";
}

DeviceErrorRecord* create_record(int device) {
  static std::mutex mutex;
  const std::lock_guard<std::mutex> lock(mutex);
  std::atomic<DeviceErrorRecord*>& slot = records()[static_cast<size_t>(device)];
  if (DeviceErrorRecord* r = slot.load(std::memory_order_acquire)) return r;
  // Never freed: one small block per device for the whole process (freeing it at exit could outlive cudart).
  void* stream = cuda_backend::legacy_stream();
  auto* r = static_cast<DeviceErrorRecord*>(cuda_backend::allocate(sizeof(DeviceErrorRecord), device, stream));
  const DeviceErrorRecord zero{};
  {
    const InCheck in_check;
    cuda_backend::memcpy(r, Device::cuda(device), &zero, Device::cpu(), sizeof zero, device, stream);
    cuda_backend::stream_synchronize(device, stream);
  }
  slot.store(r, std::memory_order_release);
  return r;
}

}  // namespace

kernels::DeviceErrorSink device_error_sink(Device device, DeviceErrorOp op) {
  MPT_CHECK(device.is_cuda() && device.index() >= 0 && device.index() < kMaxDevices,
            "[device_errors] error records exist for cuda:0 .. cuda:{}, got {}", kMaxDevices - 1, device);
  DeviceErrorRecord* r = records()[static_cast<size_t>(device.index())].load(std::memory_order_acquire);
  if (r == nullptr) r = create_record(device.index());
  return {r, op, launch_counter().fetch_add(1, std::memory_order_relaxed)};
}

void check_device_errors(Device device) {
  if (!device.is_cuda()) return;
  Stream::current(device).synchronize();  // cuda_backend::stream_synchronize runs the check
}

namespace detail {

void check_device_errors_after_sync(int device, void* stream) {
  if (t_in_check || device < 0 || device >= kMaxDevices) return;
  DeviceErrorRecord* r = records()[static_cast<size_t>(device)].load(std::memory_order_acquire);
  if (r == nullptr) return;
  const InCheck in_check;
  DeviceErrorRecord got{};
  cuda_backend::memcpy(&got, Device::cpu(), r, Device::cuda(device), sizeof got, device, stream);
  cuda_backend::stream_synchronize(device, stream);
  if (got.op == static_cast<int32_t>(DeviceErrorOp::None)) return;
  const DeviceErrorRecord zero{};
  cuda_backend::memcpy(r, Device::cuda(device), &zero, Device::cpu(), sizeof zero, device, stream);
  cuda_backend::stream_synchronize(device, stream);
  MPT_THROW("[{}] {} {} at position {} is out of range [0, {}) (found on cuda:{} by a kernel launched before this "
            "synchronisation; the results of that launch are invalid)",
            op_name(got.op), value_name(got.op), got.value, got.position, got.bound, device);
}

}  // namespace detail
}  // namespace mpt
