// mpt/data/loader.h: batches of token windows prepared on a background thread, ahead of the training step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "mpt/core/device.h"
#include "mpt/core/tensor.h"
#include "mpt/data/sampler.h"
#include "mpt/data/token_file.h"

namespace mpt::data {

struct LoaderOptions {
  int64_t batch = 1;  // sequences per rank
  int64_t seq = 0;    // tokens per sequence
  int rank = 0, world = 1;
  uint64_t seed = 0;
  int prefetch = 2;                // batches prepared ahead, at least 1
  Device device = Device::cpu();  // where next() delivers them
};

struct Batch {
  Tensor x, y;  // [batch, seq] int64 on the device: the window's first seq ids and the seq ids after each
};

// A WindowSampler over a TokenSource (a TokenFile, or a TokenVector) whose batches a worker thread reads while the
// step runs, up to `prefetch` ahead.
// On CUDA the worker fills page-locked host buffers and next() issues one asynchronous copy per batch on the
// device's current stream (the step's kernels queue behind it; the host does not wait). next() blocks only when
// the worker is behind, and that time is measured (wait_seconds). Errors on the worker (a corrupt id) are thrown by
// the next() that would have returned that batch. state_json() is the sampler's position after the last batch next()
// returned, not after the prefetched ones, so a checkpoint resumes exactly where training stood.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const TokenSource> data, const LoaderOptions& options);
  ~DataLoader();  // stops the worker (and waits for copies still reading its buffers)
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  Batch next();
  double wait_seconds() const;  // total time next() spent waiting for the worker
  double take_wait_seconds();   // the time since the last call (per logging window)
  int64_t batches() const;      // batches next() returned
  std::string state_json() const;
  void load_state_json(std::string_view json);  // discards the prefetched batches and continues from there
  const LoaderOptions& options() const;
  int64_t batches_per_epoch() const;  // of the first epoch (later ones may differ by one: their offsets differ)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace mpt::data
