// kernels/cuda/optim.cu: multi-tensor optimizer and gradient kernels over a tensor table passed as a kernel argument,
// applying the math of kernels/math/optim.h (the same operations in the same order as kernels/cpu/optim.cpp).
#include <algorithm>
#include <climits>
#include <type_traits>

#include "kernels/cuda/amax.cuh"
#include "kernels/cuda/launch.cuh"
#include "kernels/cuda/optim.h"
#include "kernels/math/elementwise.h"
#include "kernels/math/opmath.h"
#include "kernels/math/reduce.h"
#include "kernels/math/rounded.h"

namespace mpt::kernels::cuda {

namespace {

constexpr int kThreads = 256;
constexpr int kIlp = 8;                                // elements per thread per dense chunk
constexpr int kDenseChunk = kThreads * kIlp;           // elements per thread block (dense kernels)
static_assert(kDenseChunk == kSumSquaresChunk, "sum_squares_partials counts the sum-of-squares kernel's blocks");
constexpr int kQuantBlocksPerChunk = 8;                // 8-bit kernel: absmax blocks per thread block
constexpr int kTableBytes = 1920;                      // keeps every kernel's arguments under 4 KiB

// Up to kMax tensors; tensor s owns the thread blocks [block_begin[s], block_begin[s + 1]).
template <class T, int kBytes = kTableBytes>
struct TensorTable {
  static constexpr int kMax = kBytes / (sizeof(T) + sizeof(int32_t));
  T tensors[kMax];
  int32_t block_begin[kMax + 1];
  int32_t count;
};

struct DynamicMaps {
  float m[256];
  float v[256];
};

template <class T, int kBytes>
MPT_DEVICE MPT_INLINE int table_slot(const TensorTable<T, kBytes>& table) {
  int s = 0;
  while (static_cast<int32_t>(blockIdx.x) >= table.block_begin[s + 1]) ++s;
  return s;
}

MPT_DEVICE MPT_INLINE bool step_skipped(const math::StepGuards& guards) {
  return guards.found_inf != nullptr && *guards.found_inf != 0.0f;
}

// A tensor's FP8 codes of its parameters [begin, begin + kThreads * kIlp) (strided by kThreads) as they stand, for a
// step that found_inf skips (the codes' scale may have moved); the block's amax folded in. Block-uniform.
template <class G, class M>
MPT_DEVICE MPT_INLINE void fp8_codes_only(const math::AdamWTensor<float, G, M>& t, int64_t begin, int64_t chunk) {
  const float cs = *t.code_scale;
  uint32_t m = 0;
  for (int64_t k = 0; k < chunk; k += kThreads) {
    const int64_t i = begin + k;
    if (i < t.n) math::store_fp8_code(t, i, t.param[i], cs, m);
  }
  block_amax_to(m, reinterpret_cast<unsigned*>(t.code_amax));
}

// The first thread block of a tensor with FP8 codes writes their scale_inv.
template <class G, class M>
MPT_DEVICE MPT_INLINE void fp8_scale_inv(const math::AdamWTensor<float, G, M>& t, int64_t first_element) {
  if (t.codes != nullptr && first_element == 0 && threadIdx.x == 0) *t.code_scale_inv = math::reciprocal(*t.code_scale);
}

// The dense kernels' table: larger than kTableBytes (their other arguments are small), so that a step over a model's
// few hundred parameters takes few launches although each entry carries the FP8 code pointers.
constexpr int kDenseTableBytes = 3584;

template <class G, class M>
__global__ void __launch_bounds__(kThreads)
    adamw_dense_kernel(const TensorTable<math::AdamWTensor<float, G, M>, kDenseTableBytes> table,
                       const math::AdamWHyper h, const int64_t step, const math::StepGuards guards) {
  const bool skipped = step_skipped(guards);
  const int s = table_slot(table);
  const math::AdamWTensor<float, G, M> t = table.tensors[s];
  if (skipped && t.codes == nullptr) return;
  const int64_t first = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kDenseChunk;
  const int64_t begin = first + threadIdx.x;
  fp8_scale_inv(t, first);
  if (skipped) return fp8_codes_only(t, begin, kDenseChunk);
  const auto c = math::adamw_coefficients(h, math::step_of(t, step)).template to<float>();
  const float* scale = guards.grad_scale_inv;
  float g[kIlp], m[kIlp], v[kIlp], p[kIlp];
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {  // all loads first: kIlp independent memory requests in flight
    const int64_t i = begin + k * kThreads;
    if (i < t.n) {
      g[k] = math::load(t.grad[i]);
      m[k] = math::load(t.exp_avg[i]);
      v[k] = math::load(t.exp_avg_sq[i]);
      p[k] = t.param[i];
    }
  }
  const float sc = scale != nullptr ? *scale : 1.0f;
  const float cs = t.codes != nullptr ? *t.code_scale : 0.0f;
  uint32_t amax = 0;
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) {
      if (scale != nullptr) g[k] = math::optim_detail::mul(g[k], sc);
      math::adamw_moments(c, g[k], m[k], v[k]);
      p[k] = math::adamw_param(c, p[k], m[k], v[k]);
      t.param[i] = p[k];
      math::store_compute_copy(t, i, p[k]);
      t.exp_avg[i] = math::store<M>(m[k]);
      t.exp_avg_sq[i] = math::store<M>(v[k]);
      if (t.codes != nullptr) math::store_fp8_code(t, i, p[k], cs, amax);
    }
  }
  if (t.codes != nullptr) block_amax_to(amax, reinterpret_cast<unsigned*>(t.code_amax));  // block-uniform
}

// One thread per lane of a 256-element absmax block; the block's new absmax values come from two block-wide
// max reductions (exact in any order, so they equal the CPU's sequential maximum).
template <class G>
__global__ void __launch_bounds__(kThreads)
    adamw_8bit_kernel(const TensorTable<math::AdamWTensor<float, G, uint8_t>> table, const DynamicMaps maps,
                      const math::AdamWHyper h, const int64_t step, const math::StepGuards guards) {
  static_assert(kThreads == math::kQuantBlock, "one thread per lane of an absmax block");
  __shared__ float code_m[256], code_v[256];
  __shared__ float scratch[math::kBlockReduceScratch];
  const bool skipped = step_skipped(guards);
  const int s = table_slot(table);
  const math::AdamWTensor<float, G, uint8_t> t = table.tensors[s];
  if (skipped && t.codes == nullptr) return;  // uniform over the block, before any barrier
  const int64_t first_block = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kQuantBlocksPerChunk;
  fp8_scale_inv(t, first_block);
  if (skipped) return fp8_codes_only(t, first_block * math::kQuantBlock + threadIdx.x,
                                     int64_t{kQuantBlocksPerChunk} * math::kQuantBlock);
  code_m[threadIdx.x] = maps.m[threadIdx.x];
  code_v[threadIdx.x] = maps.v[threadIdx.x];
  __syncthreads();
  const auto c = math::adamw_coefficients(h, math::step_of(t, step)).template to<float>();
  const float cs = t.codes != nullptr ? *t.code_scale : 0.0f;
  uint32_t amax = 0;
  for (int qb = 0; qb < kQuantBlocksPerChunk; ++qb) {
    const int64_t block = first_block + qb;
    const int64_t base = block * math::kQuantBlock;
    if (base >= t.n) break;  // the same for every thread of the block
    const int64_t i = base + threadIdx.x;
    const bool real = i < t.n;
    float g = real ? math::load(t.grad[i]) : 0.0f;
    if (real && guards.grad_scale_inv != nullptr) g = math::optim_detail::mul(g, *guards.grad_scale_inv);
    const math::Adam8bitLane l = math::adam8bit_moments(
        c, code_m, code_v, g, real ? t.exp_avg[i] : math::kSignedPadCode,
        real ? t.exp_avg_sq[i] : math::kUnsignedPadCode, t.exp_avg_absmax[block], t.exp_avg_sq_absmax[block]);
    const float absmax_m = math::block_allreduce(fabsf(l.m), math::MaxOp{}, 0.0f, scratch);
    const float absmax_v = math::block_allreduce(fabsf(l.v), math::MaxOp{}, 0.0f, scratch);
    if (real) {
      if (l.update) {  // otherwise the parameter, and so its compute copy, keeps its value
        const float p = math::adamw_param(c, t.param[i], l.m, l.v);
        t.param[i] = p;
        math::store_compute_copy(t, i, p);
      }
      t.exp_avg[i] = math::quantize_signed_state(code_m, l.m, absmax_m);
      t.exp_avg_sq[i] = math::quantize_unsigned_state(code_v, l.v, absmax_v);
      if (t.codes != nullptr) math::store_fp8_code(t, i, t.param[i], cs, amax);  // updated or not
    }
    if (threadIdx.x == 0) {
      t.exp_avg_absmax[block] = absmax_m;
      t.exp_avg_sq_absmax[block] = absmax_v;
    }
  }
  if (t.codes != nullptr) block_amax_to(amax, reinterpret_cast<unsigned*>(t.code_amax));
}

template <class G>
__global__ void __launch_bounds__(kThreads)
    sgd_kernel(const TensorTable<math::SgdTensor<float, G>> table, const math::SgdCoefficients<float> call,
               const math::StepGuards guards) {
  if (step_skipped(guards)) return;
  const int s = table_slot(table);
  const math::SgdTensor<float, G> t = table.tensors[s];
  math::SgdCoefficients<float> c = call;
  if (t.step != nullptr) c.first_step = c.first_step || *t.step == 0;
  const int64_t begin = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kDenseChunk + threadIdx.x;
  const float* scale = guards.grad_scale_inv;
  float g[kIlp], p[kIlp], buf[kIlp];
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) {
      g[k] = math::load(t.grad[i]);
      p[k] = t.param[i];
      buf[k] = t.momentum_buffer != nullptr ? t.momentum_buffer[i] : 0.0f;
    }
  }
  const float sc = scale != nullptr ? *scale : 1.0f;
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) {
      if (scale != nullptr) g[k] = math::optim_detail::mul(g[k], sc);
      t.param[i] = math::sgd_update(c, p[k], g[k], buf[k]);
      if (t.momentum_buffer != nullptr) t.momentum_buffer[i] = buf[k];
    }
  }
}

// The step counts of one call's tensors, advanced after the step kernels (which read them) unless skipped.
struct StepList {
  static constexpr int kMax = kTableBytes / sizeof(int64_t*);
  int64_t* steps[kMax];
  int32_t count;
};

__global__ void __launch_bounds__(kThreads) advance_steps_kernel(const StepList list, const math::StepGuards guards) {
  if (step_skipped(guards)) return;
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < list.count) ++*list.steps[i];
}

template <class T>
cudaError_t advance_steps(const T* tensors, int64_t count, math::StepGuards guards, cudaStream_t stream) {
  StepList list;
  list.count = 0;
  for (int64_t k = 0; k <= count; ++k) {
    if (k < count && tensors[k].step != nullptr) list.steps[list.count++] = tensors[k].step;
    if (list.count > 0 && (list.count == StepList::kMax || k == count)) {
      const unsigned blocks = static_cast<unsigned>((list.count + kThreads - 1) / kThreads);
      // Each step count read and written (unless found_inf skips the step), the found_inf flag read.
      const uint64_t steps = static_cast<uint64_t>(list.count) * sizeof(int64_t);
      const uint64_t guards_read = guards.found_inf != nullptr ? sizeof(float) : 0;
      const LaunchConfig config{dim3(blocks), dim3(kThreads), 0, stream, steps + guards_read, steps};
      if (const cudaError_t e = launch(advance_steps_kernel, config, list, guards); e != cudaSuccess) return e;
      list.count = 0;
    }
  }
  return cudaSuccess;
}

struct FoundList {
  const float* found[kMaxFoundInf];
  int32_t count;
};

__global__ void grad_scaler_update_kernel(const math::ScalerUpdate u, const FoundList list, float* scale, float* inv,
                                          int32_t* trackers) {
  float found = 0.0f;
#pragma unroll
  for (int k = 0; k < kMaxFoundInf; ++k) {  // constant indices: the list stays in the parameter space
    if (k < list.count) found += *list.found[k];
  }
  math::grad_scaler_update(u, found, scale, inv, trackers);
}

template <class G>
struct GradSlot {
  G* grad;
  int64_t n;
};

template <class G>
__global__ void __launch_bounds__(kThreads)
    unscale_kernel(const TensorTable<GradSlot<G>> table, const float* inv_scale, float* found_inf) {
  const int s = table_slot(table);
  const GradSlot<G> t = table.tensors[s];
  const int64_t begin = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kDenseChunk + threadIdx.x;
  const float inv = *inv_scale;
  float v[kIlp];
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) v[k] = math::load(t.grad[i]);
  }
  bool found = false;
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) {
      const float r = math::unscale_value(v[k], inv, found);
      if (inv != 1.0f) t.grad[i] = math::store<G>(r);
    }
  }
  if (found) atomicExch(found_inf, 1.0f);
}

template <class G>
struct ReadSlot {
  const G* x;
  int64_t n;
};

// Each thread block: the sum of the squares of its chunk of one tensor (in f32, each thread over kIlp elements in a
// fixed order, then the block's tree), written to partials[blockIdx.x]. Deterministic for a given table.
template <class G>
__global__ void __launch_bounds__(kThreads)
    sum_squares_kernel(const TensorTable<ReadSlot<G>> table, float* partials) {
  __shared__ float scratch[math::kBlockReduceScratch];
  const int s = table_slot(table);
  const ReadSlot<G> t = table.tensors[s];
  const int64_t begin = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kDenseChunk + threadIdx.x;
  float v[kIlp];
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    v[k] = i < t.n ? static_cast<float>(math::load(t.x[i])) : 0.0f;
  }
  float acc = 0.0f;
#pragma unroll
  for (int k = 0; k < kIlp; ++k) acc = math::add_rn(acc, math::mul_rn(v[k], v[k]));
  acc = math::block_allreduce(acc, math::SumOp{}, 0.0f, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = acc;
}

template <class G>
struct AddSlot {
  G* dst;
  const G* src;
  int64_t n;
};

// dst += src, chunk by chunk: what the elementwise add kernel computes per element.
template <class G>
__global__ void __launch_bounds__(kThreads) add_multi_kernel(const TensorTable<AddSlot<G>> table) {
  const int s = table_slot(table);
  const AddSlot<G> t = table.tensors[s];
  const int64_t begin = static_cast<int64_t>(blockIdx.x - table.block_begin[s]) * kDenseChunk + threadIdx.x;
#pragma unroll
  for (int k = 0; k < kIlp; ++k) {
    const int64_t i = begin + k * kThreads;
    if (i < t.n) t.dst[i] = math::store<G>(math::AddOp{}(math::load(t.dst[i]), math::load(t.src[i])));
  }
}

// Fills tables of up to kMax tensors (ceil(n / per_block) thread blocks each) and calls launch(table, blocks)
// for each; empty tensors are skipped.
template <class T, int kBytes = kTableBytes, class Launch>
cudaError_t launch_tables(const T* tensors, int64_t count, int64_t per_block, Launch&& launch_one) {
  TensorTable<T, kBytes> table;
  table.count = 0;
  int64_t blocks = 0;
  auto flush = [&]() -> cudaError_t {
    if (table.count == 0) return cudaSuccess;
    table.block_begin[table.count] = static_cast<int32_t>(blocks);
    const cudaError_t e = launch_one(table, blocks);
    table.count = 0;
    blocks = 0;
    return e;
  };
  for (int64_t k = 0; k < count; ++k) {
    const int64_t n = tensors[k].n;
    if (n < 0) return cudaErrorInvalidValue;
    const int64_t nb = (n + per_block - 1) / per_block;
    if (nb == 0) continue;
    if (nb > INT_MAX) return cudaErrorInvalidValue;
    if (table.count == TensorTable<T, kBytes>::kMax || blocks + nb > INT_MAX) {
      if (const cudaError_t e = flush(); e != cudaSuccess) return e;
    }
    table.tensors[table.count] = tensors[k];
    table.block_begin[table.count] = static_cast<int32_t>(blocks);
    blocks += nb;
    ++table.count;
  }
  return flush();
}

LaunchConfig config_for(int64_t blocks, cudaStream_t stream, uint64_t read_bytes,
                        uint64_t written_bytes MPT_LAUNCH_SITE_PARAM) {
  LaunchConfig config{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), 0, stream, read_bytes, written_bytes};
  MPT_LAUNCH_SITE_SET(config);
  return config;
}

// Global-memory traffic of one launch. A step the guards skip (found_inf set on the device) touches only the flag,
// but the launcher cannot know: the full step is counted. Every launch reads the guards it is given.
struct Traffic {
  uint64_t read = 0, written = 0;
};

uint64_t guard_bytes(const math::StepGuards& g) {
  return (g.found_inf != nullptr ? sizeof(float) : 0) + (g.grad_scale_inv != nullptr ? sizeof(float) : 0);
}

template <class T>
uint64_t step_count_bytes(const T& t) {
  return t.step != nullptr ? sizeof(int64_t) : 0;
}

// Dense AdamW: grad, param and both moments read; param and moments written; the tensor's step count read.
template <class G, class M>
void add_traffic(Traffic& tr, const math::AdamWTensor<float, G, M>& t) {
  const uint64_t n = static_cast<uint64_t>(t.n);
  tr.written += (t.copy_bf16 != nullptr || t.copy_f16 != nullptr) ? n * 2 : 0;  // the compute copy
  if (t.codes != nullptr) {  // the FP8 codes and their scale_inv written, the scale read, the amax's atomicMax
    tr.read += 2 * sizeof(float);
    tr.written += n + 2 * sizeof(float);
  }
  if constexpr (std::is_same_v<M, uint8_t>) {
    // 8-bit states: also one absmax pair per 256-element block, read and written. (A non-finite gradient skips its
    // param read and write; counted anyway.)
    const uint64_t absmax = 2 * ((n + math::kQuantBlock - 1) / math::kQuantBlock) * sizeof(float);
    tr.read += n * (sizeof(G) + sizeof(float) + 2 * sizeof(M)) + absmax + step_count_bytes(t);
    tr.written += n * (sizeof(float) + 2 * sizeof(M)) + absmax;
  } else {
    tr.read += n * (sizeof(G) + sizeof(float) + 2 * sizeof(M)) + step_count_bytes(t);
    tr.written += n * (sizeof(float) + 2 * sizeof(M));
  }
}

// SGD: grad and param read, param written, the momentum buffer read and written when there is one.
template <class G>
void add_traffic(Traffic& tr, const math::SgdTensor<float, G>& t) {
  const uint64_t n = static_cast<uint64_t>(t.n), buf = t.momentum_buffer != nullptr ? n * sizeof(float) : 0;
  tr.read += n * (sizeof(G) + sizeof(float)) + buf + step_count_bytes(t);
  tr.written += n * sizeof(float) + buf;
}

// Unscale: each gradient read and written back (the write is skipped when *inv_scale == 1, which the launcher cannot
// see); the found_inf flag, set only on an overflow, is not counted.
template <class G>
void add_traffic(Traffic& tr, const GradSlot<G>& t) {
  tr.read += static_cast<uint64_t>(t.n) * sizeof(G);
  tr.written += static_cast<uint64_t>(t.n) * sizeof(G);
}

// The add: both read, dst written.
template <class G>
void add_traffic(Traffic& tr, const AddSlot<G>& t) {
  tr.read += 2 * static_cast<uint64_t>(t.n) * sizeof(G);
  tr.written += static_cast<uint64_t>(t.n) * sizeof(G);
}

template <class T, int kBytes>
Traffic table_traffic(const TensorTable<T, kBytes>& table) {
  Traffic tr;
  for (int32_t k = 0; k < table.count; ++k) add_traffic(tr, table.tensors[k]);
  return tr;
}

}  // namespace

template <class G, class M>
cudaError_t adamw_step(const math::AdamWTensor<float, G, M>* tensors, int64_t count, const math::AdamWHyper& h,
                       int64_t step, math::StepGuards guards, cudaStream_t stream) {
  if (count < 0 || (count > 0 && tensors == nullptr)) return cudaErrorInvalidValue;
  cudaError_t e;
  if constexpr (std::is_same_v<M, uint8_t>) {
    DynamicMaps maps;
    for (int i = 0; i < 256; ++i) {
      maps.m[i] = math::kDynamicMapSigned[i];
      maps.v[i] = math::kDynamicMapUnsigned[i];
    }
    e = launch_tables(tensors, count, int64_t{kQuantBlocksPerChunk} * math::kQuantBlock,
                      [&](const auto& table, int64_t blocks) {
                        const Traffic tr = table_traffic(table);
                        const uint64_t scalars = guard_bytes(guards) + (h.lr_wd != nullptr ? 2 * sizeof(double) : 0);
                        return launch(adamw_8bit_kernel<G>, config_for(blocks, stream, tr.read + scalars, tr.written),
                                      table, maps, h, step, guards);
                      });
  } else {
    e = launch_tables<math::AdamWTensor<float, G, M>, kDenseTableBytes>(
        tensors, count, kDenseChunk, [&](const auto& table, int64_t blocks) {
      const Traffic tr = table_traffic(table);
      const uint64_t scalars = guard_bytes(guards) + (h.lr_wd != nullptr ? 2 * sizeof(double) : 0);
      return launch(adamw_dense_kernel<G, M>, config_for(blocks, stream, tr.read + scalars, tr.written), table, h,
                    step, guards);
    });
  }
  return e != cudaSuccess ? e : advance_steps(tensors, count, guards, stream);
}

template <class G>
cudaError_t sgd_step(const math::SgdTensor<float, G>* tensors, int64_t count, const math::SgdCoefficients<double>& c,
                     math::StepGuards guards, cudaStream_t stream) {
  if (count < 0 || (count > 0 && tensors == nullptr)) return cudaErrorInvalidValue;
  const auto cf = c.to<float>();
  const cudaError_t e = launch_tables(tensors, count, kDenseChunk, [&](const auto& table, int64_t blocks) {
    const Traffic tr = table_traffic(table);
    return launch(sgd_kernel<G>, config_for(blocks, stream, tr.read + guard_bytes(guards), tr.written), table, cf,
                  guards);
  });
  return e != cudaSuccess ? e : advance_steps(tensors, count, guards, stream);
}

template <class G>
cudaError_t unscale_check(G* const* grads, const int64_t* sizes, int64_t count, const float* inv_scale,
                          float* found_inf, cudaStream_t stream) {
  if (count < 0 || (count > 0 && (grads == nullptr || sizes == nullptr)) || inv_scale == nullptr ||
      found_inf == nullptr) {
    return cudaErrorInvalidValue;
  }
  constexpr int64_t kBatch = 256;  // descriptors converted per pass (host stack)
  for (int64_t k0 = 0; k0 < count; k0 += kBatch) {
    GradSlot<G> slots[kBatch];
    const int64_t m = count - k0 < kBatch ? count - k0 : kBatch;
    for (int64_t k = 0; k < m; ++k) slots[k] = GradSlot<G>{grads[k0 + k], sizes[k0 + k]};
    const cudaError_t e = launch_tables(slots, m, kDenseChunk, [&](const auto& table, int64_t blocks) {
      const Traffic tr = table_traffic(table);
      return launch(unscale_kernel<G>, config_for(blocks, stream, tr.read + sizeof(float), tr.written), table,
                    inv_scale, found_inf);
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <class G>
cudaError_t sum_squares_multi(const G* const* xs, const int64_t* sizes, int64_t count, float* partials,
                              cudaStream_t stream) {
  if (count < 0 || (count > 0 && (xs == nullptr || sizes == nullptr || partials == nullptr))) {
    return cudaErrorInvalidValue;
  }
  constexpr int64_t kBatch = 256;  // descriptors converted per pass (host stack)
  float* out = partials;
  for (int64_t k0 = 0; k0 < count; k0 += kBatch) {
    ReadSlot<G> slots[kBatch];
    const int64_t m = count - k0 < kBatch ? count - k0 : kBatch;
    for (int64_t k = 0; k < m; ++k) slots[k] = ReadSlot<G>{xs[k0 + k], sizes[k0 + k]};
    const cudaError_t e = launch_tables(slots, m, kDenseChunk, [&](const auto& table, int64_t blocks) {
      uint64_t read = 0;
      for (int32_t j = 0; j < table.count; ++j) read += static_cast<uint64_t>(table.tensors[j].n) * sizeof(G);
      const cudaError_t le = launch(sum_squares_kernel<G>,
                                    config_for(blocks, stream, read, static_cast<uint64_t>(blocks) * sizeof(float)),
                                    table, out);
      out += blocks;
      return le;
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

template <class G>
cudaError_t add_multi(G* const* dst, const G* const* src, const int64_t* sizes, int64_t count, cudaStream_t stream) {
  if (count < 0 || (count > 0 && (dst == nullptr || src == nullptr || sizes == nullptr))) return cudaErrorInvalidValue;
  constexpr int64_t kBatch = 256;  // descriptors converted per pass (host stack)
  for (int64_t k0 = 0; k0 < count; k0 += kBatch) {
    AddSlot<G> slots[kBatch];
    const int64_t m = count - k0 < kBatch ? count - k0 : kBatch;
    for (int64_t k = 0; k < m; ++k) {
      if (sizes[k0 + k] > 0 && (dst[k0 + k] == nullptr || src[k0 + k] == nullptr)) return cudaErrorInvalidValue;
      slots[k] = AddSlot<G>{dst[k0 + k], src[k0 + k], sizes[k0 + k]};
    }
    const cudaError_t e = launch_tables(slots, m, kDenseChunk, [&](const auto& table, int64_t blocks) {
      const Traffic tr = table_traffic(table);
      return launch(add_multi_kernel<G>, config_for(blocks, stream, tr.read, tr.written), table);
    });
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaError_t grad_scaler_update(const math::ScalerUpdate& u, const float* const* found_inf, int64_t count,
                               float* scale, float* inv, int32_t* trackers, cudaStream_t stream) {
  if (count < 0 || count > kMaxFoundInf || (count > 0 && found_inf == nullptr) || scale == nullptr ||
      inv == nullptr || trackers == nullptr) {
    return cudaErrorInvalidValue;
  }
  FoundList list{};
  list.count = static_cast<int32_t>(count);
  for (int64_t k = 0; k < count; ++k) list.found[k] = found_inf[k];
  // The flags, scale and the three trackers read; scale, inv and the trackers written (which of them depends on
  // the flags: all are counted).
  const uint64_t state = sizeof(float) + 3 * sizeof(int32_t);
  return launch(grad_scaler_update_kernel,
                LaunchConfig{dim3(1), dim3(1), 0, stream, static_cast<uint64_t>(count) * sizeof(float) + state,
                             state + sizeof(float)},
                u, list, scale, inv, trackers);
}

#define MPT_INSTANTIATE(G)                                                                                        \
  template cudaError_t adamw_step<G, float>(const math::AdamWTensor<float, G, float>*, int64_t,                   \
                                            const math::AdamWHyper&, int64_t, math::StepGuards, cudaStream_t);      \
  template cudaError_t adamw_step<G, bf16>(const math::AdamWTensor<float, G, bf16>*, int64_t,                     \
                                           const math::AdamWHyper&, int64_t, math::StepGuards, cudaStream_t);       \
  template cudaError_t adamw_step<G, uint8_t>(const math::AdamWTensor<float, G, uint8_t>*, int64_t,               \
                                              const math::AdamWHyper&, int64_t, math::StepGuards, cudaStream_t);    \
  template cudaError_t sgd_step<G>(const math::SgdTensor<float, G>*, int64_t, const math::SgdCoefficients<double>&, \
                                   math::StepGuards, cudaStream_t);                                                 \
  template cudaError_t sum_squares_multi<G>(const G* const*, const int64_t*, int64_t, float*, cudaStream_t);        \
  template cudaError_t unscale_check<G>(G* const*, const int64_t*, int64_t, const float*, float*, cudaStream_t);     \
  template cudaError_t add_multi<G>(G* const*, const G* const*, const int64_t*, int64_t, cudaStream_t);
MPT_FOR_CUDA_FLOAT_TYPES(MPT_INSTANTIATE)
#undef MPT_INSTANTIATE

}  // namespace mpt::kernels::cuda
