// mpt/train/trainer.h: Trainer, the one owner of an optimizer step: micro-batches, autocast, loss scaling, FP8
// scale updates, data parallelism, clipping, the optimizer and its schedule, metrics and checkpoints.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "mpt/amp/policy.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/cuda_graph.h"
#include "mpt/core/peak.h"
#include "mpt/dist/communicator.h"
#include "mpt/fp8/scaling.h"
#include "mpt/nn/module.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/lr_schedule.h"
#include "mpt/optim/optimizer.h"
#include "mpt/train/accumulate.h"
#include "mpt/train/checkpoint.h"
#include "mpt/train/data_parallel.h"
#include "mpt/train/grad_scaler.h"

namespace mpt::train {

// Makes the optimizer from the parameter groups this process steps (with ZeRO-1 only the ones it owns).
using OptimizerFactory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<optim::ParamGroup>)>;
// Makes the learning-rate schedule bound to the optimizer.
using ScheduleFactory = std::function<std::unique_ptr<optim::LrSchedule>(optim::Optimizer&)>;

OptimizerFactory adamw(const optim::AdamWOptions& options);
ScheduleFactory warmup_cosine(const optim::WarmupCosineOptions& options);

struct TrainerOptions {
  // What GEMMs compute in (amp::Policy::named("bf16", ...)). An FP16 policy gets a dynamic loss scaler (`scaler`
  // below); an FP8 policy's scaling state is updated after every backward, before the optimizer step (which then
  // writes the FP8 weights' codes under the new scales: amp::refreshable_fp8_copy), and checkpointed.
  amp::Policy policy = amp::Policy::fp32();
  // The recipe's name as checkpoints record it ("fp32", "bf16", "fp16", "fp8-delayed", ...): a run of another precision
  // refuses the checkpoint. Empty: the policy's compute precision ("fp8" for any FP8 recipe).
  std::string precision_name{};
  int64_t grad_accum = 1;  // micro-batches per optimizer step
  LossNormalization normalization = LossNormalization::MicroBatchMean;
  double clip = 1.0;  // the global gradient-norm threshold (over every rank, ZeRO-aware); 0: no clipping, no norm
  GradScalerOptions scaler{};  // FP16 only (`enabled` is set from the policy)
  // The parameters and their groups. Empty: optim::weight_decay_groups(model.named_parameters(), weight_decay), which
  // leaves frozen parameters out.
  std::vector<optim::ParamGroup> param_groups{};
  double weight_decay = 0.0;
  ScheduleFactory schedule{};  // none: a constant learning rate
  // Data parallelism: the gradients' communicator (null or one process: none), and buckets, compression, ZeRO-1.
  std::shared_ptr<dist::Communicator> comm{};
  DataParallelOptions data_parallel{};
  // Metrics: tokens of one micro-batch on one rank (tokens/s), model FLOPs per token (MFU against the device's dense
  // peak, mpt/core/peak.h). 0: not reported.
  int64_t tokens_per_micro_batch = 0;
  double flops_per_token = 0;
  // Every this many steps, collect each FP8 tensor's quantization telemetry (a host read per tensor). 0: never.
  int64_t fp8_telemetry_every = 0;
  // Synchronise the device when backward has finished, so StepMetrics::backward_done_seconds is exact (benchmarks).
  // Not done in a replayed CUDA graph (there is no end of backward to wait for).
  bool synchronize_phases = false;
  // Run step(batches, loss) as a CUDA graph (torch.cuda.CUDAGraph's rules, mpt/core/cuda_graph.h): the inputs are
  // copied into static device buffers (one set per micro-batch), the first step runs eagerly (what lives across
  // steps is made outside the graph's pool), the next two eagerly on the graph's stream and memory pool, the fourth
  // is captured and every step after it is one replay: the host queues the whole
  // step (micro-batches, clipping, the scaler, the optimizer, FP8 updates) as one launch, then only copies the
  // inputs in and the loss, norm and skip verdict out. The learning rate is read on the device, so schedules work.
  // Where a graph cannot run, steps run eagerly and graph_status() says why (also printed once on stderr): a model
  // off CUDA, data parallelism, TokenSum (its divisor is a host value per step), a capture that fails (dropout, a
  // host read in the model); single steps run eagerly when their inputs' shapes or dtypes differ from the captured
  // ones (the graph stays for the next step that matches) or when they collect FP8 telemetry. The graph's private
  // pool keeps one step's activations between steps; an eager step beside it uses memory of its own. Give the inputs
  // on the device (as mpt::data::DataLoader does): a copy from host memory waits for the device.
  bool cuda_graph = false;
};

// Where a Trainer's CUDA graph stands (TrainerOptions::cuda_graph).
struct GraphStatus {
  bool captured = false;   // steps are replays
  int64_t warmups = 0;     // eager steps before the capture: one on the current stream, two on the graph's (and one
                           // more for each of the first two failed captures: three tries)
  int64_t replays = 0;
  int64_t eager_steps = 0;  // steps run without the graph
  std::string off;          // why the graph is off for good (empty while it works)
  std::string last_eager;   // why the last eager step was eager
};

// One micro-batch's input tensors (token ids, targets, masks, ...), on any device: the Trainer moves or copies them
// to the model's device.
using Batch = std::vector<Tensor>;
// Micro-batch `micro`'s loss from its inputs, already on the model's device (a MicroBatchLoss or a Tensor).
using BatchLoss = std::function<MicroBatchLoss(int64_t micro, const Batch& inputs)>;

// What one step did. loss and grad_norm stay on the device: reading them (Trainer::read_loss, item()) waits for it.
struct StepMetrics {
  int64_t step = 0;        // the index of the step taken (0-based)
  Tensor loss{};           // this rank's batch loss, 0-d, detached
  Tensor grad_norm{};      // before clipping; undefined when clip is 0
  double lr = 0;           // the learning rate the step used
  StepResult stepped{true};  // false when the loss scaler skipped it (reading it waits for the device)
  // Host wall time of step() and of its part up to the end of backward (the averaged gradients). On a GPU the device
  // may still be running: time a window of steps that ends in a read (e.g. read_loss) for rates.
  double seconds = 0, backward_done_seconds = 0;
  int64_t tokens = 0;      // tokens of every rank in this step (0 without tokens_per_micro_batch)
  double tokens_per_second = 0;
  double mfu = 0;          // model FLOPs / (seconds x ranks x dense peak); 0 when unknown
  int64_t peak_memory_bytes = 0;  // this rank's device allocator peak so far
  // Data parallel: the fraction of gradient bytes whose collective finished during backward, the time finish()
  // waited for the rest.
  double comm_hidden_fraction = 0, comm_wait_seconds = 0;
  std::map<std::string, fp8::Fp8TensorStats> fp8_telemetry{};  // on telemetry steps only
};

class Trainer {
 public:
  Trainer(nn::Module& model, OptimizerFactory optimizer, TrainerOptions options = {});
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step. micro_batch(i), i = 0 .. grad_accum - 1, returns micro-batch i's loss (a Tensor, or a
  // MicroBatchLoss with its token count under TokenSum); it runs under the policy's Autocast, and its backward under
  // DataParallel's no_sync for all but the last. Then: the averaged gradients, unscale, clip, the optimizer step
  // (skipped on the device when the FP16 scaler found an inf/NaN), the ZeRO-1 parameter gather, the scaler and FP8
  // updates and the schedule. Gradients are zeroed before the first micro-batch.
  // total_tokens: under TokenSum, the tokens of all micro-batches of this step (the loss divisor).
  StepMetrics step(const std::function<MicroBatchLoss(int64_t micro)>& micro_batch, int64_t total_tokens = 0);
  // The same step from input tensors: micro-batch i's loss is loss(i, batches[i]) (batches.size() == grad_accum).
  // With TrainerOptions::cuda_graph the step is captured and replayed (see there); without, it is step() above on
  // the inputs moved to the model's device. Either way the parameters, optimizer state and metrics have the bits
  // of the eager step.
  StepMetrics step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens = 0);
  const GraphStatus& graph_status() const { return graph_status_; }

  // fn() with gradients off, the model in eval mode and the policy's Autocast (validation, sampling); train mode after.
  template <class F>
  auto evaluate(F&& fn) {
    struct TrainAgain {
      nn::Module& m;
      ~TrainAgain() { m.train(); }
    } again{model_};
    autograd::NoGradGuard no_grad;
    amp::Autocast autocast(options_.policy);
    model_.eval();
    return fn();
  }

  // Checkpoints of the whole run (docs/checkpoints.md): model, optimizer (sharded with ZeRO-1), schedule, loss scaler,
  // FP8 state, dropout RNG, the step count and skipped steps, and the application's own JSON objects (its
  // configuration; its data position). Every rank calls them together.
  std::filesystem::path save(const std::filesystem::path& dir, const SaveOptions& options = {},
                             const std::string& run_config_json = "{}", const std::string& data_json = "{}");
  // Adds a part of the run that save() and load() carry along by name (TrainingState::parts), e.g. an EMA's counters.
  void add_state(StatefulPart part) { parts_.push_back(std::move(part)); }
  // Restores everything save() wrote (refusing another precision, shape or world size before changing anything);
  // the next step() continues the run bit for bit (a CUDA graph is dropped and captured again after two warm-up
  // steps). Returns what the checkpoint says of itself.
  CheckpointInfo load(const std::filesystem::path& path);

  // Every rank's loss of that step, averaged (a collective: every rank calls it at the same step).
  double read_loss(const StepMetrics& m) const;
  // True on every rank when `flag` is true on any (a collective), e.g. a stop request that reached one rank.
  bool any_rank(bool flag) const;

  nn::Module& model() { return model_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  optim::LrSchedule* schedule() { return schedule_.get(); }
  const amp::Policy& policy() const { return options_.policy; }
  const GradScaler& scaler() const { return scaler_; }  // disabled unless the policy is FP16
  fp8::Fp8ScalingState* fp8_state() const { return options_.policy.fp8_state.get(); }
  DataParallel* data_parallel() { return dp_.get(); }
  const TrainerOptions& options() const { return options_; }
  void set_synchronize_phases(bool on) { options_.synchronize_phases = on; }
  // TrainerOptions::cuda_graph from the next step on (off drops a captured graph; on starts with the warm-ups).
  void set_cuda_graph(bool on);
  const std::string& precision_name() const { return precision_name_; }
  const DensePeak& peak() const { return peak_; }  // MFU's denominator (flops 0: unknown)
  int64_t world_size() const;
  int64_t steps_done() const { return steps_done_; }
  // Steps the loss scaler skipped (FP16; reads the device's verdicts since the last call, so it waits for the device).
  int64_t skipped_steps();

 private:
  TrainingState state(const std::string& run_config_json, const std::string& data_json);
  bool telemetry_due() const;
  // The step's device work (zeroing through the FP8 update); fills loss, grad_norm, stepped, backward time, tokens.
  StepMetrics device_step(const std::function<MicroBatchLoss(int64_t)>& micro_batch, int64_t total_tokens,
                          bool telemetry, std::chrono::steady_clock::time_point t0);
  // The step's host work after it: telemetry, the schedule, counters and metrics.
  StepMetrics finish_step(StepMetrics m, std::chrono::steady_clock::time_point t0);
  double current_lr() const;
  // step(batches, loss) without a graph: the inputs moved to the model's device.
  StepMetrics eager_step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens,
                         std::chrono::steady_clock::time_point t0);
  // Why this step cannot be a graph step ("" when it can); sets graph_status_.off for reasons that last.
  std::string graph_refusal(const std::vector<Batch>& batches, bool telemetry);
  void note_eager(const std::string& why, const std::string& kind);
  StepMetrics graph_step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens,
                         std::chrono::steady_clock::time_point t0);
  void drop_graph();

  nn::Module& model_;
  TrainerOptions options_;
  std::string precision_name_;
  Device device_ = Device::cpu();
  GradScaler scaler_;
  std::unique_ptr<DataParallel> dp_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  std::unique_ptr<optim::LrSchedule> schedule_;
  std::vector<Tensor> params_;  // what clipping sees without data parallelism
  DensePeak peak_;
  int64_t steps_done_ = 0, skipped_ = 0;
  std::vector<StepResult> unread_;  // FP16: steps whose skip verdict is still on the device
  std::vector<StatefulPart> parts_;
  // TrainerOptions::cuda_graph: the graph, its static inputs (per micro-batch) and what its captured step returned.
  std::unique_ptr<CudaGraph> graph_;
  std::vector<Batch> static_inputs_;
  StepMetrics captured_;
  std::vector<Tensor> captured_grads_;  // params_' gradients as the captured step left them
  GraphStatus graph_status_;
  std::set<std::string> graph_warned_;  // kinds of eager steps already reported on stderr
};

}  // namespace mpt::train
