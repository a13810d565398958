// mpt/ops/activation.h: GELU (tanh approximation) forward and backward on tensors.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

// y = gelu(x), same shape, dtype and device as x (f32, f16, bf16; f64 on the CPU for reference checks).
Tensor gelu(const Tensor& x);

// dx = dy * gelu'(x). When `dx` is given (same shape, dtype and device), the result is accumulated into it
// (dx += ...) and dx is returned; otherwise a new tensor is returned.
Tensor gelu_backward(const Tensor& dy, const Tensor& x, Tensor dx = {});

}  // namespace mpt::ops
