// kernels/cuda/layernorm.cu: LayerNorm forward and backward, a row per warp, float math from
// kernels/math/layernorm.h.
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

constexpr int kWarps = static_cast<int>(kLayerNormWarps);  // a row per warp, forward and backward
constexpr int kThreads = 32 * kWarps;
constexpr int64_t kGradBlocks = kLayerNormGradBlocks;
constexpr int64_t kSharedBytes = 48 * 1024;  // the backward kernel's stages and (when they fit) its partial sums

// A row per warp (kWarps to a block; a warp past the last row only joins the block's amax), three passes over the
// row (with a residual, the first one writes s = x + residual and later passes read s back): sum, sum of squared
// deviations, output. The row's reductions are warp shuffles: no barrier, so a lane's loads of a pass are in flight
// together.
template <class T, class P, class Y, class X, bool kVec>
__global__ void __launch_bounds__(kThreads)
    layer_norm_forward_kernel(const math::LayerNormForwardParams<T, P, Y, X> p) {
  using Pack = RowPack<T, kVec>;
  constexpr int kWidth = Pack::kWidth;
  constexpr int kChunk = 32 * kWidth;  // columns a warp covers per step
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  const bool active = row < p.rows;  // uniform across the warp
  const int64_t n = p.cols, offset = active ? row * n : 0, first = static_cast<int64_t>(threadIdx.x % 32) * kWidth;
  const int64_t end = active ? n : 0;
  const X* x = p.x + offset;
  const T* s = p.residual != nullptr ? p.sum + offset : nullptr;  // the row the later passes read: s, or x
  auto load_row = [&](int64_t c) { return s != nullptr ? Pack::load(s + c) : Pack::load(x + c); };

  float sum = 0.0f;
  if (p.residual != nullptr) {
    for (int64_t c = first; c < end; c += kChunk) {
      Pack a = Pack::load(x + c);
      const Pack b = Pack::load(p.residual + offset + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) a.v[k] = math::load(math::store<T>(a.v[k] + b.v[k]));
      a.store(p.sum + offset + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) sum += a.v[k];
    }
  } else {
    for (int64_t c = first; c < end; c += kChunk) {
      const Pack a = Pack::load(x + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) sum += a.v[k];
    }
  }
  // RMSNorm: mean 0 (p.rms is uniform across the block, so every lane skips the reduction alike).
  const float mean = p.rms ? 0.0f : math::warp_allreduce(sum, math::SumOp{}) / static_cast<float>(n);

  float sq = 0.0f;
  for (int64_t c = first; c < end; c += kChunk) {
    const Pack a = load_row(c);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) sq += (a.v[k] - mean) * (a.v[k] - mean);
  }
  sq = math::warp_allreduce(sq, math::SumOp{});
  const float rstd = math::layer_norm_rstd(sq / static_cast<float>(n), static_cast<float>(p.eps));

  unsigned m = 0;  // an FP8 output's max |y| bits
  const bool write_y = !math::kFp8Output<Y> || p.y != nullptr;  // an FP8 y may be null: its amax-only pass
  const float y_scale = math::kFp8Output<Y> && write_y ? *p.y_scale : 1.0f;  // read once
  for (int64_t c = first; c < end; c += kChunk) {
    Pack a = load_row(c);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      const float b = p.bias != nullptr ? static_cast<float>(math::load(p.bias[c + k])) : 0.0f;
      a.v[k] = math::layer_norm_output(a.v[k], mean, rstd, static_cast<float>(math::load(p.weight[c + k])), b);
    }
    if constexpr (math::kFp8Output<Y>) {  // quantized as it is stored (kernels/math/quantize.h's element)
#pragma unroll
      for (int k = 0; k < kWidth; ++k) m = math::AmaxBitsMax{}(m, math::amax_bits(a.v[k], true));
      if (write_y) {  // the amax-only pass stops here
        RowVec<Y, kWidth> q;
#pragma unroll
        for (int k = 0; k < kWidth; ++k) q.v[k] = math::quantize_value<Y>(a.v[k], y_scale, Fp8Saturation::Saturate);
        *reinterpret_cast<RowVec<Y, kWidth>*>(p.y + offset + c) = q;
      }
    } else {
      a.store(p.y + offset + c);
    }
  }
  if (active && threadIdx.x % 32 == 0) {
    p.mean[row] = mean;
    p.rstd[row] = rstd;
  }
  if constexpr (math::kFp8Output<Y>) {
    if (p.y_amax != nullptr) block_amax_to(m, reinterpret_cast<unsigned*>(p.y_amax));
  }
}

// A warp per row (llm.c's layout): warp w of block b takes rows (b + i * gridDim.x) * kWarps + w, i = 0, 1, ...
// (every warp of a block walks the same number of row groups; a warp past the last row adds zeros). The row's two
// means are warp reductions (no block barrier); then, a chunk of 32 packs at a time, the warp writes dx and stages
// its row's dy * xhat and dy, and the block adds the staged rows of its warps in warp order into acc (shared memory,
// or the block's slice of `partials` when use_shared is false), which ends in the block's slice (blocks, 2, cols).
template <class T, class P, class G, class X, class D, bool kVec>
__global__ void __launch_bounds__(kThreads)
    layer_norm_backward_kernel(const math::LayerNormBackwardParams<T, P, G, X, D> p, float* partials,
                               bool use_shared) {
  MPT_DYNAMIC_SHARED(float, smem);
  using Pack = RowPack<T, kVec>;
  constexpr int kWidth = Pack::kWidth;
  constexpr int kChunk = 32 * kWidth;  // columns a warp covers per step
  const int64_t n = p.cols;
  const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
  // Two [kWarps][2][kChunk] stages, used in turn: the warps' dy * xhat, then dy, of one chunk. A stage is written
  // again two chunks later, after the barrier of the chunk between, so one barrier a chunk suffices.
  constexpr int kStage = kWarps * 2 * kChunk;
  float* slice = partials + static_cast<int64_t>(blockIdx.x) * 2 * n;
  float* acc = use_shared ? smem + 2 * kStage : slice;
  int turn = 0;
  for (int64_t c = threadIdx.x; c < 2 * n; c += blockDim.x) acc[c] = 0.0f;
  for (int64_t group = blockIdx.x; group * kWarps < p.rows; group += gridDim.x) {
    const int64_t row = group * kWarps + warp;
    const bool active = row < p.rows;  // uniform across the warp
    const int64_t offset = active ? row * n : 0;
    const float mean = active ? p.mean[row] : 0.0f, rstd = active ? p.rstd[row] : 0.0f;
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = static_cast<int64_t>(lane) * kWidth; active && c < n; c += kChunk) {
      const Pack x = Pack::load(p.x + offset + c), dy = Pack::load(p.dy + offset + c);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        const float g = dy.v[k] * static_cast<float>(math::load(p.weight[c + k]));
        sg += g;
        sgx += g * ((x.v[k] - mean) * rstd);
      }
    }
    const float g_mean = p.rms ? 0.0f : math::warp_allreduce(sg, math::SumOp{}) / static_cast<float>(n);
    const float gx_mean = math::warp_allreduce(sgx, math::SumOp{}) / static_cast<float>(n);
    for (int64_t c0 = 0; c0 < n; c0 += kChunk, turn ^= 1) {
      const int64_t c = c0 + static_cast<int64_t>(lane) * kWidth;
      const float* stage = smem + turn * kStage;
      float* mine = smem + turn * kStage + warp * 2 * kChunk + lane * kWidth;
      Pack dw{}, db{};
      if (active && c < n) {
        const Pack x = Pack::load(p.x + offset + c);
        Pack dx = Pack::load(p.dy + offset + c);
#pragma unroll
        for (int k = 0; k < kWidth; ++k) {
          const float xhat = (x.v[k] - mean) * rstd;
          db.v[k] = dx.v[k];
          dw.v[k] = dx.v[k] * xhat;
          const float g = dx.v[k] * static_cast<float>(math::load(p.weight[c + k]));
          dx.v[k] = math::layer_norm_dx(g, xhat, rstd, g_mean, gx_mean);
        }
        // Added to dx: its old value, or the fused residual sum's own gradient.
        if (p.accumulate_dx || p.dx_add != nullptr) {
          const Pack old = Pack::load((p.accumulate_dx ? p.dx : p.dx_add) + offset + c);
#pragma unroll
          for (int k = 0; k < kWidth; ++k) dx.v[k] = math::add_rn(dx.v[k], old.v[k]);  // never fused into dx's FMA
        }
        dx.store(p.dx + offset + c);
        // dx again in X (a low-precision x beside an f32 residual: the cast a separate pass would make); T is float
        // then, so these are the bits of the float dx just stored, rounded once. X == T never asks for it.
        if constexpr (!std::is_same_v<X, T>) {
          static_assert(std::is_same_v<T, float>, "a second dx dtype only beside f32 rows");
          if (p.dx_half != nullptr) dx.store(p.dx_half + offset + c);
        }
      }
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        mine[k] = dw.v[k];
        mine[kChunk + k] = db.v[k];
      }
      __syncthreads();
      // The chunk's 2 * kChunk sums, each over the warps in order, added to acc.
      for (int i = static_cast<int>(threadIdx.x); i < 2 * kChunk; i += static_cast<int>(blockDim.x)) {
        const int64_t col = c0 + i % kChunk;
        if (col >= n) continue;
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s += stage[w * 2 * kChunk + i];
        float* a = acc + (i < kChunk ? 0 : n) + col;
        *a += s;
      }
    }
  }
  __syncthreads();  // the last chunk's sums
  if (use_shared) {
    for (int64_t c = threadIdx.x; c < 2 * n; c += blockDim.x) slice[c] = acc[c];
  }
}

template <class P>
MPT_DEVICE MPT_INLINE void store_param_grad(P* out, int64_t c, float v, bool accumulate) {
  if (accumulate) v += static_cast<float>(math::load(out[c]));
  out[c] = math::store<P>(v);
}

// dweight[c] (+)= the column's slices summed in math::partial_groups' two levels (partial_sums.cuh), likewise dbias.
template <class T, class P, class G, class X, class D>
__global__ void __launch_bounds__(kPartialThreads)
    layer_norm_param_grad_kernel(const math::LayerNormBackwardParams<T, P, G, X, D> p, const float* partials,
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
  // x (and residual) once, weight (and bias) once for the launch; y (and sum), mean and rstd written. The later
  // passes' re-reads of x, or of the sum this launch wrote, count nothing more.
  const uint64_t elems = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
  const uint64_t cols = static_cast<uint64_t>(p.cols);
  const uint64_t read_bytes =
      elems * (sizeof(X) + (fused ? sizeof(T) : 0)) + cols * sizeof(P) * (p.bias != nullptr ? 2 : 1);
  const uint64_t written_bytes = elems * ((has_y ? sizeof(Y) : 0) + (fused ? sizeof(T) : 0)) +
                                 2 * static_cast<uint64_t>(p.rows) * sizeof(math::opmath_t<T>) +
                                 (math::kFp8Output<Y> ? sizeof(float) : 0);  // the scale read or the amax folded
  const LaunchConfig config{dim3(static_cast<unsigned>((p.rows + kWarps - 1) / kWarps)), dim3(kThreads), 0, stream,
                            read_bytes, written_bytes};
  return vec ? launch(layer_norm_forward_kernel<T, P, Y, X, true>, config, p)
             : launch(layer_norm_forward_kernel<T, P, Y, X, false>, config, p);
}

template <class T, class P, class G, class X, class D>
cudaError_t layer_norm_backward(const math::LayerNormBackwardParams<T, P, G, X, D>& p, float* scratch,
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
  const int64_t groups = (p.rows + kWarps - 1) / kWarps;  // a row per warp
  const int64_t blocks = groups < kGradBlocks ? groups : kGradBlocks;
  const int64_t partial_bytes = 2 * p.cols * static_cast<int64_t>(sizeof(float));
  const int64_t stage_bytes = 2 * kWarps * 2 * 32 * (vec ? kWidth : 1) * static_cast<int64_t>(sizeof(float));
  const bool use_shared = stage_bytes + partial_bytes <= kSharedBytes;
  // dy, x (and dx when accumulating), weight, mean and rstd in; dx (and dx_half) and the (blocks, 2, cols) partials
  // out. Without shared memory the partials are accumulated in place, so they are read too.
  const uint64_t elems = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(p.cols);
  const uint64_t cols = static_cast<uint64_t>(p.cols);
  const uint64_t partials = static_cast<uint64_t>(blocks) * static_cast<uint64_t>(partial_bytes);
  const bool adds = p.accumulate_dx || p.dx_add != nullptr;
  const uint64_t read_bytes = elems * (sizeof(G) + sizeof(T) * (adds ? 2 : 1)) + cols * sizeof(P) +
                              2 * static_cast<uint64_t>(p.rows) * sizeof(math::opmath_t<T>) +
                              (use_shared ? 0 : partials);
  const LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(static_cast<unsigned>(kThreads)),
                            static_cast<size_t>(stage_bytes + (use_shared ? partial_bytes : 0)), stream, read_bytes,
                            elems * (sizeof(T) + (p.dx_half != nullptr ? sizeof(X) : 0)) + partials};
  const cudaError_t e = vec ? launch(layer_norm_backward_kernel<T, P, G, X, D, true>, config, p, scratch, use_shared)
                            : launch(layer_norm_backward_kernel<T, P, G, X, D, false>, config, p, scratch, use_shared);
  if (e != cudaSuccess) return e;
  // The partials in; dweight (and dbias) out, read first when accumulated.
  const uint64_t param_read = partials + (p.accumulate_dweight ? cols * sizeof(D) : 0) +
                              (p.dbias != nullptr && p.accumulate_dbias ? cols * sizeof(D) : 0);
  const uint64_t param_written = cols * sizeof(D) * (p.dbias != nullptr ? 2 : 1);
  const LaunchConfig reduce{dim3(static_cast<unsigned>(partial_sums_blocks(p.cols))), partial_sums_block(), 0, stream,
                            param_read, param_written};
  return launch(layer_norm_param_grad_kernel<T, P, G, X, D>, reduce, p, static_cast<const float*>(scratch), blocks);
}

#define MPT_INSTANTIATE(T, P, Y, X)                                                                    \
  template cudaError_t layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&,  \
                                                      cudaStream_t);                                    \
  template cudaError_t layer_norm_backward<T, P, Y, X>(const math::LayerNormBackwardParams<T, P, Y, X>&, \
                                                       float*, cudaStream_t);
MPT_LAYER_NORM_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
#define MPT_INSTANTIATE(T, P, Y, X)                                                                          \
  template cudaError_t layer_norm_backward<T, P, Y, X, bf16>(const math::LayerNormBackwardParams<T, P, Y, X, bf16>&, \
                                                             float*, cudaStream_t);
MPT_LAYER_NORM_BF16_GRAD_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE
#define MPT_INSTANTIATE(T, P, Y, X)                                                                   \
  template cudaError_t layer_norm_forward<T, P, Y, X>(const math::LayerNormForwardParams<T, P, Y, X>&, \
                                                      cudaStream_t);
MPT_LAYER_NORM_FP8_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
