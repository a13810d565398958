// mpt/dist/data_parallel.h: data-parallel gradients: rank 0's weights everywhere, bucketed all-reduces during backward.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "mpt/dist/communicator.h"
#include "mpt/nn/module.h"

namespace mpt::dist {

struct DataParallelOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // gradients per all-reduce (F32 bytes)
};

// Wraps a module's trainable parameters (CPU, F32 gradients) for a data-parallel job: the constructor broadcasts rank
// 0's parameters and buffers; buckets are filled in reverse registration order (the order backward finishes them)
// and each bucket's all-reduce (Avg) starts from the post-accumulate hooks as soon as its last gradient is final, so
// communication overlaps the rest of backward. finish() waits for every bucket (starting those a parameter without a
// gradient left incomplete, with zeros for it) and writes the averaged gradients back. Inside a NoSync scope the hooks
// do nothing (gradient accumulation); the backward after it synchronises the accumulated gradients. Every rank must
// run the same backward passes.
class DataParallel {
 public:
  DataParallel(nn::Module& module, std::shared_ptr<Communicator> comm, const DataParallelOptions& options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Call after the last backward of a step, before clipping or the optimizer step.
  void finish();

  class NoSync {
   public:
    explicit NoSync(DataParallel& dp) : dp_(dp), previous_(dp.sync_) { dp.sync_ = false; }
    ~NoSync() { dp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& dp_;
    bool previous_;
  };

  int64_t num_buckets() const;
  // Buckets whose all-reduce started before finish() was called (overlap with backward), since construction.
  int64_t buckets_started_in_backward() const { return started_in_backward_; }

 private:
  struct Bucket;
  void on_grad_ready(size_t param);
  void launch(Bucket& b);

  std::shared_ptr<Communicator> comm_;
  std::vector<Tensor> params_;        // trainable, in bucket order
  std::vector<size_t> bucket_of_;     // param -> bucket
  std::vector<std::unique_ptr<Bucket>> buckets_;
  bool sync_ = true;
  int64_t started_in_backward_ = 0;
  std::shared_ptr<bool> alive_;  // the hooks outlive this object: they check it
};

}  // namespace mpt::dist
