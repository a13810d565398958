// kernels/cuda/elementwise.cu: the functors of kernels/math/elementwise.h: broadcast.cuh (map.cuh for same shapes)
// for add and mul, map.cuh for scale, and a Philox-group kernel for dropout.
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/broadcast.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/map.cuh"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {
namespace {

using broadcast_detail::grid_for;
using broadcast_detail::kThreads;

template <class T>
struct DropoutParams {
  const T* in;
  T* out;
  int64_t n;
  DropoutArgs args;
  float scale;
};

template <bool kAccumulate, class T>
__global__ void __launch_bounds__(kThreads) dropout_kernel(DropoutParams<T> p) {
  const int64_t groups = (p.n + 3) / 4;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; g < groups; g += stride) {
    const unsigned keep = math::dropout_keep4(p.args.seed, p.args.offset, g, p.args.p);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * g + j;
      if (i < p.n) {
        float v = math::dropout_apply(math::load(p.in[i]), ((keep >> j) & 1u) != 0, p.scale);
        if constexpr (kAccumulate) v = math::add_rn(math::load(p.out[i]), v);
        p.out[i] = math::store<T>(v);
      }
    }
  }
}

}  // namespace

template <class T>
cudaError_t add(const T* a, const T* b, T* out, const BinaryShape& shape, double alpha, cudaStream_t stream) {
  if (alpha == 1.0) return binary_map(a, b, out, shape, math::AddOp{}, stream);
  return binary_map(a, b, out, shape, math::AddScaledOp<float>{static_cast<float>(alpha)}, stream);
}

template <class T>
cudaError_t mul(const T* a, const T* b, T* out, const BinaryShape& shape, cudaStream_t stream) {
  return binary_map(a, b, out, shape, math::MulOp{}, stream);
}

template <class T>
cudaError_t scale(const T* x, T* out, int64_t n, double alpha, bool accumulate, cudaStream_t stream) {
  if (n > 0 && x == nullptr) return cudaErrorInvalidValue;
  return map(out, n, accumulate, math::ScaleOp<float>{static_cast<float>(alpha)}, stream, x);
}

template <class T>
cudaError_t widen_sum(const T* a, const T* b, const T* c, float* out, int64_t n, cudaStream_t stream) {
  if (n > 0 && (a == nullptr || b == nullptr)) return cudaErrorInvalidValue;
  return c != nullptr ? map(out, n, false, math::WidenSum3{}, stream, a, b, c)
                      : map(out, n, false, math::WidenSum2{}, stream, a, b);
}

template <class T>
cudaError_t dropout(const T* in, T* out, int64_t n, const DropoutArgs& args, cudaStream_t stream) {
  if (n < 0 || !(args.p >= 0.0f && args.p < 1.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  // The same float scale as the CPU kernel computes.
  const DropoutParams<T> p{in, out, n, args, 1.0f / (1.0f - args.p)};
  const uint64_t bytes = static_cast<uint64_t>(n) * sizeof(T);
  const LaunchConfig config{dim3(grid_for((n + 3) / 4)), dim3(kThreads), 0, stream,
                            args.accumulate ? 2 * bytes : bytes, bytes};
  return args.accumulate ? launch(dropout_kernel<true, T>, config, p) : launch(dropout_kernel<false, T>, config, p);
}

#define MPT_INSTANTIATE(T)                                                                               \
  template cudaError_t add<T>(const T*, const T*, T*, const BinaryShape&, double, cudaStream_t);        \
  template cudaError_t mul<T>(const T*, const T*, T*, const BinaryShape&, cudaStream_t);                \
  template cudaError_t scale<T>(const T*, T*, int64_t, double, bool, cudaStream_t);                     \
  template cudaError_t dropout<T>(const T*, T*, int64_t, const DropoutArgs&, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
template cudaError_t widen_sum<f16>(const f16*, const f16*, const f16*, float*, int64_t, cudaStream_t);
template cudaError_t widen_sum<bf16>(const bf16*, const bf16*, const bf16*, float*, int64_t, cudaStream_t);
template cudaError_t widen_sum<float>(const float*, const float*, const float*, float*, int64_t, cudaStream_t);

}  // namespace mpt::kernels::cuda
