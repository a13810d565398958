// kernels/cuda/rope.cu: rotary position embedding, one thread per (row, pair), the math of kernels/math/rope.h.
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/rope.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;

template <class T>
__global__ void __launch_bounds__(kThreads) rope_kernel(const T* x, T* y, const float* cos, const float* sin,
                                                        RopeShape s) {
  const int64_t half = s.head_dim / 2, pairs = s.rows * half;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const float sign = s.inverse ? -1.0f : 1.0f;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pairs; p += stride) {
    const int64_t r = p / half, i = p % half;
    const int64_t t = (r / s.heads) % s.seq;
    const int64_t at = (t + s.position0) * s.table_ld + i;
    const T* xr = x + math::rope_row_offset(s, r, s.x_ld);
    T* yr = y + math::rope_row_offset(s, r, s.y_ld);
    if (!math::rope_row_rotated(s, r)) {  // a copied head (Llama's v): its bits
      yr[i] = xr[i];
      yr[i + half] = xr[i + half];
      continue;
    }
    float y1, y2;
    math::rope_pair<float>(math::load(xr[i]), math::load(xr[i + half]), cos[at], sign * sin[at], y1, y2);
    yr[i] = math::store<T>(y1);
    yr[i + half] = math::store<T>(y2);
  }
}

}  // namespace

template <class T>
cudaError_t rope(const T* x, T* y, const float* cos, const float* sin, const RopeShape& s, cudaStream_t stream) {
  if (s.rows < 0 || s.seq < 1 || s.heads < 1 || s.head_dim < 2 || s.head_dim % 2 != 0 || s.position0 < 0 ||
      (s.x_ld != 0 && s.x_ld < s.heads * s.head_dim) || (s.y_ld != 0 && s.y_ld < s.heads * s.head_dim) ||
      s.rotated > s.heads)
    return cudaErrorInvalidValue;
  const int64_t pairs = s.rows * (s.head_dim / 2);
  if (pairs == 0) return cudaSuccess;
  if (x == nullptr || y == nullptr || cos == nullptr || sin == nullptr) return cudaErrorInvalidValue;
  const int64_t blocks = (pairs + kThreads - 1) / kThreads;
  // x in, y out; of the cos and sin tables, head_dim / 2 entries of each position the rows cover (min(seq,
  // ceil(rows / heads)) positions).
  const uint64_t elems = static_cast<uint64_t>(s.rows) * static_cast<uint64_t>(s.head_dim);
  const int64_t row_groups = (s.rows + s.heads - 1) / s.heads;
  const uint64_t positions = static_cast<uint64_t>(row_groups < s.seq ? row_groups : s.seq);
  const uint64_t table_bytes = 2 * positions * static_cast<uint64_t>(s.head_dim / 2) * sizeof(float);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks < 65535 * 8 ? blocks : 65535 * 8)), dim3(kThreads), 0,
                            stream, elems * sizeof(T) + table_bytes, elems * sizeof(T)};
  return launch(rope_kernel<T>, config, x, y, cos, sin, s);
}

template cudaError_t rope<float>(const float*, float*, const float*, const float*, const RopeShape&, cudaStream_t);
template cudaError_t rope<f16>(const f16*, f16*, const float*, const float*, const RopeShape&, cudaStream_t);
template cudaError_t rope<bf16>(const bf16*, bf16*, const float*, const float*, const RopeShape&, cudaStream_t);

}  // namespace mpt::kernels::cuda
