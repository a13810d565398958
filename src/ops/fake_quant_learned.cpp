// src/ops/fake_quant_learned.cpp: LSQ, fake quantization with a learned scale, forward beside backward (kernels/*/fake_quant).
#include <cmath>

#include "kernels/cpu/fake_quant.h"
#include "mpt/autograd/grad_mode.h"
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

// Runs the forward (dy undefined: out = values, codes when defined) or the backward (out = dx, and/or dscale) on
// contiguous tensors.
void run(const Problem& pr, const Tensor& x, const Tensor& scale, const Tensor& dy, const Tensor& out,
         const Tensor& dscale, float grad_scale, const Tensor& codes = Tensor{}) {
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
        int8_t* cp = codes.defined() ? codes.data<int8_t>() : nullptr;
        if (dev.is_cpu()) kernels::cpu::learned_quantize(xp, op, cp, pr.groups, pr.group, sp, pr.lq);
        else
          MPT_CUDA_KERNEL(kernels::cuda::learned_quantize(xp, op, cp, pr.groups, pr.group, sp, pr.lq,
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

void check_spec(const QuantSpec& spec, bool allow_f16) {
  MPT_CHECK(spec.format != QuantFormat::FP8,
            "[{}] learned scales (LSQ) are for the integer grids (int8, int4), got {}", kOp, spec.str());
  MPT_CHECK(spec.granularity != QuantGranularity::PerToken,
            "[{}] a learned scale is per tensor, channel or group, not per token (tokens change every call), got {}",
            kOp, spec.str());
  MPT_CHECK(allow_f16 || !spec.f16_scale, "[{}] {}: the FP16 scale rounding is not differentiable; learn the scale in "
            "f32 and round it at export", kOp, spec.str());
}

void check_scale(const Tensor& x, const Tensor& scale, const QuantSpec& spec) {
  MPT_CHECK(x.defined() && scale.defined(), "[{}] expected x and its scale, got an undefined tensor", kOp);
  detail::check_same_device({&x, &scale}, kOp);
  MPT_CHECK(scale.dtype() == DType::F32, "[{}] expected an f32 scale, got {}", kOp, scale.meta_str());
  detail::check_shape(scale, spec.scales_shape(x, kOp), "scale", kOp);
}

Problem problem(const Tensor& x, const QuantSpec& spec) {
  const int64_t group = spec.group_elements(x, kOp);
  return {{spec.format == QuantFormat::Int8 ? 127.0f : 7.0f}, group == 0 ? 0 : x.numel() / group, group};
}

}  // namespace

GroupQuantized quantize_groups(const Tensor& x_in, const QuantSpec& spec, const Tensor& scales_in) {
  check_spec(spec, true);
  check_scale(x_in, scales_in, spec);
  autograd::NoGradGuard no_grad;
  const Tensor x = x_in.contiguous();
  // A copy the result owns; FP16-rounded when the spec stores FP16 scales (what a GGUF block holds).
  const Tensor scales = spec.f16_scale ? scales_in.to(DType::F16).to(DType::F32).contiguous() : scales_in.contiguous().clone();
  GroupQuantized q{Tensor::empty(x.shape(), DType::I8, x.device()), scales, spec};
  run(problem(x, spec), x, scales, Tensor{}, Tensor{}, Tensor{}, 1.0f, q.codes);
  return q;
}

Tensor fake_quantize_learned(const Tensor& x_in, const Tensor& scale_in, const QuantSpec& spec,
                             std::optional<float> grad_scale) {
  check_spec(spec, false);
  check_scale(x_in, scale_in, spec);
  const detail::GradRecorder grad({&x_in, &scale_in});
  const Tensor x = x_in.contiguous(), scale = scale_in.contiguous();
  const Problem pr = problem(x, spec);
  const int64_t group = pr.group;
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
