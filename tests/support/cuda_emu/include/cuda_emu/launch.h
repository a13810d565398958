// tests/support/cuda_emu/include/cuda_emu/launch.h: runs an emulated kernel over a grid (fibers per thread, blocks on OS threads).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <span>
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
// clone copies ctx to the heap (the bound argument values) when a capturing stream records the launch for replay.
struct KernelBody {
  void (*fn)(void* ctx);
  void* ctx;
  std::shared_ptr<void> (*clone)(const void* ctx) = nullptr;
};

// Checks the configuration like a GPU launch would: an invalid one returns cudaErrorInvalidConfiguration
// (block or grid dimensions) or cudaErrorInvalidValue (shared memory) and runs nothing. Otherwise runs
// the grid to completion (synchronously) and returns cudaSuccess; a failing kernel throws KernelError.
cudaError_t run_kernel(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body);

// The global-memory bytes a launch reads and writes, as its launcher computes them from its sizes (LaunchConfig's
// bytes_read / bytes_written): counted per launch that runs (Counters::kernel_bytes_*), a proxy of the device time of
// a memory-bound kernel. {0, 0} means the launcher did not say (Counters::kernel_launches_unsized).
struct Traffic {
  uint64_t read = 0;
  uint64_t written = 0;
  // The launching site (static strings: a function's signature and its file), for the per-site tally
  // (counters.h kernel_sites); null when the launcher did not say.
  const char* function = nullptr;
  const char* file = nullptr;
};

// A pointer argument of a kernel: the emulated runtime checks it is device memory of the launch's device and
// records the access (a pointer to non-const counts as a write) for its cross-stream ordering checks.
struct KernelPointer {
  const void* ptr;
  bool write;
};

// A launch on `stream`. In emulation builds of the whole CUDA backend (tests/support/cuda_emu/cudart_*.cpp) this
// goes through the emulated runtime: sticky errors, stream order, pointer checks, device-memory access; in the
// kernel-only harness (test_emu) it is run_kernel and the stream is ignored. `signature` names the kernel's
// parameter types in error messages.
cudaError_t launch_on_stream(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                             std::span<const KernelPointer> pointers, const char* signature, KernelBody body,
                             Traffic traffic = {});

namespace detail {
// Marks the calling OS thread as running device code for its lifetime (kernel workers, emulated library work):
// the emulated runtime lets such threads touch device memory and reports any other thread that does.
class DeviceCodeMark {
 public:
  DeviceCodeMark();
  ~DeviceCodeMark();
  DeviceCodeMark(const DeviceCodeMark&) = delete;
  DeviceCodeMark& operator=(const DeviceCodeMark&) = delete;
};
bool in_device_code();
void set_last_error(cudaError_t e);  // what cudaGetLastError reports next on this thread
// run_kernel without running: the configuration check and the launch counters only (record-only mode).
cudaError_t check_launch(dim3 grid, dim3 block, size_t shared_bytes);
// Counters::kernel_bytes_read/written, or kernel_launches_unsized; the per-site tally with the grid's size.
void count_traffic(Traffic traffic, dim3 grid, dim3 block);
}  // namespace detail

// Number of OS threads that run blocks (at least 2, so block-level concurrency is always exercised).
unsigned worker_threads();

template <class... Params, class... Args>
cudaError_t launch_sized(Traffic traffic, void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes,
                         cudaStream_t stream, Args&&... args) {
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
  const auto clone = [](const void* ctx) -> std::shared_ptr<void> {
    return std::make_shared<Bound>(*static_cast<const Bound*>(ctx));
  };
  std::array<KernelPointer, (std::is_pointer_v<Params> + ... + 0)> pointers{};
  std::apply(
      [&pointers](const Params&... p) {
        size_t i = 0;
        (
            [&] {
              if constexpr (std::is_pointer_v<Params>) {
                pointers[i++] = KernelPointer{static_cast<const void*>(p),
                                              !std::is_const_v<std::remove_pointer_t<Params>>};
              }
            }(),
            ...);
      },
      bound.args);
  return launch_on_stream(grid, block, shared_bytes, stream, pointers, __PRETTY_FUNCTION__, KernelBody{thunk, &bound, clone},
                          traffic);
}

// A launch whose launcher does not say what it reads and writes (tests of the harness itself).
template <class... Params, class... Args>
cudaError_t launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   Args&&... args) {
  return launch_sized(Traffic{}, kernel, grid, block, shared_bytes, stream, std::forward<Args>(args)...);
}

}  // namespace mpt::cuda_emu
