// kernels/cuda/gemm_scales.cu: FP8 block-scale layout conversion for cuBLASLt, one thread per output entry.
#include "kernels/cuda/gemm_scales.h"

#include <algorithm>

#include "kernels/cuda/launch.cuh"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

int64_t lt_total(const BlockScaleConversion& c) { return lt_scale_count(c.mode, c.rows, c.k) * c.batch; }

// Entry i (of a's entries, then b's) of the two conversions.
__global__ void block_scales_kernel(BlockScaleConversion a, BlockScaleConversion b) {
  const int64_t total_a = lt_scale_count(a.mode, a.rows, a.k) * a.batch;
  const int64_t total = total_a + lt_scale_count(b.mode, b.rows, b.k) * b.batch;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    const bool in_a = i < total_a;  // the fields picked one by one: no copy of a parameter struct to local memory
    const GemmScaleMode mode = in_a ? a.mode : b.mode;
    const int64_t rows = in_a ? a.rows : b.rows, k = in_a ? a.k : b.k, at = in_a ? i : i - total_a;
    const float* ours = in_a ? a.ours : b.ours;
    float* lt = in_a ? a.lt : b.lt;
    const int64_t n_ours = our_scale_count(mode, rows, k), n_lt = lt_scale_count(mode, rows, k);
    const int64_t e = at / n_lt;
    const int64_t j = our_index_of_lt(mode, at - e * n_lt, rows, k);
    lt[at] = j < 0 ? 0.0f : ours[e * n_ours + j];
  }
}

// A conversion's arguments are valid (nothing to do is valid; b may be the empty conversion).
bool valid(const BlockScaleConversion& c) {
  if (c.mode == GemmScaleMode::PerTensor || c.rows < 0 || c.k < 0 || c.batch < 0) return false;
  return lt_total(c) == 0 || (c.ours != nullptr && c.lt != nullptr);
}

}  // namespace

cudaError_t block_scales_to_lt(GemmScaleMode mode, const float* ours, float* lt, int64_t rows, int64_t k,
                               int64_t batch, cudaStream_t stream) {
  return block_scales_to_lt({mode, ours, lt, rows, k, batch}, BlockScaleConversion{}, stream);
}

cudaError_t block_scales_to_lt(const BlockScaleConversion& a, const BlockScaleConversion& b, cudaStream_t stream) {
  if (!valid(a) || !valid(b)) return cudaErrorInvalidValue;
  const int64_t total = lt_total(a) + lt_total(b);
  if (total == 0) return cudaSuccess;
  const int64_t blocks = std::min<int64_t>((total + kThreads - 1) / kThreads, kMaxBlocks);
  const uint64_t floats_read = static_cast<uint64_t>(our_scale_count(a.mode, a.rows, a.k) * a.batch +
                                                     our_scale_count(b.mode, b.rows, b.k) * b.batch);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                            floats_read * sizeof(float), static_cast<uint64_t>(total) * sizeof(float)};
  return launch(block_scales_kernel, config, a, b);
}

}  // namespace mpt::kernels::cuda
