// src/core/cpu_allocator.cpp: size-class pooling over aligned_alloc, with statistics and ASan poisoning.
#include "core/cpu_allocator.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <string>

#include "mpt/core/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define MPT_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define MPT_ASAN 1
#endif
#endif

#if defined(MPT_ASAN)
#include <sanitizer/asan_interface.h>
// A cached block is poisoned so that a use after free through a stale pointer is still reported,
// although the memory never went back to malloc; the slack after the requested size is poisoned too.
#define MPT_POISON(p, n) ASAN_POISON_MEMORY_REGION((p), (n))
#define MPT_UNPOISON(p, n) ASAN_UNPOISON_MEMORY_REGION((p), (n))
#else
#define MPT_POISON(p, n) ((void)(p), (void)(n))
#define MPT_UNPOISON(p, n) ((void)(p), (void)(n))
#endif

namespace mpt {
namespace {

constexpr size_t kDefaultCacheLimitMb = 2048;
constexpr size_t kMaxRequest = size_t{1} << 60;

size_t cache_limit_from_env() {
  const char* text = std::getenv("MPT_CPU_CACHE_LIMIT_MB");
  if (text == nullptr || *text == '\0') return kDefaultCacheLimitMb << 20;
  char* end = nullptr;
  unsigned long long mb = std::strtoull(text, &end, 10);
  MPT_CHECK(*end == '\0' && text[0] != '-' && mb < (1ull << 40),
            "[memory] MPT_CPU_CACHE_LIMIT_MB must be a number of megabytes, got '{}'", text);
  return static_cast<size_t>(mb) << 20;
}

void release_block(void* p, size_t cls) {
  MPT_UNPOISON(p, cls);
  std::free(p);
}

}  // namespace

size_t CpuAllocator::size_class(size_t nbytes) {
  if (nbytes <= 256) return nbytes == 0 ? 0 : (nbytes + 63) & ~size_t{63};
  const int k = std::bit_width(nbytes - 1) - 1;  // nbytes in (2^k, 2^(k+1)]
  const size_t step = size_t{1} << (k - 2);
  return (nbytes + step - 1) & ~(step - 1);
}

CpuAllocator& CpuAllocator::instance() {
  // Never destroyed: a Storage released during static destruction still finds its allocator.
  static CpuAllocator* allocator = new CpuAllocator(cache_limit_from_env());
  return *allocator;
}

CpuAllocator::CpuAllocator(size_t cache_limit_bytes) : cache_limit_(cache_limit_bytes) {}

CpuAllocator::~CpuAllocator() { empty_cache(); }

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  MPT_CHECK(nbytes <= kMaxRequest, "[memory] cannot allocate {} bytes on the CPU", nbytes);
  const size_t cls = size_class(nbytes);
  const auto n = static_cast<int64_t>(nbytes);
  {
    std::lock_guard lock(mutex_);
    auto it = free_blocks_.find(cls);
    if (it != free_blocks_.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      stats_.cached_bytes -= static_cast<int64_t>(cls);
      stats_.current_bytes += n;
      stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
      ++stats_.allocations;
      ++stats_.reused;
      MPT_UNPOISON(p, nbytes);
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, cls);
  if (p == nullptr) {
    empty_cache();
    p = std::aligned_alloc(kAlignment, cls);
  }
  if (p == nullptr) {
    MemoryStats s = stats();
    MPT_THROW("[memory] out of CPU memory: allocating {} bytes failed ({} bytes in use)", nbytes, s.current_bytes);
  }
  MPT_POISON(static_cast<char*>(p) + nbytes, cls - nbytes);
  std::lock_guard lock(mutex_);
  stats_.current_bytes += n;
  stats_.reserved_bytes += static_cast<int64_t>(cls);
  reserved_peak_ = std::max(reserved_peak_, stats_.reserved_bytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  ++stats_.allocations;
  return p;
}

void CpuAllocator::free(void* ptr, size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  const size_t cls = size_class(nbytes);
  {
    std::lock_guard lock(mutex_);
    stats_.current_bytes -= static_cast<int64_t>(nbytes);
    if (static_cast<size_t>(stats_.cached_bytes) + cls <= cache_limit_) {
      MPT_POISON(ptr, cls);
      free_blocks_[cls].push_back(ptr);
      stats_.cached_bytes += static_cast<int64_t>(cls);
      return;
    }
    stats_.reserved_bytes -= static_cast<int64_t>(cls);
  }
  release_block(ptr, cls);
}

void CpuAllocator::empty_cache() noexcept {
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard lock(mutex_);
    blocks.swap(free_blocks_);
    stats_.reserved_bytes -= stats_.cached_bytes;
    stats_.cached_bytes = 0;
  }
  for (auto& [cls, list] : blocks)
    for (void* p : list) release_block(p, cls);
}

MemoryStats CpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

int64_t CpuAllocator::reserved_peak() const {
  std::lock_guard lock(mutex_);
  return reserved_peak_;
}

void CpuAllocator::reset_peak() noexcept {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  reserved_peak_ = stats_.reserved_bytes;
}

}  // namespace mpt
