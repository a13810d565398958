// tests/support/cuda_emu/nccl_engine.cpp: the NCCL double's engine: enqueues calls as pending stream work, matches them across ranks, and runs each collective once when its last rank arrives.
#include <algorithm>
#include <cstring>
#include <iostream>
#include <sstream>

#include "cuda_emu/counters.h"
#include "nccl_internal.h"

namespace mpt::cuda_emu::nccl {
namespace {

// The last batch issued on each stream (by device and handle): a later batch on that stream runs after it.
std::map<std::pair<int, CUstream_st*>, std::shared_ptr<Batch>>& stream_tails() {
  static std::map<std::pair<int, CUstream_st*>, std::shared_ptr<Batch>> tails;
  return tails;
}

// Slots whose ranks have all arrived but wait for earlier batches on their streams.
std::vector<std::pair<std::shared_ptr<Clique>, uint64_t>>& full_slots() {
  static std::vector<std::pair<std::shared_ptr<Clique>, uint64_t>> slots;
  return slots;
}

class DeviceScope {  // NCCL sets the communicator's device around its CUDA calls
 public:
  explicit DeviceScope(int device) {
    cudaGetDevice(&previous_);
    cudaSetDevice(device);
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

size_t send_bytes(const Call& c) {
  const size_t bytes = c.count * dtype_size(c.dtype);
  if (c.coll == Coll::ReduceScatter) return bytes * c.comm->nranks;
  if (c.coll == Coll::Broadcast && c.comm->rank != c.root) return 0;
  return bytes;
}

void add_accesses(const Call& c, std::vector<Access>& out) {
  if (const size_t bytes = send_bytes(c); bytes > 0) out.push_back(Access{c.send, bytes, false, "sendbuff"});
  if (const size_t bytes = recv_bytes(c); bytes > 0) out.push_back(Access{c.recv, bytes, true, "recvbuff"});
  if (c.op == OpKind::PreMulSum && c.premul.residence == ncclScalarDevice) {
    out.push_back(Access{c.premul.device_scalar, dtype_size(c.dtype), false, "scalar"});
  }
}

void poison(const Call& c) {
  if (const size_t bytes = recv_bytes(c); bytes > 0) {
    with_device_access([&] { std::memset(c.recv, 0xFF, bytes); });
  }
}

// Under state_mutex().
void mark_done(const std::shared_ptr<Call>& call) {
  if (call->done) return;
  call->done = true;
  auto& outstanding = call->comm->outstanding;
  outstanding.erase(std::remove(outstanding.begin(), outstanding.end(), call), outstanding.end());
  Batch& batch = *call->batch;
  if (--batch.remaining == 0) {
    batch.done = true;
    batch.prereqs.clear();
    for (const auto& pending : batch.pendings) pending->complete();
  }
  state_cv().notify_all();
}

std::string describe(const Call& c) {
  std::ostringstream s;
  s << coll_name(c.coll) << "(count=" << c.count << ", " << dtype_name(c.dtype);
  if (c.coll == Coll::AllReduce || c.coll == Coll::Reduce || c.coll == Coll::ReduceScatter) s << ", " << op_name(c.op);
  if (c.coll == Coll::Broadcast || c.coll == Coll::Reduce) s << ", root=" << c.root;
  s << ")";
  return s.str();
}

bool matches(const Call& a, const Call& b) {
  if (a.coll != b.coll || a.count != b.count || a.dtype != b.dtype) return false;
  if ((a.coll == Coll::AllReduce || a.coll == Coll::Reduce || a.coll == Coll::ReduceScatter) && a.op != b.op) {
    return false;
  }
  return !((a.coll == Coll::Broadcast || a.coll == Coll::Reduce) && a.root != b.root);
}

// Every rank gets ncclInvalidUsage asynchronously, with the same message, and poisoned results (see README).
void report_mismatch(Slot& slot, uint64_t seq) {
  std::ostringstream s;
  s << "collective mismatch at call #" << seq << " of a " << slot.calls.size() << "-rank communicator:";
  for (size_t r = 0; r < slot.calls.size(); ++r) s << " rank " << r << " called " << describe(*slot.calls[r]) << ";";
  s << " every rank must issue the same collectives in the same order with the same count, datatype, operation "
       "and root (a real NCCL hangs or corrupts memory)";
  std::cerr << "NCCL WARN [cuda_emu] " << s.str() << "\n";
  for (const auto& call : slot.calls) {
    poison(*call);
    set_async_error(call->comm, ncclInvalidUsage, s.str());
    mark_done(call);
  }
}

void run_collective(const std::vector<std::shared_ptr<Call>>& calls) {
  const Call& first = *calls.front();
  const size_t n = calls.size();
  const size_t size = dtype_size(first.dtype);
  const size_t block = first.count * size;
  std::vector<PreMulOp> premul(n);
  for (size_t r = 0; r < n; ++r) {
    premul[r] = calls[r]->premul;
    if (calls[r]->op == OpKind::PreMulSum && premul[r].residence == ncclScalarDevice) {
      std::memcpy(premul[r].value.data(), premul[r].device_scalar, size);  // read when the collective runs
    }
  }
  std::vector<const std::byte*> inputs(n);
  for (size_t r = 0; r < n; ++r) inputs[r] = static_cast<const std::byte*>(calls[r]->send);
  std::vector<std::byte> result;
  switch (first.coll) {
    case Coll::AllReduce:
    case Coll::Reduce:
      result.resize(block);
      reduce_elements(first.dtype, first.op, inputs, premul, first.count, result.data(), controls());
      for (size_t r = 0; r < n; ++r) {
        if (first.coll == Coll::AllReduce || static_cast<int>(r) == first.root) {
          std::memcpy(calls[r]->recv, result.data(), block);
        }
      }
      break;
    case Coll::Broadcast:
      result.assign(inputs[first.root], inputs[first.root] + block);
      for (const auto& c : calls) std::memcpy(c->recv, result.data(), block);
      break;
    case Coll::ReduceScatter: {
      result.resize(block * n);
      reduce_elements(first.dtype, first.op, inputs, premul, first.count * n, result.data(), controls());
      for (size_t r = 0; r < n; ++r) {
        auto* send = static_cast<std::byte*>(const_cast<void*>(calls[r]->send));
        const bool in_place = send + r * block == calls[r]->recv;
        if (in_place && controls().in_place_rest == NcclInPlaceRest::Poison) std::memset(send, 0xFF, block * n);
        std::memcpy(calls[r]->recv, result.data() + r * block, block);
      }
      break;
    }
    case Coll::AllGather:
      result.resize(block * n);
      for (size_t r = 0; r < n; ++r) std::memcpy(result.data() + r * block, inputs[r], block);
      for (const auto& c : calls) std::memcpy(c->recv, result.data(), block * n);
      break;
  }
}

bool ready(const Slot& slot) {
  for (const auto& call : slot.calls) {
    for (const auto& prereq : call->batch->prereqs) {
      if (!prereq->done) return false;
    }
  }
  return true;
}

// Under state_mutex(): runs every full slot whose streams have reached it, until none is left.
void progress() {
  bool again = true;
  while (again) {
    again = false;
    auto& waiting = full_slots();
    for (auto it = waiting.begin(); it != waiting.end(); ++it) {
      auto [clique, seq] = *it;
      auto slot_it = clique->slots.find(seq);
      if (slot_it == clique->slots.end()) {  // an abort took it apart
        waiting.erase(it);
        again = true;
        break;
      }
      if (!ready(slot_it->second)) continue;
      std::vector<std::shared_ptr<Call>> calls = std::move(slot_it->second.calls);
      clique->slots.erase(slot_it);
      waiting.erase(it);
      with_device_access([&] { run_collective(calls); });
      for (const auto& call : calls) mark_done(call);
      again = true;
      break;
    }
  }
}

// Throws if this thread issues, outside a group, a call for a second rank of a communicator whose slot it already
// holds: NCCL requires a group for that (a real NCCL deadlocks in the first call).
void check_single_thread_driving(const Call& call) {
  if (call.grouped) return;
  const auto it = call.comm->clique->slots.find(call.comm->next_seq);
  if (it == call.comm->clique->slots.end()) return;
  for (const auto& other : it->second.calls) {
    if (other != nullptr && !other->grouped && other->thread == call.thread) {
      throw MisuseError(std::string(coll_name(call.coll)) + ": one host thread issued ranks " +
                        std::to_string(other->comm->rank) + " and " + std::to_string(call.comm->rank) +
                        " of a communicator outside ncclGroupStart/ncclGroupEnd; a thread driving several ranks "
                        "must group their calls (a real NCCL deadlocks)");
    }
  }
}

}  // namespace

size_t recv_bytes(const Call& c) {
  const size_t bytes = c.count * dtype_size(c.dtype);
  if (c.coll == Coll::AllGather) return bytes * c.comm->nranks;
  if (c.coll == Coll::Reduce && c.comm->rank != c.root) return 0;
  return bytes;
}

ncclResult_t issue(std::vector<std::shared_ptr<Call>> calls) {
  {
    std::lock_guard<std::mutex> lock(state_mutex());
    for (const auto& call : calls) check_single_thread_driving(*call);
  }
  // One Pending per stream, outside the lock (enqueueing may wait for the stream's other work).
  struct StreamWork {
    int device;
    cudaStream_t stream;
    std::vector<Access> accesses;
    const char* api;
  };
  std::vector<StreamWork> streams;
  for (const auto& call : calls) {
    auto it = std::find_if(streams.begin(), streams.end(), [&](const StreamWork& w) {
      return w.device == call->comm->device && w.stream == call->stream;
    });
    if (it == streams.end()) {
      streams.push_back(StreamWork{call->comm->device, call->stream, {}, coll_name(call->coll)});
      it = streams.end() - 1;
    } else if (std::strcmp(it->api, coll_name(call->coll)) != 0) {
      it->api = "ncclGroupEnd";
    }
    add_accesses(*call, it->accesses);
  }
  auto batch = std::make_shared<Batch>();
  batch->remaining = calls.size();
  for (const StreamWork& work : streams) {
    DeviceScope scope(work.device);
    cudaError_t status = cudaSuccess;
    std::shared_ptr<Pending> pending;
    try {
      pending = enqueue_pending(work.stream, work.api, work.accesses, &status);
    } catch (...) {
      for (const auto& p : batch->pendings) p->complete();
      throw;
    }
    if (pending == nullptr || status != cudaSuccess) {
      for (const auto& p : batch->pendings) p->complete();
      return fail(calls.front()->comm, ncclUnhandledCudaError,
                  std::string(work.api) + ": enqueueing on the stream failed with " + cudaGetErrorName(status));
    }
    batch->pendings.push_back(std::move(pending));
  }
  cuda_emu::detail::count(&Counters::collectives, calls.size());

  std::lock_guard<std::mutex> lock(state_mutex());
  for (const StreamWork& work : streams) {
    auto& tail = stream_tails()[{work.device, work.stream}];
    if (tail != nullptr && !tail->done) batch->prereqs.push_back(tail);
    tail = batch;
  }
  ncclResult_t result = ncclSuccess;
  for (const auto& call : calls) {
    ncclComm* comm = call->comm;
    call->batch = batch;
    comm->outstanding.push_back(call);
    if (!comm->blocking && controls().nonblocking_in_progress) {
      comm->report_in_progress_once = true;
      if (result == ncclSuccess) result = ncclInProgress;
    }
    if (comm->injected != ncclSuccess) {  // fails on its own; the peers never see this rank arrive
      const ncclResult_t error = comm->injected;
      comm->injected = ncclSuccess;
      poison(*call);
      set_async_error(comm, error, std::string(coll_name(call->coll)) + " on rank " + std::to_string(comm->rank) +
                                       " failed (nccl_inject_failure)");
      mark_done(call);
      continue;
    }
    call->seq = comm->next_seq++;
    Slot& slot = comm->clique->slots[call->seq];
    if (slot.calls.empty()) slot.calls.resize(comm->nranks);
    slot.calls[comm->rank] = call;
    if (++slot.arrived < comm->nranks) continue;
    const bool all_match = std::all_of(slot.calls.begin(), slot.calls.end(),
                                       [&](const auto& c) { return matches(*c, *slot.calls.front()); });
    if (!all_match) {
      report_mismatch(slot, call->seq);
      comm->clique->slots.erase(call->seq);
      result = ncclInvalidUsage;
      continue;
    }
    full_slots().emplace_back(comm->clique, call->seq);
  }
  progress();
  return result;
}

void abort_outstanding(ncclComm* comm) {
  const std::vector<std::shared_ptr<Call>> calls = comm->outstanding;
  for (const auto& call : calls) {
    auto it = comm->clique->slots.find(call->seq);
    if (it != comm->clique->slots.end() && it->second.calls[comm->rank] == call) {
      it->second.calls[comm->rank] = nullptr;
      if (--it->second.arrived == 0) comm->clique->slots.erase(it);
    }
    poison(*call);
    mark_done(call);
  }
  auto& waiting = full_slots();  // a full slot that lost a rank can never run
  waiting.erase(std::remove_if(waiting.begin(), waiting.end(),
                               [&](const auto& entry) {
                                 const auto it = entry.first->slots.find(entry.second);
                                 if (it == entry.first->slots.end()) return true;
                                 return it->second.arrived < entry.first->nranks;
                               }),
                waiting.end());
  progress();
}

}  // namespace mpt::cuda_emu::nccl
