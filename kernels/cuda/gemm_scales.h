// kernels/cuda/gemm_scales.h: converts FP8 block scales from our layouts to the ones cuBLASLt's VEC128_32F and
// BLK128x128_32F modes read (layouts: kernels/cuda/lib/gemm_layout.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/cuda/lib/gemm_layout.h"

namespace mpt::kernels::cuda {

// ours: batch consecutive arrays of our_scale_count(mode, rows, k) floats (Block1x128: [rows, KB] row-major;
// Block128x128: [ceil(rows/128), KB] row-major). lt: batch consecutive arrays of lt_scale_count(mode, rows, k)
// floats in cuBLASLt's layout (BLK padding written as 0). rows is the operand's non-K dimension (m for A, n for
// B). PerTensor is refused (nothing to convert). Asynchronous on `stream`; returns the launch error.
cudaError_t block_scales_to_lt(GemmScaleMode mode, const float* ours, float* lt, int64_t rows, int64_t k,
                               int64_t batch, cudaStream_t stream);

// One conversion of the call above.
struct BlockScaleConversion {
  GemmScaleMode mode = GemmScaleMode::Block1x128;
  const float* ours = nullptr;
  float* lt = nullptr;
  int64_t rows = 0, k = 0, batch = 0;
};
// Both operands' conversions of one block-scaled GEMM in one launch (b's entries after a's), each as above.
cudaError_t block_scales_to_lt(const BlockScaleConversion& a, const BlockScaleConversion& b, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
