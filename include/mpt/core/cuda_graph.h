// mpt/core/cuda_graph.h: capture a whole training step into a CUDA graph once, then replay it with one launch.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "mpt/core/device.h"
#include "mpt/core/stream.h"
#include "mpt/core/tensor.h"

namespace mpt {

// torch.cuda.CUDAGraph for a training step. warmup(step) runs `step` eagerly on the graph's own stream: a real
// step, whose memory comes from and returns to the graph's private pool. After two warm-ups (the second keeps the
// first one's outputs alive while it makes its own, as every replay will) capture(step) records a third run without
// executing it, and replay() executes the recorded work, as one launch, with no host code in between.
//
// What a captured step must respect (PyTorch's rules):
// - Static inputs: the step reads the same tensors every time; copy each new batch into them before replay().
// - Outputs: the tensors the captured run produced (the loss, the gradients) are the ones each replay overwrites.
// - No host reads or synchronisations inside the step (mptrain's training step has none: the emulated step test
//   counts them), and the same allocation sizes on every run (the captured run finds its blocks in the private
//   pool; a new size is an error naming it).
// - Host-side values that change between steps reach the device through `replay_scalars`: AdamW reads its learning
//   rate and weight decay that way, so LR schedules work. SGD's coefficients are host values: a captured SGD step
//   refuses a learning rate changed after the capture. Dropout is refused while capturing (its Philox offsets are
//   drawn on the host).
// Work issued before capture() or replay() on the device's current stream is waited for, and later work there waits
// for the graph. A CudaGraph is not copyable; destroying it waits for its stream and returns its private pool.
class CudaGraph {
 public:
  explicit CudaGraph(Device device);  // a CUDA device; anything else throws
  ~CudaGraph();
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;

  void warmup(const std::function<void()>& step);
  void capture(const std::function<void()>& step);
  void replay();
  bool captured() const { return exec_ != nullptr; }
  Device device() const { return device_; }
  const Stream& stream() const { return stream_; }

  // The graph capturing on this thread for `device`, or null (what ops consult to refuse or adapt).
  static CudaGraph* capturing(Device device);

  // For a captured op that reads host values which may change between replays: `count` doubles in pinned host
  // memory, copied to the returned device buffer by the graph itself each replay (the copy is recorded now, on the
  // capturing stream); `refresh` writes the current values into `host` before every replay and once now. Both
  // buffers are slices of arenas made with the graph (nothing may be allocated from the driver while capturing):
  // kMaxReplayScalars values per graph.
  static constexpr int kMaxReplayScalars = 1024;
  const double* replay_scalars(int count, std::function<void(double* host)> refresh);
  // A check run before every replay (e.g. that a value the graph baked in has not changed); it throws to refuse.
  void before_replay(std::function<void()> check);

 private:
  void run_step(const std::function<void()>& step);
  void wait_for_current();
  void current_waits();

  Device device_;
  Stream stream_;
  void* exec_ = nullptr;
  bool pool_ = false;
  std::vector<std::function<void()>> before_replay_;
  std::shared_ptr<void> pinned_;  // kMaxReplayScalars doubles of page-locked host memory
  Tensor scalars_;                // and their device twins (f64, on the legacy stream: outside the private pool)
  int scalars_used_ = 0;
};

}  // namespace mpt
