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

  // For a captured op that reads host values which may change between replays: `count` doubles on the device (the
  // returned buffer, which the captured kernels read); `refresh` writes the current values into `host` now and
  // before every replay, and replay() copies them to the device on the graph's stream just before the launch. The
  // copy's pinned source is one of kReplaySlots buffers used in turn, each reused only after an event says its last
  // copy ran (a pinned source may be read any time before then: rewriting it in place would let a replay that is
  // still queued read the next step's values). The device buffer is made with the graph (nothing may be allocated
  // from the driver while capturing): kMaxReplayScalars values per graph.
  static constexpr int kMaxReplayScalars = 1024;
  static constexpr int kReplaySlots = 4;
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
  std::vector<double> values_;    // the replay scalars' current values (kMaxReplayScalars)
  std::shared_ptr<void> pinned_;  // kReplaySlots x kMaxReplayScalars doubles of page-locked host memory
  std::vector<Event> slot_copied_;  // per slot: recorded after the copy that last read it
  Tensor scalars_;                // the device values (f64, on the legacy stream: outside the private pool)
  int scalars_used_ = 0;
  int64_t replays_ = 0;
};

}  // namespace mpt
