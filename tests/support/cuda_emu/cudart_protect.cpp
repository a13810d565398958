// tests/support/cuda_emu/cudart_protect.cpp: device memory guarded by page protection: open only to device code, poisoned when fresh, sealed when freed.
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
bool uninitialised_reads_fatal() { return g_uninitialised_fatal && !record_only(); }  // record-only: nothing is written

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

}  // namespace

void track_device_memory(Allocation* a) {
  MapLock lock;
  g_ranges->insert_or_assign(a->base, Range{a->base, a->mapped, a, false});
}

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
  if (!record_only()) std::memset(p, kPoison, *mapped);  // record-only: never read, so left unmapped (no RAM)
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

}  // namespace mpt::cuda_emu
