// mpt/core/kernel_trace.h: the device's own time per kernel, copy and memset over a region (CUPTI's activity records, as Nsight Systems' kernel summary shows them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mpt::profile {

// One kernel (by name), or all copies or memsets of one direction, summed over the traced region.
struct KernelTime {
  std::string name;      // the kernel's demangled name, shortened (short_kernel_name); "memcpy DtoD", "memset"
  std::string kind;      // "kernel", "memcpy" or "memset"
  uint64_t calls = 0;
  double total_ms = 0;   // the device's execution time, start to end of each, summed
  double max_ms = 0;     // the longest one
  uint64_t bytes = 0;    // copies and memsets: bytes moved
};

// Empty when kernel tracing works in this process (a CUDA build, not the emulation, built with CUPTI's headers, and
// libcupti loadable: libcupti.so.13 on the library path); else why not.
std::string kernel_trace_unavailable_reason();

// Records every kernel, copy and memset the device runs from construction to stop(), whatever launched it (mptrain's
// kernels, cuBLASLt, cuDNN, NCCL), with the device's own start and end times: no synchronisation between launches,
// so the region runs as it would untraced (CUPTI adds host time per launch, not device time). One trace at a time
// per process. Throws mpt::Error with kernel_trace_unavailable_reason() when tracing is unavailable.
class KernelTrace {
 public:
  KernelTrace();
  ~KernelTrace();
  KernelTrace(const KernelTrace&) = delete;
  KernelTrace& operator=(const KernelTrace&) = delete;

  // Waits for the device, ends the trace and returns the totals, the largest first. Called once.
  std::vector<KernelTime> stop();

 private:
  bool active_ = false;
};

namespace detail {
// "void mpt::kernels::cuda::(anonymous namespace)::k<float, 8>(Params<float>)" -> "k<float, 8>": the return type,
// namespaces and parameter list dropped; other names (a library's kernels) unchanged. At most `max_chars`
// characters (the tail replaced by "...").
std::string short_kernel_name(const std::string& demangled, size_t max_chars = 96);
}  // namespace detail

}  // namespace mpt::profile
