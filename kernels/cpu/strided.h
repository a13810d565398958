// kernels/cpu/strided.h: copies between arbitrarily strided n-d arrays (strides in elements, may be 0).
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpt::kernels::cpu {

// dst[i] = src[i] for every index i of `shape`; dst must not overlap src. Adjacent dimensions that are
// contiguous in both arrays are merged first, so a dense copy becomes one memcpy.
void strided_copy(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                  const int64_t* shape, int ndim, size_t element_size);

}  // namespace mpt::kernels::cpu
