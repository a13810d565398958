// src/ops/lt_workspace.cpp: the per-stream cuBLASLt workspace pool.
#include "ops/lt_workspace.h"

#if defined(MPT_WITH_CUDA)
#include <map>
#include <memory>
#include <mutex>

#include "core/stream_resources.h"
#include "mpt/core/device.h"
#include "mpt/core/memory.h"

namespace mpt::ops::detail {

namespace {

using Workspaces = std::map<std::pair<int, void*>, std::shared_ptr<Storage>>;

std::mutex& workspaces_mutex() {
  static std::mutex mutex;
  return mutex;
}

Workspaces& workspaces() {
  static auto* pool = new Workspaces();  // never destroyed
  return *pool;
}

// A retired stream's workspace back to its pool (a user's Stream at its end, a CudaGraph's stream: else it held 32 MiB,
// of the graph's private pool and the pool itself, for the rest of the process).
void drop_workspace(int device, void* stream) {
  std::shared_ptr<Storage> ws;
  {
    const std::lock_guard<std::mutex> lock(workspaces_mutex());
    auto it = workspaces().find({device, stream});
    if (it == workspaces().end()) return;
    ws = std::move(it->second);
    workspaces().erase(it);
  }
}  // freed here, outside the lock

}  // namespace

kernels::cuda::LtWorkspace lt_workspace(const Stream& stream) {
  static const bool registered = (mpt::detail::on_stream_release(&drop_workspace), true);
  (void)registered;
  const std::lock_guard<std::mutex> lock(workspaces_mutex());
  std::shared_ptr<Storage>& ws = workspaces()[{stream.device().index(), stream.native()}];
  if (!ws) {
    const int major = cuda_status().devices.at(stream.device().index()).major;
    // On an unowned handle: the workspace must not keep its stream alive, else the stream's end (which releases it)
    // never comes (core/stream_resources.h).
    ws = Storage::allocate(kernels::cuda::recommended_workspace_bytes(major), mpt::detail::unowned_stream(stream));
  }
  return {ws->data(), ws->nbytes()};
}

}  // namespace mpt::ops::detail
#endif
