// kernels/cpu/pointwise.cpp: the functors of kernels/math/pointwise.h over contiguous arrays (kernels/cpu/map.h,
// kernels/cpu/broadcast.h).
#include "kernels/cpu/pointwise.h"

#include "kernels/cpu/broadcast.h"
#include "kernels/cpu/map.h"
#include "kernels/math/opmath.h"

namespace mpt::kernels::cpu {

template <class T>
void unary(UnaryKind kind, const UnaryParams& p, const T* x, T* y, int64_t n) {
  using F = math::opmath_t<T>;
  math::visit_unary_kind(kind, [&](auto k) {
    map(y, n, math::Unary<decltype(k)::value, F>{static_cast<F>(p.a), static_cast<F>(p.b)}, x);
  });
}

template <class T>
void unary_backward(UnaryKind kind, const UnaryParams& p, const T* dy, const T* x, T* dx, int64_t n,
                    bool accumulate) {
  using F = math::opmath_t<T>;
  math::visit_unary_kind(kind, [&](auto k) {
    map_accumulate(dx, n, accumulate, math::UnaryBackward<decltype(k)::value, F>{static_cast<F>(p.a),
                                                                                  static_cast<F>(p.b)},
                   dy, x);
  });
}

template <class T>
void binary(BinaryKind kind, const T* a, const T* b, T* out, const BinaryShape& shape) {
  math::visit_binary_kind(kind, [&](auto k) { binary_map(a, b, out, shape, math::Binary<decltype(k)::value>{}); });
}

template <class T>
void binary_backward(BinaryKind kind, bool wrt_b, const T* dy, const T* a, const T* b, T* out, int64_t n,
                     bool accumulate) {
  math::visit_binary_kind(kind, [&](auto k) {
    constexpr BinaryKind K = decltype(k)::value;
    if (wrt_b) {
      map_accumulate(out, n, accumulate, math::BinaryBackward<K, true>{}, dy, a, b);
    } else {
      map_accumulate(out, n, accumulate, math::BinaryBackward<K, false>{}, dy, a, b);
    }
  });
}

template <class T>
void swiglu_packed(const T* gu, T* y, int64_t rows, int64_t f) {
  const math::Binary<BinaryKind::SiluMul> fn{};
#pragma omp parallel for schedule(static) if (rows * f > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = gu + r * 2 * f;
    T* out = y + r * f;
    for (int64_t j = 0; j < f; ++j) out[j] = math::store<T>(fn(math::load(g[j]), math::load(g[f + j])));
  }
}

template <class T>
void swiglu_packed_backward(const T* dy, const T* gu, T* dgu, int64_t rows, int64_t f) {
  const math::BinaryBackward<BinaryKind::SiluMul, false> wrt_gate{};
  const math::BinaryBackward<BinaryKind::SiluMul, true> wrt_up{};
#pragma omp parallel for schedule(static) if (rows * f > kParallelThreshold)
  for (int64_t r = 0; r < rows; ++r) {
    const T* g = gu + r * 2 * f;
    const T* d = dy + r * f;
    T* out = dgu + r * 2 * f;
    for (int64_t j = 0; j < f; ++j) {
      const auto dv = math::load(d[j]), a = math::load(g[j]), b = math::load(g[f + j]);
      out[j] = math::store<T>(wrt_gate(dv, a, b));
      out[f + j] = math::store<T>(wrt_up(dv, a, b));
    }
  }
}

template <class T>
void compare(CompareKind kind, const T* a, const T* b, uint8_t* out, const BinaryShape& shape) {
  if (shape.n <= 0) return;
  math::visit_compare_kind(kind, [&](auto k) {
    broadcast_map<false>(a, b, out, shape, math::Compare<decltype(k)::value>{});
  });
}

template <class T>
void where(const uint8_t* cond, const T* a, const T* b, T* out, int64_t n) {
#pragma omp parallel for simd schedule(static) if (n > kParallelThreshold)
  for (int64_t i = 0; i < n; ++i) out[i] = cond[i] != 0 ? a[i] : b[i];
}

namespace {

template <bool kMax, class T>
void arg_reduce_impl(const T* x, T* values, int64_t* indices, const ReduceShape& s) {
  const int64_t outputs = s.outer * s.inner;
#pragma omp parallel for schedule(static) if (outputs * s.len > kParallelThreshold)
  for (int64_t r = 0; r < outputs; ++r) math::arg_reduce_output<kMax>(x, values, indices, s, r);
}

}  // namespace

template <class T>
void arg_reduce(bool is_max, const T* x, T* values, int64_t* indices, const ReduceShape& shape) {
  if (shape.len < 1) return;
  if (is_max) {
    arg_reduce_impl<true>(x, values, indices, shape);
  } else {
    arg_reduce_impl<false>(x, values, indices, shape);
  }
}

#define MPT_INSTANTIATE(T)                                                                                          \
  template void unary<T>(UnaryKind, const UnaryParams&, const T*, T*, int64_t);                                    \
  template void unary_backward<T>(UnaryKind, const UnaryParams&, const T*, const T*, T*, int64_t, bool);           \
  template void binary<T>(BinaryKind, const T*, const T*, T*, const BinaryShape&);                                 \
  template void binary_backward<T>(BinaryKind, bool, const T*, const T*, const T*, T*, int64_t, bool);             \
  template void swiglu_packed<T>(const T*, T*, int64_t, int64_t);                                                 \
  template void swiglu_packed_backward<T>(const T*, const T*, T*, int64_t, int64_t);                               \
  template void compare<T>(CompareKind, const T*, const T*, uint8_t*, const BinaryShape&);                         \
  template void where<T>(const uint8_t*, const T*, const T*, T*, int64_t);                                         \
  template void arg_reduce<T>(bool, const T*, T*, int64_t*, const ReduceShape&);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
