// mpt/ops/reduction.h: sum and mean over an axis, sum to a broadcast shape, global L2 norm, finite check.
#pragma once

#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// Sum (mean) of x over dimension `dim` (negative counts from the end), any axis. The result has x's
// dtype and device, and x's shape without `dim` (with size 1 there when keepdim). Accumulated in float
// (double for f64) in a fixed order: 32 strided lanes combined by a butterfly, chunks of 2048 elements
// for long axes (kernels/math/reduce_ops.h), the same bits on CPU and CUDA for any thread count;
// error <= (ceil(min(L, 2048) / 32) + ceil(L / 2048 / 32) + 10) * 2^-24 * sum |x| for an axis of L.
// f32, f16, bf16; f64 on the CPU. The mean of an empty axis is NaN (0 / 0), its sum 0.
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x, int64_t dim, bool keepdim = false);
// Sum (mean) of all elements: a 0-d tensor.
Tensor sum(const Tensor& x);
Tensor mean(const Tensor& x);

// The largest (smallest) element along `dim` and its index (i64; the first one on ties; a NaN counts as the extreme
// and its first index is taken, as in PyTorch). values keep x's dtype. The gradient flows to the chosen element only.
// f32, f16, bf16 (f64 on the CPU); the dimension must not be empty.
struct ValuesIndices {
  Tensor values;
  Tensor indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
// Variance along `dim`: sum((x - mean)^2) / (n - correction) (correction 1: the unbiased estimate, torch.var's
// default; 0: the population variance), computed in f32 (f64 for f64) and rounded once to x's dtype. Differentiable.
Tensor var(const Tensor& x, int64_t dim, bool keepdim = false, int64_t correction = 1);

// x summed over the dimensions along which `shape` broadcasts to x.shape() (leading dims that `shape`
// lacks, and dims where `shape` has size 1): the gradient of a broadcast operand. The result has
// `shape`. When `out` is given (that shape, x's dtype and device, contiguous) the sum is accumulated
// into it (+=) and out is returned.
Tensor sum_to_shape(const Tensor& x, const Shape& shape, Tensor out = {});

// sqrt(sum over tensors of sum x^2), the gradient-clipping norm: each tensor's sum of squares in float
// in the canonical order, then the per-tensor partials added in list order, then the square root:
// deterministic, the same bits on CPU and CUDA. All tensors on one device; f32, f16 and bf16 may be mixed
// (result: 0-d f32); f64 tensors (CPU only, result 0-d f64) may not be mixed with others. An empty list
// gives 0 (f32 on the CPU).
Tensor global_l2_norm(const std::vector<Tensor>& tensors);

// False when any element of any tensor is Inf or NaN (f32, f16, bf16, f64). On CUDA this waits for the
// result; all_finite_flag leaves it on the device: a 0-d u8 tensor, 1 when all are finite, else 0.
// Integer tensors are always finite. An empty list is finite (the flag then lives on the CPU).
bool all_finite(const std::vector<Tensor>& tensors);
Tensor all_finite_flag(const std::vector<Tensor>& tensors);

}  // namespace mpt::ops
