// src/core/shape.cpp: shape arithmetic with overflow and range checks.
#include "mpt/core/shape.h"

#include <algorithm>
#include <limits>

#include "mpt/core/error.h"

namespace mpt {

int64_t numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) {
    MPT_CHECK(s >= 0, "[shape] negative size {} in shape {}", s, shape_str(shape));
    MPT_CHECK(s == 0 || n <= std::numeric_limits<int64_t>::max() / s,
              "[shape] shape {} has more than 2^63 elements", shape_str(shape));
    n *= s;
  }
  return n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  MPT_CHECK(dim >= lo && dim <= hi, "[{}] dimension {} out of range for a {}-d tensor (expected {}..{})", op, dim,
            ndim, lo, hi);
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t sa = i < n - a.size() ? 1 : a[i - (n - a.size())];
    const int64_t sb = i < n - b.size() ? 1 : b[i - (n - b.size())];
    MPT_CHECK(sa == sb || sa == 1 || sb == 1, "[{}] shapes {} and {} cannot be broadcast together", op, shape_str(a),
              shape_str(b));
    out[i] = sa == 1 ? sb : sa;
  }
  return out;
}

}  // namespace mpt
