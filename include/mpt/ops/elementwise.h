// mpt/ops/elementwise.h: add, mul, scale and the in-place residual add, with their backward.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Binary ops take `b` broadcast NumPy-style onto a's shape (b's shape must broadcast to a's: same shape,
// a bias [C] over [N, C], [1, C], [B, 1, C] over [B, T, C], ...; the result has a's shape). Both operands
// must have one dtype (f32, f16, bf16; f64 on the CPU) and one device. Computed in float (double for f64)
// and rounded once; trailing-suffix broadcasts run without materialising b, others expand b first.

// y = a + b
Tensor add(const Tensor& a, const Tensor& b);
// y = a * b
Tensor mul(const Tensor& a, const Tensor& b);
// y = alpha * x
Tensor scale(const Tensor& x, double alpha);
// a += alpha * b in place (the residual add; also "accumulate into a gradient"); a must be contiguous.
// Returns a.
Tensor add_(const Tensor& a, const Tensor& b, double alpha = 1);

// Gradients of a binary op. When da / db are given (a's shape / b's shape, same dtype and device,
// contiguous) the gradients are accumulated into them (+=) and they are returned; otherwise new tensors.
struct BinaryGrads {
  Tensor da;
  Tensor db;
};

// y = a + b: da = dy, db = dy summed over the dims b was broadcast along (ops::sum_to_shape).
BinaryGrads add_backward(const Tensor& dy, const Shape& b_shape, Tensor da = {}, Tensor db = {});
// y = a * b: da = dy * b, db = (dy * a) summed over b's broadcast dims.
BinaryGrads mul_backward(const Tensor& dy, const Tensor& a, const Tensor& b, Tensor da = {}, Tensor db = {});
// y = alpha * x: dx = alpha * dy, accumulated into dx when given.
Tensor scale_backward(const Tensor& dy, double alpha, Tensor dx = {});

}  // namespace mpt::ops
