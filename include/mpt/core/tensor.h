// mpt/core/tensor.h: Tensor, a cheap handle to (shared storage, shape, strides, offset, dtype, device).
#pragma once

#include <functional>
#include <iosfwd>
#include <memory>
#include <string>
#include <vector>

#include "mpt/core/device.h"
#include "mpt/core/dtype.h"
#include "mpt/core/error.h"
#include "mpt/core/generator.h"
#include "mpt/core/memory.h"
#include "mpt/core/shape.h"

namespace mpt {

namespace autograd {
struct AutogradMeta;
class Node;
}  // namespace autograd

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor; most operations on it throw

  // ---- factories (row-major contiguous results)
  static Tensor empty(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor zeros(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor ones(const Shape& shape, DType dtype = DType::F32, Device device = Device::cpu());
  static Tensor full(const Shape& shape, double value, DType dtype = DType::F32, Device device = Device::cpu());
  // [start, end) in steps of `step` (like torch.arange): ceil((end - start) / step) elements.
  static Tensor arange(double start, double end, double step = 1, DType dtype = DType::F32,
                       Device device = Device::cpu());
  static Tensor arange(int64_t n, DType dtype = DType::I64, Device device = Device::cpu());
  static Tensor uniform(const Shape& shape, double low = 0, double high = 1, DType dtype = DType::F32,
                        Device device = Device::cpu(), Generator& gen = default_generator());
  static Tensor normal(const Shape& shape, double mean = 0, double std = 1, DType dtype = DType::F32,
                       Device device = Device::cpu(), Generator& gen = default_generator());
  // Copies host values (converted to dtype, default: T's own dtype) into a new tensor.
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, const Shape& shape, Device device = Device::cpu());
  // Wraps existing storage (no copy).
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);

  // ---- metadata
  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  Device device() const;
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements
  int64_t dim() const { return static_cast<int64_t>(shape_.size()); }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return mpt::numel(shape_); }
  size_t element_size() const { return dtype_size(dtype_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  bool shares_storage(const Tensor& other) const { return storage_ && storage_ == other.storage_; }

  // Pointer to the first element (a device pointer for CUDA tensors).
  void* data_ptr() const;
  template <class T>
  T* data() const;  // checks that T matches dtype()

  // ---- views (share storage)
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one size
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a contiguous copy
  Tensor flatten() const { return reshape({-1}); }
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;  // python-style negative bounds
  Tensor select(int64_t dim, int64_t index) const;                              // removes `dim`
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-d transpose
  Tensor permute(const std::vector<int64_t>& order) const;
  Tensor expand(const Shape& shape) const;  // size-1 dims broadcast with stride 0; -1 keeps a size
  Tensor unsqueeze(int64_t dim) const;
  Tensor squeeze(int64_t dim) const;

  // ---- copies and conversions
  Tensor contiguous() const;  // self when already contiguous
  Tensor clone() const;
  Tensor to(DType dtype, Fp8Saturation sat = Fp8Saturation::Saturate) const;
  Tensor to(Device device) const;
  Tensor to(Device device, DType dtype) const;
  // Copies src into this tensor (any dtypes, devices and strides; src broadcasts to this shape).
  Tensor& copy_(const Tensor& src, Fp8Saturation sat = Fp8Saturation::Saturate);
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0); }
  Tensor& uniform_(double low = 0, double high = 1, Generator& gen = default_generator());
  Tensor& normal_(double mean = 0, double std = 1, Generator& gen = default_generator());

  // ---- host access
  template <class T>
  std::vector<T> to_vector() const;  // all elements in row-major order, converted to T
  template <class T>
  T item() const;                    // the single element, converted to T

  std::string str() const;  // PyTorch-style text, summarised beyond 1000 elements
  std::string meta_str() const;  // "f32[2, 3] cpu" for error messages

  // ---- autograd (mpt/autograd/*.h). Copies of a handle share its autograd state; views and detach() do not.
  bool requires_grad() const;              // a leaf marked with requires_grad_, or the output of a recorded op
  Tensor& requires_grad_(bool on = true);  // leaves only (floating dtypes)
  bool is_leaf() const;                    // made by no recorded op
  Tensor grad() const;                     // a leaf's accumulated gradient; undefined until backward reached it
  void set_grad(const Tensor& grad) const; // replace (or clear, with an undefined tensor) a leaf's gradient
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Backpropagates from this tensor (gradient: ones for a one-element tensor if not given) into the leaves.
  void backward() const;
  void backward(const Tensor& gradient, bool retain_graph = false) const;
  Tensor detach() const;  // the same data, without autograd history
  // Called with the leaf each time backward has finished accumulating its gradient.
  void register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const;
  const std::shared_ptr<autograd::AutogradMeta>& autograd_meta() const { return autograd_; }
  void set_grad_fn(std::shared_ptr<autograd::Node> fn, int output_nr);  // for autograd::record

 private:
  void check_defined(const char* op) const;
  autograd::AutogradMeta& ensure_autograd_meta() const;

  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::F32;
  mutable std::shared_ptr<autograd::AutogradMeta> autograd_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- template definitions
template <class T>
T* Tensor::data() const {
  MPT_CHECK(dtype_of<T>() == dtype_, "[data] requested {} pointer of a {} tensor", dtype_of<T>(), meta_str());
  return static_cast<T*>(data_ptr());
}

}  // namespace mpt

template <>
struct fmt::formatter<mpt::Tensor> : fmt::formatter<std::string> {
  auto format(const mpt::Tensor& t, format_context& ctx) const {
    return fmt::formatter<std::string>::format(t.str(), ctx);
  }
};
