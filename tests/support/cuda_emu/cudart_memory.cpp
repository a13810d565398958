// tests/support/cuda_emu/cudart_memory.cpp: the cudart double's memory: poisoned, page-protected allocations, pools, copies and memsets.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "cudart_state.h"

namespace mpt::cuda_emu {

using namespace detail;

namespace detail {
namespace {

constexpr unsigned char kPoison = 0xFF;  // NaN in every float format mptrain uses

size_t page_size() {
  static const size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Device memory is PROT_NONE except while some thread runs device work: the first touch from device code faults,
// the handler opens that allocation, and it is closed again when no device work is left. A touch from a thread not
// running device code is the host dereferencing device memory, reported by the handler.
std::atomic<int> g_active{0};
std::atomic_flag g_map_lock = ATOMIC_FLAG_INIT;  // guards g_ranges for the signal handler
struct Range {
  uintptr_t base, mapped;
  Allocation* a;
  bool open;
};
std::map<uintptr_t, Range>* g_ranges = new std::map<uintptr_t, Range>();  // by base, freed ones too; never destroyed
// Ranges opened since device work last ended (bases; a fixed array: the signal handler must not allocate).
constexpr int kMaxOpen = 8192;
uintptr_t g_open[kMaxOpen];
int g_open_count = 0;
bool g_open_overflow = false;
struct sigaction g_previous{};

class MapLock {
 public:
  MapLock() {
    while (g_map_lock.test_and_set(std::memory_order_acquire)) {
    }
  }
  ~MapLock() { g_map_lock.clear(std::memory_order_release); }
};

Range* find_range(uintptr_t addr) {
  auto it = g_ranges->upper_bound(addr);
  if (it == g_ranges->begin()) return nullptr;
  --it;
  return addr < it->second.base + it->second.mapped ? &it->second : nullptr;
}

void say(const char* text) { (void)!write(2, text, std::strlen(text)); }

// MPT_EMU_UNINITIALISED=ignore lets device code read the poison; read once at start-up (not in the handler).
bool g_uninitialised_fatal = true;
bool uninitialised_reads_fatal() { return g_uninitialised_fatal; }

void on_fault(int sig, siginfo_t* info, void* context) {
  const auto addr = reinterpret_cast<uintptr_t>(info->si_addr);
  // x86-64: bit 1 of the page-fault error code says the access was a write.
  const bool is_write = (static_cast<ucontext_t*>(context)->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  char msg[768];
  {
    MapLock lock;
    Range* r = find_range(addr);
    if (r != nullptr && !r->a->freed && in_device_code()) {
      Allocation& a = *r->a;
      if (!is_write && !a.written && uninitialised_reads_fatal()) {
        std::snprintf(msg, sizeof msg,
                      "[cuda_emu] device code read byte %zu of the %zu-byte allocation #%llu (%s on cuda:%d), which "
                      "nothing has written yet: uninitialised device memory (a GPU returns garbage; here it holds "
                      "0xFF poison). Set MPT_EMU_UNINITIALISED=ignore to read the poison instead.\n",
                      static_cast<size_t>(addr - a.base), a.bytes, static_cast<unsigned long long>(a.serial), a.how,
                      a.device);
        say(msg);
        _exit(86);
      }
      if (is_write) a.written = true;
      (void)mprotect(reinterpret_cast<void*>(r->base), r->mapped, a.written ? PROT_READ | PROT_WRITE : PROT_READ);
      if (!r->open) {
        if (g_open_count < kMaxOpen) {
          g_open[g_open_count++] = r->base;
        } else {
          g_open_overflow = true;
        }
      }
      r->open = true;
      return;  // the access retries and succeeds
    }
    if (r != nullptr) {
      const Allocation& a = *r->a;
      std::snprintf(msg, sizeof msg,
                    "[cuda_emu] %s %s byte %zu of the %zu-byte allocation #%llu (%s on cuda:%d)%s\n",
                    in_device_code() ? "device code touched" : "the host dereferenced device memory:",
                    a.freed ? "freed memory:" : "", static_cast<size_t>(addr - a.base), a.bytes,
                    static_cast<unsigned long long>(a.serial), a.how, a.device,
                    a.freed ? " after it was freed (use after free)"
                            : ": device memory is not host memory on a GPU; copy it with cudaMemcpy first");
      say(msg);
      _exit(86);
    }
  }
  // Not ours: hand the fault to whoever handled it before (or the default action, re-raised on return).
  if ((g_previous.sa_flags & SA_SIGINFO) != 0 && g_previous.sa_sigaction != nullptr) {
    g_previous.sa_sigaction(sig, info, context);
  } else if (g_previous.sa_handler != SIG_DFL && g_previous.sa_handler != SIG_IGN && g_previous.sa_handler != nullptr) {
    g_previous.sa_handler(sig);
  } else {
    signal(SIGSEGV, SIG_DFL);
  }
}

void add_range(Allocation* a) {
  MapLock lock;
  g_ranges->insert_or_assign(a->base, Range{a->base, a->mapped, a, false});
}

}  // namespace

DeviceAccessScope::DeviceAccessScope() { ++g_active; }

DeviceAccessScope::~DeviceAccessScope() {
  if (--g_active != 0) return;
  MapLock lock;
  const auto close = [](Range& r) {
    if (!r.open) return;
    (void)mprotect(reinterpret_cast<void*>(r.base), r.mapped, PROT_NONE);
    r.open = false;
  };
  if (g_open_overflow) {
    for (auto& [base, r] : *g_ranges) close(r);
  } else {
    for (int i = 0; i < g_open_count; ++i)
      if (Range* r = find_range(g_open[i])) close(*r);
  }
  g_open_count = 0;
  g_open_overflow = false;
}

void install_fault_handler() {
  const char* v = std::getenv("MPT_EMU_UNINITIALISED");
  g_uninitialised_fatal = v == nullptr || std::strcmp(v, "ignore") != 0;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous);
}

void* map_device_memory(size_t bytes, size_t* mapped) {
  *mapped = (std::max<size_t>(bytes, 1) + page_size() - 1) / page_size() * page_size();
  void* p = mmap(nullptr, *mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  std::memset(p, kPoison, *mapped);
  (void)mprotect(p, *mapped, PROT_NONE);
  return p;
}

void retire_device_memory(Allocation& a) {
  MapLock lock;
  (void)mprotect(reinterpret_cast<void*>(a.base), a.mapped, PROT_NONE);
  (void)madvise(reinterpret_cast<void*>(a.base), a.mapped, MADV_DONTNEED);  // freed forever: no reuse, no RAM
  if (Range* r = find_range(a.base)) r->open = false;
}

}  // namespace detail

namespace {

struct Pool {
  int device = 0;
  uint64_t release_threshold = 0;  // cudart's default: give memory back at the next synchronisation
  size_t used = 0, cached = 0;
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
  } else {
    dev.used += bytes;
  }
  Allocation* raw = a.get();
  s.allocations.emplace(a->base, std::move(a));
  add_range(raw);
  *ptr = p;
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

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (bytes == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
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
    merge(host_clock(), st->full());
  }
  release(s, a, OpId{});
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t bytes) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  void* p = std::aligned_alloc(256, (std::max<size_t>(bytes, 1) + 255) / 256 * 256);
  if (p == nullptr) return fail(cudaErrorMemoryAllocation);
  auto a = std::make_unique<Allocation>();
  a->base = reinterpret_cast<uintptr_t>(p);
  a->bytes = bytes;
  a->mapped = 0;
  a->device = -1;
  a->how = "cudaMallocHost";
  a->serial = s.next_serial++;
  a->written = true;
  s.allocations.emplace(a->base, std::move(a));
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFreeHost(void* ptr) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (ptr == nullptr) return cudaSuccess;
  auto it = s.allocations.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == s.allocations.end() || it->second->device != -1) return fail(cudaErrorInvalidValue);
  std::free(ptr);
  s.allocations.erase(it);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  if (ptr == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
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
  return allocate(ptr, std::max<size_t>(bytes, 1), st->device, "cudaMallocFromPoolAsync", st, p);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (ptr == nullptr) return cudaSuccess;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
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
  if (value == nullptr || attr != cudaMemPoolAttrReleaseThreshold) return fail(cudaErrorInvalidValue);
  std::memcpy(&p->release_threshold, value, sizeof(uint64_t));
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
