// tests/support/cuda_emu/nccl_collectives.cpp: the NCCL double's collective calls and PreMulSum operations: argument checks at call time, then the engine.
#include <cstring>

#include "nccl_internal.h"

namespace mpt::cuda_emu::nccl {

const char* coll_name(Coll coll) {
  switch (coll) {
    case Coll::AllReduce: return "ncclAllReduce";
    case Coll::Broadcast: return "ncclBroadcast";
    case Coll::Reduce: return "ncclReduce";
    case Coll::ReduceScatter: return "ncclReduceScatter";
    default: return "ncclAllGather";
  }
}

const char* op_name(OpKind op) {
  switch (op) {
    case OpKind::Sum: return "ncclSum";
    case OpKind::Prod: return "ncclProd";
    case OpKind::Max: return "ncclMax";
    case OpKind::Min: return "ncclMin";
    case OpKind::Avg: return "ncclAvg";
    default: return "PreMulSum";
  }
}

namespace {

bool reduces(Coll coll) { return coll == Coll::AllReduce || coll == Coll::Reduce || coll == Coll::ReduceScatter; }

bool overlap(const void* a, size_t a_bytes, const void* b, size_t b_bytes) {
  const auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

// Null buffers and overlaps other than the documented in-place forms: undefined on a GPU, refused here.
void check_buffers(const Call& c, int rank, int nranks) {
  const size_t size = dtype_size(c.dtype);
  const char* api = coll_name(c.coll);
  const bool root = rank == c.root;
  const bool needs_send = c.coll != Coll::Broadcast || root;
  const bool needs_recv = c.coll != Coll::Reduce || root;
  if ((needs_send && c.send == nullptr) || (needs_recv && c.recv == nullptr)) {
    throw MisuseError(std::string(api) + ": rank " + std::to_string(rank) +
                      " passed a NULL buffer it must use (a real GPU faults)");
  }
  size_t send_bytes = c.count * size, recv_bytes_ = c.count * size;
  const char* in_place_rule = "sendbuff == recvbuff";
  bool in_place = c.send == c.recv;
  if (c.coll == Coll::ReduceScatter) {
    send_bytes *= nranks;
    in_place = static_cast<const std::byte*>(c.send) + rank * c.count * size == c.recv;
    in_place_rule = "recvbuff == sendbuff + rank * recvcount";
  } else if (c.coll == Coll::AllGather) {
    recv_bytes_ *= nranks;
    in_place = static_cast<const std::byte*>(c.recv) + rank * c.count * size == c.send;
    in_place_rule = "sendbuff == recvbuff + rank * sendcount";
  }
  if (!needs_send || !needs_recv || in_place) return;
  if (overlap(c.send, send_bytes, c.recv, recv_bytes_)) {
    throw MisuseError(std::string(api) + ": rank " + std::to_string(rank) +
                      ": sendbuff and recvbuff overlap without being in place (" + in_place_rule +
                      "); the result is undefined in NCCL");
  }
}

// Validates one call like NCCL's ArgsCheck and hands it to the group or the engine.
ncclResult_t submit(Call call) {
  const char* api = coll_name(call.coll);
  if (call.comm == nullptr) return fail(nullptr, ncclInvalidArgument, std::string(api) + ": comm is NULL");
  const ncclResult_t result = [&]() -> ncclResult_t {
    std::lock_guard<std::mutex> lock(state_mutex());
    ncclComm* comm = call.comm;
    check_live(comm, api);
    const std::string who = std::string(api) + " (rank " + std::to_string(comm->rank) + "): ";
    if (comm->state == CommState::Initializing) {
      return fail(comm, ncclInvalidUsage, who + "the communicator is still initialising; poll ncclCommGetAsyncError "
                                                "until ncclSuccess first");
    }
    if (comm->state == CommState::Finalized) {
      return fail(comm, ncclInvalidUsage, who + "called after ncclCommFinalize");
    }
    if (comm->async_error != ncclSuccess && comm->async_error != ncclInProgress) {
      return fail(comm, comm->async_error, who + "the communicator has an asynchronous error (" +
                                               ncclGetErrorString(comm->async_error) + "); call ncclCommAbort");
    }
    if (call.dtype < 0 || call.dtype >= ncclNumTypes) {
      return fail(comm, ncclInvalidArgument, who + "invalid datatype " + std::to_string(call.dtype));
    }
    if (reduces(call.coll)) {
      if (call.op_handle < 0) return fail(comm, ncclInvalidArgument, who + "invalid reduction operation");
      if (call.op_handle < ncclNumOps) {
        call.op = static_cast<OpKind>(call.op_handle);
      } else {
        const auto it = comm->user_ops.find(call.op_handle);
        if (it == comm->user_ops.end()) {
          return fail(comm, ncclInvalidArgument,
                      who + "reduction operation " + std::to_string(call.op_handle) +
                          " was not created on this communicator (or was destroyed)");
        }
        if (it->second.dtype != call.dtype) {
          return fail(comm, ncclInvalidArgument,
                      who + "the PreMulSum operation was created for " + dtype_name(it->second.dtype) +
                          ", not " + dtype_name(call.dtype));
        }
        call.op = OpKind::PreMulSum;
        call.premul = it->second;
      }
    }
    if ((call.coll == Coll::Broadcast || call.coll == Coll::Reduce) && (call.root < 0 || call.root >= comm->nranks)) {
      return fail(comm, ncclInvalidArgument,
                  who + "root " + std::to_string(call.root) + " is not in [0, " + std::to_string(comm->nranks) + ")");
    }
    if (call.count == 0) return ncclSuccess;  // a no-op [S enqueue.cc]
    if (reduces(call.coll) && is_fp8(call.dtype)) {
      for (const ncclComm* peer : comm->clique->ranks) {
        if (compute_capability(peer->device) < 90) {
          return fail(comm, ncclInvalidArgument,
                      who + "FP8 reductions need sm_90 or newer on every rank; rank " + std::to_string(peer->rank) +
                          " is on device " + std::to_string(peer->device) + " (sm_" +
                          std::to_string(compute_capability(peer->device)) + ")");
        }
      }
    }
    check_buffers(call, comm->rank, comm->nranks);
    const int stream_dev = stream_device(call.stream);
    if (call.stream != nullptr && call.stream != cudaStreamLegacy && call.stream != cudaStreamPerThread &&
        stream_dev >= 0 && stream_dev != comm->device) {
      return fail(comm, ncclUnhandledCudaError,
                  who + "the stream belongs to device " + std::to_string(stream_dev) + ", the communicator to device " +
                      std::to_string(comm->device));
    }
    return ncclSuccess;
  }();
  if (result != ncclSuccess || call.count == 0) {
    if (result != ncclSuccess && in_group()) group_add_error(result);
    return result;
  }
  auto recorded = std::make_shared<Call>(std::move(call));
  recorded->thread = std::this_thread::get_id();
  recorded->grouped = in_group();
  if (recorded->grouped) {
    group_add_call(std::move(recorded));
    return ncclSuccess;
  }
  std::vector<std::shared_ptr<Call>> calls{std::move(recorded)};
  return issue(std::move(calls));
}

Call make_call(Coll coll, const void* send, void* recv, size_t count, ncclDataType_t dtype, ncclRedOp_t op, int root,
               ncclComm_t comm, cudaStream_t stream) {
  Call c;
  c.coll = coll;
  c.send = send;
  c.recv = recv;
  c.count = count;
  c.dtype = dtype;
  c.op_handle = op;
  c.root = root;
  c.comm = comm;
  c.stream = stream;
  return c;
}

}  // namespace
}  // namespace mpt::cuda_emu::nccl

namespace mpt::cuda_emu {
using namespace nccl;

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(make_call(Coll::AllReduce, sendbuff, recvbuff, count, datatype, op, 0, comm, stream));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(make_call(Coll::Broadcast, sendbuff, recvbuff, count, datatype, ncclSum, root, comm, stream));
}

ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  return submit(make_call(Coll::Reduce, sendbuff, recvbuff, count, datatype, op, root, comm, stream));
}

ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  return submit(make_call(Coll::ReduceScatter, sendbuff, recvbuff, recvcount, datatype, op, 0, comm, stream));
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return submit(make_call(Coll::AllGather, sendbuff, recvbuff, sendcount, datatype, ncclSum, 0, comm, stream));
}

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm) {
  if (op == nullptr || scalar == nullptr || comm == nullptr) {
    return fail(nullptr, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: op, scalar or comm is NULL");
  }
  if (datatype < 0 || datatype >= ncclNumTypes) {
    return fail(nullptr, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid datatype");
  }
  if (residence != ncclScalarDevice && residence != ncclScalarHostImmediate) {
    return fail(nullptr, ncclInvalidArgument, "ncclRedOpCreatePreMulSum: invalid residence");
  }
  PreMulOp created;
  created.dtype = datatype;
  created.residence = residence;
  if (residence == ncclScalarHostImmediate) {
    if (pointer_device(scalar) >= 0) {
      throw MisuseError("ncclRedOpCreatePreMulSum: a ncclScalarHostImmediate scalar points to device memory (the "
                        "host reads it now; a real process would fault): use ncclScalarDevice");
    }
    std::memcpy(created.value.data(), scalar, dtype_size(datatype));  // read now: later changes have no effect
  } else {
    created.device_scalar = scalar;
  }
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, "ncclRedOpCreatePreMulSum");
  const int handle = comm->next_user_op++;
  comm->user_ops.emplace(handle, created);
  *op = static_cast<ncclRedOp_t>(handle);
  return ncclSuccess;
}

ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (comm == nullptr) return fail(nullptr, ncclInvalidArgument, "ncclRedOpDestroy: comm is NULL");
  std::lock_guard<std::mutex> lock(state_mutex());
  check_live(comm, "ncclRedOpDestroy");
  if (op < ncclNumOps || comm->user_ops.erase(op) == 0) {
    return fail(comm, ncclInvalidArgument,
                "ncclRedOpDestroy: operation " + std::to_string(op) + " was not created on this communicator");
  }
  return ncclSuccess;
}

}  // namespace mpt::cuda_emu
