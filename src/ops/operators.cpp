// src/ops/operators.cpp: Tensor's arithmetic operators as calls of the ops (which record autograd).
#include "mpt/ops/operators.h"

#include "mpt/ops/elementwise.h"
#include "mpt/ops/pointwise.h"

namespace mpt {

Tensor operator+(const Tensor& a, const Tensor& b) { return ops::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return ops::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return ops::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return ops::div(a, b); }
Tensor operator-(const Tensor& x) { return ops::neg(x); }

Tensor operator+(const Tensor& a, double s) { return ops::add(a, ops::scalar_like(a, s)); }
Tensor operator+(double s, const Tensor& a) { return a + s; }
Tensor operator-(const Tensor& a, double s) { return ops::sub(a, ops::scalar_like(a, s)); }
Tensor operator-(double s, const Tensor& a) { return ops::sub(ops::scalar_like(a, s), a); }
Tensor operator*(const Tensor& a, double s) { return ops::scale(a, s); }
Tensor operator*(double s, const Tensor& a) { return ops::scale(a, s); }
Tensor operator/(const Tensor& a, double s) { return ops::div(a, ops::scalar_like(a, s)); }
Tensor operator/(double s, const Tensor& a) { return ops::div(ops::scalar_like(a, s), a); }

}  // namespace mpt
