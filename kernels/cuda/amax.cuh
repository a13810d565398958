// kernels/cuda/amax.cuh: a block's max |x| bits folded into a float amax in global memory (include only from .cu).
#pragma once

#include "kernels/cuda/launch.cuh"
#include "kernels/math/quantize.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {

// Folds this thread's max |x| bits into *out: canonical NaN, block reduction, one atomicMax per block (integer max
// is order-independent, so the result is deterministic; *out must hold a non-negative float). Every thread of the
// block must call it.
MPT_DEVICE MPT_INLINE void block_amax_to(unsigned m, unsigned* out) {
  __shared__ unsigned scratch[math::kBlockReduceScratch];
  m = math::block_allreduce(math::canonical_amax_bits(m), math::AmaxBitsMax{}, 0u, scratch);
  if (math::block_thread_index() == 0 && m != 0) atomicMax(out, m);
}

}  // namespace mpt::kernels::cuda
