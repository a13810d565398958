// tests/support/cuda_emu/cudart_state.h: the cudart double's shared state: devices, streams, events, allocations and their happens-before clocks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
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

struct StreamState {
  uint32_t id = 0;
  int device = 0;
  bool blocking = true;  // synchronises with the legacy stream
  bool legacy = false;
  bool destroyed = false;
  uint64_t seq = 0;  // operations issued so far
  Clock clock;       // what this stream's next operation is ordered after
  std::vector<std::shared_ptr<PendingImpl>> waits;  // incomplete operations its next work must wait for
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

struct State {
  std::mutex mutex;
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

cudaError_t fail(cudaError_t e);  // records e as this thread's last error and returns it
cudaError_t sticky_or(State& s, cudaError_t e);

}  // namespace mpt::cuda_emu::detail
