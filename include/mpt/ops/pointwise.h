// mpt/ops/pointwise.h: the general elementwise ops: unary functions, binary ops with NumPy broadcasting,
// comparisons, where and masked_fill. Autograd records each; its backward is the fused gradient kernel.
#pragma once

#include <optional>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Float tensors (f32, f16, bf16; f64 on the CPU), any shape and strides, CPU or CUDA. Computed in float (double for
// f64) with the functors of kernels/math/pointwise.h and rounded once to the input's dtype; the backward computes
// dy * f'(x) in float from the saved input and rounds once. Results are contiguous.

// ---- unary: y = f(x), x's shape, dtype and device
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);      // gradient sign(x), 0 at 0
Tensor relu(const Tensor& x);     // gradient 0 at x <= 0; NaN propagates
Tensor silu(const Tensor& x);     // x * sigmoid(x)
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);  // 1 / (1 + exp(-x)), without overflow for large |x|
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);      // log(0) = -inf, log(x < 0) = NaN
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);    // 1 / sqrt(x)
Tensor softplus(const Tensor& x); // log(1 + exp(x)), stable for any x; gradient sigmoid(x)
// x^exponent. Exponents 0, +-0.5, +-1, 2, 3 are exact arithmetic; others use the platform's pow (glibc on the CPU,
// CUDA's powf on a GPU). The gradient is 0 where the exponent is 0.
Tensor pow(const Tensor& x, double exponent);
// min(max(x, lo), hi) with a missing bound left open; NaN stays NaN. The gradient passes where lo <= x <= hi
// (PyTorch's rule). lo > hi is an error.
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);

// ---- binary, NumPy broadcasting of both operands (the result has the broadcast shape); one dtype and device. The
// gradient of a broadcast operand is summed over the dimensions it was broadcast along.
Tensor sub(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);  // NaN propagates; a tie splits the gradient evenly (PyTorch)
Tensor minimum(const Tensor& a, const Tensor& b);
// a^b elementwise; the gradient for b is dy * a^b * log(a) (0 where a == 0 and b >= 0).
Tensor pow(const Tensor& a, const Tensor& b);
// SwiGLU's gated product silu(gate) * up in one pass (Llama's MLP: down(silu(gate(x)) * up(x))), its two gradients
// in one fused backward; no intermediate silu(gate) tensor is stored.
Tensor swiglu(const Tensor& gate, const Tensor& up);
// The same on one packed tensor gu [..., 2F] whose last dimension holds gate then up (the output of one GEMM over
// the gate and up weights' rows, ops::packed_linear): y [..., F], bit for bit swiglu(gate, up); backward writes
// d(gu) [..., 2F] in one pass, so the two projections' gradients reach their GEMM as one tensor.
Tensor swiglu_packed(const Tensor& gu);

// ---- comparisons: u8 masks (1 true, 0 false) of the broadcast shape; not differentiable. NaN compares unequal.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Against a scalar (converted to a's dtype first, as PyTorch does for a tensor-scalar comparison).
Tensor eq(const Tensor& a, double b);
Tensor ne(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor le(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor ge(const Tensor& a, double b);

// ---- select
// cond ? a : b elementwise: cond is u8 (any nonzero is true), a and b one float dtype; the three broadcast together.
// Gradients: dy where cond to a, dy where !cond to b (each summed back to its operand's shape).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask (u8, broadcast to x's shape) is nonzero; the gradient to x is 0 there.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// A 0-d tensor holding `value` in like's dtype, on like's device: the scalar operand of the Tensor operators.
Tensor scalar_like(const Tensor& like, double value);

}  // namespace mpt::ops
