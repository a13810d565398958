// tests/support/cuda_emu/cudart_memory.cpp: the cudart double's allocations: device memory (plain, stream-ordered, pools) and pinned host memory.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "cudart_state.h"

namespace mpt::cuda_emu {

using namespace detail;

namespace {

// Graph memory nodes are not emulated: stream-ordered allocation on a capturing stream is refused.
cudaError_t refuse_graph_memory(State& s, StreamState* st, const char* api) {
  return refuse_in_capture(s, st, cudaErrorNotSupported,
                           std::string(api) + " on a capturing stream: graph memory nodes are not emulated; allocate "
                                              "before the capture and reuse that memory in it");
}

struct Pool {
  int device = 0;
  uint64_t release_threshold = 0;  // cudart's default: give memory back at the next synchronisation
  size_t used = 0, cached = 0;
  size_t reserved_high = 0, used_high = 0;  // high-water marks of used + cached and of used, since creation or a reset
};

cudaError_t allocate(void** ptr, size_t bytes, int device, const char* how, StreamState* st, Pool* pool) {
  State& s = state();
  DeviceState& dev = s.devices[static_cast<size_t>(device)];
  const bool from_cache = pool != nullptr && pool->cached >= bytes;
  if (!from_cache && dev.used + bytes > dev.capacity) return fail(cudaErrorMemoryAllocation);
  size_t mapped = 0;
  void* p = map_device_memory(bytes, &mapped);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  auto a = std::make_unique<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(p);
  a->bytes = bytes;
  a->mapped = mapped;
  a->device = device;
  a->how = how;
  a->serial = s.next_serial++;
  a->pool = pool;
  if (st != nullptr) a->born = issue(s, *st);  // usable on st at once; elsewhere only after an event or a sync
  if (pool != nullptr) {
    if (from_cache) {
      pool->cached -= bytes;
    } else {
      dev.used += bytes;
    }
    pool->used += bytes;
    pool->reserved_high = std::max(pool->reserved_high, pool->used + pool->cached);
    pool->used_high = std::max(pool->used_high, pool->used);
  } else {
    dev.used += bytes;
  }
  Allocation* raw = a.get();
  s.allocations.emplace(a->base, std::move(a));
  track_device_memory(raw);
  *ptr = p;
  if (st == nullptr) {
    count(&Counters::mallocs);
  } else {
    count(&Counters::pool_allocs);
    // Reserved memory grew: the pool's free bytes could not serve it (cudaMallocAsync's default pool keeps none).
    if (!from_cache) count(&Counters::pool_grows);
  }
  return cudaSuccess;
}

// Pinned host memory: known to the double so copies can tell it from pageable memory.
cudaError_t allocate_host(void** ptr, size_t bytes, const char* how) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  auto a = std::make_unique<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(p);
  a->bytes = bytes;
  a->mapped = rounded;  // find_allocation knows every byte of it, so copies can tell pinned memory from pageable
  a->device = -1;
  a->how = how;
  a->serial = s.next_serial++;
  a->written = true;
  s.allocations.emplace(a->base, std::move(a));
  *ptr = p;
  count(&Counters::host_mallocs);
  return cudaSuccess;
}

// Returns the allocation that starts exactly at ptr, or throws MisuseError explaining what ptr is.
Allocation& owned(State& s, void* ptr, const char* api) {
  Allocation* a = find_allocation(s, ptr);
  std::string what;
  if (a == nullptr) {
    what = "was never returned by a CUDA allocation call";
  } else if (a->freed) {
    what = "is " + describe(*a) + ", freed already (double free)";
  } else if (a->base != reinterpret_cast<uintptr_t>(ptr)) {
    what = "points inside " + describe(*a) + ", not at its start";
  } else {
    return *a;
  }
  char p[32];
  std::snprintf(p, sizeof p, "%p", ptr);
  throw MisuseError(std::string("[cuda_emu] ") + api + "(" + p + "): the pointer " + what);
}

void release(State& s, Allocation& a, OpId at) {
  a.freed = true;
  a.freed_at = at;
  if (a.device >= 0) {
    DeviceState& dev = s.devices[static_cast<size_t>(a.device)];
    if (auto* pool = static_cast<Pool*>(a.pool)) {
      pool->used -= a.bytes;
      pool->cached += a.bytes;  // kept by the pool until trimmed or released at a synchronisation
    } else {
      dev.used -= a.bytes;
    }
  }
  retire_device_memory(a);
}

Pool* resolve_pool(cudaMemPool_t pool) { return reinterpret_cast<Pool*>(pool); }

std::vector<std::unique_ptr<Pool>>& pools() {
  static auto* p = new std::vector<std::unique_ptr<Pool>>();
  return *p;
}

bool known_pool(Pool* p) {
  return std::any_of(pools().begin(), pools().end(), [p](const auto& q) { return q.get() == p; });
}
}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  if (const cudaError_t e = refuse_unsafe(s, "cudaMalloc"); e != cudaSuccess) return e;
  return allocate(ptr, bytes, current_device(), "cudaMalloc", nullptr, nullptr);
}

cudaError_t cudaFree(void* ptr) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (ptr == nullptr) return cudaSuccess;
  Allocation& a = owned(s, ptr, "cudaFree");
  // cudaFree synchronises the device: everything issued before is complete (and ordered before the free).
  for (const auto& st : s.streams) {
    if (st->device != a.device || st->destroyed) continue;
    wait_all(lock, st->waits, "cudaFree");
    host_learns(s, st->full(), "cudaFree");
  }
  release(s, a, OpId{});
  count(&Counters::frees);
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate_host(ptr, bytes, "cudaMallocHost"); }

// Every flag is accepted and changes nothing: a pinned allocation is portable, and mapped under unified addressing.
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if ((flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) != 0)
    return fail(cudaErrorInvalidValue);
  return allocate_host(ptr, bytes, "cudaHostAlloc");
}

cudaError_t cudaFreeHost(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (ptr == nullptr) return cudaSuccess;
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second->device != -1) return fail(cudaErrorInvalidValue);
  const auto* lo = static_cast<const unsigned char*>(ptr);
  const unsigned char* hi = lo + it->second->bytes;
  std::erase_if(s.pinned_reads, [&](const PinnedRead& r) { return r.src >= lo && r.src < hi; });
  std::free(ptr);
  s.allocations.erase(it);
  count(&Counters::host_frees);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = refuse_graph_memory(s, st, "cudaMallocAsync"); e != cudaSuccess) return e;
  return allocate(ptr, std::max<size_t>(bytes, 1), st->device, "cudaMallocAsync", st, nullptr);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool, cudaStream_t stream) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  Pool* p = resolve_pool(pool);
  StreamState* st = resolve(s, stream);
  if (!known_pool(p) || st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (p->device != st->device) return fail(cudaErrorInvalidValue);
  if (const cudaError_t e = refuse_graph_memory(s, st, "cudaMallocFromPoolAsync"); e != cudaSuccess) return e;
  return allocate(ptr, std::max<size_t>(bytes, 1), st->device, "cudaMallocFromPoolAsync", st, p);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (ptr == nullptr) return cudaSuccess;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (const cudaError_t e = refuse_graph_memory(s, st, "cudaFreeAsync"); e != cudaSuccess) return e;
  Allocation& a = owned(s, ptr, "cudaFreeAsync");
  wait_all(lock, st->waits, "cudaFreeAsync");
  const OpId op = issue(s, *st);
  // The free is a write: every earlier use on other streams must be ordered before it (E8.5).
  const Access acc{ptr, 0, true, "devPtr"};
  const bool was_written = a.written;
  a.written = true;  // freeing memory nobody wrote is fine
  check_and_record(s, *st, op, "cudaFreeAsync", std::span(&acc, 1));
  a.written = was_written;
  release(s, a, op);
  count(&Counters::pool_frees);
  return cudaSuccess;
}

cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->location.type != cudaMemLocationTypeDevice ||
      props->allocType != cudaMemAllocationTypePinned)
    return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (props->location.id < 0 || props->location.id >= static_cast<int>(s.devices.size()))
    return fail(cudaErrorInvalidDevice);
  auto p = std::make_unique<Pool>();
  p->device = props->location.id;
  *pool = reinterpret_cast<cudaMemPool_t>(p.get());
  pools().push_back(std::move(p));
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (!known_pool(resolve_pool(pool))) return fail(cudaErrorInvalidResourceHandle);
  return sticky_or(s, cudaSuccess);  // kept: allocations still point at it
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Pool* p = resolve_pool(pool);
  if (!known_pool(p)) return fail(cudaErrorInvalidResourceHandle);
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  uint64_t v = 0;
  std::memcpy(&v, value, sizeof v);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: p->release_threshold = v; break;
    // The high-water marks can only be reset, with the value 0 (to the current amount, as cudart's do).
    case cudaMemPoolAttrReservedMemHigh:
      if (v != 0) return fail(cudaErrorInvalidValue);
      p->reserved_high = p->used + p->cached;
      break;
    case cudaMemPoolAttrUsedMemHigh:
      if (v != 0) return fail(cudaErrorInvalidValue);
      p->used_high = p->used;
      break;
    default: return fail(cudaErrorInvalidValue);
  }
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Pool* p = resolve_pool(pool);
  if (!known_pool(p)) return fail(cudaErrorInvalidResourceHandle);
  if (value == nullptr) return fail(cudaErrorInvalidValue);
  uint64_t v = 0;
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: v = p->release_threshold; break;
    case cudaMemPoolAttrReservedMemCurrent: v = p->used + p->cached; break;
    case cudaMemPoolAttrUsedMemCurrent: v = p->used; break;
    case cudaMemPoolAttrReservedMemHigh: v = p->reserved_high; break;
    case cudaMemPoolAttrUsedMemHigh: v = p->used_high; break;
    default: return fail(cudaErrorInvalidValue);
  }
  std::memcpy(value, &v, sizeof v);
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Pool* p = resolve_pool(pool);
  if (!known_pool(p)) return fail(cudaErrorInvalidResourceHandle);
  if (p->cached > min_bytes_to_keep) {
    s.devices[static_cast<size_t>(p->device)].used -= p->cached - min_bytes_to_keep;
    p->cached = min_bytes_to_keep;
  }
  return sticky_or(s, cudaSuccess);
}

}  // namespace mpt::cuda_emu
