// src/train/trainer.cpp: Trainer: the order of one optimizer step, written once, and the run's checkpoints.
#include "mpt/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>

#include "mpt/autograd/node.h"
#include "mpt/core/error.h"
#include "mpt/core/memory.h"
#include "mpt/core/profile.h"
#include "mpt/core/stream.h"
#include "mpt/optim/clip.h"

namespace mpt::train {

OptimizerFactory adamw(const optim::AdamWOptions& options) {
  return [options](std::vector<optim::ParamGroup> groups) -> std::unique_ptr<optim::Optimizer> {
    return std::make_unique<optim::AdamW>(std::move(groups), options);
  };
}

ScheduleFactory warmup_cosine(const optim::WarmupCosineOptions& options) {
  return [options](optim::Optimizer& opt) -> std::unique_ptr<optim::LrSchedule> {
    return std::make_unique<optim::WarmupCosineLr>(opt, options);
  };
}

namespace {

DType gemm_dtype(const amp::Policy& policy) {
  switch (policy.compute) {
    case amp::Precision::FP16: return DType::F16;
    case amp::Precision::BF16: return DType::BF16;
    case amp::Precision::FP8: return DType::F8E4M3;
    case amp::Precision::FP32: break;
  }
  return DType::F32;
}

}  // namespace

Trainer::Trainer(nn::Module& model, OptimizerFactory optimizer, TrainerOptions options)
    : model_(model), options_(std::move(options)) {
  MPT_CHECK(optimizer != nullptr, "[Trainer] no optimizer factory (e.g. mpt::train::adamw({{.lr = 3e-4}}))");
  MPT_CHECK(options_.grad_accum >= 1, "[Trainer] grad_accum must be >= 1, got {}", options_.grad_accum);
  MPT_CHECK(options_.clip >= 0, "[Trainer] clip must be >= 0 (0: no clipping), got {}", options_.clip);
  precision_name_ = options_.precision_name;
  if (precision_name_.empty()) {  // a checkpoint resumes only under the same GEMM precision and residual stream
    precision_name_ = amp::precision_name(std::string(amp::to_string(options_.policy.compute)), options_.policy);
  }
  std::vector<optim::ParamGroup> groups = options_.param_groups.empty()
      ? optim::weight_decay_groups(model_.named_parameters(), options_.weight_decay)
      : options_.param_groups;
  for (const optim::ParamGroup& g : groups) params_.insert(params_.end(), g.params.begin(), g.params.end());
  MPT_CHECK(!params_.empty(), "[Trainer] the model has no trainable parameter (all frozen?)");
  device_ = params_.front().device();
  if (const std::optional<DType>& g = options_.policy.grads) {  // BF16 gradients of the FP32 masters (llm.c's)
    MPT_CHECK(*g == DType::F32 || *g == DType::BF16, "[Trainer] the policy's gradient dtype must be f32 or bf16, got {}",
              *g);
    for (const Tensor& p : params_)
      if (p.requires_grad() && p.dtype() == DType::F32)
        autograd::set_grad_dtype(p, *g == DType::F32 ? std::nullopt : std::optional<DType>(*g));
  }
  GradScalerOptions scaler = options_.scaler;
  scaler.enabled = options_.policy.compute == amp::Precision::FP16;
  scaler_ = GradScaler(scaler, device_);
  if (options_.comm != nullptr) {
    dp_ = std::make_unique<DataParallel>(model_, options_.comm, options_.data_parallel);
    dp_->attach(scaler_);
    if (fp8_state() != nullptr) dp_->attach(*fp8_state());
    groups = dp_->shard(std::move(groups));
  }
  optimizer_ = optimizer(std::move(groups));
  MPT_CHECK(optimizer_ != nullptr, "[Trainer] the optimizer factory returned no optimizer");
  if (options_.schedule) schedule_ = options_.schedule(*optimizer_);
  if (options_.flops_per_token > 0) peak_ = dense_peak(gemm_dtype(options_.policy), device_);
}

Trainer::~Trainer() = default;

int64_t Trainer::world_size() const { return dp_ != nullptr ? dp_->communicator()->size() : 1; }

bool Trainer::telemetry_due() const {
  return fp8_state() != nullptr && options_.fp8_telemetry_every > 0 && steps_done_ % options_.fp8_telemetry_every == 0;
}

StepMetrics Trainer::step(const std::function<MicroBatchLoss(int64_t micro)>& micro_batch, int64_t total_tokens) {
  const auto t0 = std::chrono::steady_clock::now();
  const profile::Range range("step");
  return finish_step(device_step(micro_batch, total_tokens, telemetry_due(), t0), t0);
}

StepMetrics Trainer::device_step(const std::function<MicroBatchLoss(int64_t)>& micro_batch, int64_t total_tokens,
                                 bool telemetry, std::chrono::steady_clock::time_point t0) {
  StepMetrics m;
  fp8::Fp8ScalingState* fp8 = fp8_state();
  if (telemetry) fp8->set_collect_telemetry(true);
  if (steps_done_ == 0) optimizer_->materialize_state();  // long-lived memory before the first activations
  optimizer_->zero_grad();
  model_.zero_grad();  // with ZeRO-1 the optimizer holds only this rank's parameters
  const int64_t k = options_.grad_accum;
  std::optional<DataParallel::NoSync> no_sync;  // every micro-batch's backward but the last
  const AccumulateResult acc = accumulate_gradients(
      k,
      [&](int64_t micro) {
        if (dp_ != nullptr) {
          if (micro + 1 < k) no_sync.emplace(*dp_); else no_sync.reset();
        }
        amp::Autocast autocast(options_.policy);
        return micro_batch(micro);
      },
      {.normalization = options_.normalization, .total_tokens = total_tokens,
       .scale_loss = [&](const Tensor& l) { return scaler_.scale(l); }});
  m.loss = acc.loss;
  m.tokens = acc.tokens;  // this rank's; finish_step makes it every rank's
  if (dp_ != nullptr) dp_->finish();  // the averaged gradients (waits for the buckets still in flight)
  if (options_.synchronize_phases && device_.is_cuda() && CudaGraph::capturing(device_) == nullptr)
    Stream::current(device_).synchronize();
  m.backward_done_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  scaler_.unscale_(*optimizer_);      // clipping sees the true gradients
  // Clipping: the optimizer multiplies each gradient by the coefficient as it reads it (one pass over the gradients
  // fewer than scaling them in place first), with data parallelism too (over every rank's gradients, ZeRO-aware).
  Tensor clip_multiplier;
  if (options_.clip > 0) {
    // f64 parameters (CPU) have f64 gradients, which the optimizers take no f64 multiplier for: scaled in place. The
    // parameters decide (the same on every rank), not a rank's gradients (ZeRO-1 ranks may hold none).
    // Without ZeRO-1 every rank holds the averaged gradients whole: they are clipped as without data parallelism,
    // over the Trainer's parameter order (the norm's summation order), so one process gives plain training's bits.
    const bool f64 = std::ranges::any_of(params_, [](const Tensor& p) { return p.dtype() == DType::F64; });
    const bool sharded = dp_ != nullptr && options_.data_parallel.zero1;
    if (f64) {
      m.grad_norm = sharded ? dp_->clip_grad_norm_(options_.clip) : optim::clip_grad_norm_(params_, options_.clip);
    } else {
      optim::ClipCoefficient c = sharded ? dp_->clip_coefficient(options_.clip)
                                         : optim::clip_coefficient(params_, options_.clip);
      m.grad_norm = c.total_norm.defined() ? c.total_norm : Tensor::zeros({});
      clip_multiplier = std::move(c.coefficient);
    }
  }
  m.lr = current_lr();
  if (telemetry) {
    m.fp8_telemetry = fp8->telemetry();
    fp8->set_collect_telemetry(false);
  }
  // Delayed scaling: the next step's scales from the amax history, before the optimizer step (which reads no amax),
  // so that AdamW can write the weights' FP8 codes under them as it updates the masters (amp::refreshable_fp8_copy)
  // instead of the next forward quantizing every master again. The scales are the same either way.
  if (fp8 != nullptr) fp8->update();
  // The skip happens on the device; whether it did is read only with a loss scaler (it waits for the device).
  m.stepped = scaler_.step(*optimizer_, clip_multiplier);
  if (dp_ != nullptr) dp_->sync_parameters();  // ZeRO-1: every rank's updated shard everywhere
  scaler_.update();
  return m;
}

double Trainer::current_lr() const {
  return schedule_ != nullptr ? schedule_->current_lr() : optimizer_->param_groups().front().lr.value_or(0.0);
}

StepMetrics Trainer::finish_step(StepMetrics m, std::chrono::steady_clock::time_point t0) {
  m.step = steps_done_;
  if (schedule_ != nullptr) schedule_->step();
  if (scaler_.is_enabled()) unread_.push_back(m.stepped);  // read in skipped_steps(), not here: no wait per step
  ++steps_done_;
  m.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const int64_t world = world_size();
  m.tokens = options_.tokens_per_micro_batch > 0 ? options_.tokens_per_micro_batch * options_.grad_accum * world
                                                 : m.tokens * world;
  if (m.seconds > 0) m.tokens_per_second = static_cast<double>(m.tokens) / m.seconds;
  m.mfu = mfu(m.tokens_per_second / static_cast<double>(world) * options_.flops_per_token, peak_);
  m.peak_memory_bytes = memory_stats(device_).peak_bytes;
  if (dp_ != nullptr) {
    m.comm_hidden_fraction = dp_->last_step().hidden_fraction();
    m.comm_wait_seconds = dp_->last_step().finish_wait_s;
  }
  return m;
}

int64_t Trainer::skipped_steps() {
  for (const StepResult& r : unread_) skipped_ += r ? 0 : 1;
  unread_.clear();
  return skipped_;
}

double Trainer::read_loss(const StepMetrics& m) const {
  MPT_CHECK(m.loss.defined(), "[Trainer] read_loss: the metrics hold no loss");
  const double local = m.loss.item<double>();
  if (world_size() == 1) return local;
  Tensor l = Tensor::full({1}, local, DType::F32).to(device_);
  dp_->communicator()->all_reduce(l, dist::ReduceOp::Avg)->wait();
  return l.to_vector<float>()[0];
}

bool Trainer::any_rank(bool flag) const {
  if (world_size() == 1) return flag;
  Tensor f = Tensor::full({1}, flag ? 1.0 : 0.0, DType::F32).to(device_);
  dp_->communicator()->all_reduce(f, dist::ReduceOp::Max)->wait();
  return f.to_vector<float>()[0] > 0;
}

TrainingState Trainer::state(const std::string& run_config_json, const std::string& data_json) {
  return TrainingState{.model = &model_, .optimizer = optimizer_.get(), .schedule = schedule_.get(),
                       .scaler = &scaler_, .fp8 = fp8_state(), .step = steps_done_, .precision = precision_name_,
                       .run_config_json = run_config_json, .data_json = data_json,
                       .comm = dp_ != nullptr ? dp_->communicator().get() : nullptr,
                       .optimizer_sharded = dp_ != nullptr && options_.data_parallel.zero1, .parts = parts_};
}

std::filesystem::path Trainer::save(const std::filesystem::path& dir, const SaveOptions& options,
                                    const std::string& run_config_json, const std::string& data_json) {
  nlohmann::json data = nlohmann::json::parse(data_json, nullptr, /*allow_exceptions=*/false);
  MPT_CHECK(data.is_object(), "[Trainer] save: data_json must be a JSON object, got '{}'", data_json);
  data["skipped_steps"] = skipped_steps();  // the Trainer's own counter, beside the application's data position
  return save_checkpoint(dir, state(run_config_json, data.dump()), options);
}

CheckpointInfo Trainer::load(const std::filesystem::path& path) {
  drop_graph();  // the checkpoint's tensors may not be the ones a graph captured
  TrainingState s = state("{}", "{}");
  CheckpointInfo info = load_checkpoint(path, s);
  steps_done_ = info.step;
  unread_.clear();
  const nlohmann::json data = nlohmann::json::parse(info.data_json, nullptr, /*allow_exceptions=*/false);
  if (data.is_object() && data.contains("skipped_steps") && data.at("skipped_steps").is_number_integer())
    skipped_ = data.at("skipped_steps").get<int64_t>();
  return info;
}

}  // namespace mpt::train
