// src/ops/lt_workspace.cpp: the per-stream cuBLASLt workspace pool.
#include "ops/lt_workspace.h"

#if defined(MPT_WITH_CUDA)
#include <map>
#include <memory>
#include <mutex>

#include "mpt/core/device.h"
#include "mpt/core/memory.h"

namespace mpt::ops::detail {

kernels::cuda::LtWorkspace lt_workspace(const Stream& stream) {
  static std::mutex mutex;
  static auto* pool = new std::map<std::pair<int, void*>, std::shared_ptr<Storage>>();  // never destroyed
  std::lock_guard<std::mutex> lock(mutex);
  std::shared_ptr<Storage>& ws = (*pool)[{stream.device().index(), stream.native()}];
  if (!ws) {
    const int major = cuda_status().devices.at(stream.device().index()).major;
    ws = Storage::allocate(kernels::cuda::recommended_workspace_bytes(major), stream);
  }
  return {ws->data(), ws->nbytes()};
}

}  // namespace mpt::ops::detail
#endif
