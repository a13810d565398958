// tests/support/cuda_emu/include/cuda_emu/launch.h: runs an emulated kernel over a grid (fibers per thread, blocks on OS threads).
#pragma once

#include <cstddef>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu/types.h"

namespace mpt::cuda_emu {

// A kernel failed under emulation: an exception in device code, a divergent or deadlocked barrier, a
// warp intrinsic called against CUDA's rules. The message names the block and, when known, the thread.
class KernelError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The limits a launch is checked against (an H100's; other GPUs have less shared memory).
inline constexpr unsigned kMaxThreadsPerBlock = 1024;
inline constexpr unsigned kMaxBlockDimZ = 64;
inline constexpr unsigned kMaxGridDimX = 2147483647u;
inline constexpr unsigned kMaxGridDimYZ = 65535;
inline constexpr size_t kMaxSharedBytes = 227 * 1024;

// One call of body(ctx) per CUDA thread; body reads the built-ins of cuda_emu/device.h.
struct KernelBody {
  void (*fn)(void* ctx);
  void* ctx;
};

// Checks the configuration like a GPU launch would: an invalid one returns cudaErrorInvalidConfiguration
// (block or grid dimensions) or cudaErrorInvalidValue (shared memory) and runs nothing. Otherwise runs
// the grid to completion (synchronously) and returns cudaSuccess; a failing kernel throws KernelError.
cudaError_t run_kernel(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body);

// Number of OS threads that run blocks (at least 2, so block-level concurrency is always exercised).
unsigned worker_threads();

template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, Args&&... args) {
  static_assert(sizeof...(Params) == sizeof...(Args), "cuda_emu: wrong number of kernel arguments");
  static_assert((!std::is_reference_v<Params> && ...),
                "cuda_emu: kernel parameters are copied to the device; a reference parameter would alias host memory");
  // Like a GPU launch, the arguments are converted to the parameter types once and every thread gets
  // its own copy.
  struct Bound {
    void (*kernel)(Params...);
    std::tuple<Params...> args;
  } bound{kernel, std::tuple<Params...>(std::forward<Args>(args)...)};
  const auto thunk = [](void* ctx) {
    const Bound& b = *static_cast<const Bound*>(ctx);
    std::apply(b.kernel, b.args);
  };
  return run_kernel(grid, block, shared_bytes, KernelBody{thunk, &bound});
}

}  // namespace mpt::cuda_emu
