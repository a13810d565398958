// kernels/cuda/strided.h: strided n-d copies, fills and conversions with an integer side on a CUDA stream (the CPU
// twin of the copy is kernels/cpu/strided.h).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/math/numerics.h"
#include "kernels/math/strided.h"

namespace mpt::kernels::cuda {

// Device pointers; asynchronous on `stream`; strides in elements. Returns cudaErrorInvalidValue for an element
// size other than 1, 2, 4 or 8, a missing pointer, or more than math::kMaxStridedDims dimensions left after
// coalescing (size-1 dimensions dropped, runs contiguous in both arrays merged), else the launch error.

// dst[i] = src[i] for every index i of `shape` (ndim may be 0: one element); a source stride of 0 broadcasts.
// dst must not overlap src. Rows contiguous in both arrays move as 16-byte (or narrower) words when sizes and
// alignment allow; a 2-d transposition (dst contiguous along the last dim, src along the one before) goes through
// 32 x 32 shared-memory tiles so that both reads and writes are coalesced.
cudaError_t strided_copy(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                         const int64_t* shape, int ndim, size_t element_size, cudaStream_t stream);

// One matrix of bytes to transpose: b = a^T, a = [rows, cols] and b = [cols, rows], both contiguous.
struct ByteTranspose {
  const uint8_t* a;
  uint8_t* b;
  int64_t rows, cols;
};
// Whether byte_transposes takes `t` (its vectorised tile: cols % 8 == 0, rows % 16 == 0, a 8-byte and b 16-byte
// aligned); strided_copy takes any. (Inline: the emulation build compiles the .cu files a second time.)
inline bool byte_transpose_vectorisable(const ByteTranspose& t) {
  return t.a != nullptr && t.b != nullptr && t.rows > 0 && t.cols > 0 && t.cols % 8 == 0 && t.rows % 16 == 0 &&
         reinterpret_cast<uintptr_t>(t.a) % 8 == 0 && reinterpret_cast<uintptr_t>(t.b) % 16 == 0;
}
// Every matrix of the list transposed, as many as fit a launch's arguments per launch (64 x 64 tiles of bytes, each
// read eight bytes and written sixteen per thread): the FP8 codes of W^T for several weights at once. Each must be
// byte_transpose_vectorisable (cudaErrorInvalidValue otherwise, before any launch) and none may overlap another.
cudaError_t byte_transposes(const ByteTranspose* list, int64_t count, cudaStream_t stream);

// dst[i] = the element_size bytes at the host address `value` (a bit pattern: converted by the caller) for every
// index i of `shape`.
cudaError_t strided_fill(void* dst, const int64_t* strides, const int64_t* shape, int ndim, const void* value,
                         size_t element_size, cudaStream_t stream);

// dst[i] = scalar_cast<Dst>(src[i], sat) for contiguous arrays, one element per thread, for the pairs with an integer
// side: Dst and Src in {float, f16, bf16, f8e4m3, f8e5m2, int32_t, int64_t, uint8_t, uint16_t, int8_t}, at least one of
// them an integer (kernels::cuda::convert in quantize.h has the float pairs, vectorised).
template <class Dst, class Src>
cudaError_t convert_with_integers(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat, cudaStream_t stream);

}  // namespace mpt::kernels::cuda
