// mpt/core/memory_peak.h: the most memory an allocator has held from the system (its reserve's high-water mark).
#pragma once

#include <cstdint>

#include "mpt/core/device.h"

namespace mpt {

// The high-water mark of MemoryStats::reserved_bytes (live blocks rounded up plus cached ones) since start or the
// last reset_peak_memory_stats(device): what the device had to provide, torch.cuda.max_memory_reserved's figure, and
// the like-for-like comparison with a program that allocates its buffers once (llm.c), where MemoryStats::peak_bytes
// counts live allocations only. CUDA: the stream-ordered pool's cudaMemPoolAttrReservedMemHigh (mptrain's own block
// cache holds its blocks inside that reserve); CPU: the pool's own count.
int64_t reserved_peak_bytes(Device device);

}  // namespace mpt
