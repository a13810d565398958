// examples/common/progress.h: what a training run prints and logs: progress lines, a progress bar on a terminal, FP8
// telemetry tables, the summary, and the same as JSON lines.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "mpt/data/loader.h"
#include "mpt/train/trainer.h"
#include "run_options.h"

namespace mpt_examples {

// Appends one JSON object per line to --log-json (nothing without it). A resumed run continues the file.
class JsonLog {
 public:
  JsonLog(const std::string& path, bool append);
  void write(const nlohmann::json& j);

 private:
  std::ofstream out_;
};

// One step at a time: every --log-every steps (and the last) a line and a record of the loss, learning rate, gradient
// norm, step time, tokens/s, data wait, MFU against the Trainer's dense peak, peak memory and ETA (tokens/s and MFU
// over the steps since the last line); on a terminal a bar redrawn after every step.
class Progress {
 public:
  Progress(const Options& o, int64_t start_step, int world, JsonLog& log);

  // After trainer.step(): reads the loss on logging steps (a collective: every rank calls it at every step).
  void after_step(const mpt::train::StepMetrics& m, mpt::train::Trainer& trainer, mpt::data::DataLoader& loader);
  // The "done" line and the final record.
  void summary(mpt::train::Trainer& trainer, double val_loss, mpt::Device device);

 private:
  const Options& o_;
  int64_t start_step_;
  int world_;
  JsonLog& log_;
  bool bar_;
  double window_s_ = 0, total_s_ = 0, hidden_sum_ = 0, wait_s_sum_ = 0;
  int64_t window_steps_ = 0, window_tokens_ = 0, total_tokens_ = 0;
};

// Each FP8 tensor's last quantization (amax, scale, the fractions saturated and flushed to zero), printed as a table
// and logged as {"step", "fp8_telemetry": {name: {...}}}.
void report_fp8_telemetry(const std::map<std::string, mpt::fp8::Fp8TensorStats>& telemetry, int64_t step,
                          JsonLog& log);

}  // namespace mpt_examples
