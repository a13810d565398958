// kernels/cuda/random.cu: uniform and normal fill kernels; one thread per Philox counter (4 elements).
#include "kernels/cuda/random.h"

#include <algorithm>

#include "kernels/cuda/launch.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/random.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;

struct UniformOp {
  float low, high;
  MPT_HD void operator()(uint64_t seed, uint64_t counter, float* v) const {
    math::uniform4(seed, counter, low, high, v);
  }
};

struct NormalOp {
  float mean, std;
  MPT_HD void operator()(uint64_t seed, uint64_t counter, float* v) const {
    math::normal4(seed, counter, mean, std, v);
  }
};

// Thread g (grid-stride) computes counter offset + g and writes elements [4g, 4g + 4) ∩ [0, n).
// The tail is written with constant indices so v[] stays in registers (no local memory).
template <class T, class Op>
__global__ void fill_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, Op op) {
  const int64_t groups = (n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    float v[4];
    op(seed, offset + static_cast<uint64_t>(g), v);
    T* o = out + 4 * g;
    const int64_t left = n - 4 * g;
    o[0] = static_cast<T>(v[0]);
    if (left > 1) o[1] = static_cast<T>(v[1]);
    if (left > 2) o[2] = static_cast<T>(v[2]);
    if (left > 3) o[3] = static_cast<T>(v[3]);
  }
}

template <class T, class Op>
cudaError_t launch_fill(T* out, int64_t n, uint64_t seed, uint64_t offset, Op op, cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  const int64_t groups = (n + 3) / 4;
  const int64_t blocks = std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxBlocks);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, 0,
                            static_cast<uint64_t>(n) * sizeof(T)};
  return launch(fill_kernel<T, Op>, config, out, n, seed, offset, op);
}

}  // namespace

template <class T>
cudaError_t fill_uniform(T* out, int64_t n, uint64_t seed, uint64_t offset, float low, float high,
                         cudaStream_t stream) {
  return launch_fill(out, n, seed, offset, UniformOp{low, high}, stream);
}

template <class T>
cudaError_t fill_normal(T* out, int64_t n, uint64_t seed, uint64_t offset, float mean, float std,
                        cudaStream_t stream) {
  return launch_fill(out, n, seed, offset, NormalOp{mean, std}, stream);
}

#define MPT_INSTANTIATE_CUDA_FILLS(T)                                                               \
  template cudaError_t fill_uniform<T>(T*, int64_t, uint64_t, uint64_t, float, float, cudaStream_t); \
  template cudaError_t fill_normal<T>(T*, int64_t, uint64_t, uint64_t, float, float, cudaStream_t);

MPT_INSTANTIATE_CUDA_FILLS(float)
MPT_INSTANTIATE_CUDA_FILLS(double)
MPT_INSTANTIATE_CUDA_FILLS(mpt::f16)
MPT_INSTANTIATE_CUDA_FILLS(mpt::bf16)

}  // namespace mpt::kernels::cuda
