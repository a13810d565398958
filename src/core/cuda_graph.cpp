// src/core/cuda_graph.cpp: CudaGraph: warm-up and capture on a private stream and memory pool, replay with its
// host-side scalars refreshed.
#include "mpt/core/cuda_graph.h"

#include <cstring>
#include <utility>

#include "core/backend.h"
#include "core/stream_resources.h"
#include "mpt/core/error.h"

namespace mpt {
namespace {

thread_local CudaGraph* t_capturing = nullptr;

// Marks the graph as capturing on this thread for the scope.
class CapturingScope {
 public:
  explicit CapturingScope(CudaGraph* g) : outer_(t_capturing) { t_capturing = g; }
  ~CapturingScope() { t_capturing = outer_; }
  CapturingScope(const CapturingScope&) = delete;
  CapturingScope& operator=(const CapturingScope&) = delete;

 private:
  CudaGraph* outer_;
};

Stream graph_stream(Device device) {
  MPT_CHECK(device.is_cuda(), "[cuda_graph] CUDA graphs need a CUDA device, got {}", device);
  return Stream(device);
}

}  // namespace

CudaGraph::CudaGraph(Device device)
    : device_(device),
      stream_(graph_stream(device)),
      values_(kMaxReplayScalars, 0.0),
      pinned_(cuda_backend::host_alloc_pinned(sizeof(double) * kMaxReplayScalars * kReplaySlots),
              cuda_backend::host_free_pinned),
      scalars_(Tensor::empty({kMaxReplayScalars}, DType::F64, device)) {
  for (int i = 0; i < kReplaySlots; ++i) slot_copied_.emplace_back(device_);
  // The private pool's blocks come from the device's pool: hand it the block cache's idle segments first (the eager
  // steps before this graph left a whole step's activations there), or the graph's memory adds to theirs.
  cuda_backend::empty_cache(device_.index());
  cuda_backend::private_pool_begin(device_.index(), stream_.native());
  pool_ = true;
}

CudaGraph::~CudaGraph() {
  try {
    wait_for_current();  // the pool's blocks are freed on the graph's stream: after the current stream's use of them
    stream_.synchronize();
  } catch (const std::exception&) {  // a failed step's error surfaced elsewhere; free what can be freed
  }
  cuda_backend::graph_destroy(exec_);
  try {
    detail::release_stream_resources(device_.index(), stream_.native());  // the ops' caches for this stream
  } catch (const std::exception&) {
  }
  if (pool_) {
    try {
      cuda_backend::private_pool_end(device_.index(), stream_.native());
    } catch (const std::exception&) {
    }
  }
}

CudaGraph* CudaGraph::capturing(Device device) {
  return t_capturing != nullptr && t_capturing->device_ == device ? t_capturing : nullptr;
}

void CudaGraph::wait_for_current() {
  Event e(device_);
  e.record(Stream::current(device_));
  e.wait(stream_);
}

void CudaGraph::current_waits() {
  Event e(device_);
  e.record(stream_);
  e.wait(Stream::current(device_));
}

void CudaGraph::run_step(const std::function<void()>& step) {
  const StreamGuard guard(stream_);
  step();
}

void CudaGraph::warmup(const std::function<void()>& step) {
  MPT_CHECK(exec_ == nullptr, "[cuda_graph] warmup() after capture(): the private pool now belongs to the graph");
  MPT_CHECK(t_capturing == nullptr, "[cuda_graph] warmup() inside a capture");
  wait_for_current();
  run_step(step);  // a real step; its freed blocks stay in the private pool
  current_waits();
}

void CudaGraph::capture(const std::function<void()>& step) {
  MPT_CHECK(exec_ == nullptr, "[cuda_graph] this graph already holds a captured step (make a new CudaGraph)");
  MPT_CHECK(t_capturing == nullptr, "[cuda_graph] a capture is already under way on this thread");
  wait_for_current();
  cuda_backend::capture_begin(device_.index(), stream_.native());
  try {
    const CapturingScope scope(this);
    run_step(step);
  } catch (...) {
    try {
      cuda_backend::graph_destroy(cuda_backend::capture_end(device_.index(), stream_.native()));
    } catch (const std::exception&) {  // the capture itself failed too; the step's error is the one to report
    }
    before_replay_.clear();
    scalars_used_ = 0;
    throw;
  }
  exec_ = cuda_backend::capture_end(device_.index(), stream_.native());
  current_waits();
}

void CudaGraph::replay() {
  MPT_CHECK(exec_ != nullptr, "[cuda_graph] replay() before capture()");
  for (const auto& check : before_replay_) check();  // refreshes values_ too
  wait_for_current();
  if (scalars_used_ > 0) {
    const size_t slot = static_cast<size_t>(replays_ % kReplaySlots);
    const Event& copied = slot_copied_[slot];
    if (!copied.ready()) copied.synchronize();  // the device is kReplaySlots replays behind: wait for it
    double* host = static_cast<double*>(pinned_.get()) + slot * kMaxReplayScalars;
    std::memcpy(host, values_.data(), sizeof(double) * static_cast<size_t>(scalars_used_));
    cuda_backend::memcpy(scalars_.data<double>(), device_, host, Device::cpu(),
                         sizeof(double) * static_cast<size_t>(scalars_used_), device_.index(), stream_.native());
    slot_copied_[slot].record(stream_);
  }
  cuda_backend::graph_launch(device_.index(), exec_, stream_.native());
  ++replays_;
  current_waits();
}

const double* CudaGraph::replay_scalars(int count, std::function<void(double* host)> refresh) {
  MPT_CHECK(t_capturing == this, "[cuda_graph] replay_scalars is for ops being captured by this graph");
  MPT_CHECK(count > 0 && scalars_used_ + count <= kMaxReplayScalars,
            "[cuda_graph] a captured step may read {} host values per replay; {} more were asked for after {}",
            kMaxReplayScalars, count, scalars_used_);
  double* host = values_.data() + scalars_used_;
  double* dev = scalars_.data<double>() + scalars_used_;
  scalars_used_ += count;
  refresh(host);
  before_replay_.push_back([host, refresh = std::move(refresh)] { refresh(host); });
  return dev;
}

void CudaGraph::before_replay(std::function<void()> check) { before_replay_.push_back(std::move(check)); }

}  // namespace mpt
