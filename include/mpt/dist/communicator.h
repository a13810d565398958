// mpt/dist/communicator.h: collectives across a data-parallel job's processes (MPI on CPUs, NCCL on GPUs), timeouts.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "mpt/core/tensor.h"

namespace mpt::dist {

enum class ReduceOp { Sum, Avg, Max };
const char* to_string(ReduceOp op);

// A collective in flight. wait() returns once this rank's part is complete (the output tensor holds the result), or
// throws mpt::Error naming the collective, its sequence number, the tensor and the rank when it does not complete
// within the communicator's timeout (another rank died, or called a different collective). After a timeout the job
// cannot continue: let the error end the process (mpirun then ends the others).
class Work {
 public:
  virtual ~Work() = default;
  virtual bool test() = 0;  // true once complete (never blocks)
  virtual void wait() = 0;
  // Orders the device's later work on the current stream after the collective without blocking the host, where the
  // backend runs on a device stream (NCCL); elsewhere it is wait(). The tensors stay the collective's until wait()
  // returned or test() said true.
  virtual void wait_on_device() { wait(); }
};

// One process's view of the job. Tensors are contiguous, on the communicator's device (the CPU for MPI and the single
// process, the rank's GPU for NCCL), F32, F16 or BF16, of the same dtype and size on every rank; every rank must issue the same collectives in the same order. F16 and BF16 are reduced in F32 and
// rounded once. The calls return at once; the tensors must stay alive and untouched until wait() returned.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;  // "mpi", "nccl" or "single"

  // t = op over ranks of t (Avg: the sum divided by size()).
  virtual std::unique_ptr<Work> all_reduce(Tensor& t, ReduceOp op) = 0;
  // t = root's t.
  virtual std::unique_ptr<Work> broadcast(Tensor& t, int root) = 0;
  // out = the ranks' `in`, concatenated in rank order (out.numel() == size() * in.numel()).
  virtual std::unique_ptr<Work> all_gather(const Tensor& in, Tensor& out) = 0;
  // out = this rank's slice of op over ranks of `in` (in.numel() == size() * out.numel()).
  virtual std::unique_ptr<Work> reduce_scatter(const Tensor& in, Tensor& out, ReduceOp op) = 0;
  // Uneven variants: rank r's part holds counts[r] elements (counts has size() entries, the same on every rank).
  // all_gather_v: in.numel() == counts[rank()], out.numel() == sum(counts). reduce_scatter_v: the reverse.
  virtual std::unique_ptr<Work> all_gather_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts) = 0;
  virtual std::unique_ptr<Work> reduce_scatter_v(const Tensor& in, Tensor& out, std::span<const int64_t> counts,
                                                 ReduceOp op) = 0;
  // all_reduce with t travelling in its own dtype (f32, bf16, f16, f8e4m3 or f8e5m2): every hop combines two values
  // in F32 and rounds the result back to the dtype (FP8 saturating at its largest finite value), as NCCL does for
  // its 16-bit types and MS-AMP's NCCL for FP8. This is gradient compression: 2 or 1 bytes per element on the wire
  // instead of 4, for up to size() - 1 roundings. Avg rounds the sum, then sum / size() once more. f32: all_reduce.
  virtual std::unique_ptr<Work> all_reduce_on_wire(Tensor& t, ReduceOp op) = 0;
  virtual void barrier() = 0;

  // How long wait() waits before it throws (default 300 s, or MPT_DIST_TIMEOUT_S).
  void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }
  std::chrono::milliseconds timeout() const { return timeout_; }

 protected:
  Communicator();
  // The number of the next collective (for error messages), counted from 0 per communicator.
  int64_t next_sequence() { return sequence_++; }

 private:
  std::chrono::milliseconds timeout_;
  int64_t sequence_ = 0;
};

// ---- NCCL: CUDA tensors, one rank per GPU ----
// An NCCL communicator's identity: made by one rank, given to every rank of the job.
struct NcclId {
  std::array<char, 128> bytes{};
};
NcclId nccl_unique_id();  // throws in a build without CUDA, or without a GPU
// Rank `rank` of `size` on `device` (a CUDA device, one rank per device) over NCCL: collectives take contiguous
// tensors on that device (f32, f16, bf16; FP8 on the wire), run on the communicator's own stream, ordered after the
// work already issued on the device's current stream; wait() orders later work on the current stream after them
// and polls for completion and NCCL's asynchronous errors until the timeout, after which it aborts the communicator
// (ncclCommAbort) and throws naming the collective. The same semantics as the MPI communicator otherwise.
std::shared_ptr<Communicator> nccl_communicator(Device device, const NcclId& id, int rank, int size);
// The job's NCCL communicator: under mpirun, rank 0's id broadcast over MPI and rank r on cuda:(r % the device
// count); without mpirun, size 1 on cuda:0.
std::shared_ptr<Communicator> nccl_world();

// The job's communicator, made once: MPI when the process was started by mpirun (OMPI_COMM_WORLD_SIZE or PMI_SIZE
// set; MPI is initialised here and finalised at exit), else a single-process communicator (size 1, collectives copy).
std::shared_ptr<Communicator> world();
// A single-process communicator (tests, and programs that never run under mpirun).
std::shared_ptr<Communicator> single_process();

}  // namespace mpt::dist
