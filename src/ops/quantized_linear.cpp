// src/ops/quantized_linear.cpp: quantized inference GEMMs (INT8 x INT8, weight-only codes, dequantize + GEMM) behind one op.
#include "mpt/ops/quantized_linear.h"

#include "kernels/cpu/quantized_gemm.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/linear.h"
#include "ops/dispatch.h"

#if defined(MPT_WITH_CUDA)
#include <mutex>
#include <set>
#include <tuple>

#include "kernels/cuda/lib/gemm_cublaslt.h"
#include "kernels/cuda/quantized_gemm.h"
#include "mpt/core/determinism.h"
#include "ops/lt_workspace.h"
#endif

namespace mpt::ops {

namespace {

// The CPU's weight-only GEMV reads the codes once per row: up to 4 rows it beats dequantizing the weight for a float
// GEMM, beyond it loses (bench_quantized --device cpu --in 3072 --out 12288: int4-g128 13.6 ms at 2 rows, 18.6 at 4,
// 71.7 at 16, against about 16 ms of dequantization plus the FP32 GEMM's 7.4-10.9).
constexpr int64_t kWeightOnlyMaxRows = 4;

kernels::math::GroupWeights group_weights(const GroupQuantized& w, int64_t group) {
  const auto f = w.spec.format == QuantFormat::Int8   ? kernels::math::QuantFormat::Int8
                 : w.spec.format == QuantFormat::Int4 ? kernels::math::QuantFormat::Int4
                                                      : kernels::math::QuantFormat::E4M3;
  return {w.codes.data<int8_t>(), w.scales.data<float>(), w.codes.shape()[0], w.codes.shape()[1], group, f};
}

// Both operands as codes on the same grid: W8A8 (INT8 per token x INT8 per channel) or FP8 (E4M3 per token x E4M3 per
// channel): their product is a GEMM on the codes with one scale per row and one per column after it.
bool codes_times_codes(const std::optional<QuantSpec>& input, const GroupQuantized& w) {
  return input && input->granularity == QuantGranularity::PerToken && w.spec.granularity == QuantGranularity::PerChannel &&
         input->format == w.spec.format && (w.spec.format == QuantFormat::Int8 || w.spec.format == QuantFormat::FP8);
}

#if defined(MPT_WITH_CUDA)
namespace kcu = kernels::cuda;

// Problems cuBLASLt refused once (device, INT8, n, m, k) are not asked again: the fallback runs at once.
bool refused(const std::tuple<int, bool, int64_t, int64_t, int64_t>& key, bool add) {
  static std::mutex mutex;
  static auto* set = new std::set<std::tuple<int, bool, int64_t, int64_t, int64_t>>();
  std::lock_guard<std::mutex> lock(mutex);
  return add ? set->insert(key).second : set->count(key) > 0;
}

// The codes x codes GEMM on cuBLASLt's tensor cores: x quantized per token, its codes times W's codes (INT8 x INT8 ->
// exact INT32 on the IMMA kernels, or E4M3 x E4M3 -> FP32), then the dequantizing epilogue kernel (row and column
// scales, bias, one rounding to x's dtype). Undefined when cuBLASLt cannot take the problem here (INT8's multiples of
// 4, FP8's of 16 bytes, no FP8 tensor cores before sm_89, no algorithm): the caller falls back.
Tensor codes_gemm_cuda(const Tensor& x, const GroupQuantized& w, const Tensor& bias, const QuantSpec& input) {
  const char* op = "quantized_linear";
  const bool int8 = w.spec.format == QuantFormat::Int8;
  const Device dev = x.device();
  const int64_t M = w.codes.shape()[0], N = x.shape()[0], K = x.shape()[1];
  const auto key = std::make_tuple(dev.index(), int8, N, M, K);
  kcu::LtGemmParams p;
  p.shape = {N, M, K, false, true, K, K, M, 1, 0, 0, 0};  // y [N, M] = codes(x) [N, K] codes(W)^T, W stored [M, K]
  if ((int8 && !kcu::int8_gemm_shape_ok(p.shape)) || refused(key, false)) return {};
  p.a_type = p.b_type = int8 ? CUDA_R_8I : CUDA_R_8F_E4M3;
  p.c_type = int8 ? CUDA_R_32I : CUDA_R_32F;
  p.deterministic = deterministic();
  const GroupQuantized xq = quantize_groups(x, input);
  const Tensor acc = Tensor::empty({N, M}, int8 ? DType::I32 : DType::F32, dev);
  const Stream stream = Stream::current(dev);
  const auto native = static_cast<cudaStream_t>(stream.native());
  const kcu::LtResult r = kcu::cublaslt_gemm(dev.index(), p, xq.codes.data_ptr(), w.codes.data_ptr(), acc.data_ptr(),
                                             detail::lt_workspace(stream), native);
  if (r.code == kcu::LtCode::NoAlgorithm) {
    refused(key, true);
    return {};
  }
  MPT_CHECK(r.ok(), "[{}] {} (x {}, weight codes {})", op, kcu::describe(r, p), x.meta_str(), w.codes.meta_str());
  Tensor y = Tensor::empty({N, M}, x.dtype(), dev);
  const float* bp = bias.defined() ? bias.data<float>() : nullptr;
  detail::visit_float(x.dtype(), op, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, double>) {
      MPT_THROW("[{}] expected an f32, bf16 or f16 input on CUDA, got {}", op, x.meta_str());
    } else if (int8) {
      MPT_CUDA_KERNEL(kcu::dequantize_accumulators(acc.data<int32_t>(), N, M, xq.scales.data<float>(),
                                                   w.scales.data<float>(), bp, y.data<T>(), native));
    } else {
      MPT_CUDA_KERNEL(kcu::dequantize_accumulators(acc.data<float>(), N, M, xq.scales.data<float>(),
                                                   w.scales.data<float>(), bp, y.data<T>(), native));
    }
  });
  return y;
}
#endif

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
#if defined(MPT_WITH_CUDA)
    if (codes_times_codes(input, w))
      if (Tensor y = codes_gemm_cuda(x_in, w, bias.defined() ? bias.contiguous() : bias, *input); y.defined()) return y;
#endif
    const Tensor xq = input ? fake_quantize(x_in, *input) : x_in.contiguous();
#if defined(MPT_WITH_CUDA)
    if (const auto gw = group_weights(w, group); kcu::weight_only_gemv_ok(N, gw)) {
      Tensor y = Tensor::empty({N, M}, xq.dtype(), dev);
      const Tensor b = bias.defined() ? bias.contiguous() : Tensor{};
      const float* bp = b.defined() ? b.data<float>() : nullptr;
      const auto stream = static_cast<cudaStream_t>(detail::stream_of(dev));
      detail::visit_float(xq.dtype(), "quantized_linear", [&](auto tag) {
        using T = decltype(tag);
        if constexpr (std::is_same_v<T, double>) {
          MPT_THROW("[quantized_linear] expected an f32, bf16 or f16 input on CUDA, got {}", xq.meta_str());
        } else {
          MPT_CUDA_KERNEL(kcu::weight_only_gemv(xq.data<T>(), N, gw, bp, y.data<T>(), stream));
        }
      });
      return y;
    }
#endif
    return linear(xq, dequantize_groups(w, xq.dtype()), bias.defined() ? bias.to(xq.dtype()) : bias);
  }
  const Tensor x = x_in.dtype() == DType::F32 ? x_in.contiguous() : x_in.to(DType::F32);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor{};
  const float* bp = b.defined() ? b.data<float>() : nullptr;
  Tensor y = Tensor::empty({N, M}, DType::F32, dev);
  if (codes_times_codes(input, w) && w.spec.format == QuantFormat::Int8) {
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
