// mpt/core/shape.h: shapes and strides (row-major by default) and the checks every view relies on.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace mpt {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel(const Shape& shape);            // product of the sizes (1 for a scalar shape)
Strides contiguous_strides(const Shape& shape);
std::string shape_str(const Shape& shape);    // "[2, 3]"
// Wraps a possibly negative dimension index into [0, ndim); `op` names the caller in the error.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// Broadcasts two shapes NumPy-style; throws naming `op` and both shapes when incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace mpt
