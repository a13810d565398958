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

// SwiGLU over packed rows gu [rows, 2f] (gate | up): a unit is kWidth consecutive columns of one row (a 16-byte vector
// of gate, of up and of y when kVec).
template <bool kVec, class T>
__global__ void __launch_bounds__(kThreads) swiglu_packed_kernel(const T* gu, T* y, int64_t rows, int64_t f) {
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const int64_t per_row = f / kWidth, units = rows * per_row;
  const math::Binary<BinaryKind::SiluMul> fn{};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t r = u / per_row, c = (u - r * per_row) * kWidth;
    const T* g = gu + r * 2 * f + c;
    if constexpr (kVec) {
      const Vec16<T> a = load16(g), b = load16(g + f);
      Vec16<T> o;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) o.v[k] = math::store<T>(fn(math::load(a.v[k]), math::load(b.v[k])));
      store16(y + r * f + c, o);
    } else {
      y[r * f + c] = math::store<T>(fn(math::load(g[0]), math::load(g[f])));
    }
  }
}

template <bool kVec, class T>
__global__ void __launch_bounds__(kThreads) swiglu_packed_backward_kernel(const T* dy, const T* gu, T* dgu,
                                                                          int64_t rows, int64_t f) {
  constexpr int kWidth = kVec ? Vec16<T>::kSize : 1;
  const int64_t per_row = f / kWidth, units = rows * per_row;
  const math::BinaryBackward<BinaryKind::SiluMul, false> wrt_gate{};
  const math::BinaryBackward<BinaryKind::SiluMul, true> wrt_up{};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t u = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u < units; u += stride) {
    const int64_t r = u / per_row, c = (u - r * per_row) * kWidth;
    const int64_t in = r * 2 * f + c;
    if constexpr (kVec) {
      const Vec16<T> d = load16(dy + r * f + c), a = load16(gu + in), b = load16(gu + in + f);
      Vec16<T> da, db;
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const float dv = math::load(d.v[k]), av = math::load(a.v[k]), bv = math::load(b.v[k]);
        da.v[k] = math::store<T>(wrt_gate(dv, av, bv));
        db.v[k] = math::store<T>(wrt_up(dv, av, bv));
      }
      store16(dgu + in, da);
      store16(dgu + in + f, db);
    } else {
      const float dv = math::load(dy[r * f + c]), av = math::load(gu[in]), bv = math::load(gu[in + f]);
      dgu[in] = math::store<T>(wrt_gate(dv, av, bv));
      dgu[in + f] = math::store<T>(wrt_up(dv, av, bv));
    }
  }
}

// Vectorised when a row's halves are whole 16-byte vectors and every pointer is aligned.
template <class T>
bool swiglu_vectorised(int64_t f, const void* a, const void* b, const void* c) {
  return f % Vec16<T>::kSize == 0 && is_aligned16(a) && is_aligned16(b) && is_aligned16(c);
}

}  // namespace

template <class T>
cudaError_t swiglu_packed(const T* gu, T* y, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows < 0 || f < 0 || (rows * f > 0 && (gu == nullptr || y == nullptr))) return cudaErrorInvalidValue;
  if (rows * f == 0) return cudaSuccess;
  const bool vec = swiglu_vectorised<T>(f, gu, y, y);
  const int64_t units = rows * f / (vec ? Vec16<T>::kSize : 1);
  const uint64_t elems = static_cast<uint64_t>(rows * f);
  const LaunchConfig config{dim3(grid_for(units)), dim3(kThreads), 0, stream, 2 * elems * sizeof(T),
                            elems * sizeof(T)};
  if (vec) return launch(swiglu_packed_kernel<true, T>, config, gu, y, rows, f);
  return launch(swiglu_packed_kernel<false, T>, config, gu, y, rows, f);
}

template <class T>
cudaError_t swiglu_packed_backward(const T* dy, const T* gu, T* dgu, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows < 0 || f < 0 || (rows * f > 0 && (dy == nullptr || gu == nullptr || dgu == nullptr)))
    return cudaErrorInvalidValue;
  if (rows * f == 0) return cudaSuccess;
  const bool vec = swiglu_vectorised<T>(f, dy, gu, dgu);
  const int64_t units = rows * f / (vec ? Vec16<T>::kSize : 1);
  const uint64_t elems = static_cast<uint64_t>(rows * f);
  const LaunchConfig config{dim3(grid_for(units)), dim3(kThreads), 0, stream, 3 * elems * sizeof(T),
                            2 * elems * sizeof(T)};
  if (vec) return launch(swiglu_packed_backward_kernel<true, T>, config, dy, gu, dgu, rows, f);
  return launch(swiglu_packed_backward_kernel<false, T>, config, dy, gu, dgu, rows, f);
}

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
  template cudaError_t swiglu_packed<T>(const T*, T*, int64_t, int64_t, cudaStream_t);                              \
  template cudaError_t swiglu_packed_backward<T>(const T*, const T*, T*, int64_t, int64_t, cudaStream_t);            \
  template cudaError_t compare<T>(CompareKind, const T*, const T*, uint8_t*, const BinaryShape&, cudaStream_t);     \
  template cudaError_t where<T>(const uint8_t*, const T*, const T*, T*, int64_t, cudaStream_t);                     \
  template cudaError_t arg_reduce<T>(bool, const T*, T*, int64_t*, const ReduceShape&, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
