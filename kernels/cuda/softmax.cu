// kernels/cuda/softmax.cu: row softmax forward and backward, one block per row, float math from kernels/math/softmax.h.
#include "kernels/cuda/softmax.h"

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_io.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/reduce.h"
#include "kernels/math/softmax.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kMaxThreads = 1024;

// Three passes over the row (max, exp sum, output), each thread striding by blockDim.x elements or,
// with kVec, by blockDim.x vectors of 16 bytes. Passes are separated by block reductions, so x may be y.
template <class T, bool kVec>
__global__ void __launch_bounds__(kMaxThreads) softmax_rows_kernel(const T* x, T* y, int64_t cols) {
  __shared__ float scratch[math::kBlockReduceScratch];
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const T* xr = x + static_cast<int64_t>(blockIdx.x) * cols;
  T* yr = y + static_cast<int64_t>(blockIdx.x) * cols;
  const int64_t first = static_cast<int64_t>(threadIdx.x) * kWidth;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * kWidth;

  float row_max = -INFINITY;
  for (int64_t c = first; c < cols; c += stride) {
    if constexpr (kVec) {
      const Vec16<T> v = load16(xr + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) row_max = math::softmax_max(row_max, math::softmax_load(v.v[k]));
    } else {
      row_max = math::softmax_max(row_max, math::softmax_load(xr[c]));
    }
  }
  row_max = math::block_allreduce(row_max, math::MaxOp{}, -INFINITY, scratch);

  float sum = 0.0f;
  for (int64_t c = first; c < cols; c += stride) {
    if constexpr (kVec) {
      const Vec16<T> v = load16(xr + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) sum += math::softmax_exp(math::softmax_load(v.v[k]), row_max);
    } else {
      sum += math::softmax_exp(math::softmax_load(xr[c]), row_max);
    }
  }
  sum = math::block_allreduce(sum, math::SumOp{}, 0.0f, scratch);

  const math::SoftmaxRow row = math::SoftmaxRow::from_max_and_sum(row_max, sum);
  for (int64_t c = first; c < cols; c += stride) {
    if constexpr (kVec) {
      const Vec16<T> v = load16(xr + c);
      Vec16<T> out;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) out.v[k] = row.output<T>(math::softmax_load(v.v[k]));
      store16(yr + c, out);
    } else {
      yr[c] = row.output<T>(math::softmax_load(xr[c]));
    }
  }
}

// Two passes: the block's sum of dy * y, then dx.
template <class T, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    softmax_backward_rows_kernel(const T* dy, const T* y, T* dx, int64_t cols, bool accumulate) {
  __shared__ float scratch[math::kBlockReduceScratch];
  using Pack = RowPack<T, kVec>;
  const int64_t offset = static_cast<int64_t>(blockIdx.x) * cols;
  const RowStride rs = row_stride<Pack::kWidth>();
  float dot = 0.0f;
  for (int64_t c = rs.first; c < cols; c += rs.stride) {
    const Pack g = Pack::load(dy + offset + c), v = Pack::load(y + offset + c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k) dot += g.v[k] * v.v[k];
  }
  dot = math::block_allreduce(dot, math::SumOp{}, 0.0f, scratch);
  for (int64_t c = rs.first; c < cols; c += rs.stride) {
    const Pack g = Pack::load(dy + offset + c), v = Pack::load(y + offset + c);
    Pack out;
    if (accumulate) out = Pack::load(dx + offset + c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k) {
      const float d = math::softmax_backward(v.v[k], g.v[k], dot);
      out.v[k] = accumulate ? out.v[k] + d : d;
    }
    out.store(dx + offset + c);
  }
}

}  // namespace

template <class T>
cudaError_t softmax_backward_rows(const T* dy, const T* y, T* dx, int64_t rows, int64_t cols, bool accumulate,
                                  cudaStream_t stream) {
  if (rows < 0 || cols < 1 || rows > 2147483647) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (dy == nullptr || y == nullptr || dx == nullptr) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = cols % kWidth == 0 && is_aligned16(dy) && is_aligned16(y) && is_aligned16(dx);
  const int threads = row_block_threads(vec ? cols / kWidth : cols, kMaxThreads);
  // dy and y (and dx when accumulating) in, dx out.
  const uint64_t bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * sizeof(T);
  const LaunchConfig config{dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream,
                            bytes * (accumulate ? 3 : 2), bytes};
  return vec ? launch(softmax_backward_rows_kernel<T, true>, config, dy, y, dx, cols, accumulate)
             : launch(softmax_backward_rows_kernel<T, false>, config, dy, y, dx, cols, accumulate);
}

template <class T>
cudaError_t softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 1 || rows > 2147483647) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = cols % kWidth == 0 && is_aligned16(x) && is_aligned16(y);
  const int64_t units = vec ? cols / kWidth : cols;  // what one thread handles per step
  const int64_t threads = units >= kMaxThreads ? kMaxThreads : (units + 31) / 32 * 32;
  const uint64_t bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(cols) * sizeof(T);
  const LaunchConfig config{dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream, bytes,
                            bytes};
  return vec ? launch(softmax_rows_kernel<T, true>, config, x, y, cols)
             : launch(softmax_rows_kernel<T, false>, config, x, y, cols);
}

template cudaError_t softmax_rows<float>(const float*, float*, int64_t, int64_t, cudaStream_t);
template cudaError_t softmax_rows<f16>(const f16*, f16*, int64_t, int64_t, cudaStream_t);
template cudaError_t softmax_rows<bf16>(const bf16*, bf16*, int64_t, int64_t, cudaStream_t);
template cudaError_t softmax_backward_rows<float>(const float*, const float*, float*, int64_t, int64_t, bool,
                                                  cudaStream_t);
template cudaError_t softmax_backward_rows<f16>(const f16*, const f16*, f16*, int64_t, int64_t, bool, cudaStream_t);
template cudaError_t softmax_backward_rows<bf16>(const bf16*, const bf16*, bf16*, int64_t, int64_t, bool,
                                                 cudaStream_t);

}  // namespace mpt::kernels::cuda
