// kernels/cuda/layernorm.cu: LayerNorm forward/backward, one block per row, float math from kernels/math/layernorm.h.
#include "kernels/cuda/layernorm.h"

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/partial_sums.cuh"
#include "kernels/cuda/row_io.cuh"
#include "kernels/math/numerics.h"
#include "kernels/math/quantize.h"
#include "kernels/math/reduce.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::cuda {
namespace {

constexpr int kMaxThreads = 1024;
constexpr int kBackwardThreads = 512;        // the backward kernel keeps more values live: 128 registers a thread
constexpr int64_t kGradBlocks = kLayerNormGradBlocks;
constexpr int64_t kSharedPartialBytes = 48 * 1024;

// Three passes over the row (with a residual, the first one writes s = x + residual and later passes read
// s back): sum, sum of squared deviations, output.
template <class T, class P, class Y, class X, bool kVec>
__global__ void __launch_bounds__(kMaxThreads)
    layer_norm_forward_kernel(const math::LayerNormForwardParams<T, P, Y, X> p) {
  __shared__ float scratch[math::kBlockReduceScratch];
  using Pack = RowPack<T, kVec>;
  const int64_t n = p.cols, offset = static_cast<int64_t>(blockIdx.x) * n;
  const RowStride rs = row_stride<Pack::kWidth>();
  const X* x = p.x + offset;
  const T* s = p.residual != nullptr ? p.sum + offset : nullptr;  // the row the later passes read: s, or x
  auto load_row = [&](int64_t c) { return s != nullptr ? Pack::load(s + c) : Pack::load(x + c); };

  float sum = 0.0f;
  if (p.residual != nullptr) {
    for (int64_t c = rs.first; c < n; c += rs.stride) {
      Pack a = Pack::load(x + c);
      const Pack b = Pack::load(p.residual + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) a.v[k] = math::load(math::store<T>(a.v[k] + b.v[k]));
      a.store(p.sum + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) sum += a.v[k];
    }
  } else {
    for (int64_t c = rs.first; c < n; c += rs.stride) {
      const Pack a = Pack::load(x + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) sum += a.v[k];
    }
  }
  // RMSNorm: mean 0 (p.rms is uniform across the block, so every thread skips the reduction alike).
  const float mean = p.rms ? 0.0f : math::block_allreduce(sum, math::SumOp{}, 0.0f, scratch) / static_cast<float>(n);

  float sq = 0.0f;
  for (int64_t c = rs.first; c < n; c += rs.stride) {
    const Pack a = load_row(c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k) sq += (a.v[k] - mean) * (a.v[k] - mean);
  }
  sq = math::block_allreduce(sq, math::SumOp{}, 0.0f, scratch);
  const float rstd = math::layer_norm_rstd(sq / static_cast<float>(n), static_cast<float>(p.eps));

  unsigned m = 0;  // an FP8 output's max |y| bits
  const bool write_y = !math::kFp8Output<Y> || p.y != nullptr;  // an FP8 y may be null: its amax-only pass
  const float y_scale = math::kFp8Output<Y> && write_y ? *p.y_scale : 1.0f;  // read once
  for (int64_t c = rs.first; c < n; c += rs.stride) {
    Pack a = load_row(c);
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k) {
      const float b = p.bias != nullptr ? static_cast<float>(math::load(p.bias[c + k])) : 0.0f;
      a.v[k] = math::layer_norm_output(a.v[k], mean, rstd, static_cast<float>(math::load(p.weight[c + k])), b);
    }
    if constexpr (math::kFp8Output<Y>) {  // quantized as it is stored (kernels/math/quantize.h's element)
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) m = math::AmaxBitsMax{}(m, math::amax_bits(a.v[k], true));
      if (write_y) {  // the amax-only pass stops here
        RowVec<Y, Pack::kWidth> q;
#pragma unroll
        for (int k = 0; k < Pack::kWidth; ++k) q.v[k] = math::quantize_value<Y>(a.v[k], y_scale, Fp8Saturation::Saturate);
        *reinterpret_cast<RowVec<Y, Pack::kWidth>*>(p.y + offset + c) = q;
      }
    } else {
      a.store(p.y + offset + c);
    }
  }
  if (threadIdx.x == 0) {
    p.mean[blockIdx.x] = mean;
    p.rstd[blockIdx.x] = rstd;
  }
  if constexpr (math::kFp8Output<Y>) {
    if (p.y_amax != nullptr) block_amax_to(m, reinterpret_cast<unsigned*>(p.y_amax));
  }
}

// Block b handles rows b, b + gridDim.x, ...: dx per row, and its threads sum dy * xhat and dy of the columns
// they own into acc (shared memory, or the block's slice of `partials` when use_shared is false), which is
// finally written to the block's slice (blocks, 2, cols) of `partials`.
template <class T, class P, class G, class X, bool kVec>
__global__ void __launch_bounds__(kBackwardThreads)
    layer_norm_backward_kernel(const math::LayerNormBackwardParams<T, P, G, X> p, float* partials, bool use_shared) {
  __shared__ float scratch[math::kBlockReduceScratch];
  MPT_DYNAMIC_SHARED(float, smem);
  using Pack = RowPack<T, kVec>;
  const int64_t n = p.cols;
  const RowStride rs = row_stride<Pack::kWidth>();
  float* slice = partials + static_cast<int64_t>(blockIdx.x) * 2 * n;
  float* acc = use_shared ? smem : slice;
  for (int64_t c = rs.first; c < n; c += rs.stride) {
#pragma unroll
    for (int k = 0; k < Pack::kWidth; ++k) acc[c + k] = acc[n + c + k] = 0.0f;
  }
  for (int64_t row = blockIdx.x; row < p.rows; row += gridDim.x) {
    const int64_t offset = row * n;
    const float mean = p.mean[row], rstd = p.rstd[row];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = rs.first; c < n; c += rs.stride) {
      const Pack x = Pack::load(p.x + offset + c), dy = Pack::load(p.dy + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) {
        const float xhat = (x.v[k] - mean) * rstd;
        const float g = dy.v[k] * static_cast<float>(math::load(p.weight[c + k]));
        sg += g;
        sgx += g * xhat;
        acc[c + k] += dy.v[k] * xhat;
        acc[n + c + k] += dy.v[k];
      }
    }
    const float g_mean =
        p.rms ? 0.0f : math::block_allreduce(sg, math::SumOp{}, 0.0f, scratch) / static_cast<float>(n);
    const float gx_mean = math::block_allreduce(sgx, math::SumOp{}, 0.0f, scratch) / static_cast<float>(n);
    for (int64_t c = rs.first; c < n; c += rs.stride) {
      const Pack x = Pack::load(p.x + offset + c);
      Pack dx = Pack::load(p.dy + offset + c);
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) {
        const float xhat = (x.v[k] - mean) * rstd;
        const float g = dx.v[k] * static_cast<float>(math::load(p.weight[c + k]));
        dx.v[k] = math::layer_norm_dx(g, xhat, rstd, g_mean, gx_mean);
      }
      // Added to dx: its old value, or the fused residual sum's own gradient (the pointers read from the kernel's
      // parameters where they are used: holding one across the row loop spills the 8-wide kernels).
      if (p.accumulate_dx || p.dx_add != nullptr) {
        const Pack old = Pack::load((p.accumulate_dx ? p.dx : p.dx_add) + offset + c);
#pragma unroll
        for (int k = 0; k < Pack::kWidth; ++k) dx.v[k] = math::add_rn(dx.v[k], old.v[k]);  // never fused into dx's FMA
      }
      dx.store(p.dx + offset + c);
    }
    // dx again in X (a low-precision x beside an f32 residual: the cast a separate pass would make), read back from
    // what this thread just wrote (the same columns, so no barrier), in a loop of its own: inside the loop above the
    // conversion's registers spill the 4-wide float kernels. X == T never asks for it.
    if constexpr (!std::is_same_v<X, T>) {
      static_assert(std::is_same_v<T, float>, "a second dx dtype only beside f32 rows");
      if (p.dx_half != nullptr) {
        for (int64_t c = rs.first; c < n; c += rs.stride) Pack::load(p.dx + offset + c).store(p.dx_half + offset + c);
      }
    }
  }
  if (use_shared) {
    for (int64_t c = rs.first; c < n; c += rs.stride) {
#pragma unroll
      for (int k = 0; k < Pack::kWidth; ++k) {
        slice[c + k] = acc[c + k];
        slice[n + c + k] = acc[n + c + k];
      }
    }
  }
}

template <class P>
MPT_DEVICE MPT_INLINE void store_param_grad(P* out, int64_t c, float v, bool accumulate) {
  if (accumulate) v += static_cast<float>(math::load(out[c]));
  out[c] = math::store<P>(v);
}

// dweight[c] (+)= the column's slices summed in math::partial_groups' two levels (partial_sums.cuh), likewise dbias.
template <class T, class P, class G, class X>
__global__ void __launch_bounds__(kPartialThreads)
    layer_norm_param_grad_kernel(const math::LayerNormBackwardParams<T, P, G, X> p, const float* partials,
                                 int64_t blocks) {
  __shared__ float w_groups[math::kPartialGroups][kPartialCols], b_groups[math::kPartialGroups][kPartialCols];
  const int64_t n = p.cols;
  const float w = finish_partial_sum(partials, blocks, 2 * n, n, w_groups);
  const float b = p.dbias != nullptr ? finish_partial_sum(partials + n, blocks, 2 * n, n, b_groups) : 0.0f;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kPartialCols + threadIdx.x;
  if (threadIdx.y != 0 || c >= n) return;
  store_param_grad(p.dweight, c, w, p.accumulate_dweight);
  if (p.dbias != nullptr) store_param_grad(p.dbias, c, b, p.accumulate_dbias);
}

bool bad_shape(int64_t rows, int64_t cols) { return rows < 0 || cols < 1 || rows > 2147483647; }

}  // namespace

template <class T, class P, class Y, class X>
cudaError_t layer_norm_forward(const math::LayerNormForwardParams<T, P, Y, X>& p, cudaStream_t stream) {
  if (bad_shape(p.rows, p.cols)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  const bool fused = p.residual != nullptr;
  // An FP8 y: codes with a scale, an amax, or both; y null (the amax-only pass) takes the amax.
  const bool has_y = p.y != nullptr;
  if (p.x == nullptr || p.weight == nullptr || p.mean == nullptr || p.rstd == nullptr || (fused && p.sum == nullptr) ||
      (!math::kFp8Output<Y> && !has_y) ||
      (math::kFp8Output<Y> && (has_y ? p.y_scale == nullptr : p.y_amax == nullptr)))
    return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = p.cols % kWidth == 0 && is_aligned16(p.x) && (!has_y || is_aligned16(p.y)) &&
                   (!fused || (is_aligned16(p.residual) && is_aligned16(p.sum)));
  const int threads = row_block_threads(vec ? p.cols / kWidth : p.cols, kMaxThreads);
  // x (and residual) once, weight (and bias) once for the launch; y (and sum), mean and rstd written. The later
  // passes' re-reads of x, or of the sum this launch wrote, count nothing more.
  const uint64_t elems = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
  const uint64_t cols = static_cast<uint64_t>(p.cols);
  const uint64_t read_bytes =
      elems * (sizeof(X) + (fused ? sizeof(T) : 0)) + cols * sizeof(P) * (p.bias != nullptr ? 2 : 1);
  const uint64_t written_bytes = elems * ((has_y ? sizeof(Y) : 0) + (fused ? sizeof(T) : 0)) +
                                 2 * static_cast<uint64_t>(p.rows) * sizeof(math::opmath_t<T>) +
                                 (math::kFp8Output<Y> ? sizeof(float) : 0);  // the scale read or the amax folded
  const LaunchConfig config{dim3(static_cast<unsigned>(p.rows)), dim3(static_cast<unsigned>(threads)), 0, stream,
                            read_bytes, written_bytes};
  return vec ? launch(layer_norm_forward_kernel<T, P, Y, X, true>, config, p)
             : launch(layer_norm_forward_kernel<T, P, Y, X, false>, config, p);
}

template <class T, class P, class G, class X>
cudaError_t layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X>& p, float* scratch,
                                cudaStream_t stream) {
  if (bad_shape(p.rows, p.cols)) return cudaErrorInvalidValue;
  if (p.rows == 0) return cudaSuccess;
  if (p.dy == nullptr || p.x == nullptr || p.weight == nullptr || p.mean == nullptr || p.rstd == nullptr ||
      p.dx == nullptr || p.dweight == nullptr || scratch == nullptr)
    return cudaErrorInvalidValue;
  constexpr int kWidth = Vec16<T>::kSize;
  const bool vec = p.cols % kWidth == 0 && is_aligned16(p.x) && is_aligned16(p.dy) && is_aligned16(p.dx) &&
                   is_aligned16(p.dx_add) && is_aligned16(p.dx_half);
  if (p.accumulate_dx && p.dx_add != nullptr) return cudaErrorInvalidValue;
  if (partial_sums_blocks(p.cols) > 2147483647) return cudaErrorInvalidValue;  // the dweight/dbias kernel's grid
  const int threads = row_block_threads(vec ? p.cols / kWidth : p.cols, kBackwardThreads);
  const int64_t blocks = p.rows < kGradBlocks ? p.rows : kGradBlocks;
  const int64_t partial_bytes = 2 * p.cols * static_cast<int64_t>(sizeof(float));
  const bool use_shared = partial_bytes <= kSharedPartialBytes;
  // dy, x (and dx when accumulating), weight, mean and rstd in; dx and the (blocks, 2, cols) partials out. Without
  // shared memory the partials are accumulated in place, so they are read too.
  const uint64_t elems = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
  const uint64_t cols = static_cast<uint64_t>(p.cols);
  const uint64_t partials = static_cast<uint64_t>(blocks) * static_cast<uint64_t>(partial_bytes);
  const bool adds = p.accumulate_dx || p.dx_add != nullptr;
  const uint64_t read_bytes = elems * (sizeof(G) + sizeof(T) * (adds ? 2 : 1)) + cols * sizeof(P) +
                              2 * static_cast<uint64_t>(p.rows) * sizeof(math::opmath_t<T>) +
                              (use_shared ? 0 : partials);
  // dx_half: dx read back (from cache: the thread wrote it just before; counted) and written in X.
  const uint64_t half_read = p.dx_half != nullptr ? elems * sizeof(T) : 0;
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(threads)),
                            use_shared ? static_cast<size_t>(partial_bytes) : 0, stream, read_bytes + half_read,
                            elems * (sizeof(T) + (p.dx_half != nullptr ? sizeof(X) : 0)) + partials};
  const cudaError_t e = vec ? launch(layer_norm_backward_kernel<T, P, G, X, true>, config, p, scratch, use_shared)
                            : launch(layer_norm_backward_kernel<T, P, G, X, false>, config, p, scratch, use_shared);
  if (e != cudaSuccess) return e;
  // The partials in; dweight (and dbias) out, read first when accumulated.
  const uint64_t param_read = partials + (p.accumulate_dweight ? cols * sizeof(P) : 0) +
                              (p.dbias != nullptr && p.accumulate_dbias ? cols * sizeof(P) : 0);
  const uint64_t param_written = cols * sizeof(P) * (p.dbias != nullptr ? 2 : 1);
  const LaunchConfig reduce{dim3(static_cast<unsigned>(partial_sums_blocks(p.cols))), partial_sums_block(), 0, stream,
                            param_read, param_written};
  return launch(layer_norm_param_grad_kernel<T, P, G, X>, reduce, p, static_cast<const float*>(scratch), blocks);
}

#define MPT_INSTANTIATE(T, P, Y, X)                                                                    \
  template cudaError_t layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&,  \
                                                      cudaStream_t);                                    \
  template cudaError_t layer_norm_backward<T, P, Y, X>(const math::LayerNormBackwardParams<T, P, Y, X>&, \
                                                       float*, cudaStream_t);
MPT_LAYER_NORM_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
#define MPT_INSTANTIATE(T, P, Y, X)                                                                   \
  template cudaError_t layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&, \
                                                      cudaStream_t);
MPT_LAYER_NORM_FP8_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
