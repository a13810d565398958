// kernels/cuda/fake_quant.cu: group-wise fake quantization (QAT, PTQ, export codes): one warp per group, or amax + scale + apply for one group (math from kernels/math/fake_quant.h).
#include "kernels/cuda/fake_quant.h"
#include "kernels/cuda/pack.cuh"
#include "kernels/cuda/quantize.h"
#include "kernels/math/quantize.h"
#include "kernels/math/reduce.h"

namespace mpt::kernels::cuda {
namespace {

template <class T>
struct FakeQuantParams {
  const T* x;
  T* y;
  int8_t* codes;
  float* scales;
  int64_t groups, group_size;
  math::FakeQuant fq;
};

template <class T>
MPT_DEVICE MPT_INLINE void write_element(const FakeQuantParams<T>& p, int64_t i, float s) {
  const float v = scalar_cast<float>(p.x[i]);
  if (p.y != nullptr) p.y[i] = scalar_cast<T>(p.fq.value(v, s));
  if (p.codes != nullptr) p.codes[i] = p.fq.code_byte(v, s);
}

// One warp per group: lanes stride over the group for its amax (an unsigned max of |x| bits: any order gives the same
// bits as the CPU's loop), then write codes and values.
template <class T>
__global__ void __launch_bounds__(kPackThreads) fake_quantize_warp_kernel(FakeQuantParams<T> p) {
  const int64_t g = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (g >= p.groups) return;  // the whole warp leaves together
  const int64_t base = g * p.group_size;
  unsigned m = 0;
  for (int64_t i = lane; i < p.group_size; i += 32) m = math::AmaxBitsMax{}(m, math::abs_bits(p.x[base + i]));
  m = math::warp_allreduce(m, math::AmaxBitsMax{});
  const float s = p.fq.scale(math::amax_from_bits(m));
  if (lane == 0) p.scales[g] = s;
  for (int64_t i = lane; i < p.group_size; i += 32) write_element(p, base + i, s);
}

// Per-tensor: scales[0] holds the amax on entry, the scale after.
__global__ void fake_quant_scale_kernel(float* scale, math::FakeQuant fq) { *scale = fq.scale(*scale); }

template <class T>
__global__ void __launch_bounds__(kPackThreads) fake_quantize_apply_kernel(FakeQuantParams<T> p) {
  const float s = *p.scales;
  const int64_t n = p.group_size;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    write_element(p, i, s);
  }
}

template <class Out>
__global__ void __launch_bounds__(kPackThreads) dequantize_groups_kernel(math::GroupWeights w, Out* out) {
  const int64_t n = w.n * w.k;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    out[i] = scalar_cast<Out>(math::code_value(w.codes[i], w.format) * w.scales[i / w.group]);
  }
}

template <class T>
struct LearnedParams {
  const T* x;
  const T* dy;
  T* y;  // the forward's output, or the backward's dx
  int8_t* codes;  // the forward's codes (optional)
  float* dscales;
  const float* scales;
  int64_t groups, group_size;
  math::LearnedQuant lq;
  float grad_scale;
};

template <class T>
__global__ void __launch_bounds__(kPackThreads) learned_quantize_kernel(LearnedParams<T> p) {
  const int64_t n = p.groups * p.group_size;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xv = scalar_cast<float>(p.x[i]), s = p.scales[i / p.group_size];
    if (p.y != nullptr) p.y[i] = scalar_cast<T>(p.lq.value(xv, s));
    if (p.codes != nullptr) p.codes[i] = p.lq.code_byte(xv, s);
  }
}

template <class T>
__global__ void __launch_bounds__(kPackThreads) learned_quantize_backward_kernel(LearnedParams<T> p) {
  const int64_t g = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (g >= p.groups) return;  // the whole warp leaves together
  const float s = p.scales[g];
  float sum = 0.0f;
  for (int64_t i = g * p.group_size + lane; i < (g + 1) * p.group_size; i += 32) {
    const float xv = scalar_cast<float>(p.x[i]), d = scalar_cast<float>(p.dy[i]);
    if (p.y != nullptr) p.y[i] = scalar_cast<T>(d * p.lq.grad_x(xv, s));
    sum += d * p.lq.grad_s(xv, s);
  }
  sum = math::warp_allreduce(sum, math::SumOp{});
  if (lane == 0 && p.dscales != nullptr) p.dscales[g] = p.grad_scale * sum;
}

}  // namespace

template <class T>
cudaError_t learned_quantize(const T* x, T* y, int8_t* codes, int64_t groups, int64_t group_size,
                             const float* scales, const math::LearnedQuant& lq, cudaStream_t stream) {
  if (groups < 0 || group_size < 0) return cudaErrorInvalidValue;
  const int64_t n = groups * group_size;
  if (n == 0) return cudaSuccess;
  if (x == nullptr || scales == nullptr) return cudaErrorInvalidValue;
  const LaunchConfig config{dim3(grid_stride_blocks(n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) * sizeof(T) + static_cast<uint64_t>(groups) * sizeof(float),
                            static_cast<uint64_t>(n) * ((y != nullptr ? sizeof(T) : 0) + (codes != nullptr ? 1 : 0))};
  return launch(learned_quantize_kernel<T>, config,
                LearnedParams<T>{x, nullptr, y, codes, nullptr, scales, groups, group_size, lq, 1.0f});
}

template <class T>
cudaError_t learned_quantize_backward(const T* x, const T* dy, T* dx, float* dscales, int64_t groups,
                                      int64_t group_size, const float* scales, const math::LearnedQuant& lq,
                                      float grad_scale, cudaStream_t stream) {
  if (groups < 0 || group_size < 0) return cudaErrorInvalidValue;
  const int64_t n = groups * group_size;
  if (groups == 0) return cudaSuccess;
  if (scales == nullptr || (n > 0 && (x == nullptr || dy == nullptr))) return cudaErrorInvalidValue;
  constexpr int64_t kWarpsPerBlock = kPackThreads / 32;
  const int64_t grid = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (grid > 2147483647) return cudaErrorInvalidValue;
  const LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kPackThreads), 0, stream,
                            2 * static_cast<uint64_t>(n) * sizeof(T) + static_cast<uint64_t>(groups) * sizeof(float),
                            (dx != nullptr ? static_cast<uint64_t>(n) * sizeof(T) : 0) +
                                (dscales != nullptr ? static_cast<uint64_t>(groups) * sizeof(float) : 0)};
  return launch(learned_quantize_backward_kernel<T>, config,
                LearnedParams<T>{x, dy, dx, nullptr, dscales, scales, groups, group_size, lq, grad_scale});
}

#define MPT_LSQ_CUDA(T)                                                                                              \
  template cudaError_t learned_quantize<T>(const T*, T*, int8_t*, int64_t, int64_t, const float*,                 \
                                           const math::LearnedQuant&, cudaStream_t);                                 \
  template cudaError_t learned_quantize_backward<T>(const T*, const T*, T*, float*, int64_t, int64_t, const float*, \
                                                    const math::LearnedQuant&, float, cudaStream_t);
MPT_LSQ_CUDA(float)
MPT_LSQ_CUDA(f16)
MPT_LSQ_CUDA(bf16)
#undef MPT_LSQ_CUDA

template <class Out>
cudaError_t dequantize_groups(const math::GroupWeights& w, Out* out, cudaStream_t stream) {
  if (w.n < 0 || w.k < 0) return cudaErrorInvalidValue;
  const int64_t n = w.n * w.k;
  if (n == 0) return cudaSuccess;
  if (w.group <= 0 || w.codes == nullptr || w.scales == nullptr || out == nullptr) return cudaErrorInvalidValue;
  // The codes and every group's scale once; the values.
  const LaunchConfig config{dim3(grid_stride_blocks(n)), dim3(kPackThreads), 0, stream,
                            static_cast<uint64_t>(n) + static_cast<uint64_t>(n / w.group) * sizeof(float),
                            static_cast<uint64_t>(n) * sizeof(Out)};
  return launch(dequantize_groups_kernel<Out>, config, w, out);
}

constexpr int64_t kOneWarpMaxGroup = 16384;

template <class T>
cudaError_t fake_quantize(const T* x, T* y, int64_t groups, int64_t group_size, const math::FakeQuant& fq,
                          float* scales, int8_t* codes, cudaStream_t stream) {
  if (groups < 0 || group_size < 0) return cudaErrorInvalidValue;
  if (groups == 0) return cudaSuccess;
  if (scales == nullptr || (group_size > 0 && x == nullptr)) return cudaErrorInvalidValue;
  const FakeQuantParams<T> p{x, y, codes, scales, groups, group_size, fq};
  const uint64_t n = static_cast<uint64_t>(groups) * static_cast<uint64_t>(group_size);
  const uint64_t written = (y != nullptr ? n * sizeof(T) : 0) + (codes != nullptr ? n : 0);
  // A single large group (per-tensor scaling of a whole tensor) spreads over the GPU in three launches; a single short
  // one (a decoding step's one token, quantized per token) stays one warp's work in one launch.
  if (groups == 1 && group_size > kOneWarpMaxGroup) {
    cudaError_t e = amax(x, group_size, scales, stream);
    if (e != cudaSuccess) return e;
    e = launch(fake_quant_scale_kernel, LaunchConfig{dim3(1), dim3(1), 0, stream, sizeof(float), sizeof(float)},
               scales, fq);
    if (e != cudaSuccess) return e;
    // x, and the scale once per block.
    const unsigned blocks = grid_stride_blocks(group_size);
    const LaunchConfig config{dim3(blocks), dim3(kPackThreads), 0, stream, n * sizeof(T) + blocks * sizeof(float),
                              written};
    return launch(fake_quantize_apply_kernel<T>, config, p);
  }
  constexpr int64_t kWarpsPerBlock = kPackThreads / 32;
  const int64_t grid = (groups + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (grid > 2147483647) return cudaErrorInvalidValue;
  // x twice (the amax pass, then the codes: a group is small enough to stay in cache, but counted as read twice).
  const LaunchConfig config{dim3(static_cast<unsigned>(grid)), dim3(kPackThreads), 0, stream, 2 * n * sizeof(T),
                            written + static_cast<uint64_t>(groups) * sizeof(float)};
  return launch(fake_quantize_warp_kernel<T>, config, p);
}

template cudaError_t fake_quantize<float>(const float*, float*, int64_t, int64_t, const math::FakeQuant&, float*,
                                          int8_t*, cudaStream_t);
template cudaError_t fake_quantize<f16>(const f16*, f16*, int64_t, int64_t, const math::FakeQuant&, float*, int8_t*,
                                        cudaStream_t);
template cudaError_t fake_quantize<bf16>(const bf16*, bf16*, int64_t, int64_t, const math::FakeQuant&, float*,
                                         int8_t*, cudaStream_t);

template cudaError_t dequantize_groups<float>(const math::GroupWeights&, float*, cudaStream_t);
template cudaError_t dequantize_groups<f16>(const math::GroupWeights&, f16*, cudaStream_t);
template cudaError_t dequantize_groups<bf16>(const math::GroupWeights&, bf16*, cudaStream_t);

}  // namespace mpt::kernels::cuda
