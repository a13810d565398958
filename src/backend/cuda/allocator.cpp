// src/backend/cuda/allocator.cpp: stream-ordered CUDA memory from one cudaMallocAsync pool per device.
// The pool keeps freed memory (release threshold) so that a later allocation of the same size is
// served without a driver call; the library counts current and peak bytes itself.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device_guard.h"
#include "core/backend.h"

namespace mpt::cuda_backend {
namespace {

struct Pool {
  cudaMemPool_t pool = nullptr;
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> reused{0};
};

// MPT_CUDA_POOL_RELEASE_THRESHOLD_MB: memory the pool may keep cached past a synchronization
// (default: unlimited, like PyTorch's caching allocator; empty_cache trims it).
uint64_t release_threshold() {
  const char* text = std::getenv("MPT_CUDA_POOL_RELEASE_THRESHOLD_MB");
  if (text == nullptr || *text == '\0') return std::numeric_limits<uint64_t>::max();
  char* end = nullptr;
  unsigned long long mb = std::strtoull(text, &end, 10);
  MPT_CHECK(*end == '\0' && text[0] != '-' && mb < (1ull << 40),
            "[memory] MPT_CUDA_POOL_RELEASE_THRESHOLD_MB must be a number of megabytes, got '{}'", text);
  return static_cast<uint64_t>(mb) << 20;
}

Pool& pool_for(int device) {
  static std::mutex mutex;
  // Never destroyed: Storage released during static destruction still finds its pool.
  static auto* pools = new std::vector<std::unique_ptr<Pool>>(static_cast<size_t>(mpt::cuda_status().device_count));
  std::lock_guard lock(mutex);
  std::unique_ptr<Pool>& slot = pools->at(static_cast<size_t>(device));
  if (!slot) {
    auto p = std::make_unique<Pool>();
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    MPT_CUDA_CHECK(cudaMemPoolCreate(&p->pool, &props));
    uint64_t threshold = release_threshold();
    MPT_CUDA_CHECK(cudaMemPoolSetAttribute(p->pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    slot = std::move(p);
  }
  return *slot;
}

uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t value = 0;
  MPT_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
  return value;
}

}  // namespace

void* allocate(size_t nbytes, int device, void* stream) {
  Pool& p = pool_for(device);
  DeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream);
  const uint64_t reserved_before = pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent);
  void* ptr = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&ptr, nbytes, p.pool, s);
  if (e == cudaErrorMemoryAllocation) {
    // Memory freed on other streams may still be pending: wait for it, give it back, try once more.
    (void)cudaGetLastError();
    MPT_CUDA_CHECK(cudaDeviceSynchronize());
    MPT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
    e = cudaMallocFromPoolAsync(&ptr, nbytes, p.pool, s);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    MPT_THROW("[memory] out of memory on cuda:{}: allocating {} bytes failed ({} bytes in use by mptrain)", device,
              nbytes, p.current.load());
  }
  MPT_CUDA_CHECK(e);
  if (pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent) <= reserved_before) ++p.reused;
  ++p.allocations;
  const int64_t now = p.current += static_cast<int64_t>(nbytes);
  int64_t peak = p.peak.load();
  while (now > peak && !p.peak.compare_exchange_weak(peak, now)) {
  }
  return ptr;
}

void free(void* ptr, size_t nbytes, int device, void* stream) {
  Pool& p = pool_for(device);
  p.current -= static_cast<int64_t>(nbytes);
  DeviceGuard guard(device);
  const cudaError_t e = cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));
  if (e == cudaErrorCudartUnloading) return;  // process exit: the runtime already released everything
  MPT_CUDA_CHECK(e);
}

MemoryStats memory_stats(int device) {
  Pool& p = pool_for(device);
  MemoryStats s;
  s.current_bytes = p.current.load();
  s.peak_bytes = p.peak.load();
  s.reserved_bytes = static_cast<int64_t>(pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent));
  s.cached_bytes = s.reserved_bytes - static_cast<int64_t>(pool_attribute(p.pool, cudaMemPoolAttrUsedMemCurrent));
  s.allocations = p.allocations.load();
  s.reused = p.reused.load();
  return s;
}

void reset_peak_memory_stats(int device) {
  Pool& p = pool_for(device);
  p.peak = p.current.load();
}

void* host_alloc_pinned(size_t nbytes) {
  void* p = nullptr;
  MPT_CUDA_CHECK(cudaMallocHost(&p, nbytes));
  return p;
}

void host_free_pinned(void* ptr) noexcept {
  if (ptr != nullptr) (void)cudaFreeHost(ptr);
}

void empty_cache(int device) {
  Pool& p = pool_for(device);
  DeviceGuard guard(device);
  MPT_CUDA_CHECK(cudaDeviceSynchronize());
  MPT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
}

}  // namespace mpt::cuda_backend
