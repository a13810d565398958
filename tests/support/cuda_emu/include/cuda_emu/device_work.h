// tests/support/cuda_emu/include/cuda_emu/device_work.h: how the emulated libraries (cuBLASLt, NCCL) run work on emulated streams and memory.
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>

#include "cuda_emu/runtime_api.h"

namespace mpt::cuda_emu {

// Misuse a real GPU would punish with a fault, a hang or undefined behaviour (a host pointer given to device code, a
// use after free, an access out of bounds, two streams touching memory without an event between them, ...). The
// message says what was misused, where the memory came from and what the program must do instead.
class MisuseError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

// One buffer an operation touches. bytes == 0 checks only that ptr lies in a live allocation; ptr == nullptr is skipped.
struct Access {
  const void* ptr = nullptr;
  size_t bytes = 0;
  bool write = false;
  const char* what = "";  // the argument's name in messages ("A", "recvbuff", ...)
};

// Runs one device operation named `api` on `stream` (nullptr or cudaStreamLegacy: the current device's legacy
// stream) in the calling thread:
//  - returns the sticky error if one is set (cudaErrorIllegalAddress after inject_sticky_error), or
//    cudaErrorInvalidResourceHandle for a stream that does not exist;
//  - first waits for every pending operation (enqueue_pending) the stream depends on;
//  - checks every access (throws MisuseError): a live allocation of the stream's device (host memory, freed memory,
//    another device's memory and out-of-bounds ranges are refused), ordered after the other streams' conflicting
//    accesses (a write after any access, a read after a write) by the stream order, events or host synchronisation;
//    reads of an allocation nothing ever wrote are refused too;
//  - runs work() with device memory accessible to this thread, then records the accesses. work()'s exceptions
//    propagate. Returns cudaSuccess.
cudaError_t run_on_stream(cudaStream_t stream, const char* api, std::span<const Access> accesses,
                          const std::function<void()>& work);

// An operation that completes later, e.g. an NCCL collective whose peers have not all arrived. Work issued on its
// stream afterwards, host synchronisation with the stream, events recorded after it and streams waiting on those
// events wait until complete() is called (queries return cudaErrorNotReady meanwhile). A wait longer than
// wait_timeout() throws MisuseError naming the operation ("never completed: a real GPU would hang here").
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void complete() = 0;  // call after the operation's results are in place (idempotent)
  virtual bool done() const = 0;
  virtual const std::string& api() const = 0;
};

// Checks and records `accesses` as run_on_stream does (at enqueue time) and returns the handle. *status gets the
// CUDA error (sticky error, bad stream); on error the result is nullptr.
std::shared_ptr<Pending> enqueue_pending(cudaStream_t stream, const char* api, std::span<const Access> accesses,
                                         cudaError_t* status);

// Runs fn with device memory accessible to this thread, without checks or recording: for completing a pending
// operation (the last NCCL rank to arrive computes the result for every rank).
void with_device_access(const std::function<void()>& fn);

// The device of a stream (the current device for nullptr / legacy / per-thread), or -1 for an unknown handle.
int stream_device(cudaStream_t stream);
// The device of a live device allocation containing p, or -1.
int pointer_device(const void* p);

// Record-only mode: what a GPU would run is issued, checked, ordered and counted as usual (launch configurations,
// pointer arguments, stream order, captures and replays, Counters with their bytes and FLOPs), but not carried out:
// kernel bodies, cuBLASLt's arithmetic, device-to-device copies above kRecordOnlyCopyBytes and memsets are skipped,
// and new device memory is not poisoned (reading it gives zeros; host<->device copies still move their bytes). Small
// device copies still run, so that bookkeeping the host reads back (e.g. DataParallel's flags of which parameters had
// gradients) keeps its values and the host takes the path it takes on a GPU. For measuring the host's cost of a
// step at full size (benchmarks/bench_step_cost): the results are meaningless. Off by default;
// MPT_EMU_DEVICE_WORK=record-only switches it on at start-up.
void set_record_only(bool on);
bool record_only();
inline constexpr size_t kRecordOnlyCopyBytes = 64 << 10;

// How long waits on pending operations may take (default 60 s, MPT_EMU_WAIT_TIMEOUT_MS overrides).
std::chrono::milliseconds wait_timeout();
void set_wait_timeout(std::chrono::milliseconds timeout);

// The emulated devices: MPT_EMU_DEVICES (default 4) H100-like devices, compute capability 9.0 unless a test changes
// it (the libraries' architecture rules, e.g. FP8 block scaling on 9.0 only, read it). The count is fixed at the
// first CUDA call.
int device_count();
int compute_capability(int device);  // 90 for sm_90
void set_compute_capability(int device, int cc);

// Why the calling thread's last refused call during a stream capture was refused, beyond its error code ("" when
// none was): e.g. cudaMallocAsync on a capturing stream (graph memory nodes are not emulated: cudaErrorNotSupported).
std::string capture_failure();

// Test controls.
void inject_sticky_error(cudaError_t error);  // every later call returns it, like a real device after a fault
void clear_sticky_error();                    // tests only: no real device recovers without a process restart

}  // namespace mpt::cuda_emu
