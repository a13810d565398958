// src/core/cpu_allocator.h: the pooled, 64-byte aligned host allocator behind CPU Storage.
#pragma once

#include <cstddef>
#include <mutex>

#include "block_cache.h"  // beside this header: tests include it by path
#include "mpt/core/memory.h"

namespace mpt {

// Blocks of a detail::BlockCache (best fit, split and merged) carved from aligned_alloc segments: memory freed as one
// size serves requests of another, so the pool holds little above the live peak, and a step's memory stays mapped
// (no page faults from handing large blocks back and forth). Thread-safe.
class CpuAllocator {
 public:
  static constexpr size_t kAlignment = 64;  // segments are; blocks start at multiples of 512 bytes inside them

  // The process-wide allocator. The cache limit comes from MPT_CPU_CACHE_LIMIT_MB (default 2048).
  static CpuAllocator& instance();

  explicit CpuAllocator(size_t cache_limit_bytes);
  ~CpuAllocator();
  CpuAllocator(const CpuAllocator&) = delete;
  CpuAllocator& operator=(const CpuAllocator&) = delete;

  // nbytes == 0 returns nullptr. Throws mpt::Error when the system has no memory left.
  void* allocate(size_t nbytes);
  // `nbytes` is the size passed to allocate. When the free bytes held exceed the cache limit, the wholly free
  // segments go back to the system.
  void free(void* ptr, size_t nbytes) noexcept;
  // Every wholly free segment back to the system.
  void empty_cache() noexcept;
  MemoryStats stats() const;
  // The most stats().reserved_bytes has been since start or reset_peak().
  int64_t reserved_peak() const;
  void reset_peak() noexcept;
  size_t cache_limit() const { return cache_limit_; }

 private:
  void note_reserve();  // under mutex_

  mutable std::mutex mutex_;
  detail::BlockCache cache_;
  size_t cache_limit_;
  MemoryStats stats_;  // current, peak, allocations, reused; reserved and cached are the cache's
  int64_t reserved_peak_ = 0;
};

}  // namespace mpt
