// mpt/core/memory.h: device memory: Storage (owned bytes), byte copies between devices, allocator statistics.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "mpt/core/device.h"
#include "mpt/core/stream.h"

namespace mpt {

// Bytes owned on one device. CPU memory is 64-byte aligned and pooled; CUDA memory comes from a
// stream-ordered cudaMallocAsync pool. Freed blocks go back to the pool of their device.
// CUDA memory is freed on the stream it was allocated on: work on other streams that uses it must be
// ordered before that stream's later work (Event::record / Event::wait) before the Storage dies.
class Storage {
 public:
  // Allocates nbytes (0 is allowed and yields a null data pointer) on `device`, ordered on the
  // device's current stream. Throws mpt::Error when the device is unavailable or memory runs out.
  static std::shared_ptr<Storage> allocate(size_t nbytes, Device device);
  // Allocates on stream.device(), ordered on `stream`.
  static std::shared_ptr<Storage> allocate(size_t nbytes, const Stream& stream);
  ~Storage();  // never throws: a failed free is reported on stderr
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  void* stream() const { return stream_.get(); }  // the cudaStream_t it is ordered on; null on the CPU

 private:
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<void> stream)
      : data_(data), nbytes_(nbytes), device_(device), stream_(std::move(stream)) {}
  void* data_;
  size_t nbytes_;
  Device device_;
  std::shared_ptr<void> stream_;
};

// Copies nbytes between any two devices (host<->host, host->device, device->host, device->device),
// ordered on `stream`, which must be a CUDA stream when either side is CUDA. Host<->host copies are
// done at once. Returns once the copy is enqueued; call stream.synchronize() before reading a
// device->host result or reusing a host source.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, const Stream& stream);
// Synchronous: on the current (legacy default) stream of the CUDA side, if any, which is synchronized before
// returning. Work on streams made by Stream(device) (non-blocking) is not waited for: synchronize them first.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes);

struct MemoryStats {
  int64_t current_bytes = 0;   // bytes requested by live allocations
  int64_t peak_bytes = 0;      // maximum of current_bytes since start or reset_peak_memory_stats
  int64_t reserved_bytes = 0;  // bytes held from the system: live blocks (rounded up) + cached blocks
  int64_t cached_bytes = 0;    // bytes held for reuse (CUDA: by the pool and by the block cache)
  int64_t allocations = 0;     // number of non-empty allocations
  int64_t reused = 0;          // allocations served from the pool without asking the system
};
MemoryStats memory_stats(Device device);
void reset_peak_memory_stats(Device device);
// Bytes that new allocations on `device` can still get, for refusing work that cannot fit before allocating it.
// CPU: the kernel's MemAvailable (/proc/meminfo), capped by the cgroup's memory.max minus memory.current when one is
// set, plus what mptrain's own pool caches. CUDA: the device's total memory minus mptrain's live allocations (other
// processes' use is not seen). Approximate by nature: a bound to refuse the impossible, not a promise.
int64_t available_memory(Device device);
// Returns cached blocks to the system (CPU: free(); CUDA: the block cache's wholly free segments to the pool, then
// synchronizes the device and trims the pool).
void empty_cache(Device device);

// CUDA: a device's default-stream tensors are blocks of a host-side cache carved from large pool segments (best fit,
// split and merged: memory freed as one size serves another), handed out without a driver call (a training step's
// sizes repeat: after warm-up it makes no cudaMallocFromPoolAsync at all).
// On by default; off under the emulation build (fresh blocks let its cudart double catch reads of memory nothing
// wrote); MPT_CUDA_CACHING=0/1 overrides. Turning it off returns the cached blocks to the pool. No-op without CUDA.
void set_cuda_memory_caching(bool on);
bool cuda_memory_caching();

// When on, every new CPU allocation is filled with 0xFF bytes (NaN in every float dtype), so a test can
// prove that an op wrote every element of its output. Off by default; MPT_POISON_ALLOCATIONS=1 turns it on.
void set_allocation_poison(bool enabled);
bool allocation_poison();

}  // namespace mpt
