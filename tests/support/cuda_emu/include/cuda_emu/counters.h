// tests/support/cuda_emu/include/cuda_emu/counters.h: process-wide counts of what the emulated GPU was asked to do (launches, matmuls, copies, syncs, allocations).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mpt::cuda_emu {

// What a real GPU would pay for, counted over every emulated device and host thread since the process started or
// the last reset_counters(). Only operations that were carried out are counted: a call refused for a bad argument,
// a bad handle or a sticky error counts nothing (launches refused for their configuration have their own field).
struct Counters {
  // Kernels (mpt::cuda_emu::launch, and run_kernel in the kernel-only harness).
  uint64_t kernel_launches = 0;          // grids that ran (a kernel that throws KernelError counts: it started)
  uint64_t kernel_launches_refused = 0;  // cudaErrorInvalidConfiguration / InvalidValue for the launch shape
  // Global-memory bytes of the launches that ran, as their launchers declared them (LaunchConfig::bytes_read /
  // bytes_written); launches that declared nothing are kernel_launches_unsized.
  uint64_t kernel_bytes_read = 0, kernel_bytes_written = 0;
  uint64_t kernel_launches_unsized = 0;
  uint64_t matmuls = 0;                  // cublasLtMatmul calls that ran on their stream
  // Their multiply-adds x 2 (2 M N K per batch entry) and the bytes of A, B, C (when beta != 0) and D.
  uint64_t matmul_flops = 0, matmul_bytes = 0;
  uint64_t collectives = 0;              // NCCL collectives issued, one per rank's call
  // cudaGraphLaunch calls that ran. A replayed graph's operations count in their own fields when replayed (a kernel
  // node is a kernel launch, a memcpy node a copy, ...); nothing counts while a stream only records (capture).
  uint64_t graph_launches = 0;

  // Copies between host and device (cudaMemcpy*, peer copies count as device-to-device; host-to-host is not
  // counted, except that a synchronous one is a sync copy). pageable_copies is a subset of h2d + d2h.
  uint64_t h2d = 0, h2d_bytes = 0;
  uint64_t d2h = 0, d2h_bytes = 0;
  uint64_t d2d = 0, d2d_bytes = 0;
  uint64_t pageable_copies = 0;  // h2d/d2h whose host side is not from cudaMallocHost/cudaHostAlloc
  // Copies the host waited for: synchronous calls (cudaMemcpy in any direction, cudaMemcpyPeer) and asynchronous
  // copies into pageable host memory (R8.3: the call returns when the data is there).
  uint64_t sync_copies = 0;
  uint64_t memsets = 0;  // cudaMemset, cudaMemsetAsync

  // Host synchronisation. syncs = stream_syncs + device_syncs + event_syncs + sync_copies (a synchronous copy
  // stalls the host like a stream synchronisation). cudaFree and cudaMemset are not counted although the double
  // synchronises there (cudaFree's is counted by `frees`; a real cudaMemset of device memory does not synchronise).
  uint64_t stream_syncs = 0;  // cudaStreamSynchronize
  uint64_t device_syncs = 0;  // cudaDeviceSynchronize
  uint64_t event_syncs = 0;   // cudaEventSynchronize
  uint64_t syncs = 0;
  uint64_t event_records = 0;  // cudaEventRecord
  uint64_t stream_waits = 0;   // cudaStreamWaitEvent (a wait on a never-recorded event too: it was issued)

  // Driver allocations.
  uint64_t mallocs = 0;       // cudaMalloc (size 0 excluded: it allocates nothing)
  uint64_t frees = 0;         // cudaFree (of any device memory; nullptr excluded)
  uint64_t host_mallocs = 0;  // cudaMallocHost, cudaHostAlloc
  uint64_t host_frees = 0;    // cudaFreeHost
  // The stream-ordered allocator: cudaMallocAsync (the device's default pool) and cudaMallocFromPoolAsync.
  uint64_t pool_allocs = 0;
  uint64_t pool_frees = 0;  // cudaFreeAsync
  // Pool allocations that grew the pool's reserved memory (cudaMemPoolAttrReservedMemCurrent) because its free bytes
  // could not serve them: the pool's driver allocation. The double keeps nothing cached in a default pool (its release
  // threshold is 0, so a real one gives freed memory back at the next synchronisation): every cudaMallocAsync grows.
  uint64_t pool_grows = 0;
};

Counters counters();    // a snapshot (each field read atomically, not all at one instant)
void reset_counters();  // zero every field (call it while no other thread uses the emulated GPU)
// The nonzero fields in declaration order, "h2d=1 h2d_bytes=256 pageable_copies=1" ("" when all are zero): a test
// compares the whole record at once, so an unexpected extra operation shows in the failure message.
std::string to_string(const Counters& c);

// Launches, and the bytes their launchers declared, per launching site ("quantize.cu quantize_fp8_transpose": the
// file and function that made the launch's LaunchConfig), while set_kernel_sites(true): the per-kernel breakdown of a
// step. Off by default (a map update per launch); reset_counters() empties it. Sorted by bytes, largest first.
// A launch whose grid has fewer blocks than an H100's or H200's 132 SMs leaves SMs idle however fast its blocks run
// (a static proxy of a kernel that cannot reach the HBM's rate): such launches and their bytes are tallied apart, and
// the site's smallest grid kept, in blocks and in threads (an H100 holds 132 x 2048 resident threads; a launch of a
// few thousand threads keeps few loads in flight). Launches whose grid the runtime did not see, cuDNN's, count in none.
inline constexpr uint64_t kSmsOfAnH100 = 132;
struct KernelSite {
  std::string name;
  uint64_t launches = 0, bytes_read = 0, bytes_written = 0;
  uint64_t few_block_launches = 0, few_block_bytes = 0;  // launches with fewer than kSmsOfAnH100 blocks
  uint64_t few_block_max_bytes = 0;                       // the most bytes one of them moved
  uint64_t min_blocks = 0, min_threads = 0;               // the smallest grid; 0 when none was seen
};
void set_kernel_sites(bool on);
std::vector<KernelSite> kernel_sites();

namespace detail {
// Adds n to one field (relaxed atomic): count(&Counters::h2d).
void count(uint64_t Counters::*field, uint64_t n = 1);
// One launch of `function` in `file` (either may be null) of `blocks` blocks of `threads` threads (0: not known) into
// the per-site tally, when it is on.
void count_site(const char* function, const char* file, uint64_t read, uint64_t written, uint64_t blocks,
                uint64_t threads);
}  // namespace detail

}  // namespace mpt::cuda_emu
