// src/train/trainer_graph.cpp: the Trainer's step from input tensors, eager or captured into a CUDA graph and replayed.
#include <fmt/format.h>

#include <cstdio>

#include "mpt/core/error.h"
#include "mpt/core/profile.h"
#include "mpt/train/trainer.h"

namespace mpt::train {

namespace {

// Eager steps before the capture: one on the current stream, so that what lives across steps (optimizer state,
// caches) is made in the ordinary pool, then CudaGraph's two on the graph's stream, which bring its private pool to
// the step's steady state.
constexpr int64_t kWarmups = 3;
// Captures tried before the graph is given up. A capture that fails runs its step as one more warm-up instead: a
// block the capture missed in the graph's pool (best fit can place a step's blocks differently where a previous
// run's outputs are still alive) is there after a warm-up that needed it.
constexpr int64_t kCaptureTries = 3;

// The metrics' device values copied out of the graph's pool (made on the current stream): a replay rewrites the
// captured step's, and a warm-up's must not stay alive in the pool, which the capture needs back.
StepMetrics copied_out(const StepMetrics& from) {
  StepMetrics m;
  m.loss = from.loss.clone();
  if (from.grad_norm.defined()) m.grad_norm = from.grad_norm.clone();
  m.stepped = from.stepped.snapshot();
  m.tokens = from.tokens;
  m.lr = from.lr;
  m.backward_done_seconds = from.backward_done_seconds;
  return m;
}

std::string describe(const Tensor& t) { return fmt::format("{}{}", t.dtype(), shape_str(t.shape())); }

}  // namespace

StepMetrics Trainer::step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens) {
  MPT_CHECK(loss != nullptr, "[Trainer] step: no loss function");
  MPT_CHECK(static_cast<int64_t>(batches.size()) == options_.grad_accum,
            "[Trainer] step: {} micro-batches of inputs given, expected grad_accum = {}", batches.size(),
            options_.grad_accum);
  for (size_t i = 0; i < batches.size(); ++i)
    for (size_t j = 0; j < batches[i].size(); ++j)
      MPT_CHECK(batches[i][j].defined(), "[Trainer] step: input {} of micro-batch {} is undefined", j, i);
  const auto t0 = std::chrono::steady_clock::now();
  const profile::Range range("step");
  if (options_.cuda_graph) {
    const std::string why = graph_refusal(batches, telemetry_due());
    if (why.empty()) return graph_step(batches, loss, total_tokens, t0);
  }
  return eager_step(batches, loss, total_tokens, t0);
}

StepMetrics Trainer::eager_step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens,
                                std::chrono::steady_clock::time_point t0) {
  std::vector<Batch> moved(batches.size());
  for (size_t i = 0; i < batches.size(); ++i)
    for (const Tensor& t : batches[i]) moved[i].push_back(t.device() == device_ ? t : t.to(device_));
  return finish_step(device_step([&](int64_t micro) { return loss(micro, moved[static_cast<size_t>(micro)]); },
                                 total_tokens, telemetry_due(), t0),
                     t0);
}

void Trainer::note_eager(const std::string& why, const std::string& kind) {
  ++graph_status_.eager_steps;
  graph_status_.last_eager = why;
  if (graph_warned_.insert(kind).second)
    std::fprintf(stderr, "mptrain: Trainer: step %lld runs without its CUDA graph: %s\n",
                 static_cast<long long>(steps_done_), why.c_str());
}

std::string Trainer::graph_refusal(const std::vector<Batch>& batches, bool telemetry) {
  if (graph_status_.off.empty()) {
    if (!device_.is_cuda()) {
      graph_status_.off = fmt::format("the model is on {}: CUDA graphs need a CUDA device", device_.str());
    } else if (dp_ != nullptr) {
      graph_status_.off = "data parallelism is not captured (its gradient buckets are launched and timed from "
                          "autograd hooks on the host)";
    } else if (options_.normalization == LossNormalization::TokenSum) {
      graph_status_.off = "LossNormalization::TokenSum divides by total_tokens, a host value that changes per step";
    }
  }
  if (!graph_status_.off.empty()) {
    note_eager(graph_status_.off, "off");
    return graph_status_.off;
  }
  if (telemetry) {
    const std::string why = "it collects FP8 telemetry (a host read per tensor)";
    note_eager(why, "telemetry");
    return why;
  }
  if (!static_inputs_.empty()) {
    for (size_t i = 0; i < batches.size(); ++i) {
      const Batch& fixed = static_inputs_[i];
      std::string why;
      if (batches[i].size() != fixed.size()) {
        why = fmt::format("micro-batch {} has {} inputs; the captured step took {}", i, batches[i].size(),
                          fixed.size());
      } else {
        for (size_t j = 0; j < fixed.size() && why.empty(); ++j) {
          if (batches[i][j].shape() != fixed[j].shape() || batches[i][j].dtype() != fixed[j].dtype())
            why = fmt::format("input {} of micro-batch {} is {}; the captured step's is {}", j, i,
                              describe(batches[i][j]), describe(fixed[j]));
        }
      }
      if (!why.empty()) {
        note_eager(why, "inputs");
        return why;
      }
    }
  }
  return {};
}

StepMetrics Trainer::graph_step(const std::vector<Batch>& batches, const BatchLoss& loss, int64_t total_tokens,
                                std::chrono::steady_clock::time_point t0) {
  if (graph_status_.warmups == 0) {
    ++graph_status_.warmups;
    return eager_step(batches, loss, total_tokens, t0);
  }
  if (graph_ == nullptr) {
    graph_ = std::make_unique<CudaGraph>(device_);
    static_inputs_.assign(batches.size(), {});
    for (size_t i = 0; i < batches.size(); ++i)
      for (const Tensor& t : batches[i]) static_inputs_[i].push_back(Tensor::empty(t.shape(), t.dtype(), device_));
  }
  for (size_t i = 0; i < batches.size(); ++i)
    for (size_t j = 0; j < batches[i].size(); ++j) static_inputs_[i][j].copy_(batches[i][j]);
  const auto micro = [&](int64_t i) { return loss(i, static_inputs_[static_cast<size_t>(i)]); };
  bool just_captured = false;  // the capture ran the step's host side (the FP8 update's count) already
  const auto warmup = [&] {
    StepMetrics m;
    graph_->warmup([&] { m = device_step(micro, total_tokens, false, t0); });
    ++graph_status_.warmups;
    return finish_step(copied_out(m), t0);
  };
  if (!graph_->captured()) {
    if (graph_status_.warmups < kWarmups) return warmup();
    try {
      graph_->capture([&] { captured_ = device_step(micro, total_tokens, false, t0); });
    } catch (const Error& e) {
      // Nothing ran: the capture only recorded. Forget the host's half-done bookkeeping and run this step as one
      // more warm-up, or, after the last try, eagerly without the graph.
      captured_ = {};
      scaler_.forget_stages();
      if (graph_status_.warmups - kWarmups + 1 < kCaptureTries) return warmup();  // each failed try added one
      drop_graph();
      graph_status_.off = fmt::format("the step could not be captured: {}", e.what());
      note_eager(graph_status_.off, "off");
      return eager_step(batches, loss, total_tokens, t0);
    }
    graph_status_.captured = true;
    just_captured = true;
    captured_grads_.clear();
    for (const Tensor& p : params_) captured_grads_.push_back(p.grad());
  }
  const double lr = current_lr();  // the value the replay reads (refreshed on the device before the launch)
  graph_->replay();
  ++graph_status_.replays;
  // The gradients are the captured step's buffers, which every replay rewrites; an eager step in between (FP8
  // telemetry, other shapes) left its own on the parameters.
  for (size_t i = 0; i < params_.size(); ++i)
    if (captured_grads_[i].defined() && params_[i].grad().storage() != captured_grads_[i].storage())
      params_[i].set_grad(captured_grads_[i]);
  StepMetrics m = copied_out(captured_);
  m.lr = lr;
  m.backward_done_seconds = 0;  // nothing marks the end of backward inside a replay
  if (fp8::Fp8ScalingState* fp8 = fp8_state(); fp8 != nullptr && !just_captured) fp8->replayed_update();
  return finish_step(std::move(m), t0);
}

void Trainer::set_cuda_graph(bool on) {
  if (!on) drop_graph();
  options_.cuda_graph = on;
}

void Trainer::drop_graph() {
  graph_.reset();
  static_inputs_.clear();
  captured_ = {};
  captured_grads_.clear();
  graph_status_.captured = false;
  graph_status_.warmups = 0;
}

}  // namespace mpt::train
