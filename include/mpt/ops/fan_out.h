// mpt/ops/fan_out.h: one tensor handed to several readers, their gradients summed in f32.
#pragma once

#include <cstdint>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// n (2 or 3) aliases of x (views: nothing is copied) for n readers. Backward sums the readers' gradients, the last
// reader's first ((g[2] + g[1]) + g[0]), in f32, and for an f16/bf16 x returns the sum in f32: x's gradient is then
// f32, for a producer that reads an f32 gradient of its low-precision output (a norm of the f32 residual stream
// that wrote the cast its readers share: Llama's q, k, v and gate, up). The bits are those of each reader casting
// its own f32 copy of x, whose gradients the engine sums in f32 in that order; one pass instead of n casts and n - 1
// additions. An f32 x, and FP8 codes (E4M3, whose readers' gradients are f32: a norm's codes shared by FP8 layers),
// get their f32 gradients summed likewise in one pass, the bits of the engine's additions; f64 adds in f64.
std::vector<Tensor> fan_out(const Tensor& x, int64_t n);

}  // namespace mpt::ops
