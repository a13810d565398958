// src/ops/quantized_linear.cpp: quantized inference GEMMs (INT8 x INT8, weight-only codes, dequantize + GEMM) behind one op.
#include "mpt/ops/quantized_linear.h"

#include "kernels/cpu/quantized_gemm.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/linear.h"
#include "ops/dispatch.h"

namespace mpt::ops {

namespace {

constexpr int64_t kWeightOnlyMaxRows = 16;

kernels::math::GroupWeights group_weights(const GroupQuantized& w, int64_t group) {
  const auto f = w.spec.format == QuantFormat::Int8   ? kernels::math::QuantFormat::Int8
                 : w.spec.format == QuantFormat::Int4 ? kernels::math::QuantFormat::Int4
                                                      : kernels::math::QuantFormat::E4M3;
  return {w.codes.data<int8_t>(), w.scales.data<float>(), w.codes.shape()[0], w.codes.shape()[1], group, f};
}

}  // namespace

Tensor quantized_linear(const Tensor& x_in, const GroupQuantized& w, const Tensor& bias,
                        const std::optional<QuantSpec>& input) {
  const char* op = "quantized_linear";
  autograd::NoGradGuard no_grad;
  MPT_CHECK(x_in.dim() == 2 && w.codes.dim() == 2 && x_in.shape()[1] == w.codes.shape()[1],
            "[{}] expected x [N, K] and weight codes [M, K], got {} and {}", op, x_in.meta_str(), w.codes.meta_str());
  MPT_CHECK(w.codes.dtype() == DType::I8 && w.scales.dtype() == DType::F32 && w.codes.is_contiguous() &&
                w.scales.is_contiguous(),
            "[{}] expected contiguous i8 codes and f32 scales (ops::quantize_groups), got {} and {}", op,
            w.codes.meta_str(), w.scales.meta_str());
  MPT_CHECK(w.spec.granularity != QuantGranularity::PerTensor && w.spec.granularity != QuantGranularity::PerToken,
            "[{}] a weight is quantized per channel or per group, got {}", op, w.spec.str());
  const Device dev = detail::check_same_device({&x_in, &w.codes, &w.scales}, op);
  const int64_t group = w.spec.group_elements(w.codes, op);
  const int64_t M = w.codes.shape()[0], N = x_in.shape()[0], K = x_in.shape()[1];
  detail::check_shape(w.scales, {M, K / group}, "scales", op);
  if (bias.defined()) {
    detail::check_same_device({&x_in, &bias}, op);
    MPT_CHECK(bias.dtype() == DType::F32, "[{}] expected an f32 bias, got {}", op, bias.meta_str());
    detail::check_shape(bias, {M}, "bias", op);
  }
  if (dev.is_cuda()) {
    const Tensor xq = input ? fake_quantize(x_in, *input) : x_in;
    return linear(xq, dequantize_groups(w, xq.dtype()), bias.defined() ? bias.to(xq.dtype()) : bias);
  }
  const Tensor x = x_in.dtype() == DType::F32 ? x_in.contiguous() : x_in.to(DType::F32);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor{};
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  Tensor y = Tensor::empty({N, M}, DType::F32, dev);
  const bool w8a8 = input && input->format == QuantFormat::Int8 && input->granularity == QuantGranularity::PerToken &&
                    w.spec.format == QuantFormat::Int8 && w.spec.granularity == QuantGranularity::PerChannel;
  if (w8a8) {
    const GroupQuantized xq = quantize_groups(x, *input);
    Tensor acc = Tensor::empty({N, M}, DType::I32, dev);
    kernels::cpu::gemm_s8s8s32(N, M, K, xq.codes.data<int8_t>(), w.codes.data<int8_t>(), acc.data<int32_t>());
    kernels::cpu::int8_epilogue(acc.data<int32_t>(), N, M, xq.scales.data<float>(), w.scales.data<float>(), bp,
                                y.data<float>());
    return y;
  }
  const Tensor xq = input ? fake_quantize(x, *input) : x;
  if (N <= kWeightOnlyMaxRows) {
    kernels::cpu::weight_only_gemm(xq.data<float>(), N, group_weights(w, group), bp, y.data<float>());
    return y;
  }
  return linear(xq, dequantize_groups(w), b);
}

}  // namespace mpt::ops
