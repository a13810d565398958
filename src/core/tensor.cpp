// src/core/tensor.cpp: Tensor construction, metadata and views (everything that shares storage).
#include "mpt/core/tensor.h"

#include <algorithm>
#include <exception>
#include <limits>
#include <memory>
#include <numeric>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/reduction.h"

namespace mpt {

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)), shape_(std::move(shape)), strides_(std::move(strides)), offset_(offset),
      dtype_(dtype) {
  MPT_CHECK(storage_ != nullptr, "[tensor] null storage");
  MPT_CHECK(shape_.size() == strides_.size(), "[tensor] shape {} and strides {} differ in rank", shape_str(shape_),
            shape_str(strides_));
  MPT_CHECK(offset_ >= 0, "[tensor] negative offset {}", offset_);
  // Every reachable element must lie inside the storage.
  const int64_t n = mpt::numel(shape_);
  if (n > 0) {
    int64_t lo = offset_, hi = offset_;
    for (size_t i = 0; i < shape_.size(); ++i) {
      const int64_t extent = (shape_[i] - 1) * strides_[i];
      (extent < 0 ? lo : hi) += extent;
    }
    MPT_CHECK(lo >= 0 && (hi + 1) * static_cast<int64_t>(dtype_size(dtype_)) <= static_cast<int64_t>(storage_->nbytes()),
              "[tensor] view {} strides {} offset {} of dtype {} exceeds its storage of {} bytes", shape_str(shape_),
              shape_str(strides_), offset_, dtype_, storage_->nbytes());
  }
}

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  const int64_t n = mpt::numel(shape);
  MPT_CHECK(static_cast<uint64_t>(n) <= std::numeric_limits<uint64_t>::max() / dtype_size(dtype),
            "[tensor] a {} tensor of shape {} has more bytes than 2^64", dtype, shape_str(shape));
  const size_t nbytes = static_cast<size_t>(n) * dtype_size(dtype);
  std::shared_ptr<Storage> storage;
  try {
    storage = Storage::allocate(nbytes, device);
  } catch (const std::exception& e) {  // the allocator's mpt::Error, or std::bad_alloc: name what was asked for
    MPT_THROW("[tensor] cannot allocate a {} tensor of shape {} ({} bytes) on {}: {}", dtype, shape_str(shape), nbytes,
              device, e.what());
  }
  return Tensor(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor Tensor::zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0.0, dtype, device); }
Tensor Tensor::ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1.0, dtype, device); }

Tensor Tensor::full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Device Tensor::device() const {
  check_defined("device");
  return storage_->device();
}

void Tensor::check_defined(const char* op) const {
  MPT_CHECK(storage_ != nullptr, "[{}] called on an undefined tensor", op);
}

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "size")]; }
int64_t Tensor::stride(int64_t d) const { return strides_[wrap_dim(d, dim(), "stride")]; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // no element to lay out (PyTorch's rule too); strides are then arbitrary
  int64_t expected = 1;
  for (size_t i = shape_.size(); i-- > 0;) {
    if (shape_[i] == 1) continue;
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  check_defined("data_ptr");
  return static_cast<char*>(storage_->data()) + offset_ * static_cast<int64_t>(dtype_size(dtype_));
}

std::string Tensor::meta_str() const {
  if (!defined()) return "undefined";
  return fmt::format("{}{} {}", dtype_, shape_str(shape_), device());
}

namespace {

// Resolves one -1 in `shape` so that it holds `n` elements.
Shape infer_shape(const Shape& shape, int64_t n, const char* op) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      MPT_CHECK(infer < 0, "[{}] only one dimension can be -1, got {}", op, shape_str(shape));
      infer = static_cast<int64_t>(i);
    } else {
      MPT_CHECK(out[i] >= 0, "[{}] invalid size {} in {}", op, out[i], shape_str(shape));
      known *= out[i];
    }
  }
  if (infer >= 0) {
    MPT_CHECK(known != 0 && n % known == 0, "[{}] cannot infer -1 in {} for {} elements", op, shape_str(shape), n);
    out[infer] = n / known;
  }
  MPT_CHECK(mpt::numel(out) == n, "[{}] shape {} is invalid for {} elements", op, shape_str(shape), n);
  return out;
}

// Strides for viewing (old shape, old strides) as `shape` without copying, if possible (PyTorch's
// computeStride): each run of old dims that is contiguous in memory can be re-split freely.
bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& shape, Strides& out) {
  out.assign(shape.size(), 0);
  if (mpt::numel(old_shape) <= 1) {
    out = contiguous_strides(shape);
    return true;
  }
  int64_t view_d = static_cast<int64_t>(shape.size()) - 1;
  int64_t chunk_stride = old_strides.back();  // stride of the innermost dim of the current chunk
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = static_cast<int64_t>(old_shape.size()) - 1; d >= 0; --d) {
    tensor_numel *= old_shape[d];
    const bool chunk_ends = d == 0 || (old_shape[d - 1] != 1 && old_strides[d - 1] != tensor_numel * chunk_stride);
    if (!chunk_ends) continue;
    while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
      out[view_d] = view_numel * chunk_stride;
      view_numel *= shape[view_d];
      --view_d;
    }
    if (view_numel != tensor_numel) return false;
    if (d > 0) {
      chunk_stride = old_strides[d - 1];
      tensor_numel = 1;
      view_numel = 1;
    }
  }
  return view_d == -1;
}

// Records out = a view of `in` when `in` requires grad and grad mode is on; `back` maps out's gradient to in's.
template <class Back>
Tensor track_view(const Tensor& in, Tensor out, const char* name, Back back) {
  if (in.requires_grad() && autograd::is_grad_enabled())
    autograd::record(name, {&in}, {&out}, [back](const std::vector<Tensor>& g) { return std::vector<Tensor>{back(g[0])}; });
  return out;
}

}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  const Shape target = infer_shape(shape, numel(), "view");
  Strides strides;
  MPT_CHECK(view_strides(shape_, strides_, target, strides),
            "[view] cannot view {} with strides {} as {} without a copy; use reshape()", meta_str(),
            shape_str(strides_), shape_str(target));
  return track_view(*this, Tensor(storage_, target, strides, offset_, dtype_), "ViewBackward",
                    [shape = shape_](const Tensor& g) { return g.reshape(shape); });
}

Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  const Shape target = infer_shape(shape, numel(), "reshape");
  Strides strides;
  if (view_strides(shape_, strides_, target, strides))
    return track_view(*this, Tensor(storage_, target, strides, offset_, dtype_), "ReshapeBackward",
                      [shape = shape_](const Tensor& g) { return g.reshape(shape); });
  return contiguous().view(target);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  check_defined("slice");
  MPT_CHECK(dim() > 0, "[slice] cannot slice a 0-d tensor");
  d = wrap_dim(d, dim(), "slice");
  MPT_CHECK(step > 0, "[slice] step must be positive, got {}", step);
  const int64_t n = shape_[d];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape shape = shape_;
  Strides strides = strides_;
  shape[d] = (end - start + step - 1) / step;
  strides[d] *= step;
  return track_view(*this, Tensor(storage_, shape, strides, offset_ + start * strides_[d], dtype_), "SliceBackward",
                    [in = shape_, d, start, end, step](const Tensor& g) {
                      Tensor gi = Tensor::zeros(in, g.dtype(), g.device());
                      gi.slice(d, start, end, step).copy_(g);
                      return gi;
                    });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  check_defined("select");
  MPT_CHECK(dim() > 0, "[select] cannot select from a 0-d tensor");
  d = wrap_dim(d, dim(), "select");
  const int64_t n = shape_[d];
  MPT_CHECK(index >= -n && index < n, "[select] index {} out of range for dimension {} of size {} in {}", index, d,
            n, meta_str());
  if (index < 0) index += n;
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return track_view(*this, Tensor(storage_, shape, strides, offset_ + index * strides_[d], dtype_), "SelectBackward",
                    [in = shape_, d, index](const Tensor& g) {
                      Tensor gi = Tensor::zeros(in, g.dtype(), g.device());
                      gi.select(d, index).copy_(g);
                      return gi;
                    });
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  check_defined("transpose");
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape shape = shape_;
  Strides strides = strides_;
  if (dim() > 0) {
    std::swap(shape[d0], shape[d1]);
    std::swap(strides[d0], strides[d1]);
  }
  return track_view(*this, Tensor(storage_, shape, strides, offset_, dtype_), "TransposeBackward",
                    [d0, d1](const Tensor& g) { return g.transpose(d0, d1); });
}

Tensor Tensor::t() const {
  MPT_CHECK(dim() == 2, "[t] expects a 2-d tensor, got {}", meta_str());
  return transpose(0, 1);
}

Tensor Tensor::permute(const std::vector<int64_t>& order) const {
  check_defined("permute");
  MPT_CHECK(static_cast<int64_t>(order.size()) == dim(), "[permute] order {} has {} entries for a {}-d tensor",
            shape_str(order), order.size(), dim());
  Shape shape(order.size());
  Strides strides(order.size());
  std::vector<bool> seen(order.size(), false);
  for (size_t i = 0; i < order.size(); ++i) {
    const int64_t d = wrap_dim(order[i], dim(), "permute");
    MPT_CHECK(!seen[d], "[permute] dimension {} repeated in {}", d, shape_str(order));
    seen[d] = true;
    shape[i] = shape_[d];
    strides[i] = strides_[d];
  }
  std::vector<int64_t> inverse(order.size());
  for (size_t i = 0; i < order.size(); ++i) inverse[static_cast<size_t>(wrap_dim(order[i], dim(), "permute"))] = i;
  return track_view(*this, Tensor(storage_, shape, strides, offset_, dtype_), "PermuteBackward",
                    [inverse](const Tensor& g) { return g.permute(inverse); });
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  MPT_CHECK(shape.size() >= shape_.size(), "[expand] cannot expand {} to fewer dimensions {}", meta_str(),
            shape_str(shape));
  const size_t lead = shape.size() - shape_.size();
  Shape out(shape.size());
  Strides strides(shape.size());
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      MPT_CHECK(shape[i] >= 0, "[expand] new leading dimension {} must be >= 0 in {}", shape[i], shape_str(shape));
      out[i] = shape[i];
      strides[i] = 0;
      continue;
    }
    const int64_t have = shape_[i - lead];
    const int64_t want = shape[i] == -1 ? have : shape[i];
    MPT_CHECK(want == have || have == 1, "[expand] cannot expand {} to {}: dimension {} has size {} (only size-1 "
              "dimensions broadcast)", meta_str(), shape_str(shape), i, have);
    out[i] = want;
    strides[i] = want == have ? strides_[i - lead] : 0;
  }
  return track_view(*this, Tensor(storage_, out, strides, offset_, dtype_), "ExpandBackward",
                    [in = shape_](const Tensor& g) { return ops::sum_to_shape(g, in); });
}

Tensor Tensor::unsqueeze(int64_t d) const {
  check_defined("unsqueeze");
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape shape = shape_;
  Strides strides = strides_;
  const int64_t stride = d < dim() ? shape_[d] * strides_[d] : 1;
  shape.insert(shape.begin() + d, 1);
  strides.insert(strides.begin() + d, stride);
  return track_view(*this, Tensor(storage_, shape, strides, offset_, dtype_), "UnsqueezeBackward",
                    [d](const Tensor& g) { return g.squeeze(d); });
}

Tensor Tensor::squeeze(int64_t d) const {
  check_defined("squeeze");
  d = wrap_dim(d, dim(), "squeeze");
  MPT_CHECK(dim() > 0 && shape_[d] == 1, "[squeeze] dimension {} of {} has size {}, expected 1", d, meta_str(),
            dim() > 0 ? shape_[d] : 0);
  Shape shape = shape_;
  Strides strides = strides_;
  shape.erase(shape.begin() + d);
  strides.erase(strides.begin() + d);
  return track_view(*this, Tensor(storage_, shape, strides, offset_, dtype_), "SqueezeBackward",
                    [d](const Tensor& g) { return g.unsqueeze(d); });
}

}  // namespace mpt
