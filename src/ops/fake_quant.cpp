// src/ops/fake_quant.cpp: fake quantization with the straight-through gradient, and quantization to codes + scales (kernels/*/fake_quant).
#include "mpt/ops/fake_quant.h"

#include <fmt/format.h>

#include "kernels/cpu/fake_quant.h"
#include "kernels/cpu/quantized_gemm.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/fake_quant.h"
#endif

namespace mpt::ops {

namespace {

using kernels::math::FakeQuant;

FakeQuant functor(const QuantSpec& spec) {
  const auto f = spec.format == QuantFormat::Int8   ? kernels::math::QuantFormat::Int8
                 : spec.format == QuantFormat::Int4 ? kernels::math::QuantFormat::Int4
                                                    : kernels::math::QuantFormat::E4M3;
  return FakeQuant{f, spec.f16_scale};
}

// Runs the kernel on contiguous x: values into y and/or codes (either may be undefined), scales always.
void run(const Tensor& x, const Tensor& y, const Tensor& codes, const Tensor& scales, int64_t group,
         const QuantSpec& spec, const char* op) {
  const FakeQuant fq = functor(spec);
  const int64_t groups = group == 0 ? 0 : x.numel() / group;
  const Device dev = x.device();
  detail::visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      MPT_THROW("[{}] expected a f32, bf16 or f16 tensor, got {}", op, x.meta_str());
    } else {
      T* yp = y.defined() ? y.data<T>() : nullptr;
      int8_t* cp = codes.defined() ? codes.data<int8_t>() : nullptr;
      if (dev.is_cpu()) {
        kernels::cpu::fake_quantize(x.data<T>(), yp, groups, group, fq, scales.data<float>(), cp);
      } else {
        MPT_CUDA_KERNEL(kernels::cuda::fake_quantize(x.data<T>(), yp, groups, group, fq, scales.data<float>(), cp,
                                                     static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    }
  });
}

}  // namespace

std::string QuantSpec::str() const {
  const char* f = format == QuantFormat::Int8 ? "int8" : (format == QuantFormat::Int4 ? "int4" : "fp8");
  std::string g;
  switch (granularity) {
    case QuantGranularity::PerTensor: g = "tensor"; break;
    case QuantGranularity::PerChannel: g = "channel"; break;
    case QuantGranularity::PerToken: g = "token"; break;
    case QuantGranularity::PerGroup: g = fmt::format("g{}", group_size); break;
  }
  return fmt::format("{}-{}{}", f, g, f16_scale ? "-f16scale" : "");
}

int64_t QuantSpec::group_elements(const Tensor& x, const char* op) const {
  if (granularity == QuantGranularity::PerTensor) return x.numel();
  MPT_CHECK(x.dim() >= 1, "[{}] {} quantization needs a tensor with a last dimension, got {}", op, str(),
            x.meta_str());
  const int64_t last = x.shape().back();
  if (granularity != QuantGranularity::PerGroup) return last;
  MPT_CHECK(group_size > 0, "[{}] a per-group quantization needs a positive group size, got {}", op, group_size);
  MPT_CHECK(last % group_size == 0,
            "[{}] group size {} does not divide the last dimension {} of {} ({}): pick a group size that divides the "
            "width", op, group_size, last, x.meta_str(), str());
  return group_size;
}

Shape QuantSpec::scales_shape(const Tensor& x, const char* op) const {
  const int64_t group = group_elements(x, op);
  if (granularity == QuantGranularity::PerTensor) return Shape{};
  Shape s = x.shape();
  s.back() /= group;
  return s;
}

Tensor fake_quantize(const Tensor& x_in, const QuantSpec& spec) {
  const char* op = "fake_quantize";
  const detail::GradRecorder grad({&x_in});
  detail::check_same_device({&x_in}, op);
  const int64_t group = spec.group_elements(x_in, op);
  const Tensor x = x_in.contiguous();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  const Tensor scales = Tensor::empty(spec.scales_shape(x, op), DType::F32, x.device());
  run(x, y, Tensor{}, scales, group, spec, op);
  // The straight-through estimator: the rounding's derivative is taken as 1 (nothing is clamped, see the header).
  grad.record("FakeQuantizeBackward", {&y}, [](const std::vector<Tensor>& g) { return std::vector<Tensor>{g[0]}; });
  return y;
}

GroupQuantized quantize_groups(const Tensor& x_in, const QuantSpec& spec) {
  const char* op = "quantize_groups";
  detail::check_same_device({&x_in}, op);
  const int64_t group = spec.group_elements(x_in, op);
  const Tensor x = x_in.contiguous();
  GroupQuantized q{Tensor::empty(x.shape(), DType::I8, x.device()),
                   Tensor::empty(spec.scales_shape(x, op), DType::F32, x.device()), spec};
  run(x, Tensor{}, q.codes, q.scales, group, spec, op);
  return q;
}

Tensor dequantize_groups(const GroupQuantized& q, DType dtype) {
  const char* op = "dequantize_groups";
  MPT_CHECK(q.codes.dtype() == DType::I8 && q.scales.dtype() == DType::F32,
            "[{}] expected i8 codes and f32 scales, got {} and {}", op, q.codes.meta_str(), q.scales.meta_str());
  const Device dev = detail::check_same_device({&q.codes, &q.scales}, op);
  const int64_t group = q.spec.group_elements(q.codes, op);
  detail::check_shape(q.scales, q.spec.scales_shape(q.codes, op), "scales", op);
  const Tensor codes = q.codes.contiguous(), scales = q.scales.contiguous();
  Tensor out = Tensor::empty(codes.shape(), dtype, dev);
  // Groups run along the last dimension: the kernels see rows of `last` codes (one row for PerTensor).
  const int64_t last = q.spec.granularity == QuantGranularity::PerTensor ? codes.numel() : codes.shape().back();
  const kernels::math::GroupWeights w{codes.data<int8_t>(), scales.data<float>(), last == 0 ? 0 : codes.numel() / last,
                                      last, group, functor(q.spec).format};
  detail::visit_float(dtype, op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      MPT_THROW("[{}] expected an f32, bf16 or f16 result dtype, got f64", op);
    } else if (dev.is_cpu()) {
      kernels::cpu::dequantize_groups(w, out.data<T>());
    } else {
      MPT_CUDA_KERNEL(kernels::cuda::dequantize_groups(w, out.data<T>(), static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  return out;
}

}  // namespace mpt::ops
