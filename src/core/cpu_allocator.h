// src/core/cpu_allocator.h: the pooled, 64-byte aligned host allocator behind CPU Storage.
#pragma once

#include <cstddef>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "mpt/core/memory.h"

namespace mpt {

class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;

  // Blocks are rounded up to a size class: 64-byte steps up to 256 bytes, then four classes per
  // power of two (n in (2^k, 2^(k+1)] rounds up to a multiple of 2^(k-2)), so at most 25% is wasted.
  static size_t size_class(size_t nbytes);

  // The process-wide allocator. The cache limit comes from MPT_CPU_CACHE_LIMIT_MB (default 2048).
  static CpuAllocator& instance();

  explicit CpuAllocator(size_t cache_limit_bytes);
  ~CpuAllocator();
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;

  // nbytes == 0 returns nullptr. Throws mpt::Error when the system has no memory left.
  void* allocate(size_t nbytes);
  // `nbytes` is the size passed to allocate. A block that would push the cache over its limit goes
  // back to the system at once.
  void free(void* ptr, size_t nbytes) noexcept;
  void empty_cache() noexcept;
  MemoryStats stats() const;
  // The most stats().reserved_bytes has been since start or reset_peak().
  int64_t reserved_peak() const;
  void reset_peak() noexcept;
  size_t cache_limit() const { return cache_limit_; }

 private:
  mutable std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_blocks_;  // size class -> cached blocks (LIFO)
  size_t cache_limit_;
  MemoryStats stats_;
  int64_t reserved_peak_ = 0;
};

}  // namespace mpt
