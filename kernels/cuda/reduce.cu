// kernels/cuda/reduce.cu: full-array sum: grid-stride 16-byte loads, warp-shuffle and shared-memory block reduction, atomicAdd.
#include "kernels/cuda/reduce.h"

#include "kernels/cuda/launch.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1024;

// x[0, head) lies before the first 16-byte boundary and x[head + nvec * kWidth, n) after the last
// whole vector; each is shorter than one vector and read by the first threads of the grid.
template <class T>
__global__ void __launch_bounds__(kThreads) sum_kernel(const T* x, int64_t n, int64_t head, float* out) {
  __shared__ float scratch[math::kBlockReduceScratch];
  constexpr int kWidth = Vec16<T>::kSize;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t nvec = (n - head) / kWidth;
  const T* body = x + head;

  float acc = 0.0f;
  if (tid < head) acc += static_cast<float>(x[tid]);
  for (int64_t i = tid; i < nvec; i += stride) {
    const Vec16<T> v = load16(body + i * kWidth);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) acc += static_cast<float>(v.v[k]);
  }
  const int64_t tail = head + nvec * kWidth + tid;
  if (tail < n) acc += static_cast<float>(x[tail]);

  acc = math::block_allreduce(acc, math::SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

}  // namespace

template <class T>
cudaError_t sum_accumulate(const T* x, int64_t n, float* out, cudaStream_t stream) {
  if (n < 0 || out == nullptr) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uintptr_t address = reinterpret_cast<uintptr_t>(x);
  if (x == nullptr || address % sizeof(T) != 0) return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const int64_t to_boundary = static_cast<int64_t>((16 - address % 16) % 16 / sizeof(T));
  const int64_t head = to_boundary < n ? to_boundary : n;
  const int64_t nvec = (n - head) / kWidth;
  const int64_t wanted = (nvec + kThreads - 1) / kThreads;
  const int64_t blocks = wanted < 1 ? 1 : (wanted > kMaxBlocks ? kMaxBlocks : wanted);
  // x; *out is read and written by the blocks' atomicAdds.
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(T) + sizeof(float), sizeof(float)};
  return launch(sum_kernel<T>, config, x, n, head, out);
}

template cudaError_t sum_accumulate<float>(const float*, int64_t, float*, cudaStream_t);
template cudaError_t sum_accumulate<bf16>(const bf16*, int64_t, float*, cudaStream_t);

}  // namespace mpt::kernels::cuda
