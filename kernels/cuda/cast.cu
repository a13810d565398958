// kernels/cuda/cast.cu: element-type conversion between f32, f16, bf16, e4m3 and e5m2 on a CUDA stream (scalar_cast per element).
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cuda {
namespace {

// kVec: packs of 8 (both pointers aligned to a pack) in a grid-stride loop, then the last n % 8 elements by the
// first threads of the grid; otherwise one element per step.
template <class Dst, class Src, bool kVec>
__global__ void __launch_bounds__(kPackThreads) convert_kernel(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat) {
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  if constexpr (kVec) {
    const int64_t packs = n / 8;
    for (int64_t i = tid; i < packs; i += stride) {
      const Pack8<Src> a = load8(src + i * 8);
      Pack8<Dst> b;
#pragma unroll
      for (int k = 0; k < 8; ++k) b.v[k] = scalar_cast<Dst>(a.v[k], sat);
      store8(dst + i * 8, b);
    }
    const int64_t tail = packs * 8 + tid;
    if (tail < n) dst[tail] = scalar_cast<Dst>(src[tail], sat);
  } else {
    for (int64_t i = tid; i < n; i += stride) dst[i] = scalar_cast<Dst>(src[i], sat);
  }
}

}  // namespace

template <class Dst, class Src>
cudaError_t convert(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  const bool vec = pack8_aligned(src) && pack8_aligned(dst);
  const LaunchConfig config{dim3(grid_stride_blocks(vec ? n / 8 : n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(Src), static_cast<uint64_t>(n) * sizeof(Dst)};
  return vec ? launch(convert_kernel<Dst, Src, true>, config, src, dst, n, sat)
             : launch(convert_kernel<Dst, Src, false>, config, src, dst, n, sat);
}

#define MPT_CONVERT_INSTANTIATE(D, S) \
  template cudaError_t convert<D, S>(const S*, D*, int64_t, Fp8Saturation, cudaStream_t);
#define MPT_CONVERT_INSTANTIATE_DST(D)                                                                  \
  MPT_CONVERT_INSTANTIATE(D, float) MPT_CONVERT_INSTANTIATE(D, f16) MPT_CONVERT_INSTANTIATE(D, bf16) \
  MPT_CONVERT_INSTANTIATE(D, f8e4m3) MPT_CONVERT_INSTANTIATE(D, f8e5m2)
MPT_CONVERT_INSTANTIATE_DST(float)
MPT_CONVERT_INSTANTIATE_DST(f16)
MPT_CONVERT_INSTANTIATE_DST(bf16)
MPT_CONVERT_INSTANTIATE_DST(f8e4m3)
MPT_CONVERT_INSTANTIATE_DST(f8e5m2)
#undef MPT_CONVERT_INSTANTIATE_DST
#undef MPT_CONVERT_INSTANTIATE

}  // namespace mpt::kernels::cuda
