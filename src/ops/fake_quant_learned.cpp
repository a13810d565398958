// src/ops/fake_quant_learned.cpp: LSQ, fake quantization with a learned scale, forward beside backward (kernels/*/fake_quant).
#include <cmath>

#include "kernels/cpu/fake_quant.h"
#include "mpt/ops/fake_quant.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/fake_quant.h"
#endif

namespace mpt::ops {

namespace {

constexpr const char* kOp = "fake_quantize_learned";

struct Problem {
  kernels::math::LearnedQuant lq;
  int64_t groups = 0, group = 0;
};

// Runs the forward (dy undefined: y = values) or the backward (dx and/or dscale) on contiguous tensors.
void run(const Problem& pr, const Tensor& x, const Tensor& scale, const Tensor& dy, const Tensor& out,
         const Tensor& dscale, float grad_scale) {
  const Device dev = x.device();
  detail::visit_float(x.dtype(), kOp, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      MPT_THROW("[{}] expected a f32, bf16 or f16 tensor, got {}", kOp, x.meta_str());
    } else {
      const T* xp = x.data<T>();
      T* op = out.defined() ? out.data<T>() : nullptr;
      const float* sp = scale.data<float>();
      float* dsp = dscale.defined() ? dscale.data<float>() : nullptr;
      if (!dy.defined()) {
        if (dev.is_cpu()) kernels::cpu::learned_quantize(xp, op, pr.groups, pr.group, sp, pr.lq);
        else
          MPT_CUDA_KERNEL(kernels::cuda::learned_quantize(xp, op, pr.groups, pr.group, sp, pr.lq,
                                                          static_cast<cudaStream_t>(detail::stream_of(dev))));
      } else if (dev.is_cpu()) {
        kernels::cpu::learned_quantize_backward(xp, dy.data<T>(), op, dsp, pr.groups, pr.group, sp, pr.lq, grad_scale);
      } else {
        MPT_CUDA_KERNEL(kernels::cuda::learned_quantize_backward(xp, dy.data<T>(), op, dsp, pr.groups, pr.group, sp,
                                                                 pr.lq, grad_scale,
                                                                 static_cast<cudaStream_t>(detail::stream_of(dev))));
      }
    }
  });
}

}  // namespace

Tensor fake_quantize_learned(const Tensor& x_in, const Tensor& scale_in, const QuantSpec& spec,
                             std::optional<float> grad_scale) {
  MPT_CHECK(x_in.defined() && scale_in.defined(), "[{}] expected x and its scale, got an undefined tensor", kOp);
  MPT_CHECK(spec.format != QuantFormat::FP8,
            "[{}] learned scales (LSQ) are for the integer grids (int8, int4), got {}", kOp, spec.str());
  MPT_CHECK(spec.granularity != QuantGranularity::PerToken,
            "[{}] a learned scale is per tensor, channel or group, not per token (tokens change every call), got {}",
            kOp, spec.str());
  MPT_CHECK(!spec.f16_scale, "[{}] {}: the FP16 scale rounding is not differentiable; learn the scale in f32 and "
            "round it at export", kOp, spec.str());
  detail::check_same_device({&x_in, &scale_in}, kOp);
  MPT_CHECK(scale_in.dtype() == DType::F32, "[{}] expected an f32 scale, got {}", kOp, scale_in.meta_str());
  const int64_t group = spec.group_elements(x_in, kOp);
  detail::check_shape(scale_in, spec.scales_shape(x_in, kOp), "scale", kOp);
  const detail::GradRecorder grad({&x_in, &scale_in});
  const Tensor x = x_in.contiguous(), scale = scale_in.contiguous();
  const Problem pr{{spec.format == QuantFormat::Int8 ? 127.0f : 7.0f}, group == 0 ? 0 : x.numel() / group, group};
  const float g = grad_scale ? *grad_scale
                             : static_cast<float>(1.0 / std::sqrt(static_cast<double>(group > 0 ? group : 1) * pr.lq.qmax));
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  run(pr, x, scale, Tensor{}, y, Tensor{}, g);
  grad.record("FakeQuantizeLearnedBackward", {&y},
              [pr, g, x = x.detach(), scale = scale.detach(), dx_needed = x_in.requires_grad(),
               ds_needed = scale_in.requires_grad()](const std::vector<Tensor>& grads) {
                const Tensor dy = grads[0].to(x.dtype()).contiguous();
                Tensor dx = dx_needed ? Tensor::empty(x.shape(), x.dtype(), x.device()) : Tensor{};
                Tensor ds = ds_needed ? Tensor::empty(scale.shape(), DType::F32, x.device()) : Tensor{};
                run(pr, x, scale, dy, dx, ds, g);
                return std::vector<Tensor>{dx, ds};
              });
  return y;
}

}  // namespace mpt::ops
