// mpt/ops/dropout.h: dropout whose mask is regenerated from the Philox stream in backward (never stored).
#pragma once

#include <cstdint>

#include "mpt/core/generator.h"
#include "mpt/core/tensor.h"

namespace mpt::ops {

// What backward (or activation checkpointing) needs to replay a dropout: the stream and probability.
// Element i was kept when uniform_at(seed, offset, i, 0, 1) >= p (kernels/math/random.h).
struct DropoutState {
  uint64_t seed = 0;
  uint64_t offset = 0;
  float p = 0;
};

// y = x * mask / (1 - p), each element dropped with probability p (f32, f16, bf16; f64 on the CPU).
// Draws philox_offset_increment(numel) counters from `gen` (none when p is 0 or 1) and records the
// stream position in *state when state is not null. p must be in [0, 1]: p = 0 copies x, p = 1 gives
// zeros (like PyTorch). A dropped element is exactly 0, even where x is Inf or NaN. The mask is the same
// on CPU and CUDA and for any thread count.
Tensor dropout(const Tensor& x, float p, Generator& gen, DropoutState* state = nullptr);

// dx = dy * mask / (1 - p) with the mask of `state` regenerated. When `dx` is given (dy's shape, dtype
// and device, contiguous) the result is accumulated into it (dx += ...) and dx is returned.
Tensor dropout_backward(const Tensor& dy, const DropoutState& state, Tensor dx = {});

}  // namespace mpt::ops
