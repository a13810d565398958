// mpt/train/data_parallel.h: data-parallel gradients: rank 0's weights everywhere, bucketed all-reduces during
// backward, optional BF16/FP8 compression and ZeRO-1 optimizer sharding.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mpt/autograd/engine.h"
#include "mpt/fp8/scaling.h"
#include "mpt/train/grad_scaler.h"
#include "mpt/dist/communicator.h"
#include "mpt/nn/module.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/optimizer.h"

namespace mpt::train {

// How gradients travel. None: in their own dtype (F32; BF16 gradients of FP32 masters under amp::Policy::grads stay
// BF16: llm.c's all-reduce). BF16: rounded to BF16, summed on the wire in BF16 (dist::Communicator::
// all_reduce_on_wire), averaged in F32. FP8 (MS-AMP's FP8 all-reduce, docs/distributed.md): per parameter the
// ranks agree on amax with a MAX all-reduce, scale s = pow2 factor for E4M3 (448 / amax, rounded down to a power of
// two) / sqrt(size), codes = saturate(g * s) summed on the wire in E4M3, g = sum / (s * size) in F32. A parameter
// whose amax is inf or NaN on any rank gets an all-NaN gradient, so a GradScaler still sees the overflow.
enum class GradCompression { None, BF16, FP8 };
const char* to_string(GradCompression c);

struct DataParallelOptions {
  int64_t bucket_bytes = int64_t{25} << 20;  // gradients per collective (bytes in the gradients' dtype)
  GradCompression compression = GradCompression::None;
  // ZeRO-1: each parameter's optimizer state lives on one rank (its owner, balanced by size); gradients are
  // reduce-scattered to the owners, each rank steps only its own parameters (build the optimizer from shard()),
  // and sync_parameters() all-gathers the updated weights. Optimizer memory per rank drops to about 1/size.
  bool zero1 = false;
};

// Wraps a module's trainable parameters (F32, all on one device: the CPU with the MPI communicator, a GPU with the
// NCCL one) for a data-parallel job. The constructor broadcasts
// rank 0's parameters and buffers. Buckets are filled in reverse registration order (the order backward finishes
// them); a bucket's collective starts from the post-accumulate hooks once its last gradient is final, buckets in
// order (every rank issues the same sequence), so communication overlaps the rest of backward; the hooks also
// progress the collectives in flight. finish() starts what is left (a parameter without a gradient on this rank
// counts as zeros), waits, and writes the averaged gradients back: a parameter used on any rank gets a gradient
// on every rank, one used on none keeps none (so every rank's optimizer skips it alike). Frozen parameters
// (requires_grad false) are not touched. Inside a NoSync scope the hooks do nothing (gradient accumulation); the
// backward after it synchronises the accumulated gradients. Every rank must run the same number of backward passes.
//
// A step:   loss.backward(); dp.finish(); dp.clip_grad_norm_(1.0); opt.step(); dp.sync_parameters();
class DataParallel {
 public:
  DataParallel(nn::Module& module, std::shared_ptr<dist::Communicator> comm, const DataParallelOptions& options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Call after the last backward of a step, before clipping or the optimizer step. With zero1, only this rank's
  // parameters keep a gradient afterwards.
  void finish();
  // The groups this rank's optimizer steps: all of them, or with zero1 only the parameters it owns (a group may be
  // left empty; every rank keeps every group, so group hyperparameters line up across ranks and checkpoints). Build
  // the optimizer from these; name the parameters (optim::weight_decay_groups does) to checkpoint a sharded one.
  std::vector<optim::ParamGroup> shard(std::vector<optim::ParamGroup> groups) const;
  // zero1: every parameter's new value from its owner (after the optimizer step). Otherwise nothing to do.
  void sync_parameters();
  // optim::clip_grad_norm_ over the gradients of every rank (with zero1 the squared norms are summed across ranks),
  // summed in the module's parameter order (as optim::clip_grad_norm_(model.parameters()) sums them).
  Tensor clip_grad_norm_(double max_norm);
  // The same without touching the gradients (optim::clip_coefficient): the total norm and the coefficient as 0-d
  // tensors on the device (f32; f64 for f64 gradients), for the optimizer to apply as it reads each gradient
  // (train::Trainer's step). Nothing is read back to the host: without zero1 every rank holds the averaged gradients
  // whole; with zero1 the ranks' squared norms are summed by an all-reduce on the device (f32). Without zero1,
  // undefined tensors when no gradient is defined.
  optim::ClipCoefficient clip_coefficient(double max_norm);
  // Hooks that make every rank agree: the GradScaler's found_inf (MAX; needed with zero1, where each rank
  // unscales its own gradients) and FP8 delayed scaling's amaxes (MAX), each one all-reduce on the device that the
  // device's later work waits for, not the host (found_inf on several devices goes through the host).
  void attach(train::GradScaler& scaler);
  void attach(fp8::Fp8ScalingState& fp8);

  // Its hooks having nothing to do, they may wait for the end of the pass (autograd::HooksMayWait): the small
  // gradient adds of a later micro-batch are then batched into one launch as without data parallelism.
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp) : dp_(dp), previous_(dp.sync_) { dp.sync_ = false; }
    ~NoSync() { dp_.sync_ = previous_; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel& dp_;
    bool previous_;
    autograd::HooksMayWait hooks_may_wait_;
  };

  const std::shared_ptr<dist::Communicator>& communicator() const { return comm_; }
  int64_t num_buckets() const;
  bool owns(const Tensor& param) const;  // zero1: this rank steps it (always true without zero1)

  // The last synchronised step, for overlap reports: when each bucket's collective started and whether it had
  // completed when finish() was called (seconds from the first hook of that backward).
  struct StepTiming {
    std::vector<double> launched_s;
    std::vector<bool> done_before_finish;
    std::vector<int64_t> bytes;  // on the wire, per bucket
    double finish_called_s = 0;  // backward's end
    double finish_wait_s = 0;    // time finish() spent waiting (exposed communication)
    // Fraction of the bytes whose collective completed during backward.
    double hidden_fraction() const;
  };
  const StepTiming& last_step() const { return timing_; }
  // Buckets whose collective started before finish() was called (overlap with backward), since construction.
  int64_t buckets_started_in_backward() const { return started_in_backward_; }

 private:
  struct Bucket;
  void on_grad_ready(size_t param);
  Tensor destination(size_t param);  // the parameter's slice of its bucket (autograd::set_grad_destination)
  void launch_ready();
  void launch(Bucket& b);
  void progress();
  // Waits for the collective (on_device: orders the current stream after it, the host going on where the backend
  // allows); names the bucket when the collective fails or times out.
  void wait_for(const Bucket& b, dist::Work& work, bool on_device = false) const;

  std::shared_ptr<dist::Communicator> comm_;
  DataParallelOptions options_;
  Device device_ = Device::cpu();  // of every parameter, buffer and bucket
  bool device_set_ = false;
  std::vector<Tensor> params_;   // trainable, in bucket order
  std::vector<Tensor> module_order_;  // the same in the module's order: clipping sums over them in it
  std::vector<std::string> names_;
  std::vector<size_t> bucket_of_;
  std::vector<int> owner_;       // param -> rank (zero1)
  std::vector<std::unique_ptr<Bucket>> buckets_;
  size_t next_launch_ = 0;       // buckets start in order
  bool sync_ = true;
  bool step_started_ = false;
  double step_t0_ = 0;
  int64_t started_in_backward_ = 0;
  StepTiming timing_;
  std::shared_ptr<bool> alive_;  // the hooks outlive this object: they hold a weak_ptr to it
};

}  // namespace mpt::train
