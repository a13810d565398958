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
#include "backend/cuda/device_guard.h"
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/random.h"
#include "kernels/cuda/strided.h"
#include "kernels/math/strided.h"
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

#if defined(MPT_WITH_CUDA)

bool is_cuda_convertible(DType t) { return t != DType::F64; }

cudaStream_t current_stream(Device device) { return static_cast<cudaStream_t>(Stream::current(device).native()); }

// The strided kernels take at most kMaxStridedDims dimensions after merging; no view of a model gets near it.
void check_strided_rank(const Tensor& dst, const Tensor& src, const char* op) {
  kernels::math::StridedDims dims;
  MPT_CHECK(kernels::math::coalesce_strided(dst.shape().data(), dst.strides().data(), src.strides().data(),
                                            static_cast<int>(dst.dim()), dims),
            "[{}] {} <- {}: more than {} dimensions remain after merging contiguous ones", op, dst.meta_str(),
            src.meta_str(), kernels::math::kMaxStridedDims);
}

// dst[i] = src[i]: one CUDA device (current), same dtype and shape, no overlap. No host round trip, no sync.
void device_strided_copy(const Tensor& dst, const Tensor& src) {
  if (dst.is_contiguous() && src.is_contiguous()) {
    copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), dst.nbytes(), Stream::current(dst.device()));
    return;
  }
  check_strided_rank(dst, src, "copy_");
  MPT_CUDA_CHECK(kernels::cuda::strided_copy(dst.data_ptr(), dst.strides().data(), src.data_ptr(),
                                             src.strides().data(), dst.shape().data(), static_cast<int>(dst.dim()),
                                             dst.element_size(), current_stream(dst.device())));
}

// A fresh contiguous copy of a CUDA view, made on its device (`always`: even when `t` is already contiguous).
Tensor device_packed(const Tensor& t, bool always = false) {
  if (t.is_contiguous() && !always) return t;
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  device_strided_copy(out, t);
  return out;
}

// dst = convert(src): contiguous tensors of one CUDA device, neither f64. Float pairs take the vectorised cast
// kernels; pairs with an integer side the scalar ones (the same kernels::math::scalar_cast as the CPU).
void convert_on_device(const Tensor& dst, const Tensor& src, Fp8Saturation sat) {
  const cudaStream_t stream = current_stream(dst.device());
  visit_dtype(src.dtype(), [&](auto s) {
    using S = decltype(s);
    visit_dtype(dst.dtype(), [&](auto d) {
      using D = decltype(d);
      const auto* in = static_cast<const S*>(src.data_ptr());
      auto* out = static_cast<D*>(dst.data_ptr());
      if constexpr (std::is_same_v<S, double> || std::is_same_v<D, double>) {
        MPT_CHECK(false, "[copy_] no CUDA conversion {} -> {} (f64 is staged through the host)", src.dtype(),
                  dst.dtype());
      } else if constexpr (std::is_integral_v<S> || std::is_integral_v<D>) {
        MPT_CUDA_CHECK((kernels::cuda::convert_with_integers<D, S>(in, out, dst.numel(), sat, stream)));
      } else {
        MPT_CUDA_CHECK((kernels::cuda::convert<D, S>(in, out, dst.numel(), sat, stream)));
      }
    });
  });
}

// dst and src are views of one CUDA device of the same shape, and no conversion involves f64: everything runs on
// the device, in stream order (a strided source is packed first, a strided destination filled from a packed
// temporary; overlapping views read a device clone of the source).
void copy_on_device(const Tensor& dst, Tensor src, Fp8Saturation sat) {
  cuda_backend::DeviceGuard guard(dst.device().index());
  if (src.shares_storage(dst)) src = device_packed(src, /*always=*/true);
  if (src.dtype() == dst.dtype()) return device_strided_copy(dst, src);
  src = device_packed(src);
  if (dst.is_contiguous()) return convert_on_device(dst, src, sat);
  const Tensor tmp = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  convert_on_device(tmp, src, sat);
  device_strided_copy(dst, tmp);
}

// Host -> device: converted and packed on the host (f64 included), then one dense upload; a strided destination is
// filled from the uploaded temporary on the device.
void copy_host_to_device(const Tensor& dst, const Tensor& src, Fp8Saturation sat) {
  Tensor host = src;
  if (!src.is_contiguous() || src.dtype() != dst.dtype()) {
    host = Tensor::empty(dst.shape(), dst.dtype());
    copy_cpu(host, src, sat);
  }
  if (dst.is_contiguous()) {
    copy_bytes(dst.data_ptr(), dst.device(), host.data_ptr(), Device::cpu(), dst.nbytes());
    return;
  }
  const Tensor staged = Tensor::empty(dst.shape(), dst.dtype(), dst.device());
  copy_bytes(staged.data_ptr(), dst.device(), host.data_ptr(), Device::cpu(), dst.nbytes());
  copy_on_device(dst, staged, sat);
}

// Device -> host: packed on the device, one dense download, converted and placed on the host.
void copy_device_to_host(const Tensor& dst, const Tensor& src, Fp8Saturation sat) {
  Tensor packed;
  {
    cuda_backend::DeviceGuard guard(src.device().index());
    packed = device_packed(src);
  }
  if (dst.is_contiguous() && dst.dtype() == src.dtype()) {
    copy_bytes(dst.data_ptr(), Device::cpu(), packed.data_ptr(), src.device(), dst.nbytes());
    return;
  }
  const Tensor host = Tensor::empty(src.shape(), src.dtype());
  copy_bytes(host.data_ptr(), Device::cpu(), packed.data_ptr(), src.device(), host.nbytes());
  copy_cpu(dst, host, sat);
}

void copy_cuda(const Tensor& dst, const Tensor& src, Fp8Saturation sat) {
  if (src.device().is_cpu()) return copy_host_to_device(dst, src, sat);
  if (dst.device().is_cpu()) return copy_device_to_host(dst, src, sat);
  const bool f64_conversion =
      src.dtype() != dst.dtype() && (!is_cuda_convertible(src.dtype()) || !is_cuda_convertible(dst.dtype()));
  if (src.device() != dst.device() || f64_conversion) {
    // Between two CUDA devices (rare: data parallelism moves gradients with NCCL), or a conversion from or to f64 (a
    // CPU reference dtype without CUDA conversion kernels): through one dense download and one dense upload.
    const Tensor host = Tensor::empty(src.shape(), src.dtype());
    copy_device_to_host(host, src, sat);
    return copy_host_to_device(dst, host, sat);
  }
  copy_on_device(dst, src, sat);
}

#endif  // MPT_WITH_CUDA

bool is_random_native(DType t) { return t == DType::F32 || t == DType::F64 || t == DType::F16 || t == DType::BF16; }

}  // namespace

Tensor& Tensor::copy_(const Tensor& src, Fp8Saturation sat) {
  check_defined("copy_");
  MPT_CHECK(src.defined(), "[copy_] source is undefined (destination {})", meta_str());
  MPT_CHECK(broadcast_shapes(shape_, src.shape(), "copy_") == shape_,
            "[copy_] source {} does not broadcast to destination {}", src.meta_str(), meta_str());
  const Tensor s = src.shape() == shape_ ? src : src.expand(shape_);
  if (numel() == 0) return *this;
#if defined(MPT_WITH_CUDA)
  if (!device().is_cpu() || !s.device().is_cpu()) {
    copy_cuda(*this, s, sat);
    return *this;
  }
#endif
  copy_cpu(*this, s, sat);
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
  visit_dtype(dtype_, [&](auto tag) {
    using T = decltype(tag);
    T v;
    kernels::cpu::convert<T, double>(&value, &v, 1);
    if (device().is_cpu() && is_contiguous()) {
      std::fill_n(static_cast<T*>(data_ptr()), numel(), v);
      return;
    }
#if defined(MPT_WITH_CUDA)
    if (device().is_cuda()) {  // the value's bits, written by a kernel: nothing is built on the host
      cuda_backend::DeviceGuard guard(device().index());
      check_strided_rank(*this, *this, "fill_");
      MPT_CUDA_CHECK(kernels::cuda::strided_fill(data_ptr(), strides_.data(), shape_.data(), static_cast<int>(dim()),
                                                 &v, sizeof(T), current_stream(device())));
      return;
    }
#endif
    kernels::cpu::strided_copy(data_ptr(), strides_.data(), &v, Strides(strides_.size(), 0).data(), shape_.data(),
                               static_cast<int>(dim()), sizeof(T));
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
  // Draw contiguous values on the tensor's device (the same Philox words and math on both: kernels/math/random.h) in
  // a dtype the kernel produces natively, then place them; CUDA fills never touch the host.
  const bool direct = t.is_contiguous() && is_random_native(t.dtype());
  Tensor out =
      direct ? t : Tensor::empty(t.shape(), is_random_native(t.dtype()) ? t.dtype() : DType::F32, t.device());
  const auto lo = static_cast<float>(a), hi = static_cast<float>(b);
  visit_dtype(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, f16> ||
                  std::is_same_v<T, bf16>) {
      T* p = static_cast<T*>(out.data_ptr());
#if defined(MPT_WITH_CUDA)
      if (out.device().is_cuda()) {
        cuda_backend::DeviceGuard guard(out.device().index());
        const cudaStream_t stream = current_stream(out.device());
        MPT_CUDA_CHECK(kind == Draw::Uniform ? kernels::cuda::fill_uniform<T>(p, n, gen.seed(), offset, lo, hi, stream)
                                             : kernels::cuda::fill_normal<T>(p, n, gen.seed(), offset, lo, hi, stream));
        return;
      }
#endif
      if (kind == Draw::Uniform) {
        kernels::cpu::fill_uniform<T>(p, n, gen.seed(), offset, lo, hi);
      } else {
        kernels::cpu::fill_normal<T>(p, n, gen.seed(), offset, lo, hi);
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
  return from_vector(values, {n}).to(device, dtype);  // converted on the host: one upload of the final dtype
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
MPT_INSTANTIATE(int8_t)
#undef MPT_INSTANTIATE

}  // namespace mpt
