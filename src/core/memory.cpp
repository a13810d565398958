// src/core/memory.cpp: Storage allocation routed to the device's allocator, byte copies, memory statistics.
#include "mpt/core/memory.h"
#include "mpt/core/memory_peak.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>

#include "core/backend.h"
#include "core/cpu_allocator.h"
#include "mpt/core/error.h"

namespace mpt {

namespace {
std::atomic<bool>& poison_flag() {
  static std::atomic<bool> flag{[] {
    const char* v = std::getenv("MPT_POISON_ALLOCATIONS");
    return v != nullptr && v[0] == '1';
  }()};
  return flag;
}
}  // namespace

void set_allocation_poison(bool enabled) { poison_flag().store(enabled); }
bool allocation_poison() { return poison_flag().load(); }

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, Device device) {
  if (device.is_cpu()) {
    void* p = CpuAllocator::instance().allocate(nbytes);
    if (p != nullptr && allocation_poison()) std::memset(p, 0xFF, nbytes);
    try {
      return std::shared_ptr<Storage>(new Storage(p, nbytes, device, nullptr));
    } catch (...) {
      CpuAllocator::instance().free(p, nbytes);
      throw;
    }
  }
  return allocate(nbytes, Stream::current(device));
}

std::shared_ptr<Storage> Storage::allocate(size_t nbytes, const Stream& stream) {
  const Device device = stream.device();
  if (device.is_cpu()) return allocate(nbytes, device);
  check_device_available(device);
  void* p = nbytes == 0 ? nullptr : cuda_backend::allocate(nbytes, device.index(), stream.native());
  try {
    return std::shared_ptr<Storage>(new Storage(p, nbytes, device, stream.shared_native()));
  } catch (...) {
    if (p != nullptr) cuda_backend::free(p, nbytes, device.index(), stream.native());
    throw;
  }
}

Storage::~Storage() {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
    CpuAllocator::instance().free(data_, nbytes_);
    return;
  }
  try {
    cuda_backend::free(data_, nbytes_, device_.index(), stream_.get());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[memory] freeing %zu bytes on %s failed: %s\n", nbytes_, device_.str().c_str(), e.what());
  }
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes,
                const Stream& stream) {
  if (nbytes == 0) return;
  MPT_CHECK(dst != nullptr && src != nullptr, "[copy] copying {} bytes {} -> {} with a null pointer", nbytes,
            src_device, dst_device);
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    if (dst != src) std::memmove(dst, src, nbytes);
    return;
  }
  check_device_available(dst_device);
  check_device_available(src_device);
  const Device sd = stream.device();
  MPT_CHECK(sd.is_cuda() && (sd == dst_device || sd == src_device),
            "[copy] a copy {} -> {} must be ordered on a stream of one of its CUDA devices, got a stream of {}",
            src_device, dst_device, sd);
  cuda_backend::memcpy(dst, dst_device, src, src_device, nbytes, sd.index(), stream.native());
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes) {
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    copy_bytes(dst, dst_device, src, src_device, nbytes, Stream::current(Device::cpu()));
    return;
  }
  Stream stream = Stream::current(dst_device.is_cuda() ? dst_device : src_device);
  copy_bytes(dst, dst_device, src, src_device, nbytes, stream);
  stream.synchronize();
}

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) return CpuAllocator::instance().stats();
  check_device_available(device);
  return cuda_backend::memory_stats(device.index());
}

namespace {

// The first integer after `key` in a /proc or /sys file; -1 when the file or key is missing (or says "max").
int64_t read_number(const char* path, const std::string& key) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.compare(0, key.size(), key) != 0) continue;
    std::istringstream fields(line.substr(key.size()));
    int64_t value = -1;
    fields >> value;
    return fields ? value : -1;
  }
  return -1;
}

}  // namespace

int64_t available_memory(Device device) {
  if (device.is_cpu()) {
    const int64_t kib = read_number("/proc/meminfo", "MemAvailable:");
    int64_t bytes = kib >= 0 ? kib * 1024 : std::numeric_limits<int64_t>::max();
    const int64_t limit = read_number("/sys/fs/cgroup/memory.max", "");
    const int64_t used = read_number("/sys/fs/cgroup/memory.current", "");
    if (limit >= 0 && used >= 0) bytes = std::min(bytes, std::max<int64_t>(limit - used, 0));
    return bytes + CpuAllocator::instance().stats().cached_bytes;
  }
  check_device_available(device);
  const size_t total = cuda_status().devices.at(static_cast<size_t>(device.index())).total_memory;
  return std::max<int64_t>(static_cast<int64_t>(total) - memory_stats(device).current_bytes, 0);
}

int64_t reserved_peak_bytes(Device device) {
  if (device.is_cpu()) return CpuAllocator::instance().reserved_peak();
  check_device_available(device);
  return cuda_backend::reserved_peak_bytes(device.index());
}

void reset_peak_memory_stats(Device device) {
  if (device.is_cpu()) return CpuAllocator::instance().reset_peak();
  check_device_available(device);
  cuda_backend::reset_peak_memory_stats(device.index());
}

void set_cuda_memory_caching(bool on) {
  if (cuda_status().usable) cuda_backend::set_caching(on);
}
bool cuda_memory_caching() { return cuda_status().usable && cuda_backend::caching_enabled(); }

void empty_cache(Device device) {
  if (device.is_cpu()) return CpuAllocator::instance().empty_cache();
  check_device_available(device);
  cuda_backend::empty_cache(device.index());
}

}  // namespace mpt
