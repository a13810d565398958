// examples/common/progress.cpp: progress lines, the terminal's progress bar, FP8 telemetry tables and JSON records.
#include "progress.h"

#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "mpt/core/error.h"
#include "mpt/core/memory.h"

namespace mpt_examples {
namespace {

// "12.3%", flagged when above 100% (a register-only or datasheet peak cannot be beaten: the peak is wrong), or "n/a".
std::string mfu_text(double mfu, const mpt::DensePeak& peak) {
  if (peak.flops <= 0) return "n/a";
  return fmt::format("{:.1f}%{}", 100 * mfu, mfu > 1 ? " (above the peak: the peak is wrong)" : "");
}

}  // namespace

JsonLog::JsonLog(const std::string& path, bool append) {
  if (path.empty()) return;
  out_.open(path, append ? std::ios::app : std::ios::trunc);
  MPT_CHECK(out_, "[train_gpt] cannot write the log '{}'", path);
}

void JsonLog::write(const nlohmann::json& j) {
  if (out_.is_open()) out_ << j.dump() << "\n" << std::flush;
}

void report_fp8_telemetry(const std::map<std::string, mpt::fp8::Fp8TensorStats>& telemetry, int64_t step,
                          JsonLog& log) {
  nlohmann::json all = nlohmann::json::object();
  fmt::print("fp8 telemetry, step {}:\n{:<34} {:>11} {:>11} {:>10} {:>10}\n", step, "tensor", "amax", "scale",
             "saturated", "flushed");
  for (const auto& [name, t] : telemetry) {
    if (t.count == 0) continue;  // not quantized yet (e.g. a weight served from the cache)
    fmt::print("{:<34} {:>11.4g} {:>11.4g} {:>9.4f}% {:>9.4f}%\n", name, t.amax, t.scale, 100 * t.saturated,
               100 * t.flushed);
    all[name] = {{"amax", t.amax}, {"scale", t.scale}, {"saturated", t.saturated}, {"flushed", t.flushed},
                 {"numel", t.numel}};
  }
  log.write({{"step", step}, {"fp8_telemetry", all}});
}

// Not when stdout is a file or a pipe, nor under mpirun (OpenMPI gives its ranks a pseudo-terminal even when the
// job's output goes to a file).
Progress::Progress(const Options& o, int64_t start_step, int world, JsonLog& log)
    : o_(o), start_step_(start_step), world_(world), log_(log), bar_(::isatty(STDOUT_FILENO) != 0 && world == 1) {}

void Progress::after_step(const mpt::train::StepMetrics& m, mpt::train::Trainer& trainer,
                          mpt::data::DataLoader& loader) {
  const int64_t step = m.step;
  if (!m.fp8_telemetry.empty()) report_fp8_telemetry(m.fp8_telemetry, step, log_);
  // The loss and the norm stay on the device between logging steps: a step on a GPU does not wait for them.
  const bool log_step = step % o_.log_every == 0 || step + 1 == o_.steps;
  double loss = 0, norm = 0, seconds = m.seconds;
  if (log_step) {
    const auto t0 = std::chrono::steady_clock::now();
    loss = trainer.read_loss(m);  // every rank's, averaged
    norm = m.grad_norm.defined() ? m.grad_norm.item<double>() : 0.0;
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    MPT_CHECK(std::isfinite(loss), "[{}] the loss became {} at step {}", o_.program, loss, step);
  }
  window_s_ += seconds;
  total_s_ += seconds;
  ++window_steps_;
  window_tokens_ += m.tokens;
  total_tokens_ += m.tokens;
  hidden_sum_ += m.comm_hidden_fraction;
  wait_s_sum_ += m.comm_wait_seconds;
  const auto eta_s = static_cast<int64_t>(total_s_ / static_cast<double>(step + 1 - start_step_) *
                                          static_cast<double>(o_.steps - step - 1));
  if (bar_) {  // one line redrawn after every step, cleared before any other output
    const int width = 30, filled = static_cast<int>(width * (step + 1) / o_.steps);
    fmt::print("\r[{}{}] {:3}% step {}/{} ETA {}:{:02} ", std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(width - filled), '.'), 100 * (step + 1) / o_.steps, step + 1, o_.steps,
               eta_s / 60, eta_s % 60);
    std::fflush(stdout);
    if (log_step || step + 1 == o_.steps || (o_.eval_every > 0 && (step + 1) % o_.eval_every == 0))
      fmt::print("\r{}\r", std::string(80, ' '));
  }
  if (!log_step) return;
  const double tps = static_cast<double>(window_tokens_) / window_s_;  // every rank's tokens
  // Time the step waited for its batches (the loader's worker was behind), per step of the window.
  const double data_wait_ms = loader.take_wait_seconds() * 1e3 / static_cast<double>(window_steps_);
  const mpt::DensePeak& peak = trainer.peak();  // each rank has its own device and peak
  const double mfu = mpt::mfu(tps / world_ * trainer.options().flops_per_token, peak);
  const bool scaled = trainer.scaler().is_enabled();
  fmt::print("step {:5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:7.1f} ms | {:8.0f} tok/s | data wait "
             "{:.2f} ms | MFU {} | peak mem {:.0f} MiB | ETA {}:{:02}{}{}\n", step, o_.steps, loss, m.lr, norm,
             seconds * 1e3, tps, data_wait_ms, mfu_text(mfu, peak),
             static_cast<double>(m.peak_memory_bytes) / (1 << 20), eta_s / 60, eta_s % 60,
             scaled ? fmt::format(" | scale {:g}", trainer.scaler().get_scale()) : std::string(),
             world_ > 1 ? fmt::format(" | comm hidden {:.0f}%, wait {:.1f} ms", 100 * hidden_sum_ / window_steps_,
                                      wait_s_sum_ * 1e3 / window_steps_)
                        : std::string());
  nlohmann::json record{{"step", step}, {"loss", loss}, {"lr", m.lr}, {"grad_norm", norm}, {"tokens_per_s", tps},
                        {"data_wait_ms", data_wait_ms}};
  if (peak.flops > 0) record["mfu"] = mfu;
  if (scaled) record["loss_scale"] = trainer.scaler().get_scale();
  log_.write(record);
  window_s_ = hidden_sum_ = wait_s_sum_ = 0;
  window_steps_ = window_tokens_ = 0;
  std::fflush(stdout);
}

void Progress::summary(mpt::train::Trainer& trainer, double val_loss, mpt::Device device) {
  const int64_t steps_run = o_.steps - start_step_;
  const double mean_tps = total_s_ > 0 ? static_cast<double>(total_tokens_) / total_s_ : 0.0;
  const int64_t skipped = trainer.skipped_steps();
  fmt::print("done: {} steps in {:.0f} s ({} skipped by the loss scaler), mean {:.0f} tok/s, final val loss {:.4f}\n",
             steps_run, total_s_, skipped, mean_tps, val_loss);
  log_.write({{"final", true}, {"precision", o_.precision}, {"steps", o_.steps}, {"skipped", skipped},
              {"tokens_per_s", mean_tps}, {"val_loss", val_loss}});
  fmt::print("peak memory on {}: {:.1f} MiB\n", device,
             static_cast<double>(mpt::memory_stats(device).peak_bytes) / (1 << 20));
}

}  // namespace mpt_examples
