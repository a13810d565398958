// mpt/ops/operators.h: arithmetic operators on Tensor (tensor and scalar operands), recorded by autograd.
#pragma once

#include "mpt/core/tensor.h"

namespace mpt {

// Tensor op Tensor: ops::add, ops::sub, ops::mul, ops::div with NumPy broadcasting of both operands; one dtype and
// device (an mpt::Error naming the op and both tensors otherwise). Tensor op scalar (either side): the scalar takes
// the tensor's dtype and device, as in PyTorch; a * s is ops::scale. A loss then reads as it does in PyTorch:
// `ops::mean((pred - y) * (pred - y))`.
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& x);

Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);

}  // namespace mpt
