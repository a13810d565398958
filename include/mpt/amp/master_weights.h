// mpt/amp/master_weights.h: FP32 master parameters and their cached low-precision compute copies.
#pragma once

#include <cstdint>

#include "mpt/core/tensor.h"

namespace mpt::amp {

// The copy of the F32 master parameter `master` in `dtype` (F16 or BF16) that GEMM-like ops use under Autocast.
// It is made once (one cast) and reused, by every micro-batch, until the parameter changes: an optimizer step
// invalidates the copies of the parameters it updates, Module::load_state_dict and Module::to invalidate all.
// The copy is a leaf of its own: when the master requires grad (and grad mode is on) so does the copy, and each time
// a backward finishes the copy's gradient it is converted to F32, added into the master's gradient (so micro-batch
// gradients accumulate in FP32, not in the low precision) and cleared, and the master's post-accumulate hooks run.
// A master that is not an F32 leaf, or already has `dtype`, is returned cast by a plain (recorded) to().
Tensor compute_copy(const Tensor& master, DType dtype);

// Drops the cached copies of one parameter, or of all.
void invalidate_compute_copies(const Tensor& master);
void invalidate_compute_copies();

struct CastCacheStats {
  int64_t casts = 0;  // copies made
  int64_t hits = 0;   // requests served from the cache
  int64_t live = 0;   // cached copies now
};
CastCacheStats cast_cache_stats();
void reset_cast_cache_stats();

}  // namespace mpt::amp
