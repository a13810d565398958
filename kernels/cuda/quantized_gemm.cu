// kernels/cuda/quantized_gemm.cu: the dequantizing epilogue of the quantized GEMMs: per-token x per-channel scales, bias, one rounding (math from kernels/math/fake_quant.h).
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/quantized_gemm.h"

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

}  // namespace

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
