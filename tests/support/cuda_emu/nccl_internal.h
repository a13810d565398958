// tests/support/cuda_emu/nccl_internal.h: the NCCL double's shared state: communicators, recorded calls, and the engine that matches calls across ranks and runs them.
#pragma once

#include <nccl.h>

#include <array>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"

namespace mpt::cuda_emu::nccl {

enum class Coll { AllReduce, Broadcast, Reduce, ReduceScatter, AllGather };
const char* coll_name(Coll coll);  // "ncclAllReduce", ...

enum class OpKind { Sum, Prod, Max, Min, Avg, PreMulSum };
const char* op_name(OpKind op);

// A user operation from ncclRedOpCreatePreMulSum (one rank's; each rank has its own scalar).
struct PreMulOp {
  ncclDataType_t dtype = ncclFloat32;
  ncclScalarResidence_t residence = ncclScalarHostImmediate;
  std::array<std::byte, 8> value{};      // HostImmediate: copied at create time
  const void* device_scalar = nullptr;  // Device: read when the collective runs
};

struct Batch;
struct Clique;

// One rank's call of one collective.
struct Call {
  Coll coll = Coll::AllReduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;  // the API's count: recvcount for ReduceScatter, sendcount for AllGather
  ncclDataType_t dtype = ncclFloat32;
  OpKind op = OpKind::Sum;
  ncclRedOp_t op_handle = ncclSum;
  PreMulOp premul;
  int root = 0;
  cudaStream_t stream = nullptr;
  ncclComm* comm = nullptr;
  std::thread::id thread;
  bool grouped = false;
  uint64_t seq = 0;
  std::shared_ptr<Batch> batch;
  bool done = false;
};

// The calls one host thread issued at once (one call, or a whole group), with one Pending per stream. Like NCCL's
// fused group launch, every stream of the batch completes when the whole batch has.
struct Batch {
  std::vector<std::shared_ptr<Pending>> pendings;
  std::vector<std::shared_ptr<Batch>> prereqs;  // earlier NCCL batches on the same streams (cleared when done)
  size_t remaining = 0;  // calls not yet complete
  bool done = false;
};

// The calls with one sequence number across the ranks of a communicator.
struct Slot {
  std::vector<std::shared_ptr<Call>> calls;  // by rank
  int arrived = 0;
};

// What the ranks of one communicator share.
struct Clique {
  std::string id;
  int nranks = 0;
  std::vector<ncclComm*> ranks;  // by rank; nullptr until joined
  int joined = 0;
  bool init_done = false;
  ncclResult_t init_result = ncclSuccess;
  std::string init_message;
  std::map<uint64_t, Slot> slots;
};

enum class CommState { Initializing, Ready, Finalized, Destroyed, Aborted };

}  // namespace mpt::cuda_emu::nccl

namespace mpt::cuda_emu {

struct ncclComm {
  std::shared_ptr<nccl::Clique> clique;
  int rank = 0;
  int nranks = 0;
  int device = 0;
  bool blocking = true;
  nccl::CommState state = nccl::CommState::Initializing;
  ncclResult_t async_error = ncclSuccess;  // an error sticks; ncclInProgress while an operation is under way
  bool report_in_progress_once = false;    // non-blocking comms: the next poll says ncclInProgress
  std::string message;                     // for ncclGetLastError(comm)
  uint64_t next_seq = 0;
  int next_user_op = ncclNumOps;
  std::map<int, nccl::PreMulOp> user_ops;
  ncclResult_t injected = ncclSuccess;
  std::vector<std::shared_ptr<nccl::Call>> outstanding;  // issued, not yet complete
};

}  // namespace mpt::cuda_emu

namespace mpt::cuda_emu::nccl {

// The controls of include/nccl.h, read by the engine.
struct Controls {
  NcclLowPrecisionSum low_precision_sum = NcclLowPrecisionSum::StepRounded;
  NcclFp8Overflow fp8_overflow = NcclFp8Overflow::Saturate;
  NcclInPlaceRest in_place_rest = NcclInPlaceRest::Keep;
  bool report_peer_abort = true;
  bool nonblocking_in_progress = true;
};

// One lock for all NCCL state: the double favours simple, obviously ordered code over concurrency.
std::mutex& state_mutex();
std::condition_variable& state_cv();  // notified whenever a call completes or a rank joins
Controls& controls();                 // guarded by state_mutex()

// Remembers a failure's message for ncclGetLastError (this thread's, and comm's when given) and returns `result`.
ncclResult_t fail(ncclComm* comm, ncclResult_t result, const std::string& message);
// Throws MisuseError unless comm is a live communicator (not destroyed or aborted). Call under state_mutex().
void check_live(const ncclComm* comm, const char* api);
// Sets the async error of comm (the first one sticks) with its message. Call under state_mutex().
void set_async_error(ncclComm* comm, ncclResult_t error, const std::string& message);

// Element sizes and kinds.
size_t dtype_size(ncclDataType_t dtype);
const char* dtype_name(ncclDataType_t dtype);
bool is_fp8(ncclDataType_t dtype);
bool is_integer(ncclDataType_t dtype);

// out[k] = op over ranks r (in rank order) of inputs[r][k], for k < count, with the data type's arithmetic
// (see nccl_reduce.cpp). premul[r] is rank r's PreMulSum operation (used for OpKind::PreMulSum).
void reduce_elements(ncclDataType_t dtype, OpKind op, std::span<const std::byte* const> inputs,
                     std::span<const PreMulOp> premul, size_t count, std::byte* out, const Controls& controls);

// The engine (nccl_engine.cpp). Issues a batch of validated calls from this thread: enqueues one Pending per stream,
// places the calls in their communicators' slots and runs whatever became complete. Returns an NCCL status.
ncclResult_t issue(std::vector<std::shared_ptr<Call>> calls);
// Completes comm's outstanding calls with poisoned receive buffers (ncclCommAbort). Call under state_mutex().
void abort_outstanding(ncclComm* comm);
// Bytes a call writes to its receive buffer (0 where it writes nothing, e.g. Reduce off the root).
size_t recv_bytes(const Call& call);

// Groups (nccl_group.cpp): whether this thread is inside ncclGroupStart/End, and recording into the group.
bool in_group();
void group_add_call(std::shared_ptr<Call> call);
void group_add_error(ncclResult_t error);
// Records a ncclCommInitRank inside a group; joined at the outermost ncclGroupEnd.
void group_add_init(ncclComm* comm, std::shared_ptr<Clique> clique);
// Joining a clique (nccl_comm.cpp): registers comm as its rank; waits for the others unless wait is false.
ncclResult_t join_clique(ncclComm* comm, const std::shared_ptr<Clique>& clique);
ncclResult_t wait_for_clique(ncclComm* comm);

}  // namespace mpt::cuda_emu::nccl
