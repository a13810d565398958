// kernels/cuda/attention.cu: causal scaled softmax over [B*H, T, T] score rows, forward and backward.
#include "kernels/cuda/attention.h"
#include "kernels/math/opmath.h"

#include <cmath>

#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/row_io.cuh"
#include "kernels/math/attention.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kMaxThreads = 1024;

// Three passes over the row's causal keys (max, exp sum, output); the output pass also writes the zeros past
// the diagonal. Threads stride by blockDim.x packs of one element or 16 bytes; a pack straddling the
// diagonal uses only its elements j <= i.
template <class T, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    causal_softmax_forward_kernel(const T* x, T* y, float* lse, int64_t t, float scale, math::KeyPadding pad) {
  __shared__ float scratch[math::kBlockReduceScratch];
  using Pack = RowPack<T, kVec>;
  const int64_t row = blockIdx.x, offset = row * t, n = math::causal_keys(row, t, pad);
  const RowStride rs = row_stride<Pack::kWidth>();
  float row_max = -INFINITY;
  for (int64_t c = rs.first; c < n; c += rs.stride) {
    const Pack p = Pack::load(x + offset + c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k)
      if (c + k < n) row_max = math::attention_max(row_max, p.v[k] * scale);
  }
  row_max = math::block_allreduce(row_max, math::MaxOp{}, -INFINITY, scratch);
  float sum = 0.0f;
  for (int64_t c = rs.first; c < n; c += rs.stride) {
    const Pack p = Pack::load(x + offset + c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k)
      if (c + k < n) sum += math::attention_exp(p.v[k] * scale - row_max);
  }
  sum = math::block_allreduce(sum, math::SumOp{}, 0.0f, scratch);
  const auto sm = math::CausalSoftmaxRow<float>::make(scale, row_max, sum);
  for (int64_t c = rs.first; c < t; c += rs.stride) {
    Pack out;
    if (c < n) {
      const Pack p = Pack::load(x + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) out.v[k] = c + k < n ? sm.prob(p.v[k]) : 0.0f;
    } else {
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) out.v[k] = 0.0f;
    }
    out.store(y + offset + c);
  }
  if (lse != nullptr && threadIdx.x == 0) lse[row] = sm.lse;
}

// Two passes: the block's sum of dy * y over the causal keys, then dx (zeros past the diagonal).
template <class T, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    causal_softmax_backward_kernel(const T* dy, const T* y, T* dx, int64_t t, float scale, math::KeyPadding pad) {
  __shared__ float scratch[math::kBlockReduceScratch];
  using Pack = RowPack<T, kVec>;
  const int64_t row = blockIdx.x, offset = row * t, n = math::causal_keys(row, t, pad);
  const RowStride rs = row_stride<Pack::kWidth>();
  float dot = 0.0f;
  for (int64_t c = rs.first; c < n; c += rs.stride) {
    const Pack g = Pack::load(dy + offset + c), p = Pack::load(y + offset + c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k)
      if (c + k < n) dot += g.v[k] * p.v[k];
  }
  dot = math::block_allreduce(dot, math::SumOp{}, 0.0f, scratch);
  for (int64_t c = rs.first; c < t; c += rs.stride) {
    Pack out;
    if (c < n) {
      const Pack g = Pack::load(dy + offset + c), p = Pack::load(y + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k)
        out.v[k] = c + k < n ? math::causal_softmax_backward(p.v[k], g.v[k], dot, scale) : 0.0f;
    } else {
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) out.v[k] = 0.0f;
    }
    out.store(dx + offset + c);
  }
}

// Score elements the passes read: the causal triangle of each [t, t] block, t (t + 1) / 2 of them. Under key padding
// the lengths live in device memory, unknowable here: the unpadded triangle is counted (an upper bound), plus the
// lengths (one int32 per sample).
uint64_t causal_elements(int64_t rows, int64_t t) {
  return static_cast<uint64_t>(rows / t) * (static_cast<uint64_t>(t) * static_cast<uint64_t>(t + 1) / 2);
}

uint64_t padding_bytes(int64_t rows, int64_t t, math::KeyPadding pad) {
  return pad.lengths == nullptr ? 0 : static_cast<uint64_t>((rows / t + pad.heads - 1) / pad.heads) * sizeof(int32_t);
}

bool valid_rows(int64_t rows, int64_t t, float scale, math::KeyPadding pad) {
  return rows >= 0 && t >= 1 && rows <= 2147483647 && rows % t == 0 && std::isfinite(scale) && scale > 0 &&
         pad.heads >= 1;
}

}  // namespace

template <class T>
cudaError_t causal_softmax_forward(const T* x, T* y, float* lse, int64_t rows, int64_t t, float scale,
                                   cudaStream_t stream, math::KeyPadding padding) {
  if (!valid_rows(rows, t, scale, padding)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = t % kWidth == 0 && is_aligned16(x) && is_aligned16(y);
  const int threads = row_block_threads(vec ? t / kWidth : t, kMaxThreads);
  // x over the causal triangle; y whole (zeros past the diagonal), lse when given.
  const uint64_t read_bytes = causal_elements(rows, t) * sizeof(T) + padding_bytes(rows, t, padding);
  const uint64_t written_bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(t) * sizeof(T) +
                                 (lse != nullptr ? static_cast<uint64_t>(rows) * sizeof(float) : 0);
  const LaunchConfig config{dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream,
                            read_bytes, written_bytes};
  return vec ? launch(causal_softmax_forward_kernel<T, true>, config, x, y, lse, t, scale, padding)
             : launch(causal_softmax_forward_kernel<T, false>, config, x, y, lse, t, scale, padding);
}

template <class T>
cudaError_t causal_softmax_backward(const T* dy, const T* y, T* dx, int64_t rows, int64_t t, float scale,
                                    cudaStream_t stream, math::KeyPadding padding) {
  if (!valid_rows(rows, t, scale, padding)) return cudaErrorInvalidValue;
  if (rows == 0) return cudaSuccess;
  if (dy == nullptr || y == nullptr || dx == nullptr) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = t % kWidth == 0 && is_aligned16(dy) && is_aligned16(y) && is_aligned16(dx);
  const int threads = row_block_threads(vec ? t / kWidth : t, kMaxThreads);
  // dy and y over the causal triangle; dx whole (zeros past the diagonal).
  const uint64_t read_bytes = 2 * causal_elements(rows, t) * sizeof(T) + padding_bytes(rows, t, padding);
  const uint64_t written_bytes = static_cast<uint64_t>(rows) * static_cast<uint64_t>(t) * sizeof(T);
  const LaunchConfig config{dim3(static_cast<unsigned>(rows)), dim3(static_cast<unsigned>(threads)), 0, stream,
                            read_bytes, written_bytes};
  return vec ? launch(causal_softmax_backward_kernel<T, true>, config, dy, y, dx, t, scale, padding)
             : launch(causal_softmax_backward_kernel<T, false>, config, dy, y, dx, t, scale, padding);
}

#define MPT_INSTANTIATE(T)                                                                                       \
  template cudaError_t causal_softmax_forward<T>(const T*, T*, float*, int64_t, int64_t, float, cudaStream_t,   \
                                                 math::KeyPadding);                                             \
  template cudaError_t causal_softmax_backward<T>(const T*, const T*, T*, int64_t, int64_t, float, cudaStream_t, \
                                                  math::KeyPadding);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
