// kernels/cuda/partial_sums.cuh: per-column partials summed in math::partial_groups' two levels (.cu files only).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/quantize.h"

namespace mpt::kernels::cuda {

// A finishing block: kPartialCols columns x math::kPartialGroups groups (256 threads). A warp reads four runs of 8
// consecutive floats (a whole 32-byte sector each), one per group.
inline constexpr int kPartialCols = 8;
inline constexpr int kPartialThreads = kPartialCols * static_cast<int>(math::kPartialGroups);
inline dim3 partial_sums_block() { return dim3(kPartialCols, static_cast<unsigned>(math::kPartialGroups)); }
inline int64_t partial_sums_blocks(int64_t cols) { return (cols + kPartialCols - 1) / kPartialCols; }

// For column c = blockIdx.x * kPartialCols + threadIdx.x: the sum of partial[k * stride + c] over parts k in
// [0, parts), each group of math::partial_groups(parts) from 0 in order by thread (x, group), then the groups' sums
// from 0 in order. The total is valid in the threads with threadIdx.y == 0 (0 elsewhere and past cols). Every thread
// of the block calls it (it holds a barrier); `groups` is __shared__ float[math::kPartialGroups][kPartialCols], not
// reused by the caller before another barrier.
MPT_DEVICE MPT_INLINE float finish_partial_sum(const float* partial, int64_t parts, int64_t stride, int64_t cols,
                                               float (*groups)[kPartialCols]) {
  const math::PartialGroups pg = math::partial_groups(parts);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kPartialCols + threadIdx.x;
  const int64_t g = threadIdx.y;
  float sum = 0.0f;
  if (c < cols && g < pg.groups) {
    const int64_t end = (g + 1) * pg.size < parts ? (g + 1) * pg.size : parts;
#pragma unroll 4
    for (int64_t k = g * pg.size; k < end; ++k) sum += partial[k * stride + c];
  }
  groups[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  float total = 0.0f;
  if (threadIdx.y == 0) {
    for (int64_t k = 0; k < pg.groups; ++k) total += groups[k][threadIdx.x];
  }
  return total;
}

}  // namespace mpt::kernels::cuda
