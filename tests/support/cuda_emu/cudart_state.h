// tests/support/cuda_emu/cudart_state.h: the cudart double's shared state: devices, streams, events, allocations and their happens-before clocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#include "cuda_emu/launch.h"

namespace mpt::cuda_emu::detail {

// A vector clock over streams: clock[s] = the last operation of stream s known to have completed.
using Clock = std::vector<uint64_t>;
void merge(Clock& into, const Clock& from);

struct OpId {
  uint32_t stream = 0;  // 0: none
  uint64_t seq = 0;
};

class PendingImpl;
struct StreamState;

// One recorded operation of a capture: replay re-issues it, with every check, on the graph's launch stream.
struct GraphOp {
  std::string what;
  std::function<cudaError_t(cudaStream_t)> replay;
};

// A capture sequence, shared by its origin stream and the streams that joined it through an event.
struct Capture {
  uint64_t id = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  std::thread::id thread;  // the host thread that began it (ThreadLocal mode)
  StreamState* origin = nullptr;
  bool active = true;
  cudaError_t invalidated = cudaSuccess;  // the error that invalidated it
  std::vector<GraphOp> ops;               // in issue order: a valid serial schedule of the graph
  std::vector<StreamState*> members;      // origin first
};

struct StreamState {
  uint32_t id = 0;
  int device = 0;
  bool blocking = true;  // synchronises with the legacy stream
  bool legacy = false;
  bool destroyed = false;
  uint64_t seq = 0;  // operations issued so far
  Clock clock;       // what this stream's next operation is ordered after
  std::vector<std::shared_ptr<PendingImpl>> waits;  // incomplete operations its next work must wait for
  std::shared_ptr<Capture> capture;  // while capturing: its work is recorded, not run
  uint64_t capture_ops = 0;          // operations recorded from this stream (event records excluded)
  bool capture_unjoined = false;     // a joined stream with work the origin has not waited for
  std::string name() const;
  Clock full() const;  // clock plus its own operations
};

struct EventState {
  int device = 0;
  unsigned flags = 0;
  bool recorded = false;
  bool destroyed = false;
  Clock snapshot;
  std::vector<std::shared_ptr<PendingImpl>> waits;
  double time_ms = 0;
  // Recorded on a capturing stream (an event node: the event itself is untouched until replay).
  std::weak_ptr<Capture> captured_in;
  StreamState* captured_on = nullptr;
  uint64_t captured_ops = 0;  // captured_on's capture_ops at the record
};

struct Allocation {
  uintptr_t base = 0;
  size_t bytes = 0;   // requested
  size_t mapped = 0;  // page-rounded mapping (device memory); the aligned_alloc'd extent (pinned host memory)
  int device = -1;    // -1: pinned host memory (cudaMallocHost)
  const char* how = "";
  uint64_t serial = 0;
  bool freed = false;
  std::atomic<bool> written{false};
  OpId born, last_write, freed_at;
  std::map<uint32_t, uint64_t> reads;  // since the last write: stream -> last reading operation
  void* pool = nullptr;
};

class PendingImpl final : public Pending {
 public:
  explicit PendingImpl(std::string api) : api_(std::move(api)) {}
  void complete() override;
  bool done() const override;
  const std::string& api() const override { return api_; }

 private:
  std::string api_;
  std::atomic<bool> done_{false};  // set under state().mutex; read by pollers without it
};

struct DeviceState {
  cudaDeviceProp prop{};
  int cc = 90;
  StreamState* legacy = nullptr;
  size_t capacity = 0, used = 0;
};

// An asynchronous copy that reads pinned host memory (R8.3): it may run any time before the host synchronises with
// it, so the host must not write the source until then (E8.4). The double runs it at once and keeps the bytes it
// read, to find a host write in between.
struct PinnedRead {
  const unsigned char* src = nullptr;
  std::vector<unsigned char> bytes;  // what the copy read
  OpId op;
  std::string api;
};

struct State {
  std::mutex mutex;
  std::vector<PinnedRead> pinned_reads;  // not yet known to the host as complete (sources up to kPinnedReadBytes)
  std::condition_variable changed;  // a pending operation completed
  std::vector<DeviceState> devices;
  std::vector<std::unique_ptr<StreamState>> streams;  // every stream ever made (handles stay recognisable)
  std::vector<std::unique_ptr<EventState>> events;
  std::map<uintptr_t, std::unique_ptr<Allocation>> allocations;  // by base address, freed ones included
  uint64_t next_serial = 1;
  cudaError_t sticky = cudaSuccess;
};
State& state();  // initialised on first use (device count, properties, legacy streams)

// Per host thread: the current device and what the host has synchronised with.
int& current_device();
Clock& host_clock();

// The stream behind a handle (nullptr / legacy / per-thread: the current device's legacy stream), or nullptr.
StreamState* resolve(State& s, cudaStream_t stream);
// Pinned sources the double watches for host writes (larger copies are not snapshotted).
inline constexpr size_t kPinnedReadBytes = size_t{1} << 20;
// The host learned that the work in `c` completed (a synchronisation, a successful query, a blocking copy). Checks
// the watched pinned sources first: one written while its copy was still pending throws MisuseError.
void host_learns(State& s, const Clock& c, const char* api);
// Throws MisuseError when the host wrote the source of a pinned copy it has not synchronised with.
void check_pinned_reads(State& s, const char* api);
// Issues one operation on st (applies host order and legacy-stream rules); returns its id.
OpId issue(State& s, StreamState& st);
// Waits (releasing the lock) until every pending operation in `waits` completed; throws MisuseError on timeout.
void wait_all(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<PendingImpl>>& waits, const char* who);
// Waits for every stream of the current device and orders their work before the host's next calls
// (cudaDeviceSynchronize; cudaMemset, which the double makes synchronous, without counting a synchronisation).
cudaError_t synchronize_device(const char* who);

// The allocation containing [p, p + bytes) (freed ones included), or nullptr.
Allocation* find_allocation(State& s, const void* p);
// Checks accesses of one operation on st and records them (throws MisuseError). cross_device allows peers.
// `written` is kept by the fault handler (device code's first write to an allocation), so reads of memory nothing
// wrote can be refused (check_reads_initialised).
void check_and_record(State& s, StreamState& st, OpId op, const char* api, std::span<const Access> accesses,
                      bool cross_device = false, bool check_reads_initialised = true);
std::string describe(const Allocation& a);

// Memory protection: device memory is inaccessible outside device work (memory.cpp).
class DeviceAccessScope {
 public:
  DeviceAccessScope();
  ~DeviceAccessScope();
  DeviceAccessScope(const DeviceAccessScope&) = delete;
  DeviceAccessScope& operator=(const DeviceAccessScope&) = delete;
};
void* map_device_memory(size_t bytes, size_t* mapped);
void track_device_memory(Allocation* a);  // lets the fault handler find it
void retire_device_memory(Allocation& a);  // poison, protect forever, keep in quarantine
void install_fault_handler();

// Stream capture (cudart_graph.cpp); all under State::mutex.
using Replay = std::function<cudaError_t(cudaStream_t)>;
// When st captures, records the operation and sets *status (the capture's error once invalidated); when st is the
// legacy stream and a blocking stream of its device captures, refuses it (implicit synchronisation with a capturing
// stream: cudaErrorStreamCaptureImplicit, invalidating that capture). Returns false when the caller runs it.
// counts_as_work = false for event records (they do not make a joined stream unjoined).
bool captured(State& s, StreamState& st, std::string what, Replay replay, cudaError_t* status,
              bool counts_as_work = true);
// Whether any capture is active (cheap, without the lock): lets hot paths skip building a replay.
bool capturing_anywhere();
// The same for callers without the lock (kernel launches, library work).
bool captured(cudaStream_t stream, std::string what, Replay replay, cudaError_t* status);
// A call that may not run while st captures (synchronisation, a query, stream-ordered allocation, NCCL): when st
// captures or is the legacy stream of a device with a capturing blocking stream, invalidates that capture and
// returns fail(code, or Implicit for the legacy stream) with `why` as capture_failure(); otherwise cudaSuccess.
cudaError_t refuse_in_capture(State& s, StreamState* st, cudaError_t code, const std::string& why);
// A potentially unsafe call (cudaMalloc, synchronous copies and memsets, cudaDeviceSynchronize on a device without a
// capturing stream): refused while a Global capture runs anywhere or a ThreadLocal one on this thread.
cudaError_t refuse_unsafe(State& s, const char* api);
// A synchronous call (cudaMemcpy, cudaMemset, cudaMemcpyPeer) issued to st: refuse_in_capture, then refuse_unsafe.
cudaError_t refuse_synchronous(State& s, StreamState* st, const char* api);

cudaError_t fail(cudaError_t e);  // records e as this thread's last error and returns it
cudaError_t sticky_or(State& s, cudaError_t e);

}  // namespace mpt::cuda_emu::detail
