// kernels/cuda/quantized_gemm.cu: the dequantizing epilogue of the codes x codes GEMMs and the weight-only decoding GEMV (math from kernels/math/fake_quant.h).
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/quantized_gemm.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

template <class Acc, class Out>
struct EpilogueParams {
  const Acc* acc;
  int64_t m, n;
  const float *sa, *sb, *bias;
  Out* y;
};

template <class Acc, class Out>
__global__ void __launch_bounds__(kPackThreads) dequantize_accumulators_kernel(EpilogueParams<Acc, Out> p) {
  const int64_t total = p.m * p.n;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / p.n, j = i - row * p.n;
    p.y[i] = scalar_cast<Out>(
        math::dequantize_accumulator(static_cast<float>(p.acc[i]), p.sa[row], p.sb[j], p.bias, j));
  }
}

template <class T>
struct GemvParams {
  const T* x;
  int64_t m;
  math::GroupWeights w;
  const float* bias;
  T* y;
};

constexpr int kGemvWarps = 8;  // output columns per block

// One warp per output column j; lane l takes codes 4l..4l+3, 128 + 4l.., so a warp reads 128 consecutive bytes per
// step. The rows are unrolled to the maximum with a bound check (the accumulators stay in registers).
template <class T>
__global__ void __launch_bounds__(kGemvWarps * 32) weight_only_gemv_kernel(GemvParams<T> p) {
  constexpr int R = static_cast<int>(kWeightOnlyGemvMaxRows);
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kGemvWarps + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (j >= p.w.n) return;  // the whole warp leaves together
  const int64_t k = p.w.k, groups = k / p.w.group;
  const int8_t* codes = p.w.codes + j * k;
  const float* scales = p.w.scales + j * groups;
  float acc[R];
#pragma unroll
  for (int i = 0; i < R; ++i) acc[i] = 0.0f;
  for (int64_t l = 4 * lane; l < k; l += 128) {
    const uint32_t c4 = *reinterpret_cast<const uint32_t*>(codes + l);  // 4 codes, little-endian: code l in bits 0-7
    const float w0 = math::code_value(static_cast<int8_t>(c4 & 0xFFu), p.w.format),
                w1 = math::code_value(static_cast<int8_t>((c4 >> 8) & 0xFFu), p.w.format),
                w2 = math::code_value(static_cast<int8_t>((c4 >> 16) & 0xFFu), p.w.format),
                w3 = math::code_value(static_cast<int8_t>(c4 >> 24), p.w.format);
    const float s = scales[l / p.w.group];  // 4 | group: the four share it
#pragma unroll
    for (int i = 0; i < R; ++i) {
      if (i < p.m) {
        const T* xr = p.x + i * k + l;
        const float part = scalar_cast<float>(xr[0]) * w0 + scalar_cast<float>(xr[1]) * w1 +
                           scalar_cast<float>(xr[2]) * w2 + scalar_cast<float>(xr[3]) * w3;
        acc[i] += part * s;
      }
    }
  }
  const float b = p.bias != nullptr ? p.bias[j] : 0.0f;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (i < p.m) {
      const float v = math::warp_allreduce(acc[i], math::SumOp{});
      if (lane == 0) p.y[i * p.w.n + j] = scalar_cast<T>(v + b);
    }
  }
}

}  // namespace

template <class T>
cudaError_t weight_only_gemv(const T* x, int64_t m, const math::GroupWeights& w, const float* bias, T* y,
                             cudaStream_t stream) {
  if (!weight_only_gemv_ok(m, w) || w.n < 0 || w.k < 0) return cudaErrorInvalidValue;
  if (m == 0 || w.n == 0) return cudaSuccess;
  if (w.k > 0 && (x == nullptr || w.codes == nullptr || w.scales == nullptr)) return cudaErrorInvalidValue;
  if (y == nullptr || reinterpret_cast<uintptr_t>(w.codes) % 4 != 0) return cudaErrorInvalidValue;
  const int64_t blocks = (w.n + kGemvWarps - 1) / kGemvWarps;
  if (blocks > 2147483647) return cudaErrorInvalidValue;
  // Every code and scale once; x once (it stays in cache for the other warps), the bias; the outputs.
  const uint64_t read = static_cast<uint64_t>(w.n * w.k) + static_cast<uint64_t>(w.n * (w.k / w.group)) * sizeof(float) +
                        static_cast<uint64_t>(m * w.k) * sizeof(T) + (bias != nullptr ? w.n * sizeof(float) : 0);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kGemvWarps * 32), 0, stream, read,
                            static_cast<uint64_t>(m * w.n) * sizeof(T)};
  return launch(weight_only_gemv_kernel<T>, config, GemvParams<T>{x, m, w, bias, y});
}

template cudaError_t weight_only_gemv<float>(const float*, int64_t, const math::GroupWeights&, const float*, float*,
                                             cudaStream_t);
template cudaError_t weight_only_gemv<f16>(const f16*, int64_t, const math::GroupWeights&, const float*, f16*,
                                           cudaStream_t);
template cudaError_t weight_only_gemv<bf16>(const bf16*, int64_t, const math::GroupWeights&, const float*, bf16*,
                                            cudaStream_t);

template <class Acc, class Out>
cudaError_t dequantize_accumulators(const Acc* acc, int64_t m, int64_t n, const float* sa, const float* sb,
                                    const float* bias, Out* y, cudaStream_t stream) {
  if (m < 0 || n < 0) return cudaErrorInvalidValue;
  const int64_t total = m * n;
  if (total == 0) return cudaSuccess;
  if (acc == nullptr || sa == nullptr || sb == nullptr || y == nullptr) return cudaErrorInvalidValue;
  // The accumulators once, the scales and the bias (small, cached), the outputs.
  const uint64_t read = static_cast<uint64_t>(total) * sizeof(Acc) +
                        static_cast<uint64_t>(m + n + (bias != nullptr ? n : 0)) * sizeof(float);
  const LaunchConfig config{dim3(grid_stride_blocks(total)), dim3(kPackThreads), 0, stream, read,
                            static_cast<uint64_t>(total) * sizeof(Out)};
  return launch(dequantize_accumulators_kernel<Acc, Out>, config,
                EpilogueParams<Acc, Out>{acc, m, n, sa, sb, bias, y});
}

#define MPT_DEQUANT_ACC(Acc, Out)                                                                                \
  template cudaError_t dequantize_accumulators<Acc, Out>(const Acc*, int64_t, int64_t, const float*, const float*, \
                                                         const float*, Out*, cudaStream_t);
MPT_DEQUANT_ACC(int32_t, float)
MPT_DEQUANT_ACC(int32_t, f16)
MPT_DEQUANT_ACC(int32_t, bf16)
MPT_DEQUANT_ACC(float, float)
MPT_DEQUANT_ACC(float, f16)
MPT_DEQUANT_ACC(float, bf16)
#undef MPT_DEQUANT_ACC

}  // namespace mpt::kernels::cuda
