// examples/common/run_options.h: a GPT training run's options: the flags, --config FILE, --preset, and --resume taking
// every option not given from the checkpoint.
#pragma once

#include <cstdint>
#include <string>
#include <variant>

#include <nlohmann/json.hpp>

namespace mpt_examples {

struct Options {
  std::string program = "train_gpt";  // the name errors start with: "[train_gpt] ..."
  std::string model = "gpt";  // the family: gpt (GPT-2) or llama
  int64_t kv_heads = 0;       // llama: key/value heads (grouped-query attention); 0: --heads
  std::string data{};
  std::string tokens{};            // mpt-tokenize's directory (train.tok, val.tok, tokenizer.json) instead of --data
  std::string tokenizer = "char";  // for --data: char or bpe (trained on the text's first nine tenths)
  int64_t vocab_size = 2048;       // the BPE vocabulary
  // The defaults train on the built-in tinyshakespeare to a validation loss near 1.62 in about 3 minutes on 2 CPU
  // cores (docs/examples.md).
  int64_t steps = 2000, batch = 16, seq = 128, layers = 4, heads = 6, embd = 192;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0, dropout = 0.0;
  int64_t warmup = -1, log_every = 25, eval_every = 250, eval_batches = 8, sample_chars = 300;
  uint64_t seed = 1337;
  bool checkpoint = false;  // activation checkpointing
  std::string precision = "fp32";
  std::string grads = "f32";        // the masters' gradient dtype (amp::Policy::grads): f32 or bf16
  std::string residual = "f32";     // the residual stream's dtype (amp::Policy::residual): f32, bf16 or f16
  int64_t grad_accum = 1;
  std::string log_json{};
  std::string moments = "f32";      // AdamW moment storage: f32, bf16, int8
  std::string optimizer = "adamw";  // adamw, or adamw8bit (AdamW with int8 blockwise moments)
  int64_t freeze = -1;              // >= 0: freeze the embeddings and the first `freeze` blocks
  int64_t fp8_telemetry = 0;        // > 0: every this many steps, print and log each FP8 tensor's quantization stats
  // FP8 precisions on a GPU: "auto" runs a layer in FP8 only where the per-shape rule (amp::Fp8GemmRule, fitted to
  // fp8_calibration's measurements, the H200's when empty) judges it faster than BF16; "all" runs every layer the
  // policy gives FP8 in FP8.
  std::string fp8_layers = "auto";
  std::string fp8_calibration{};
  double init_scale = 65536;        // the fp16 GradScaler's initial scale
  // Quantization-aware training: int8, int4 or fp8 (amp::QatScheme::named) on every Linear but the LM head; empty:
  // none. qat_group: int4's group size.
  std::string qat{};
  int64_t qat_group = 32;
  bool qat_lsq = false;  // learned weight scales (LSQ) instead of absmax ones (int8 / int4)
  // Checkpoints (not part of the saved configuration except save_every and keep).
  std::string save_dir{}, resume{};
  int64_t save_every = 0, keep = 3, stop_after = 0;
  // Pretrained weights to start from (weights only: a fresh optimizer at step 0). Recorded in the checkpoint's
  // configuration but never restored from it: a resumed run continues its own weights.
  std::string init_from{};
  // Data parallelism under mpirun (not saved: a run may resume with other settings).
  double bucket_mb = 25;
  bool zero1 = false;
  std::string grad_compression = "none";
  // Capture the training step into a CUDA graph and replay it (TrainerOptions::cuda_graph; not saved).
  bool cuda_graph = false;
};

// Parses the command line of `o.program` into `o` (whose fields hold the defaults): the flags; --config FILE, a TOML
// file of long flags that must be text and whose every key must be a flag (a misspelt key is an error naming the
// nearest one); --preset; --resume, which takes every saved option not given from the checkpoint. Returns the options
// ready to run, or the exit code when the program should end at once (--help, or a malformed command line that CLI11
// has reported). Throws mpt::Error naming any other mistake.
std::variant<Options, int> parse_options(int argc, char** argv, Options o = {});

// The options a checkpoint records (its run_config JSON), by the keys older checkpoints used.
nlohmann::json saved_options(const Options& o);

}  // namespace mpt_examples
