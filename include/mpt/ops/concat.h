// mpt/ops/concat.h: joining and splitting tensors along a dimension: cat, stack, split, chunk.
#pragma once

#include <cstdint>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {

// The tensors joined along `dim` (negative counts from the end): one dtype, one device, one rank, equal sizes except
// along dim. The result is a new contiguous tensor; autograd hands each input its slice of the gradient.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim);
// The tensors (all of one shape) stacked along a new dimension `dim` (0 ..= rank; negative counts from the end).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim);

// Views of x along dim (no copy; recorded by autograd like Tensor::slice): pieces of `size` elements, the last one
// smaller when size does not divide the dimension (torch.split with an int).
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);
// Pieces of the given sizes, which must add up to the dimension (torch.split with a list).
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
// `chunks` pieces of ceil(size / chunks) elements (fewer pieces when the last would be empty, as torch.chunk).
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

}  // namespace mpt::ops
