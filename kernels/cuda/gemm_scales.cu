// kernels/cuda/gemm_scales.cu: FP8 block-scale layout conversion for cuBLASLt, one thread per output entry.
#include "kernels/cuda/gemm_scales.h"

#include <algorithm>

#include "kernels/cuda/launch.cuh"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

__global__ void block_scales_kernel(GemmScaleMode mode, const float* ours, float* lt, int64_t rows, int64_t k,
                                    int64_t batch) {
  const int64_t n_ours = our_scale_count(mode, rows, k), n_lt = lt_scale_count(mode, rows, k);
  const int64_t total = n_lt * batch;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const int64_t e = i / n_lt;
    const int64_t j = our_index_of_lt(mode, i - e * n_lt, rows, k);
    lt[i] = j < 0 ? 0.0f : ours[e * n_ours + j];
  }
}

}  // namespace

cudaError_t block_scales_to_lt(GemmScaleMode mode, const float* ours, float* lt, int64_t rows, int64_t k,
                               int64_t batch, cudaStream_t stream) {
  if (mode == GemmScaleMode::PerTensor || rows < 0 || k < 0 || batch < 0) return cudaErrorInvalidValue;
  const int64_t total = lt_scale_count(mode, rows, k) * batch;
  if (total == 0) return cudaSuccess;
  if (ours == nullptr || lt == nullptr) return cudaErrorInvalidValue;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks);
  const uint64_t floats_read = static_cast<uint64_t>(our_scale_count(mode, rows, k)) * static_cast<uint64_t>(batch);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                            floats_read * sizeof(float), static_cast<uint64_t>(total) * sizeof(float)};
  return launch(block_scales_kernel, config, mode, ours, lt, rows, k, batch);
}

}  // namespace mpt::kernels::cuda
