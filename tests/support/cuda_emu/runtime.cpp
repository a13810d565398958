// tests/support/cuda_emu/runtime.cpp: launch validation, the OS worker threads that run blocks, and the emulated runtime's error API.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "block_runner.h"
#include "cuda_emu/cuda_emu.h"

namespace mpt::cuda_emu {
namespace {

// Kernels here are small device functions; 64 KiB leaves room for libstdc++ error paths.
constexpr size_t kStackBytes = 64 * 1024;

thread_local cudaError_t t_last_error = cudaSuccess;
// > 0 while this OS thread runs device code (a kernel's blocks, or an emulated library's work).
thread_local int t_device_depth = 0;

cudaError_t validate(dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t{block.x} * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || block.x > kMaxThreadsPerBlock || block.y > kMaxThreadsPerBlock ||
      block.z > kMaxBlockDimZ || threads > kMaxThreadsPerBlock) {
    return cudaErrorInvalidConfiguration;
  }
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > kMaxGridDimX || grid.y > kMaxGridDimYZ ||
      grid.z > kMaxGridDimYZ) {
    return cudaErrorInvalidConfiguration;
  }
  if (shared_bytes > kMaxSharedBytes) return cudaErrorInvalidValue;
  return cudaSuccess;
}

uint3 block_index(uint64_t linear, dim3 grid) {
  return {static_cast<unsigned>(linear % grid.x), static_cast<unsigned>((linear / grid.x) % grid.y),
          static_cast<unsigned>(linear / (uint64_t{grid.x} * grid.y))};
}

}  // namespace

unsigned worker_threads() { return std::clamp(std::thread::hardware_concurrency(), 2u, 16u); }

cudaError_t run_kernel(dim3 grid, dim3 block, size_t shared_bytes, KernelBody body) {
  if (detail::BlockRunner::current() != nullptr) {
    throw KernelError("[cuda_emu] a kernel launched a kernel: dynamic parallelism is not emulated");
  }
  if (const cudaError_t e = detail::check_launch(grid, block, shared_bytes); e != cudaSuccess) return e;
  const uint64_t blocks = uint64_t{grid.x} * grid.y * grid.z;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex mutex;
  uint64_t failed_block = std::numeric_limits<uint64_t>::max();
  std::string failure;
  const auto record = [&](uint64_t b, const std::string& what) {
    std::lock_guard lock(mutex);
    if (b < failed_block) {
      failed_block = b;
      failure = what;
    }
    failed = true;
  };
  // Each worker owns its stacks and block runner; it takes the next block until all ran or one failed.
  const auto work = [&] {
    const detail::DeviceCodeMark device_code;
    uint64_t b = 0;
    try {
      detail::StackPool stacks(kStackBytes);
      detail::BlockRunner runner(grid, block, shared_bytes, body, stacks);
      while (!failed.load() && (b = next.fetch_add(1)) < blocks) runner.run(block_index(b, grid));
    } catch (const std::exception& e) {
      record(b, e.what());
    } catch (...) {
      record(b, "[cuda_emu] unknown exception");
    }
  };
  const unsigned nworkers = static_cast<unsigned>(std::min<uint64_t>(blocks, worker_threads()));
  std::vector<std::thread> workers;
  workers.reserve(nworkers);
  for (unsigned w = 0; w < nworkers; ++w) workers.emplace_back(work);
  for (std::thread& w : workers) w.join();
  if (failed) throw KernelError(failure);
  return cudaSuccess;
}

#if !defined(MPT_EMU_DOUBLES)
// The kernel-only harness: no emulated runtime behind it, so no stream, memory or pointer checks.
cudaError_t launch_on_stream(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t, std::span<const KernelPointer>,
                             const char*, KernelBody body, Traffic traffic) {
  const cudaError_t e = run_kernel(grid, block, shared_bytes, body);
  if (e == cudaSuccess) detail::count_traffic(traffic, grid, block);
  return e;
}
#endif

// Names and descriptions as the CUDA 13 runtime gives them.
const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorCudartUnloading: return "cudaErrorCudartUnloading";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorStubLibrary: return "cudaErrorStubLibrary";
    case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureUnjoined: return "cudaErrorStreamCaptureUnjoined";
    case cudaErrorStreamCaptureImplicit: return "cudaErrorStreamCaptureImplicit";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorCudartUnloading: return "driver shutting down";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorStubLibrary: return "CUDA driver is a stub library";
    case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorStreamCaptureUnjoined: return "capture sequence contains a fork that was not joined to the primary stream";
    case cudaErrorStreamCaptureImplicit:
      return "operation would make the legacy stream depend on a capturing blocking stream";
    case cudaErrorStreamCaptureWrongThread: return "attempt to terminate a thread-local capture sequence from another thread";
  }
  return "unrecognized error code";
}

cudaError_t cudaGetLastError() { return std::exchange(t_last_error, cudaSuccess); }
cudaError_t cudaPeekAtLastError() { return t_last_error; }

namespace detail {
void set_last_error(cudaError_t e) { t_last_error = e; }

cudaError_t check_launch(dim3 grid, dim3 block, size_t shared_bytes) {
  if (const cudaError_t e = validate(grid, block, shared_bytes); e != cudaSuccess) {
    count(&Counters::kernel_launches_refused);
    t_last_error = e;
    return e;
  }
  count(&Counters::kernel_launches);
  return cudaSuccess;
}

void count_traffic(Traffic traffic, dim3 grid, dim3 block) {
  count_site(traffic.function, traffic.file, traffic.read, traffic.written,
             static_cast<uint64_t>(grid.x) * grid.y * grid.z, static_cast<uint64_t>(block.x) * block.y * block.z);
  if (traffic.read == 0 && traffic.written == 0) {
    count(&Counters::kernel_launches_unsized);
    return;
  }
  count(&Counters::kernel_bytes_read, traffic.read);
  count(&Counters::kernel_bytes_written, traffic.written);
}
DeviceCodeMark::DeviceCodeMark() { ++t_device_depth; }
DeviceCodeMark::~DeviceCodeMark() { --t_device_depth; }
bool in_device_code() { return t_device_depth > 0; }

namespace {
BlockRunner& runner_for(const char* what) {
  BlockRunner* runner = BlockRunner::current();
  if (runner == nullptr) throw KernelError(std::string("[cuda_emu] ") + what + " called outside an emulated kernel");
  return *runner;
}
}  // namespace

void sync_threads(const std::source_location& site) { runner_for("__syncthreads").sync_threads(site); }

uint64_t warp_op(WarpOp op, unsigned mask, uint64_t value, int arg, int width) {
  return runner_for("a warp intrinsic").warp_op(op, mask, value, arg, width);
}

void* dynamic_shared_memory() { return runner_for("MPT_DYNAMIC_SHARED").dynamic_shared(); }

void misaligned(const void* p, size_t alignment, const char* what) {
  std::ostringstream out;
  out << what << ": address " << p << " is not " << alignment << "-byte aligned (a misaligned address fault on a GPU)";
  throw KernelError(out.str());
}

}  // namespace detail
}  // namespace mpt::cuda_emu
