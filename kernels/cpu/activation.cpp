// kernels/cpu/activation.cpp: the GELU functors of kernels/math/activation.h applied with kernels/cpu/map.h.
#include "kernels/cpu/activation.h"

#include "kernels/cpu/map.h"
#include "kernels/math/activation.h"

namespace mpt::kernels::cpu {

template <class T>
void gelu_forward(const T* x, T* y, int64_t n) {
  map(y, n, math::GeluForward{}, x);
}

template <class T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, bool accumulate) {
  map_accumulate(dx, n, accumulate, math::GeluBackward{}, dy, x);
}

#define MPT_INSTANTIATE(T)                                 \
  template void gelu_forward<T>(const T*, T*, int64_t); \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t, bool);
MPT_FOR_CPU_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cpu
