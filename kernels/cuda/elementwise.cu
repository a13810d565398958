// kernels/cuda/elementwise.cu: the functors of kernels/math/elementwise.h: map.cuh for same shapes, a
// broadcast kernel for a periodic b, and a Philox-group kernel for dropout.
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/map.cuh"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535 * 8;

unsigned grid_for(int64_t units) {
  const int64_t blocks = (units + kThreads - 1) / kThreads;
  return static_cast<unsigned>(blocks < 1 ? 1 : blocks > kMaxBlocks ? kMaxBlocks : blocks);
}

template <class T, class F>
struct BroadcastParams {
  T* out;
  const T* a;
  const T* b;
  int64_t n;
  int64_t period;
  F f;
};

// out[i] (+)= f(a[i], b[i % period]); with kVec each thread takes one 16-byte vector of each array (period
// is then a multiple of the vector width, so the b vector never wraps).
template <bool kVec, bool kAccumulate, class T, class F>
__global__ void __launch_bounds__(kThreads) broadcast_kernel(BroadcastParams<T, F> p) {
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * kWidth;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kWidth; i < p.n; i += stride) {
    const int64_t j = i % p.period;
    if constexpr (kVec) {
      const Vec16<T> va = load16(p.a + i), vb = load16(p.b + j);
      Vec16<T> o;
      if constexpr (kAccumulate) o = load16(p.out + i);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        auto v = p.f(math::load(va.v[k]), math::load(vb.v[k]));
        if constexpr (kAccumulate) v = math::add_rn(math::load(o.v[k]), v);
        o.v[k] = math::store<T>(v);
      }
      store16(p.out + i, o);
    } else {
      auto v = p.f(math::load(p.a[i]), math::load(p.b[j]));
      if constexpr (kAccumulate) v = math::add_rn(math::load(p.out[i]), v);
      p.out[i] = math::store<T>(v);
    }
  }
}

template <bool kAccumulate, class T, class F>
cudaError_t launch_broadcast(const BroadcastParams<T, F>& p, cudaStream_t stream) {
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = p.period % kWidth == 0 && is_aligned16(p.out) && is_aligned16(p.a) && is_aligned16(p.b);
  const LaunchConfig config{dim3(grid_for(vec ? p.n / kWidth : p.n)), dim3(kThreads), 0, stream};
  return vec ? launch(broadcast_kernel<true, kAccumulate, T, F>, config, p)
             : launch(broadcast_kernel<false, kAccumulate, T, F>, config, p);
}

template <class T, class F>
cudaError_t binary(const T* a, const T* b, T* out, const BinaryShape& s, F f, cudaStream_t stream) {
  if (s.n < 0 || s.b_period < 1 || (s.n > 0 && s.n % s.b_period != 0)) return cudaErrorInvalidValue;
  if (s.n == 0) return cudaSuccess;
  if (a == nullptr || b == nullptr || out == nullptr) return cudaErrorInvalidValue;
  if (s.b_period == s.n) return map(out, s.n, s.accumulate, f, stream, a, b);
  const BroadcastParams<T, F> p{out, a, b, s.n, s.b_period, f};
  return s.accumulate ? launch_broadcast<true>(p, stream) : launch_broadcast<false>(p, stream);
}

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
  if (alpha == 1.0) return binary(a, b, out, shape, math::AddOp{}, stream);
  return binary(a, b, out, shape, math::AddScaledOp<float>{static_cast<float>(alpha)}, stream);
}

template <class T>
cudaError_t mul(const T* a, const T* b, T* out, const BinaryShape& shape, cudaStream_t stream) {
  return binary(a, b, out, shape, math::MulOp{}, stream);
}

template <class T>
cudaError_t scale(const T* x, T* out, int64_t n, double alpha, bool accumulate, cudaStream_t stream) {
  if (n > 0 && x == nullptr) return cudaErrorInvalidValue;
  return map(out, n, accumulate, math::ScaleOp<float>{static_cast<float>(alpha)}, stream, x);
}

template <class T>
cudaError_t dropout(const T* in, T* out, int64_t n, const DropoutArgs& args, cudaStream_t stream) {
  if (n < 0 || !(args.p >= 0.0f && args.p < 1.0f)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (in == nullptr || out == nullptr) return cudaErrorInvalidValue;
  // The same float scale as the CPU kernel computes.
  const DropoutParams<T> p{in, out, n, args, 1.0f / (1.0f - args.p)};
  const LaunchConfig config{dim3(grid_for((n + 3) / 4)), dim3(kThreads), 0, stream};
  return args.accumulate ? launch(dropout_kernel<true, T>, config, p) : launch(dropout_kernel<false, T>, config, p);
}

#define MPT_INSTANTIATE(T)                                                                               \
  template cudaError_t add<T>(const T*, const T*, T*, const BinaryShape&, double, cudaStream_t);        \
  template cudaError_t mul<T>(const T*, const T*, T*, const BinaryShape&, cudaStream_t);                \
  template cudaError_t scale<T>(const T*, T*, int64_t, double, bool, cudaStream_t);                     \
  template cudaError_t dropout<T>(const T*, T*, int64_t, const DropoutArgs&, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
