// src/core/tensor_copy.cpp: copies, dtype and device conversions, fills and random draws for Tensor.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/random.h"
#include "kernels/cpu/strided.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/tensor.h"
#if defined(MPT_WITH_CUDA)
#include "backend/cuda/check.h"
#include "kernels/cuda/quantize.h"
#endif

namespace mpt {
namespace {

// The one dtype x dtype dispatch for contiguous conversions on the CPU.
void convert_cpu(const void* src, DType src_dtype, void* dst, DType dst_dtype, int64_t n, Fp8Saturation sat) {
  visit_dtype(src_dtype, [&](auto s) {
    using S = decltype(s);
    visit_dtype(dst_dtype, [&](auto d) {
      using D = decltype(d);
      kernels::cpu::convert<D, S>(static_cast<const S*>(src), static_cast<D*>(dst), static_cast<size_t>(n), sat);
    });
  });
}

void strided_copy(const Tensor& dst, const Tensor& src) {
  kernels::cpu::strided_copy(dst.data_ptr(), dst.strides().data(), src.data_ptr(), src.strides().data(),
                             dst.shape().data(), static_cast<int>(dst.dim()), dst.element_size());
}

// dst and src are CPU tensors of the same shape.
void copy_cpu(const Tensor& dst, Tensor src, Fp8Saturation sat) {
  if (dst.numel() == 0) return;
  if (src.shares_storage(dst)) src = src.clone();  // overlapping views: read everything before writing
  if (src.dtype() == dst.dtype()) return strided_copy(dst, src);
  src = src.contiguous();
  if (dst.is_contiguous()) return convert_cpu(src.data_ptr(), src.dtype(), dst.data_ptr(), dst.dtype(), dst.numel(), sat);
  Tensor tmp = Tensor::empty(dst.shape(), dst.dtype());
  convert_cpu(src.data_ptr(), src.dtype(), tmp.data_ptr(), tmp.dtype(), tmp.numel(), sat);
  strided_copy(dst, tmp);
}

// Element range [lo, hi] (in elements from the storage start) a view can touch.
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t lo = t.offset(), hi = t.offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t extent = (t.size(d) - 1) * t.stride(d);
    (extent < 0 ? lo : hi) += extent;
  }
  return {lo, hi};
}

// A CPU copy of the bytes a CUDA view touches, viewed with the same shape and strides. Strided, broadcast and
// integer copies of CUDA tensors are staged through host memory (correct, slow) until a strided CUDA copy kernel
// exists; dense float conversions run on the device (copy_on_device).
Tensor span_to_host(const Tensor& t) {
  const auto [lo, hi] = element_span(t);
  const size_t es = t.element_size();
  auto host = Storage::allocate(static_cast<size_t>(hi - lo + 1) * es, Device::cpu());
  copy_bytes(host->data(), Device::cpu(), static_cast<char*>(t.storage()->data()) + lo * static_cast<int64_t>(es),
             t.device(), host->nbytes());
  return Tensor(host, t.shape(), t.strides(), t.offset() - lo, t.dtype());
}

// True when the view's elements tile its span exactly once (a permutation of a contiguous layout, e.g. a transpose):
// then a copy into it overwrites the whole span and need not read it first.
bool covers_its_span(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> dims;  // (stride, size) of the dimensions that move
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  std::sort(dims.begin(), dims.end());
  int64_t expected = 1;
  for (const auto& [stride, size] : dims) {
    if (stride != expected) return false;
    expected *= size;
  }
  return true;
}

// A host tensor shaped like the CUDA view `t` over a buffer the size of its span, without reading the device.
Tensor span_on_host(const Tensor& t) {
  const auto [lo, hi] = element_span(t);
  auto host = Storage::allocate(static_cast<size_t>(hi - lo + 1) * t.element_size(), Device::cpu());
  return Tensor(host, t.shape(), t.strides(), t.offset() - lo, t.dtype());
}

void span_to_device(const Tensor& host, const Tensor& device_view) {
  const auto [lo, hi] = element_span(device_view);
  const size_t es = device_view.element_size();
  copy_bytes(static_cast<char*>(device_view.storage()->data()) + lo * static_cast<int64_t>(es), device_view.device(),
             host.storage()->data(), Device::cpu(), static_cast<size_t>(hi - lo + 1) * es);
}

[[maybe_unused]] bool is_cuda_convertible(DType t) { return is_floating(t) && t != DType::F64; }  // CUDA builds only

// Dense same-device CUDA copies and float conversions run on the device; everything else is staged.
bool copy_on_device(const Tensor& dst, const Tensor& src, Fp8Saturation sat) {
#if defined(MPT_WITH_CUDA)
  if (!dst.device().is_cuda() || src.device() != dst.device() || !dst.is_contiguous() || !src.is_contiguous() ||
      src.shape() != dst.shape() || src.shares_storage(dst)) {
    return false;
  }
  void* stream = Stream::current(dst.device()).native();
  if (src.dtype() == dst.dtype()) {
    copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes(), Stream::current(dst.device()));
    return true;
  }
  if (!is_cuda_convertible(src.dtype()) || !is_cuda_convertible(dst.dtype())) return false;
  visit_dtype(src.dtype(), [&](auto s) {
    using S = decltype(s);
    visit_dtype(dst.dtype(), [&](auto d) {
      using D = decltype(d);
      if constexpr (!std::is_same_v<S, double> && !std::is_same_v<D, double> && !std::is_integral_v<S> &&
                    !std::is_integral_v<D>) {
        MPT_CUDA_CHECK((kernels::cuda::convert<D, S>(static_cast<const S*>(src.data_ptr()),
                                                     static_cast<D*>(dst.data_ptr()), dst.numel(), sat,
                                                     static_cast<cudaStream_t>(stream))));
      }
    });
  });
  return true;
#else
  (void)dst;
  (void)src;
  (void)sat;
  return false;
#endif
}

bool is_random_native(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

}  // namespace

Tensor& Tensor::copy_(const Tensor& src, Fp8Saturation sat) {
  check_defined("copy_");
  MPT_CHECK(src.defined(), "[copy_] source is undefined (destination {})", meta_str());
  MPT_CHECK(broadcast_shapes(shape_, src.shape(), "copy_") == shape_,
            "[copy_] source {} does not broadcast to destination {}", src.meta_str(), meta_str());
  const Tensor s = src.shape() == shape_ ? src : src.expand(shape_);
  if (numel() == 0) return *this;
  if (copy_on_device(*this, s, sat)) return *this;
  const Tensor hs = s.device().is_cpu() ? s : span_to_host(s);
  if (device().is_cpu()) {
    copy_cpu(*this, hs, sat);
    return *this;
  }
  // Read the destination's span first only when the copy leaves some of it alone (a strided slice): a transpose or
  // any other dense permutation is overwritten whole, so reading it would only move stale bytes there and back.
  Tensor hd = is_contiguous()             ? Tensor::empty(shape_, dtype_)
              : covers_its_span(*this) ? span_on_host(*this)
                                        : span_to_host(*this);
  copy_cpu(hd, hs, sat);
  if (is_contiguous()) {
    copy_bytes(data_ptr(), device(), hd.data_ptr(), Device::cpu(), nbytes());
  } else {
    span_to_device(hd, *this);
  }
  return *this;
}

Tensor Tensor::contiguous() const {
  check_defined("contiguous");
  if (is_contiguous()) return *this;
  return clone();
}

namespace {

// Records out = a copy of `in` (its dtype and device) when `in` requires grad and grad mode is on: the gradient
// goes back converted to in's dtype and device. The copy itself runs with grad mode off (copy_ is in place).
Tensor track_copy(const Tensor& in, Tensor out) {
  if (in.requires_grad() && autograd::is_grad_enabled())
    autograd::record("CopyBackward", {&in}, {&out},
                     [dtype = in.dtype(), device = in.device()](const std::vector<Tensor>& g) {
                       return std::vector<Tensor>{g[0].to(device, dtype)};
                     });
  return out;
}

}  // namespace

Tensor Tensor::clone() const {
  check_defined("clone");
  Tensor out = empty(shape_, dtype_, device());
  {
    autograd::NoGradGuard no_grad;
    out.copy_(*this);
  }
  return track_copy(*this, out);
}

Tensor Tensor::to(DType dtype, Fp8Saturation sat) const {
  check_defined("to");
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device());
  {
    autograd::NoGradGuard no_grad;
    out.copy_(*this, sat);
  }
  return track_copy(*this, out);
}

Tensor Tensor::to(Device device) const { return to(device, dtype_); }

Tensor Tensor::to(Device device, DType dtype) const {
  check_defined("to");
  if (device == this->device() && dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device);
  {
    autograd::NoGradGuard no_grad;
    out.copy_(*this);
  }
  return track_copy(*this, out);
}

Tensor& Tensor::fill_(double value) {
  check_defined("fill_");
  if (numel() == 0) return *this;
  if (!device().is_cpu() || !is_contiguous()) {
    Tensor tmp = full(shape_, value, dtype_);
    return copy_(tmp);
  }
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v;
    kernels::cpu::convert<T, double>(&value, &v, 1);
    std::fill_n(static_cast<T*>(data_ptr()), numel(), v);
  });
  return *this;
}

namespace {

enum class Draw { Uniform, Normal };

void draw_random(Tensor& t, Draw kind, double a, double b, Generator& gen, const char* op) {
  MPT_CHECK(is_floating(t.dtype()), "[{}] expected a floating dtype, got {}", op, t.meta_str());
  if (kind == Draw::Normal) MPT_CHECK(b >= 0, "[normal_] std must be >= 0, got {}", b);
  if (kind == Draw::Uniform) MPT_CHECK(a <= b, "[uniform_] low {} > high {}", a, b);
  const int64_t n = t.numel();
  const uint64_t offset = gen.reserve(n);
  if (n == 0) return;
  // Draw contiguous values on the CPU in a dtype the kernel produces natively, then place them.
  const bool direct = t.device().is_cpu() && t.is_contiguous() && is_random_native(t.dtype());
  Tensor out = direct ? t : Tensor::empty(t.shape(), is_random_native(t.dtype()) ? t.dtype() : DType::F32);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, f16> ||
                  std::is_same_v<T, bf16>) {
      T* p = static_cast<T*>(out.data_ptr());
      if (kind == Draw::Uniform) {
        kernels::cpu::fill_uniform<T>(p, n, gen.seed(), offset, static_cast<float>(a), static_cast<float>(b));
      } else {
        kernels::cpu::fill_normal<T>(p, n, gen.seed(), offset, static_cast<float>(a), static_cast<float>(b));
      }
    }
  });
  if (!direct) t.copy_(out);
}

}  // namespace

Tensor& Tensor::uniform_(double low, double high, Generator& gen) {
  check_defined("uniform_");
  draw_random(*this, Draw::Uniform, low, high, gen, "uniform_");
  return *this;
}

Tensor& Tensor::normal_(double mean, double std, Generator& gen) {
  check_defined("normal_");
  draw_random(*this, Draw::Normal, mean, std, gen, "normal_");
  return *this;
}

Tensor Tensor::uniform(const Shape& shape, double low, double high, DType dtype, Device device, Generator& gen) {
  Tensor t = empty(shape, dtype, device);
  return t.uniform_(low, high, gen);
}

Tensor Tensor::normal(const Shape& shape, double mean, double std, DType dtype, Device device, Generator& gen) {
  Tensor t = empty(shape, dtype, device);
  return t.normal_(mean, std, gen);
}

Tensor Tensor::arange(double start, double end, double step, DType dtype, Device device) {
  MPT_CHECK(step != 0, "[arange] step must be non-zero");
  MPT_CHECK((end - start) / step >= 0 || start == end, "[arange] step {} has the wrong sign for [{}, {})", step, start,
            end);
  const double count = std::ceil((end - start) / step);
  MPT_CHECK(count < 9.0e15, "[arange] [{}, {}) step {} has too many elements", start, end, step);
  const auto n = static_cast<int64_t>(std::max(count, 0.0));
  std::vector<double> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = start + static_cast<double>(i) * step;
  return from_vector(values, {n}, device).to(dtype);
}

Tensor Tensor::arange(int64_t n, DType dtype, Device device) {
  MPT_CHECK(n >= 0, "[arange] expected n >= 0, got {}", n);
  return arange(0.0, static_cast<double>(n), 1.0, dtype, device);
}

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, const Shape& shape, Device device) {
  MPT_CHECK(static_cast<int64_t>(values.size()) == mpt::numel(shape), "[from_vector] {} values for shape {}",
            values.size(), shape_str(shape));
  Tensor host = empty(shape, dtype_of<T>());
  if (!values.empty()) std::memcpy(host.data_ptr(), values.data(), values.size() * sizeof(T));
  return host.to(device);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  check_defined("to_vector");
  const Tensor host = to(Device::cpu(), dtype_of<T>()).contiguous();
  std::vector<T> out(static_cast<size_t>(numel()));
  if (!out.empty()) std::memcpy(out.data(), host.data_ptr(), out.size() * sizeof(T));
  return out;
}

template <class T>
T Tensor::item() const {
  check_defined("item");
  MPT_CHECK(numel() == 1, "[item] expects a tensor with one element, got {}", meta_str());
  return to_vector<T>()[0];
}

#define MPT_INSTANTIATE(T)                                                                           \
  template Tensor Tensor::from_vector<T>(const std::vector<T>&, const Shape&, Device);              \
  template std::vector<T> Tensor::to_vector<T>() const;                                              \
  template T Tensor::item<T>() const;
MPT_INSTANTIATE(float)
MPT_INSTANTIATE(double)
MPT_INSTANTIATE(f16)
MPT_INSTANTIATE(bf16)
MPT_INSTANTIATE(f8e4m3)
MPT_INSTANTIATE(f8e5m2)
MPT_INSTANTIATE(int32_t)
MPT_INSTANTIATE(int64_t)
MPT_INSTANTIATE(uint8_t)
MPT_INSTANTIATE(uint16_t)
#undef MPT_INSTANTIATE

}  // namespace mpt
