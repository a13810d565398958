// src/core/cpu_allocator.cpp: a BlockCache over aligned_alloc segments, with statistics and ASan poisoning.
#include "core/cpu_allocator.h"

#include <algorithm>
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
// Memory no live block holds is poisoned so that a use after free through a stale pointer is still reported,
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

void* acquire_segment(size_t bytes) {
  void* p = std::aligned_alloc(CpuAllocator::kAlignment, bytes);
  if (p != nullptr) MPT_POISON(p, bytes);  // every byte no block hands out stays poisoned
  return p;
}

void release_segment(void* p, size_t bytes) {
  MPT_UNPOISON(p, bytes);
  std::free(p);
}

}  // namespace

CpuAllocator& CpuAllocator::instance() {
  // Never destroyed: a Storage released during static destruction still finds its allocator.
  static CpuAllocator* allocator = new CpuAllocator(cache_limit_from_env());
  return *allocator;
}

CpuAllocator::CpuAllocator(size_t cache_limit_bytes)
    : cache_(acquire_segment, release_segment), cache_limit_(cache_limit_bytes) {}

CpuAllocator::~CpuAllocator() = default;  // the cache gives every segment back

void CpuAllocator::note_reserve() {
  reserved_peak_ = std::max(reserved_peak_, static_cast<int64_t>(cache_.reserved()));
}

void* CpuAllocator::allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  MPT_CHECK(nbytes <= kMaxRequest, "[memory] cannot allocate {} bytes on the CPU", nbytes);
  std::lock_guard lock(mutex_);
  const uint64_t acquires = cache_.segment_acquires();
  void* p = cache_.allocate(nbytes);  // on a refusal the idle segments went back and it tried again
  if (p == nullptr) {
    MPT_THROW("[memory] out of CPU memory: allocating {} bytes failed ({} bytes in use, {} held by the pool)", nbytes,
              stats_.current_bytes, cache_.reserved());
  }
  MPT_UNPOISON(p, nbytes);  // the slack after the request stays poisoned
  stats_.current_bytes += static_cast<int64_t>(nbytes);
  stats_.peak_bytes = std::max(stats_.peak_bytes, stats_.current_bytes);
  ++stats_.allocations;
  if (cache_.segment_acquires() == acquires) ++stats_.reused;
  note_reserve();
  return p;
}

void CpuAllocator::free(void* ptr, size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  std::lock_guard lock(mutex_);
  if (!cache_.owns(ptr)) return;  // not a block of this pool: cannot happen through Storage, and must not throw here
  stats_.current_bytes -= static_cast<int64_t>(nbytes);
  MPT_POISON(ptr, cache_.block_size(ptr));  // a use after free is still reported, though malloc never sees it
  cache_.free(ptr);
  if (cache_.idle() > cache_limit_) cache_.release_idle();
}

void CpuAllocator::empty_cache() noexcept {
  std::lock_guard lock(mutex_);
  cache_.release_idle();
}

MemoryStats CpuAllocator::stats() const {
  std::lock_guard lock(mutex_);
  MemoryStats s = stats_;
  s.reserved_bytes = static_cast<int64_t>(cache_.reserved());
  s.cached_bytes = static_cast<int64_t>(cache_.idle());
  return s;
}

int64_t CpuAllocator::reserved_peak() const {
  std::lock_guard lock(mutex_);
  return reserved_peak_;
}

void CpuAllocator::reset_peak() noexcept {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.current_bytes;
  reserved_peak_ = static_cast<int64_t>(cache_.reserved());
}

}  // namespace mpt
