// kernels/cuda/launch.cuh: the project's single kernel launcher, dynamic shared memory and 16-byte vector access; runs on a GPU or under tests/support/cuda_emu.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>

#if defined(MPT_CUDA_EMULATION)
#include <cuda_emu/cuda_emu.h>

#include <source_location>
#else
#include <cuda_runtime.h>
#endif

#include "kernels/math/common.h"

// MPT_DYNAMIC_SHARED(float, smem); declares `float* smem`, the block's dynamic shared memory
// (LaunchConfig::shared_bytes of it, 16-byte aligned). Use it instead of `extern __shared__`.
#if defined(MPT_CUDA_EMULATION)
#define MPT_DYNAMIC_SHARED(T, name) T* const name = static_cast<T*>(::mpt::cuda_emu::detail::dynamic_shared_memory())
#else
#define MPT_DYNAMIC_SHARED(T, name)                                     \
  extern __shared__ __align__(16) unsigned char mpt_dynamic_shared_[]; \
  T* const name = reinterpret_cast<T*>(mpt_dynamic_shared_)
#endif

namespace mpt::kernels::cuda {

struct LaunchConfig {
  dim3 grid;
  dim3 block;
  size_t shared_bytes = 0;  // dynamic shared memory per block
  cudaStream_t stream = nullptr;
  // Global-memory bytes the launch reads and writes, computed by the launcher from its sizes (each element counted
  // once per pass that touches it; shared memory and caches ignored). No GPU sees them: the emulation counts them
  // (cuda_emu Counters::kernel_bytes_read/written) as the device-work proxy of a step. Every launcher sets them.
  uint64_t bytes_read = 0;
  uint64_t bytes_written = 0;
#if defined(MPT_CUDA_EMULATION)
  // Where the config was made (its launcher): the emulation's per-site tally (cuda_emu::kernel_sites) names it.
  std::source_location where = std::source_location::current();
#endif
};

// A helper that makes the LaunchConfig for several launchers takes its caller's site as a last parameter, so that
// the emulation's per-site tally names the launcher rather than the helper:
//   LaunchConfig config_for(int64_t n, cudaStream_t s MPT_LAUNCH_SITE_PARAM) { LaunchConfig c{...};
//   MPT_LAUNCH_SITE_SET(c); return c; }
#if defined(MPT_CUDA_EMULATION)
#define MPT_LAUNCH_SITE_PARAM , std::source_location mpt_launch_site = std::source_location::current()
#define MPT_LAUNCH_SITE_SET(config) ((config).where = mpt_launch_site)
#else
#define MPT_LAUNCH_SITE_PARAM
#define MPT_LAUNCH_SITE_SET(config) ((void)0)
#endif

#if defined(__CUDACC__) || defined(MPT_CUDA_EMULATION)
// Every custom kernel is launched here, never with <<<>>> elsewhere, so the same source runs on a GPU
// and under the CPU emulation harness. Returns the launch error (an invalid configuration included);
// asynchronous on a GPU, synchronous under emulation, where a failing kernel throws
// mpt::cuda_emu::KernelError. More than 48 KiB of dynamic shared memory is opted into here.
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), const LaunchConfig& config, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "launch: wrong number of kernel arguments");
#if defined(MPT_CUDA_EMULATION)
  return ::mpt::cuda_emu::launch_sized(::mpt::cuda_emu::Traffic{config.bytes_read, config.bytes_written,
                                                                config.where.function_name(),
                                                                config.where.file_name()},
                                       kernel,
                                       config.grid, config.block, config.shared_bytes, config.stream,
                                       std::forward<Args>(args)...);
#else
  if (config.shared_bytes > 48 * 1024) {
    const cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                               static_cast<int>(config.shared_bytes));
    if (e != cudaSuccess) return e;
  }
  kernel<<<config.grid, config.block, config.shared_bytes, config.stream>>>(static_cast<Params>(std::forward<Args>(args))...);
  return cudaGetLastError();
#endif
}

// 16 bytes of T, loaded and stored as one vector access (LDG.128/STG.128 on a GPU).
template <class T>
struct alignas(16) Vec16 {
  static_assert(16 % sizeof(T) == 0, "Vec16: the element size must divide 16");
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

// p must be 16-byte aligned (checked under emulation; a GPU faults on a misaligned vector access).
template <class T>
MPT_DEVICE MPT_INLINE Vec16<T> load16(const T* p) {
#if defined(MPT_CUDA_EMULATION)
  ::mpt::cuda_emu::check_aligned(p, 16, "load16");
#endif
  return *reinterpret_cast<const Vec16<T>*>(p);
}

template <class T>
MPT_DEVICE MPT_INLINE void store16(T* p, const Vec16<T>& v) {
#if defined(MPT_CUDA_EMULATION)
  ::mpt::cuda_emu::check_aligned(p, 16, "store16");
#endif
  *reinterpret_cast<Vec16<T>*>(p) = v;
}
#endif  // __CUDACC__ || MPT_CUDA_EMULATION

// Host-side helper for launchers choosing a vector path.
inline bool is_aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace mpt::kernels::cuda
