// kernels/cuda/softmax.cu: row softmax forward, one block per row, float math from kernels/math/softmax.h.
#include "kernels/cuda/softmax.h"

#include "kernels/cuda/launch.cuh"
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

}  // namespace

template <class T>
cudaError_t softmax_rows(const T* x, T* y, int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows < 0 || cols < 1 || rows > 2147483647) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = cols % kWidth == 0 && is_aligned16(x) && is_aligned16(y);
  const int64_t units = vec ? cols / kWidth : cols;  // what one thread handles per step
  const int64_t threads = units >= kMaxThreads ? kMaxThreads : (units + 31) / 32 * 32;
  const LaunchConfig config{dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream};
  return vec ? launch(softmax_rows_kernel<T, true>, config, x, y, cols)
             : launch(softmax_rows_kernel<T, false>, config, x, y, cols);
}

template cudaError_t softmax_rows<float>(const float*, float*, int64_t, int64_t, cudaStream_t);
template cudaError_t softmax_rows<f16>(const f16*, f16*, int64_t, int64_t, cudaStream_t);
template cudaError_t softmax_rows<bf16>(const bf16*, bf16*, int64_t, int64_t, cudaStream_t);

}  // namespace mpt::kernels::cuda
