// mpt/data/sampler.h: which windows of a token stream each rank trains on, in epochs, resumable from a checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpt::data {

struct SamplerOptions {
  int64_t tokens = 0;  // ids in the stream
  int64_t window = 0;  // ids per sample: seq + 1 (the inputs and their next-id targets)
  int64_t batch = 1;   // samples per rank per batch
  int rank = 0, world = 1;
  uint64_t seed = 0;
};

// Where the sampler is: windows of `epoch` already handed out (to every rank together).
struct SamplerPosition {
  int64_t epoch = 0, index = 0;
  bool operator==(const SamplerPosition&) const = default;
};

// Epochs of non-overlapping windows. Epoch e starts at an offset in [0, window) drawn from (seed, e), cuts the stream
// into W = floor((tokens - offset) / window) windows and visits them in an order drawn from (seed, e) (Fisher-Yates
// on SplitMix64: the same on every platform and compiler). Each batch takes the next world x batch windows of that
// order; rank r gets [r * batch, (r + 1) * batch) of them, so ranks never share a window and together see each one
// once per epoch. An epoch's last world x batch - 1 windows at most are dropped (drop_last). The position is two
// integers, saved with a checkpoint and restored for a bit-identical continuation.
class WindowSampler {
 public:
  explicit WindowSampler(const SamplerOptions& o);
  std::vector<int64_t> next();  // this rank's window starts (ids), `batch` of them; advances the position
  SamplerPosition position() const { return pos_; }
  void set_position(SamplerPosition p);  // epoch >= 0, index a multiple of world x batch within the epoch
  int64_t batches_per_epoch() const;
  const SamplerOptions& options() const { return o_; }

  // {"sampler": "window", "version": 1, "seed", "window", "tokens", "global_batch", "epoch", "index"}. Loading checks
  // that the stream, window, seed and windows per batch (world x batch) are this sampler's, and names what differs: a
  // resumed run reads the same windows in the same order, on any number of ranks that keeps the global batch.
  std::string state_json() const;
  void load_state_json(std::string_view json);

 private:
  void start_epoch(int64_t epoch);
  SamplerOptions o_;
  SamplerPosition pos_;
  int64_t offset_ = 0;
  std::vector<int64_t> order_;  // window indices of the current epoch, in visiting order
};

}  // namespace mpt::data
