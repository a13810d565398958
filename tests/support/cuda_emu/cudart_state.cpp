// tests/support/cuda_emu/cudart_state.cpp: the cudart double's core: devices, happens-before clocks, access checks, pending work, run_on_stream.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

#include "cudart_state.h"

namespace mpt::cuda_emu {
namespace detail {
namespace {

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "[cuda_emu] %s must be an integer in [%d, %d], got '%s'\n", name, lo, hi, v);
    std::abort();  // a broken test environment, before any test runs
  }
  return static_cast<int>(x);
}

std::chrono::milliseconds g_timeout{env_int("MPT_EMU_WAIT_TIMEOUT_MS", 60000, 1, 3600000)};

std::atomic<bool> g_record_only{[] {
  const char* v = std::getenv("MPT_EMU_DEVICE_WORK");
  return v != nullptr && std::strcmp(v, "record-only") == 0;
}()};

StreamState* make_stream(State& s, int device, bool blocking, bool legacy) {
  auto st = std::make_unique<StreamState>();
  st->id = static_cast<uint32_t>(s.streams.size() + 1);
  st->device = device;
  st->blocking = blocking;
  st->legacy = legacy;
  s.streams.push_back(std::move(st));
  return s.streams.back().get();
}

void init(State& s) {
  const int n = env_int("MPT_EMU_DEVICES", 4, 0, 16);
  const int mb = env_int("MPT_EMU_DEVICE_MEMORY_MB", 8192, 1, 1 << 20);
  s.devices.resize(static_cast<size_t>(n));
  for (int d = 0; d < n; ++d) {
    DeviceState& dev = s.devices[static_cast<size_t>(d)];
    cudaDeviceProp& p = dev.prop;
    std::snprintf(p.name, sizeof p.name, "cuda_emu H100 (emulated on the CPU)");
    dev.capacity = static_cast<size_t>(mb) << 20;
    p.totalGlobalMem = dev.capacity;
    p.sharedMemPerBlock = 48 * 1024;
    p.sharedMemPerBlockOptin = 227 * 1024;
    p.sharedMemPerMultiprocessor = 228 * 1024;
    p.regsPerBlock = 65536;
    p.warpSize = 32;
    p.maxThreadsPerBlock = 1024;
    p.maxThreadsDim[0] = 1024, p.maxThreadsDim[1] = 1024, p.maxThreadsDim[2] = 64;
    p.maxGridSize[0] = 2147483647, p.maxGridSize[1] = 65535, p.maxGridSize[2] = 65535;
    p.major = 9, p.minor = 0;
    p.multiProcessorCount = 132;
    p.maxThreadsPerMultiProcessor = 2048;
    p.l2CacheSize = 50 * 1024 * 1024;
    p.memoryBusWidth = 5120;
    p.unifiedAddressing = 1;
    p.pciBusID = 0x10 + d;
    dev.legacy = make_stream(s, d, true, true);
  }
  install_fault_handler();
}

bool ordered(const StreamState& st, OpId o) {
  return o.stream == 0 || o.stream == st.id || (o.stream < st.clock.size() && st.clock[o.stream] >= o.seq);
}

std::string op_name(const State& s, OpId o) {
  if (o.stream == 0) return "(none)";
  return s.streams[o.stream - 1]->name() + " operation #" + std::to_string(o.seq);
}

[[noreturn]] void race(const State& s, const StreamState& st, const char* api, const Access& a, const Allocation& al,
                       const char* kind, OpId other) {
  std::ostringstream m;
  m << "[cuda_emu] " << api << " on " << st.name() << ": '" << a.what << "' (" << a.ptr << ") " << kind << " "
    << describe(al) << " by " << op_name(s, other)
    << ", with no event, stream order or host synchronisation between them (a data race on a GPU: record an event "
       "after the earlier work and cudaStreamWaitEvent on this stream)";
  throw MisuseError(m.str());
}

}  // namespace

void merge(Clock& into, const Clock& from) {
  if (into.size() < from.size()) into.resize(from.size(), 0);
  for (size_t i = 0; i < from.size(); ++i) into[i] = std::max(into[i], from[i]);
}

std::string StreamState::name() const {
  if (legacy) return "the legacy default stream of cuda:" + std::to_string(device);
  return "stream #" + std::to_string(id) + " of cuda:" + std::to_string(device);
}

Clock StreamState::full() const {
  Clock c = clock;
  if (c.size() <= id) c.resize(id + 1, 0);
  c[id] = std::max(c[id], seq);
  return c;
}

State& state() {
  static State* s = [] {
    auto* st = new State();  // never destroyed: memory is freed by destructors running at exit
    init(*st);
    return st;
  }();
  return *s;
}

int& current_device() {
  thread_local int d = 0;
  return d;
}

Clock& host_clock() {
  thread_local Clock c;
  return c;
}

StreamState* resolve(State& s, cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread) {
    const int d = current_device();
    if (d < 0 || d >= static_cast<int>(s.devices.size())) return nullptr;
    return s.devices[static_cast<size_t>(d)].legacy;
  }
  for (const auto& st : s.streams)
    if (reinterpret_cast<cudaStream_t>(st.get()) == stream) return st->destroyed ? nullptr : st.get();
  return nullptr;
}

namespace {

std::string address(const void* p) {
  std::ostringstream o;
  o << p;
  return o.str();
}

bool host_knows_done(const OpId& op) {
  const Clock& h = host_clock();
  return op.stream < h.size() && h[op.stream] >= op.seq;
}

}  // namespace

void check_pinned_reads(State& s, const char* api) {
  for (const PinnedRead& r : s.pinned_reads) {
    if (host_knows_done(r.op) || std::memcmp(r.src, r.bytes.data(), r.bytes.size()) == 0) continue;
    throw MisuseError("[cuda_emu] " + std::string(api) + ": the host wrote pinned memory at " +
                      address(r.src) + " (" + std::to_string(r.bytes.size()) + " bytes) that an earlier " + r.api +
                      " reads, before synchronising with that copy: on a GPU the copy may not have run yet and may "
                      "read the new bytes (R8.3/E8.4: keep a pinned source untouched until its copy is known done, "
                      "e.g. one buffer per copy in flight, reused after an event says it completed)");
  }
}

void host_learns(State& s, const Clock& c, const char* api) {
  check_pinned_reads(s, api);
  merge(host_clock(), c);
  std::erase_if(s.pinned_reads, [](const PinnedRead& r) { return host_knows_done(r.op); });
}

OpId issue(State& s, StreamState& st) {
  check_pinned_reads(s, "an operation");
  merge(st.clock, host_clock());
  DeviceState& dev = s.devices[static_cast<size_t>(st.device)];
  if (st.legacy) {
    for (const auto& other : s.streams)
      if (!other->destroyed && other->device == st.device && other->blocking && !other->legacy)
        merge(st.clock, other->full());
  } else if (st.blocking) {
    merge(st.clock, dev.legacy->full());
  }
  ++st.seq;
  return OpId{st.id, st.seq};
}

void wait_all(std::unique_lock<std::mutex>& lock, std::vector<std::shared_ptr<PendingImpl>>& waits, const char* who) {
  State& s = state();
  for (const auto& p : waits) {
    if (!s.changed.wait_for(lock, g_timeout, [&] { return p->done(); })) {
      throw MisuseError(std::string("[cuda_emu] ") + who + " waited " + std::to_string(g_timeout.count()) +
                        " ms for " + p->api() +
                        ", which never completed: a peer never issued the matching call (a real GPU would hang here)");
    }
  }
  waits.clear();
}

Allocation* find_allocation(State& s, const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = s.allocations.upper_bound(addr);
  if (it == s.allocations.begin()) return nullptr;
  --it;
  Allocation& a = *it->second;
  return addr < a.base + std::max<size_t>(a.mapped, 1) ? &a : nullptr;
}

std::string describe(const Allocation& a) {
  std::ostringstream m;
  m << "the " << a.bytes << "-byte allocation #" << a.serial << " at " << reinterpret_cast<void*>(a.base) << " ("
    << a.how << (a.device >= 0 ? " on cuda:" + std::to_string(a.device) : std::string(", pinned host memory")) << ")";
  return m.str();
}

void check_and_record(State& s, StreamState& st, OpId op, const char* api, std::span<const Access> accesses,
                      bool cross_device, bool check_reads_initialised) {
  std::vector<Allocation*> found(accesses.size(), nullptr);
  for (size_t i = 0; i < accesses.size(); ++i) {
    const Access& a = accesses[i];
    if (a.ptr == nullptr) continue;
    Allocation* al = find_allocation(s, a.ptr);
    std::ostringstream m;
    m << "[cuda_emu] " << api << " on " << st.name() << ": '" << a.what << "' (" << a.ptr << ") ";
    if (al == nullptr) {
      m << "is not device memory (a host pointer, or never allocated): device code would fault on it; copy the data "
           "to a cudaMalloc'd buffer first";
      throw MisuseError(m.str());
    }
    if (al->freed) {
      m << "points into " << describe(*al) << ", which was already freed by " << op_name(s, al->freed_at)
        << " (use after free)";
      throw MisuseError(m.str());
    }
    const uintptr_t p = reinterpret_cast<uintptr_t>(a.ptr);
    if (p + a.bytes > al->base + al->bytes || p >= al->base + std::max<size_t>(al->bytes, 1)) {
      m << "with " << a.bytes << " bytes runs past the end of " << describe(*al) << " (offset " << (p - al->base)
        << ")";
      throw MisuseError(m.str());
    }
    if (al->device >= 0 && al->device != st.device && !cross_device) {
      m << "is memory of cuda:" << al->device << " used on cuda:" << st.device
        << " (peer access is not enabled by mptrain)";
      throw MisuseError(m.str());
    }
    if (!ordered(st, al->born)) race(s, st, api, a, *al, "uses", al->born);
    if (!ordered(st, al->last_write)) race(s, st, api, a, *al, a.write ? "overwrites" : "reads", al->last_write);
    if (a.write) {
      for (const auto& [sid, seq] : al->reads)
        if (!ordered(st, OpId{sid, seq})) race(s, st, api, a, *al, "overwrites what was read from", OpId{sid, seq});
    } else if (check_reads_initialised && !al->written && al->device >= 0 && !record_only()) {
      m << "reads " << describe(*al) << ", which nothing has written yet (uninitialised device memory; it holds "
           "0xFF poison bytes here)";
      throw MisuseError(m.str());
    }
    found[i] = al;
  }
  for (size_t i = 0; i < accesses.size(); ++i) {
    Allocation* al = found[i];
    if (al == nullptr) continue;
    if (accesses[i].write) {
      al->last_write = op;  // `written` is set by the fault handler when device code really writes
      al->reads.clear();
    } else {
      uint64_t& r = al->reads[op.stream];
      r = std::max(r, op.seq);
    }
  }
}

cudaError_t fail(cudaError_t e) {
  if (e != cudaSuccess) set_last_error(e);
  return e;
}

cudaError_t sticky_or(State& s, cudaError_t e) { return fail(s.sticky != cudaSuccess ? s.sticky : e); }

void PendingImpl::complete() {
  State& s = state();
  {
    std::lock_guard lock(s.mutex);
    done_ = true;
  }
  s.changed.notify_all();
}

bool PendingImpl::done() const { return done_; }

}  // namespace detail

using namespace detail;

namespace {
cudaError_t run_checked(cudaStream_t stream, const char* api, std::span<const Access> accesses,
                        const std::function<void()>& work, bool check_reads_initialised) {
  State& s = state();
  {
    std::unique_lock lock(s.mutex);
    if (s.sticky != cudaSuccess) return fail(s.sticky);
    StreamState* st = resolve(s, stream);
    if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
    wait_all(lock, st->waits, api);
    const OpId op = issue(s, *st);
    check_and_record(s, *st, op, api, accesses, false, check_reads_initialised);
  }
  const DeviceAccessScope access;
  const DeviceCodeMark device_code;
  work();
  return cudaSuccess;
}
}  // namespace

cudaError_t run_on_stream(cudaStream_t stream, const char* api, std::span<const Access> accesses,
                          const std::function<void()>& work) {
  cudaError_t status = cudaSuccess;
  if (capturing_anywhere()) {
    const Replay replay = [name = std::string(api), acc = std::vector<Access>(accesses.begin(), accesses.end()),
                           work](cudaStream_t t) { return run_on_stream(t, name.c_str(), acc, work); };
    if (captured(stream, api, replay, &status)) return status;
  }
  return run_checked(stream, api, accesses, work, true);
}

std::shared_ptr<Pending> enqueue_pending(cudaStream_t stream, const char* api, std::span<const Access> accesses,
                                         cudaError_t* status) {
  State& s = state();
  std::unique_lock lock(s.mutex);
  *status = s.sticky;
  if (s.sticky != cudaSuccess) return nullptr;
  StreamState* st = resolve(s, stream);
  if (st == nullptr) {
    *status = cudaErrorInvalidResourceHandle;
    return nullptr;
  }
  *status = refuse_in_capture(s, st, cudaErrorStreamCaptureUnsupported,
                              std::string(api) + " on a capturing stream: capturing NCCL work is not emulated");
  if (*status != cudaSuccess) return nullptr;
  const OpId op = issue(s, *st);
  check_and_record(s, *st, op, api, accesses);
  auto p = std::make_shared<PendingImpl>(api);
  st->waits.push_back(p);
  return p;
}

void with_device_access(const std::function<void()>& fn) {
  const DeviceAccessScope access;
  const DeviceCodeMark device_code;
  fn();
}

int stream_device(cudaStream_t stream) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const StreamState* st = resolve(s, stream);
  return st == nullptr ? -1 : st->device;
}

int pointer_device(const void* p) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  const Allocation* a = find_allocation(s, p);
  return a == nullptr || a->freed ? -1 : a->device;
}

void set_record_only(bool on) { g_record_only.store(on); }
bool record_only() { return g_record_only.load(std::memory_order_relaxed); }

std::chrono::milliseconds wait_timeout() { return g_timeout; }
void set_wait_timeout(std::chrono::milliseconds timeout) { g_timeout = timeout; }

int device_count() { return static_cast<int>(state().devices.size()); }

int compute_capability(int device) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  return device >= 0 && device < static_cast<int>(s.devices.size()) ? s.devices[static_cast<size_t>(device)].cc : -1;
}

void set_compute_capability(int device, int cc) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  DeviceState& d = s.devices.at(static_cast<size_t>(device));
  d.cc = cc;
  d.prop.major = cc / 10;
  d.prop.minor = cc % 10;
}

void inject_sticky_error(cudaError_t error) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  s.sticky = error;
}

void clear_sticky_error() { inject_sticky_error(cudaSuccess); }

cudaError_t launch_on_stream(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                             std::span<const KernelPointer> pointers, const char* signature, KernelBody body,
                             Traffic traffic) {
  static const char* const kNames[] = {"pointer argument 1", "pointer argument 2", "pointer argument 3",
                                      "pointer argument 4", "pointer argument 5", "pointer argument 6",
                                      "pointer argument 7", "pointer argument 8"};
  std::vector<Access> accesses;
  accesses.reserve(pointers.size());
  for (size_t i = 0; i < pointers.size(); ++i)
    accesses.push_back(Access{pointers[i].ptr, 0, pointers[i].write, i < 8 ? kNames[i] : "a pointer argument"});
  cudaError_t status = cudaSuccess;
  if (body.clone != nullptr && capturing_anywhere()) {
    // The node keeps a copy of the converted argument values; a replay launches it again with every check.
    const Replay replay = [grid, block, shared_bytes, ptrs = std::vector<KernelPointer>(pointers.begin(), pointers.end()),
                           signature, fn = body.fn, clone = body.clone, args = body.clone(body.ctx),
                           traffic](cudaStream_t t) {
      return launch_on_stream(grid, block, shared_bytes, t, ptrs, signature, KernelBody{fn, args.get(), clone},
                              traffic);
    };
    if (captured(stream, std::string("the kernel ") + signature, replay, &status)) return status;
  }
  const std::string api = std::string("the kernel ") + signature;
  cudaError_t launch_status = cudaSuccess;
  // A kernel's pointer may be optional or read only in part: what device code really reads unwritten is caught
  // precisely by the fault handler (cudart_memory.cpp), not here.
  const cudaError_t e = run_checked(
      stream, api.c_str(), accesses,
      [&] {
        launch_status = record_only() ? check_launch(grid, block, shared_bytes) : run_kernel(grid, block, shared_bytes, body);
      },
      false);
  if (e == cudaSuccess && launch_status == cudaSuccess) count_traffic(traffic, grid, block);
  return e != cudaSuccess ? e : launch_status;
}

}  // namespace mpt::cuda_emu
