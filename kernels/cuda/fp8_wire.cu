// kernels/cuda/fp8_wire.cu: the FP8 gradient all-reduce's amax fix-up and per-parameter scales, one thread per parameter.
#include "kernels/cuda/fp8_wire.h"
#include "kernels/cuda/launch.cuh"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) fp8_wire_amax_kernel(float* amax, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) amax[i] = math::Fp8WireAmax{}(amax[i]);
}

__global__ void __launch_bounds__(kThreads) fp8_wire_scales_kernel(const float* amax, float* scale, float* inv,
                                                                   int64_t n, math::Fp8WireScale f) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) f(amax[i], scale + i, inv + i);
}

unsigned blocks_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t fp8_wire_amax(float* amax, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && amax == nullptr)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  return launch(fp8_wire_amax_kernel, LaunchConfig{dim3(blocks_for(n)), dim3(kThreads), 0, stream, bytes, bytes},
                amax, n);
}

cudaError_t fp8_wire_scales(const float* amax, float* scale, float* inv, int64_t n, const math::Fp8WireScale& f,
                            cudaStream_t stream) {
  if (n < 0 || (n > 0 && (amax == nullptr || scale == nullptr || inv == nullptr))) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(float);
  return launch(fp8_wire_scales_kernel,
                LaunchConfig{dim3(blocks_for(n)), dim3(kThreads), 0, stream, bytes, 2 * bytes}, amax, scale, inv, n,
                f);
}

}  // namespace mpt::kernels::cuda
