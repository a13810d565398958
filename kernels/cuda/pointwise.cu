// kernels/cuda/pointwise.cu: the functors of kernels/math/pointwise.h through map.cuh and broadcast.cuh, a select
// kernel and a thread-per-output max/min with indices.
#include "kernels/cuda/broadcast.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/map.cuh"
#include "kernels/cuda/pointwise.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cuda {
namespace {

using broadcast_detail::grid_for;
using broadcast_detail::kThreads;

template <class T>
__global__ void __launch_bounds__(kThreads) where_kernel(const uint8_t* cond, const T* a, const T* b, T* out,
                                                         int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = cond[i] != 0 ? a[i] : b[i];
  }
}

template <bool kMax, class T>
__global__ void __launch_bounds__(kThreads) arg_reduce_kernel(const T* x, T* values, int64_t* indices,
                                                              ReduceShape s) {
  const int64_t outputs = s.outer * s.inner;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; r < outputs; r += stride)
    math::arg_reduce_output<kMax>(x, values, indices, s, r);
}

}  // namespace

template <class T>
cudaError_t unary(UnaryKind kind, const UnaryParams& p, const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n > 0 && x == nullptr) return cudaErrorInvalidValue;
  return math::visit_unary_kind(kind, [&](auto k) {
    return map(y, n, false, math::Unary<decltype(k)::value, float>{static_cast<float>(p.a), static_cast<float>(p.b)},
               stream, x);
  });
}

template <class T>
cudaError_t unary_backward(UnaryKind kind, const UnaryParams& p, const T* dy, const T* x, T* dx, int64_t n,
                           bool accumulate, cudaStream_t stream) {
  if (n > 0 && (dy == nullptr || x == nullptr)) return cudaErrorInvalidValue;
  return math::visit_unary_kind(kind, [&](auto k) {
    const math::UnaryBackward<decltype(k)::value, float> f{static_cast<float>(p.a), static_cast<float>(p.b)};
    return map(dx, n, accumulate, f, stream, dy, x);
  });
}

template <class T>
cudaError_t binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryShape& shape, cudaStream_t stream) {
  return math::visit_binary_kind(
      kind, [&](auto k) { return binary_map(a, b, out, shape, math::Binary<decltype(k)::value>{}, stream); });
}

template <class T>
cudaError_t binary_backward(BinaryKind kind, bool wrt_b, const T* dy, const T* a, const T* b, T* out, int64_t n,
                            bool accumulate, cudaStream_t stream) {
  if (n > 0 && (dy == nullptr || a == nullptr || b == nullptr)) return cudaErrorInvalidValue;
  return math::visit_binary_kind(kind, [&](auto k) {
    constexpr BinaryKind K = decltype(k)::value;
    return wrt_b ? map(out, n, accumulate, math::BinaryBackward<K, true>{}, stream, dy, a, b)
                 : map(out, n, accumulate, math::BinaryBackward<K, false>{}, stream, dy, a, b);
  });
}

template <class T>
cudaError_t binary_backward_both(BinaryKind kind, const T* dy, const T* a, const T* b, T* da, T* db, int64_t n,
                                 cudaStream_t stream) {
  if (n > 0 && (dy == nullptr || a == nullptr || b == nullptr)) return cudaErrorInvalidValue;
  return math::visit_binary_kind(kind, [&](auto k) {
    constexpr BinaryKind K = decltype(k)::value;
    return map2(da, db, n, math::BinaryBackward<K, false>{}, math::BinaryBackward<K, true>{}, stream, dy, a, b);
  });
}

template <class T>
cudaError_t compare(CompareKind kind, const T* a, const T* b, uint8_t* out, const BinaryShape& shape,
                    cudaStream_t stream) {
  const BinaryShape s{shape.n, shape.b_period, false};
  return math::visit_compare_kind(
      kind, [&](auto k) { return binary_map(a, b, out, s, math::Compare<decltype(k)::value>{}, stream); });
}

template <class T>
cudaError_t where(const uint8_t* cond, const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  if (n < 0 || (n > 0 && (cond == nullptr || a == nullptr || b == nullptr || out == nullptr)))
    return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  // cond, and a or b as cond says (device data): both counted, as whole sectors of each are fetched anyway.
  const uint64_t elems = static_cast<uint64_t>(n);
  return launch(where_kernel<T>,
                LaunchConfig{dim3(grid_for(n)), dim3(kThreads), 0, stream, elems * (sizeof(uint8_t) + 2 * sizeof(T)),
                             elems * sizeof(T)},
                cond, a, b, out, n);
}

template <class T>
cudaError_t arg_reduce(bool is_max, const T* x, T* values, int64_t* indices, const ReduceShape& s,
                       cudaStream_t stream) {
  if (s.outer < 0 || s.len < 1 || s.inner < 0) return cudaErrorInvalidValue;
  const int64_t outputs = s.outer * s.inner;
  if (outputs == 0) return cudaSuccess;
  if (x == nullptr || values == nullptr || indices == nullptr) return cudaErrorInvalidValue;
  const uint64_t out_count = static_cast<uint64_t>(outputs);
  const LaunchConfig config{dim3(grid_for(outputs)), dim3(kThreads), 0, stream,
                            out_count * static_cast<uint64_t>(s.len) * sizeof(T),
                            out_count * (sizeof(T) + sizeof(int64_t))};
  return is_max ? launch(arg_reduce_kernel<true, T>, config, x, values, indices, s)
                : launch(arg_reduce_kernel<false, T>, config, x, values, indices, s);
}

#define MPT_INSTANTIATE(T)                                                                                           \
  template cudaError_t unary<T>(UnaryKind, const UnaryParams&, const T*, T*, int64_t, cudaStream_t);                \
  template cudaError_t unary_backward<T>(UnaryKind, const UnaryParams&, const T*, const T*, T*, int64_t, bool,       \
                                         cudaStream_t);                                                              \
  template cudaError_t binary<T>(BinaryKind, const T*, const T*, T*, const BinaryShape&, cudaStream_t);             \
  template cudaError_t binary_backward<T>(BinaryKind, bool, const T*, const T*, const T*, T*, int64_t, bool,         \
                                          cudaStream_t);                                                             \
  template cudaError_t binary_backward_both<T>(BinaryKind, const T*, const T*, const T*, T*, T*, int64_t,           \
                                               cudaStream_t);                                                        \
  template cudaError_t compare<T>(CompareKind, const T*, const T*, uint8_t*, const BinaryShape&, cudaStream_t);     \
  template cudaError_t where<T>(const uint8_t*, const T*, const T*, T*, int64_t, cudaStream_t);                     \
  template cudaError_t arg_reduce<T>(bool, const T*, T*, int64_t*, const ReduceShape&, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
