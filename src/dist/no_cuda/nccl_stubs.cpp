// src/dist/no_cuda/nccl_stubs.cpp: the NCCL communicator of a build without CUDA: every entry point says so.
#include "core/backend.h"
#include "mpt/core/error.h"
#include "mpt/dist/communicator.h"

namespace mpt::dist {

NcclId nccl_unique_id() { MPT_THROW("[dist.nccl] {}", cuda_backend::kNotBuilt); }
std::shared_ptr<Communicator> nccl_communicator(Device, const NcclId&, int, int) {
  MPT_THROW("[dist.nccl] {}", cuda_backend::kNotBuilt);
}
std::shared_ptr<Communicator> nccl_world() { MPT_THROW("[dist.nccl] {}", cuda_backend::kNotBuilt); }

}  // namespace mpt::dist
