// tests/support/cuda_emu/include/cuda_emu/device.h: CUDA device built-ins for emulated kernels: indices, barriers, warp intrinsics, atomics, math.
#pragma once

#include <atomic>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <source_location>
#include <type_traits>
#include <utility>

#include "cuda_emu/types.h"

namespace mpt::cuda_emu {
namespace detail {

// threadIdx & co. of the fiber running on this OS thread; the scheduler sets them before each switch.
struct Builtins {
  uint3 thread_idx{0, 0, 0};
  uint3 block_idx{0, 0, 0};
  dim3 block_dim{1, 1, 1};
  dim3 grid_dim{1, 1, 1};
};
inline thread_local Builtins t_builtins;

enum class WarpOp : uint8_t { kSyncWarp, kShflIdx, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll };

// Implemented by the block scheduler (block_runner.cpp). They throw when called outside a kernel
// or when the call breaks CUDA's rules (see README.md).
void sync_threads(const std::source_location& site);
uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width);
void* dynamic_shared_memory();
[[noreturn]] void misaligned(const void* p, size_t alignment, const char* what);

template <class T>
uint64_t to_bits(T v) {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) <= 8,
                "cuda_emu: warp shuffles move values of at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <class T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

}  // namespace detail

inline constexpr int warpSize = 32;

// Loud alignment check for emulated vector loads (a misaligned 16-byte access faults on a GPU).
inline void check_aligned(const void* p, size_t alignment, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % alignment != 0) detail::misaligned(p, alignment, what);
}

// ---- barriers and warp intrinsics ----
inline void __syncthreads(std::source_location site = std::source_location::current()) { detail::sync_threads(site); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { detail::warp_op(detail::WarpOp::kSyncWarp, mask, 0, 0, warpSize); }

template <class T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return detail::from_bits<T>(detail::warp_op(detail::WarpOp::kShflIdx, mask, detail::to_bits(var), src_lane, width));
}
template <class T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return detail::from_bits<T>(
      detail::warp_op(detail::WarpOp::kShflUp, mask, detail::to_bits(var), static_cast<int>(delta & 31u), width));
}
template <class T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return detail::from_bits<T>(
      detail::warp_op(detail::WarpOp::kShflDown, mask, detail::to_bits(var), static_cast<int>(delta & 31u), width));
}
template <class T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return detail::from_bits<T>(detail::warp_op(detail::WarpOp::kShflXor, mask, detail::to_bits(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(detail::warp_op(detail::WarpOp::kBallot, mask, predicate != 0, 0, warpSize));
}
inline int __any_sync(unsigned mask, int predicate) {
  return static_cast<int>(detail::warp_op(detail::WarpOp::kAny, mask, predicate != 0, 0, warpSize));
}
inline int __all_sync(unsigned mask, int predicate) {
  return static_cast<int>(detail::warp_op(detail::WarpOp::kAll, mask, predicate != 0, 0, warpSize));
}

// Blocks run on concurrent OS threads, so fences and atomics are real ones.
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- atomics (return the old value, like CUDA's) ----
inline float atomicAdd(float* address, float v) { return std::atomic_ref<float>(*address).fetch_add(v); }
inline double atomicAdd(double* address, double v) { return std::atomic_ref<double>(*address).fetch_add(v); }
inline int atomicAdd(int* address, int v) { return std::atomic_ref<int>(*address).fetch_add(v); }
inline unsigned atomicAdd(unsigned* address, unsigned v) { return std::atomic_ref<unsigned>(*address).fetch_add(v); }
inline unsigned long long atomicAdd(unsigned long long* address, unsigned long long v) {
  return std::atomic_ref<unsigned long long>(*address).fetch_add(v);
}
inline int atomicSub(int* address, int v) { return std::atomic_ref<int>(*address).fetch_sub(v); }
inline unsigned atomicSub(unsigned* address, unsigned v) { return std::atomic_ref<unsigned>(*address).fetch_sub(v); }

namespace detail {
template <class T, class Pick>
T atomic_update(T* address, T v, Pick pick) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, pick(old, v))) {
  }
  return old;
}
}  // namespace detail

inline int atomicMax(int* address, int v) {
  return detail::atomic_update(address, v, [](int a, int b) { return a > b ? a : b; });
}
inline unsigned atomicMax(unsigned* address, unsigned v) {
  return detail::atomic_update(address, v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int atomicMin(int* address, int v) {
  return detail::atomic_update(address, v, [](int a, int b) { return a < b ? a : b; });
}
inline unsigned atomicMin(unsigned* address, unsigned v) {
  return detail::atomic_update(address, v, [](unsigned a, unsigned b) { return a < b ? a : b; });
}
template <class T>
  requires(std::is_same_v<T, int> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long> ||
           std::is_same_v<T, float>)
T atomicExch(T* address, T v) {
  return std::atomic_ref<T>(*address).exchange(v);
}
template <class T>
  requires(std::is_same_v<T, int> || std::is_same_v<T, unsigned> || std::is_same_v<T, unsigned long long>)
T atomicCAS(T* address, T compare, T v) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, v);
  return compare;
}

// ---- math and bit intrinsics ----
// __expf, __logf, __sinf, __cosf and __powf are glibc's own (exact) functions here; on a GPU they are
// fast approximations, so compare them with a tolerance.
inline float __fdividef(float x, float y) { return x / y; }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __saturatef(float x) { return x != x ? 0.0f : (x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x)); }
inline int __popc(unsigned x) { return std::popcount(x); }
inline int __popcll(unsigned long long x) { return std::popcount(x); }
inline int __clz(unsigned x) { return std::countl_zero(x); }
inline int __ffs(int x) { return x == 0 ? 0 : std::countr_zero(static_cast<unsigned>(x)) + 1; }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
inline int __float_as_int(float x) { return std::bit_cast<int>(x); }
inline unsigned __float_as_uint(float x) { return std::bit_cast<unsigned>(x); }
inline float __int_as_float(int x) { return std::bit_cast<float>(x); }
inline float __uint_as_float(unsigned x) { return std::bit_cast<float>(x); }
template <class T>
T __ldg(const T* p) {
  return *p;
}

// CUDA's device min/max overloads (mixed argument types that CUDA accepts may be ambiguous here).
#define MPT_CUDA_EMU_MINMAX(T)                       \
  inline T min(T a, T b) { return b < a ? b : a; } \
  inline T max(T a, T b) { return a < b ? b : a; }
MPT_CUDA_EMU_MINMAX(int)
MPT_CUDA_EMU_MINMAX(unsigned)
MPT_CUDA_EMU_MINMAX(long)
MPT_CUDA_EMU_MINMAX(unsigned long)
MPT_CUDA_EMU_MINMAX(long long)
MPT_CUDA_EMU_MINMAX(unsigned long long)
#undef MPT_CUDA_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }

}  // namespace mpt::cuda_emu

// The built-in variables, read-only like on a GPU.
#define threadIdx (::std::as_const(::mpt::cuda_emu::detail::t_builtins.thread_idx))
#define blockIdx (::std::as_const(::mpt::cuda_emu::detail::t_builtins.block_idx))
#define blockDim (::std::as_const(::mpt::cuda_emu::detail::t_builtins.block_dim))
#define gridDim (::std::as_const(::mpt::cuda_emu::detail::t_builtins.grid_dim))

using mpt::cuda_emu::__all_sync;
using mpt::cuda_emu::__any_sync;
using mpt::cuda_emu::__ballot_sync;
using mpt::cuda_emu::__brev;
using mpt::cuda_emu::__clz;
using mpt::cuda_emu::__fdividef;
using mpt::cuda_emu::__ffs;
using mpt::cuda_emu::__float_as_int;
using mpt::cuda_emu::__float_as_uint;
using mpt::cuda_emu::__fmaf_rn;
using mpt::cuda_emu::__int_as_float;
using mpt::cuda_emu::__ldg;
using mpt::cuda_emu::__popc;
using mpt::cuda_emu::__popcll;
using mpt::cuda_emu::__saturatef;
using mpt::cuda_emu::__shfl_down_sync;
using mpt::cuda_emu::__shfl_sync;
using mpt::cuda_emu::__shfl_up_sync;
using mpt::cuda_emu::__shfl_xor_sync;
using mpt::cuda_emu::__syncthreads;
using mpt::cuda_emu::__syncwarp;
using mpt::cuda_emu::__threadfence;
using mpt::cuda_emu::__threadfence_block;
using mpt::cuda_emu::__uint_as_float;
using mpt::cuda_emu::atomicAdd;
using mpt::cuda_emu::atomicCAS;
using mpt::cuda_emu::atomicExch;
using mpt::cuda_emu::atomicMax;
using mpt::cuda_emu::atomicMin;
using mpt::cuda_emu::atomicSub;
using mpt::cuda_emu::max;
using mpt::cuda_emu::min;
using mpt::cuda_emu::rsqrt;
using mpt::cuda_emu::rsqrtf;
using mpt::cuda_emu::warpSize;
