// src/backend/cuda/allocator.cpp: stream-ordered CUDA memory from one cudaMallocAsync pool per device, with a
// host-side cache of legacy-stream blocks in front of it. The pool keeps freed memory (release threshold); the cache
// (detail::BlockCache) carves blocks from segments of the pool, splits and merges them, so a training step's
// allocations make no driver call at all after warm-up and memory freed as one size serves another; the library
// counts current and peak bytes itself.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <limits>
#include <memory>
#include <cstring>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "backend/cuda/check.h"
#include "backend/cuda/device_guard.h"
#include "core/backend.h"
#include "core/block_cache.h"

namespace mpt::cuda_backend {
namespace {

struct Pool {
  cudaMemPool_t pool = nullptr;
  std::atomic<int64_t> current{0};
  std::atomic<int64_t> peak{0};
  std::atomic<int64_t> allocations{0};
  std::atomic<int64_t> reused{0};
  // Blocks of the device's legacy stream (every op's stream), carved from pool segments allocated and freed on that
  // stream. Reusing one there is safe without an event: the new owner's work is queued after the old owner's. Blocks
  // of other streams go back to the pool (cudaFreeAsync) at once: their stream may be destroyed while a block waits.
  std::mutex cache_mutex;
  std::unique_ptr<detail::BlockCache> blocks;  // under cache_mutex
  // Private pools (CUDA graphs): per stream, a block cache of its own whose segments come from the pool on that
  // stream, reused on that stream only; while the stream captures, a new segment is refused (a capture cannot ask
  // the driver for memory). An ended pool whose blocks are still in use (a graph's outputs outliving it) is retired:
  // its segments go back once its last block does. Under cache_mutex.
  std::unordered_map<void*, std::unique_ptr<detail::BlockCache>> private_pools;
  std::vector<std::unique_ptr<detail::BlockCache>> retired;
  std::atomic<int> private_count{0};  // private_pools.size() + retired.size(): without any, no lock taken for them
};

// Sizes as the stream-ordered pool is asked for them (other streams than the legacy one): 512 bytes below 1 MiB,
// 1 MiB above.
size_t rounded(size_t n) {
  const size_t unit = n < (size_t{1} << 20) ? 512 : (size_t{1} << 20);
  return (n + unit - 1) / unit * unit;
}

std::atomic<int>& caching_flag() {  // -1: not read yet
  static std::atomic<int> flag{-1};
  return flag;
}

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

// A block cache whose segments come from `pool` on `stream` and go back to it there; `before_segment` runs before
// each new segment of `bytes` is asked for (it may throw to refuse it).
std::unique_ptr<detail::BlockCache> stream_cache(cudaMemPool_t pool, int device, cudaStream_t stream,
                                                 std::function<void(size_t bytes)> before_segment) {
  return std::make_unique<detail::BlockCache>(
      [pool, device, stream, before = std::move(before_segment)](size_t bytes) -> void* {
        if (before) before(bytes);
        DeviceGuard guard(device);
        void* ptr = nullptr;  // nullptr when the device has no memory for the segment
        const cudaError_t e = cudaMallocFromPoolAsync(&ptr, bytes, pool, stream);
        if (e == cudaErrorMemoryAllocation) {
          (void)cudaGetLastError();
          return nullptr;
        }
        MPT_CUDA_CHECK(e);
        return ptr;
      },
      [device, stream](void* base, size_t) {
        DeviceGuard guard(device);
        const cudaError_t e = cudaFreeAsync(base, stream);
        if (e != cudaErrorCudartUnloading) MPT_CUDA_CHECK(e);  // at process exit the runtime released everything
      });
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
    p->blocks = stream_cache(p->pool, device, cudaStreamLegacy, {});
    slot = std::move(p);
  }
  return *slot;
}

uint64_t pool_attribute(cudaMemPool_t pool, cudaMemPoolAttr attr) {
  uint64_t value = 0;
  MPT_CUDA_CHECK(cudaMemPoolGetAttribute(pool, attr, &value));
  return value;
}

bool cacheable(void* stream) { return stream == static_cast<void*>(cudaStreamLegacy) && caching_enabled(); }

void count_allocation(Pool& p, size_t nbytes) {
  ++p.allocations;
  const int64_t now = p.current += static_cast<int64_t>(nbytes);
  int64_t peak = p.peak.load();
  while (now > peak && !p.peak.compare_exchange_weak(peak, now)) {
  }
}

// A block of `cache`, counted; out of memory, memory freed on other streams may still be pending: wait for it, trim
// the pool and try once more. `what` names the cache in the error.
void* allocate_from(Pool& p, detail::BlockCache& cache, size_t nbytes, int device, const char* what) {
  const uint64_t acquires = cache.segment_acquires();
  void* ptr = cache.allocate(nbytes);  // on a refusal its idle segments went back and it tried again
  if (ptr == nullptr) {
    DeviceGuard guard(device);
    MPT_CUDA_CHECK(cudaDeviceSynchronize());
    MPT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
    ptr = cache.allocate(nbytes);
  }
  if (ptr == nullptr) {
    MPT_THROW("[memory] out of memory on cuda:{}: allocating {} bytes failed ({} bytes in use by mptrain, {} held by "
              "{})", device, nbytes, p.current.load(), cache.reserved(), what);
  }
  if (cache.segment_acquires() == acquires) ++p.reused;
  count_allocation(p, nbytes);
  return ptr;
}

// Gives the cache's wholly free segments back to the pool (on the legacy stream, where they were allocated).
void release_cache(Pool& p) {
  std::lock_guard lock(p.cache_mutex);
  p.blocks->release_idle();
}

}  // namespace

bool caching_enabled() {
  int v = caching_flag().load();
  if (v < 0) {
    const char* text = std::getenv("MPT_CUDA_CACHING");
#if defined(MPT_CUDA_EMULATION)
    v = text != nullptr && std::strcmp(text, "1") == 0;  // off: the double's uninitialised-read checks see fresh blocks
#else
    v = !(text != nullptr && std::strcmp(text, "0") == 0);
#endif
    caching_flag().store(v);
  }
  return v != 0;
}

void set_caching(bool on) {
  caching_flag().store(on ? 1 : 0);
  if (on) return;
  const int count = mpt::cuda_status().device_count;
  for (int d = 0; d < count; ++d) release_cache(pool_for(d));
}

void* allocate(size_t nbytes, int device, void* stream) {
  Pool& p = pool_for(device);
  const size_t size = rounded(nbytes);
  if (p.private_count.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(p.cache_mutex);
    if (auto pp = p.private_pools.find(stream); pp != p.private_pools.end()) {
      return allocate_from(p, *pp->second, nbytes, device, "the CUDA graph's pool");
    }
  }
  if (cacheable(stream)) {  // a free block that holds it: no driver call; else a new segment of the pool
    std::lock_guard lock(p.cache_mutex);
    return allocate_from(p, *p.blocks, nbytes, device, "its block cache");
  }
  DeviceGuard guard(device);
  auto s = static_cast<cudaStream_t>(stream);
  const uint64_t reserved_before = pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent);
  void* ptr = nullptr;
  cudaError_t e = cudaMallocFromPoolAsync(&ptr, size, p.pool, s);
  if (e == cudaErrorMemoryAllocation) {
    // Memory cached here or freed on other streams may still be pending: give it back, wait, try once more.
    (void)cudaGetLastError();
    release_cache(p);
    MPT_CUDA_CHECK(cudaDeviceSynchronize());
    MPT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
    e = cudaMallocFromPoolAsync(&ptr, size, p.pool, s);
  }
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    MPT_THROW("[memory] out of memory on cuda:{}: allocating {} bytes failed ({} bytes in use by mptrain)", device,
              nbytes, p.current.load());
  }
  MPT_CUDA_CHECK(e);
  if (pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent) <= reserved_before) ++p.reused;
  count_allocation(p, nbytes);
  return ptr;
}

void free(void* ptr, size_t nbytes, int device, void* stream) {
  Pool& p = pool_for(device);
  p.current -= static_cast<int64_t>(nbytes);
  if (p.private_count.load(std::memory_order_acquire) > 0) {
    std::lock_guard lock(p.cache_mutex);
    if (auto pp = p.private_pools.find(stream); pp != p.private_pools.end() && pp->second->owns(ptr)) {
      pp->second->free(ptr);
      return;
    }
    for (auto r = p.retired.begin(); r != p.retired.end(); ++r) {
      if (!(*r)->owns(ptr)) continue;
      (*r)->free(ptr);
      if ((*r)->live_blocks() == 0) {  // its last block: every segment back to the pool
        p.retired.erase(r);
        --p.private_count;
      }
      return;
    }
  }
  if (stream == static_cast<void*>(cudaStreamLegacy)) {
    std::lock_guard lock(p.cache_mutex);
    if (p.blocks->owns(ptr)) {  // back to the cache, merged with its free neighbours (with caching off since: and
      p.blocks->free(ptr);      // its segment back to the pool once wholly free)
      if (!caching_enabled()) p.blocks->release_idle();
      return;
    }
  }
  DeviceGuard guard(device);
  const cudaError_t e = cudaFreeAsync(ptr, static_cast<cudaStream_t>(stream));
  if (e == cudaErrorCudartUnloading) return;  // process exit: the runtime already released everything
  MPT_CUDA_CHECK(e);
}

void private_pool_begin(int device, void* stream) {
  Pool& p = pool_for(device);
  auto cache = stream_cache(p.pool, device, static_cast<cudaStream_t>(stream), [&p, device, stream](size_t bytes) {
    MPT_CHECK(!stream_capturing(stream),
              "[cuda_graph] the captured step needed a {}-byte segment on cuda:{} that its warm-up runs did not leave "
              "for reuse: run CudaGraph::warmup(step) twice before capture (the second run keeps the first one's "
              "outputs alive while it makes its own, as replays do), and allocate the same sizes in every run (a "
              "capture cannot ask the driver for memory)", bytes, device);
    // The legacy stream's idle segments first (the eager steps before the graph freed their gradients there): the
    // pool lends their memory to this stream instead of growing.
    p.blocks->release_idle();
  });
  std::lock_guard lock(p.cache_mutex);
  MPT_CHECK(p.private_pools.emplace(stream, std::move(cache)).second,
            "[cuda_graph] the stream already has a private pool on cuda:{}", device);
  ++p.private_count;
}

void private_pool_end(int device, void* stream) {
  Pool& p = pool_for(device);
  std::unique_ptr<detail::BlockCache> cache;
  {
    std::lock_guard lock(p.cache_mutex);
    auto pp = p.private_pools.find(stream);
    if (pp == p.private_pools.end()) return;
    cache = std::move(pp->second);
    p.private_pools.erase(pp);
    if (cache->live_blocks() > 0) {  // the graph's outputs outlive it: their segments wait for them
      cache->release_idle();
      p.retired.push_back(std::move(cache));
      return;
    }
    --p.private_count;
  }
  cache.reset();  // every segment back to the pool, on the graph's stream
}

MemoryStats memory_stats(int device) {
  Pool& p = pool_for(device);
  MemoryStats s;
  s.current_bytes = p.current.load();
  s.peak_bytes = p.peak.load();
  s.reserved_bytes = static_cast<int64_t>(pool_attribute(p.pool, cudaMemPoolAttrReservedMemCurrent));
  int64_t idle = 0;
  {
    std::lock_guard lock(p.cache_mutex);
    idle = static_cast<int64_t>(p.blocks->idle());
    for (const auto& [stream, cache] : p.private_pools) idle += static_cast<int64_t>(cache->idle());
    for (const auto& cache : p.retired) idle += static_cast<int64_t>(cache->idle());
  }
  s.cached_bytes = s.reserved_bytes - static_cast<int64_t>(pool_attribute(p.pool, cudaMemPoolAttrUsedMemCurrent)) +
                   idle;
  s.allocations = p.allocations.load();
  s.reused = p.reused.load();
  return s;
}

int64_t reserved_peak_bytes(int device) {
  return static_cast<int64_t>(pool_attribute(pool_for(device).pool, cudaMemPoolAttrReservedMemHigh));
}

void reset_peak_memory_stats(int device) {
  Pool& p = pool_for(device);
  p.peak = p.current.load();
  uint64_t zero = 0;  // the only value the high-water mark takes: back to the current reserve
  MPT_CUDA_CHECK(cudaMemPoolSetAttribute(p.pool, cudaMemPoolAttrReservedMemHigh, &zero));
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
  release_cache(p);
  MPT_CUDA_CHECK(cudaDeviceSynchronize());
  MPT_CUDA_CHECK(cudaMemPoolTrimTo(p.pool, 0));
}

}  // namespace mpt::cuda_backend
