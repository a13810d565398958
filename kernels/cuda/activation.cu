// kernels/cuda/activation.cu: the GELU functors of kernels/math/activation.h applied with kernels/cuda/map.cuh.
#include "kernels/cuda/activation.h"
#include "kernels/cuda/map.cuh"
#include "kernels/math/activation.h"

namespace mpt::kernels::cuda {

template <class T>
cudaError_t gelu_forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n > 0 && x == nullptr) return cudaErrorInvalidValue;
  return map(y, n, false, math::GeluForward{}, stream, x);
}

template <class T>
cudaError_t gelu_backward(const T* dy, const T* x, T* dx, int64_t n, bool accumulate, cudaStream_t stream) {
  if (n > 0 && (dy == nullptr || x == nullptr)) return cudaErrorInvalidValue;
  return map(dx, n, accumulate, math::GeluBackward{}, stream, dy, x);
}

#define MPT_INSTANTIATE(T)                                                       \
  template cudaError_t gelu_forward<T>(const T*, T*, int64_t, cudaStream_t); \
  template cudaError_t gelu_backward<T>(const T*, const T*, T*, int64_t, bool, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
