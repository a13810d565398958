// src/dist/communicator_impl.h: what the communicator backends share: argument checks, a finished Work, MPI's world.
#pragma once

#include <memory>

#include "mpt/core/error.h"
#include "mpt/dist/communicator.h"

namespace mpt::dist::detail {

// A contiguous CPU tensor of f32, f16 or bf16 (and FP8 with allow_fp8).
// `cpu_only`: the MPI communicator's rule; the single-process one takes tensors on any device.
void check_tensor(const Tensor& t, const char* op, const char* what, bool allow_fp8 = false, bool cpu_only = true);
// counts: size entries, each >= 0; small.numel() == counts[rank], large.numel() == sum(counts), same dtype.
void check_counts(const Tensor& small, const Tensor& large, std::span<const int64_t> counts, int rank, int size,
                  const char* op);
// large.numel() == size * small.numel(), same dtype.
void check_sizes(const Tensor& small, const Tensor& large, int size, const char* op);

class DoneWork final : public Work {
 public:
  bool test() override { return true; }
  void wait() override {}
};

// MPI_COMM_WORLD (MPI initialised with MPI_THREAD_MULTIPLE on the first call, finalised at exit).
std::shared_ptr<Communicator> mpi_world();

}  // namespace mpt::dist::detail
