// examples/common/run_options.cpp: the flags of a GPT training run, a checked --config file, presets, and the options a
// checkpoint saves and a resumed run restores.
#include "run_options.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "mpt/core/error.h"
#include "mpt/core/profile.h"
#include "mpt/train/checkpoint.h"

namespace mpt_examples {
namespace {

// One option a checkpoint records: its run_config key (the field's name, as every checkpoint so far wrote it) and the
// flag that sets it. A resumed run takes each one whose flag it is not given.
struct SavedOption {
  const char* key;
  const char* flag;
  std::function<nlohmann::json(const Options&)> get;
  std::function<void(Options&, const nlohmann::json&)> set;
};

template <class T>
SavedOption saved(const char* key, const char* flag, T Options::*field) {
  return {key, flag, [field](const Options& o) { return nlohmann::json(o.*field); },
          [field](Options& o, const nlohmann::json& j) { j.get_to(o.*field); }};
}

const std::vector<SavedOption>& saved_option_table() {
  using O = Options;
  static const std::vector<SavedOption> table{
      saved("data", "--data", &O::data), saved("tokens", "--tokens", &O::tokens),
      saved("tokenizer", "--tokenizer", &O::tokenizer), saved("vocab_size", "--vocab-size", &O::vocab_size),
      saved("steps", "--steps", &O::steps), saved("batch", "--batch", &O::batch), saved("seq", "--seq", &O::seq),
      saved("layers", "--layers", &O::layers), saved("heads", "--heads", &O::heads), saved("embd", "--embd", &O::embd),
      saved("lr", "--lr", &O::lr), saved("min_lr", "--min-lr", &O::min_lr),
      saved("weight_decay", "--weight-decay", &O::weight_decay), saved("clip", "--clip", &O::clip),
      saved("dropout", "--dropout", &O::dropout), saved("warmup", "--warmup", &O::warmup),
      saved("log_every", "--log-every", &O::log_every), saved("eval_every", "--eval-every", &O::eval_every),
      saved("eval_batches", "--eval-batches", &O::eval_batches), saved("sample_chars", "--sample", &O::sample_chars),
      saved("seed", "--seed", &O::seed), saved("checkpoint", "--checkpoint-activations", &O::checkpoint),
      saved("precision", "--precision", &O::precision), saved("residual", "--residual", &O::residual),
      saved("grads", "--grads", &O::grads), saved("grad_accum", "--grad-accum", &O::grad_accum),
      saved("log_json", "--log-json", &O::log_json), saved("moments", "--moments", &O::moments),
      saved("init_scale", "--init-scale", &O::init_scale), saved("save_every", "--save-every", &O::save_every),
      saved("keep", "--keep", &O::keep), saved("optimizer", "--optimizer", &O::optimizer),
      saved("freeze", "--freeze", &O::freeze), saved("fp8_telemetry", "--fp8-telemetry", &O::fp8_telemetry),
      saved("model", "--model", &O::model), saved("kv_heads", "--kv-heads", &O::kv_heads),
      saved("qat", "--qat", &O::qat), saved("qat_group", "--qat-group", &O::qat_group),
      saved("qat_lsq", "--qat-lsq", &O::qat_lsq), saved("fp8_layers", "--fp8-layers", &O::fp8_layers),
      saved("fp8_calibration", "--fp8-calibration", &O::fp8_calibration)};
  return table;
}

// Fills every saved option not given (given(flag) false) from a checkpoint's run_config.
template <class Given>
void restore_options(Options& o, const nlohmann::json& run_config, const std::string& where, Given&& given) {
  for (const SavedOption& s : saved_option_table()) {
    if (given(s.flag) || !run_config.contains(s.key)) continue;
    try {
      s.set(o, run_config.at(s.key));
    } catch (const nlohmann::json::exception& e) {
      MPT_THROW("[{}] {}: run_config key \"{}\" ({}): {}", o.program, where, s.key, s.flag, e.what());
    }
  }
}

// Model and batch shapes by name, with the peak and final learning rates of their references (the defaults, 2e-3
// and 2e-4, suit the small models); each sets only what the command line (or --config) does not.
struct Preset {
  const char* model;
  int64_t layers, heads, kv_heads, embd, seq, batch;
  double lr, min_lr;
};

const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> p{
      // seconds on a CPU: smoke tests and first looks
      {"tiny", {"gpt", 2, 2, 0, 64, 64, 8, 2e-3, 2e-4}},
      // nanoGPT's shakespeare-char model and its learning rates
      {"small", {"gpt", 6, 6, 0, 384, 256, 16, 1e-3, 1e-4}},
      // GPT-2 124M's shape (with a GPT-2 tokenizer: --tokens) and the learning rates nanoGPT and llm.c train it with
      {"gpt2", {"gpt", 12, 12, 0, 768, 1024, 8, 6e-4, 6e-5}},
      // nn::llama_preset("llama-tiny")
      {"llama-tiny", {"llama", 2, 4, 2, 64, 64, 8, 2e-3, 2e-4}},
      // about 100M parameters with a 32k vocabulary: GPT-2 124M's learning rates
      {"llama-100m", {"llama", 12, 12, 4, 768, 1024, 8, 6e-4, 6e-5}}};
  return p;
}

// Returns the flags it set.
template <class Given>
std::set<std::string> apply_preset(Options& o, const std::string& name, Given&& given) {
  const Preset& p = presets().at(name);  // CLI11 checked the name
  MPT_CHECK(!given("--model") || o.model == p.model, "[{}] --preset {} is a {} model; --model {} contradicts it",
            o.program, name, p.model, o.model);
  std::set<std::string> set;
  if (!given("--model")) o.model = p.model, set.insert("--model");
  const auto put = [&](const char* flag, int64_t& field, int64_t value) {
    if (!given(flag)) field = value, set.insert(flag);
  };
  put("--kv-heads", o.kv_heads, p.kv_heads);
  put("--layers", o.layers, p.layers);
  put("--heads", o.heads, p.heads);
  put("--embd", o.embd, p.embd);
  put("--seq", o.seq, p.seq);
  put("--batch", o.batch, p.batch);
  if (!given("--lr")) o.lr = p.lr, set.insert("--lr");
  if (!given("--min-lr")) o.min_lr = p.min_lr, set.insert("--min-lr");
  return set;
}

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

bool valid_utf8(const std::string& s, size_t& bad) {
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    bool ok = n > 0 && i + n <= s.size();
    for (size_t k = 1; ok && k < n; ++k) ok = (static_cast<unsigned char>(s[i + k]) >> 6) == 0x2;
    if (!ok) {
      bad = i;
      return false;
    }
    i += n;
  }
  return true;
}

// CLI11's TOML reader takes any line as a key and ignores keys that are no option: this one first requires the file
// to be text of `key = value` lines (and comments) whose every key is a long flag of the program.
class CheckedToml : public CLI::ConfigBase {
 public:
  CheckedToml(const CLI::App& app, std::string program) : app_(app), program_(std::move(program)) {}

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    const std::string text{std::istreambuf_iterator<char>(input), std::istreambuf_iterator<char>()};
    const std::string file = "--config " + CLI::detail::join(app_.get_config_ptr()->results(), ", ");
    const size_t nul = text.find('\0');
    MPT_CHECK(nul == std::string::npos, "[{}] {}: not a TOML text file (a NUL byte at offset {})", program_, file,
              nul);
    size_t bad = 0;
    MPT_CHECK(valid_utf8(text, bad), "[{}] {}: not a TOML text file (invalid UTF-8 at offset {})", program_, file,
              bad);
    std::istringstream lines(text);
    std::string line, unknown;
    for (int number = 1; std::getline(lines, line); ++number) {
      const std::string trimmed = CLI::detail::trim_copy(line);
      if (trimmed.empty() || trimmed.front() == '#') continue;
      MPT_CHECK(trimmed.front() != '[', "[{}] {}: line {}: '{}': tables are not options; write `key = value` lines at "
                "the top level", program_, file, number, trimmed);
      const size_t eq = trimmed.find('=');
      MPT_CHECK(eq != std::string::npos && eq > 0, "[{}] {}: line {}: '{}' is not a `key = value` line", program_,
                file, number, trimmed);
      std::string key = CLI::detail::trim_copy(trimmed.substr(0, eq));
      if (key.size() >= 2 && (key.front() == '"' || key.front() == '\'') && key.back() == key.front())
        key = key.substr(1, key.size() - 2);
      if (const std::string problem = check_key(key); !problem.empty())
        unknown += (unknown.empty() ? "" : "; ") + problem;
    }
    MPT_CHECK(unknown.empty(), "[{}] {}: {} (the keys are the long flags without their dashes: see --help)", program_,
              file, unknown);
    std::istringstream again(text);
    return CLI::ConfigBase::from_config(again);
  }

 private:
  // "" for a key that is a flag, else what is wrong with it.
  std::string check_key(const std::string& key) const {
    std::string nearest;
    size_t best = std::string::npos;
    for (const CLI::Option* opt : app_.get_options()) {
      if (opt == app_.get_config_ptr() || opt == app_.get_help_ptr() || !opt->get_configurable()) continue;
      for (const std::string& name : opt->get_lnames()) {
        if (name == key) return "";
        if (const size_t d = edit_distance(key, name); d < best) best = d, nearest = name;
      }
    }
    if (best > std::max<size_t>(2, key.size() / 3)) return fmt::format("unknown key '{}'", key);
    return fmt::format("unknown key '{}' (did you mean '{}'?)", key, nearest);
  }

  const CLI::App& app_;
  std::string program_;
};

}  // namespace

nlohmann::json saved_options(const Options& o) {
  nlohmann::json j = nlohmann::json::object();
  for (const SavedOption& s : saved_option_table()) j[s.key] = s.get(o);
  if (!o.init_from.empty()) j["init_from"] = o.init_from;  // a record of where the weights came from; never restored
  return j;
}

std::variant<Options, int> parse_options(int argc, char** argv, Options o) {
  CLI::App app{fmt::format("mptrain {}: a GPT-2 or a Llama trained on a text (by characters or BPE) or on token files "
                           "(CPU when no GPU is usable)", o.program)};
  if (const char* env = std::getenv("MPT_DATA")) o.data = env;
  app.add_option("--data", o.data, "training text (default: $MPT_DATA, else the built-in tinyshakespeare)");
  app.add_option("--tokens", o.tokens, "train on mpt-tokenize's token files in this directory instead of a text");
  app.add_option("--tokenizer", o.tokenizer, "how --data is tokenized: char (bytes) or bpe (SentencePiece BPE trained "
                 "on the text)")->check(CLI::IsMember({"char", "bpe"}));
  app.add_option("--vocab-size", o.vocab_size, "the BPE vocabulary size")->check(CLI::Range(260, 1 << 20));
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "sequences per step")->check(CLI::PositiveNumber);
  app.add_option("--seq", o.seq, "sequence length (the model's context)")->check(CLI::PositiveNumber);
  app.add_option("--layers", o.layers, "transformer blocks")->check(CLI::NonNegativeNumber);
  app.add_option("--model", o.model, "the model family: gpt (GPT-2: LayerNorm, GELU, learned positions, tied head) "
                 "or llama (RMSNorm, SwiGLU, rotary positions, grouped-query attention, untied head)")
      ->check(CLI::IsMember({"gpt", "llama"}));
  app.add_option("--heads", o.heads, "attention heads")->check(CLI::PositiveNumber);
  app.add_option("--kv-heads", o.kv_heads, "llama: key/value heads, dividing --heads (grouped-query attention; "
                 "default: --heads)")->check(CLI::NonNegativeNumber);
  app.add_option("--embd", o.embd, "model width")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate")->check(CLI::NonNegativeNumber);
  app.add_option("--min-lr", o.min_lr, "final learning rate of the cosine decay")->check(CLI::NonNegativeNumber);
  app.add_option("--warmup", o.warmup, "linear warmup steps (default: steps / 10)");
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay of the Linear weights");
  app.add_option("--clip", o.clip, "gradient-norm clipping threshold")->check(CLI::NonNegativeNumber);
  app.add_option("--dropout", o.dropout, "dropout probability")->check(CLI::Range(0.0, 1.0));
  app.add_option("--log-every", o.log_every, "steps between progress lines")->check(CLI::PositiveNumber);
  app.add_option("--eval-every", o.eval_every, "steps between validation losses (0: only at the end)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--eval-batches", o.eval_batches, "batches per validation loss")->check(CLI::PositiveNumber);
  app.add_option("--sample", o.sample_chars, "tokens to sample at the end (characters with --tokenizer char)");
  app.add_option("--seed", o.seed, "initialisation and data-order seed");
  app.add_flag("--checkpoint-activations", o.checkpoint, "recompute each block in backward (less memory)");
  app.add_option("--precision", o.precision,
                 "GEMM precision: fp32, bf16, fp16 (with dynamic loss scaling), fp8-delayed, fp8-current, fp8-block");
  app.add_option("--residual", o.residual, "the residual stream's dtype: f32 (the FP32 masters', PyTorch autocast's "
                 "regime) or bf16 / f16 (llm.c's: every residual add rounded, the norms move half the bytes)")
      ->check(CLI::IsMember({"f32", "bf16", "f16"}));
  app.add_option("--grads", o.grads, "the FP32 masters' gradient dtype: f32 (PyTorch AMP's) or bf16 (llm.c's: half "
                 "the gradients' memory, every micro-batch's sum rounded to BF16)")
      ->check(CLI::IsMember({"f32", "bf16"}));
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  app.add_option("--log-json", o.log_json, "write progress as JSON lines to this file");
  app.add_option("--qat", o.qat, "quantization-aware training of every Linear but the LM head: int8 (W8A8: weights "
                 "per channel, inputs per token), int4 (weights per group of --qat-group), fp8 (E4M3 weights per "
                 "channel, inputs per token); with --init-from, the PTQ and FP32 losses are reported first")
      ->check(CLI::IsMember({"int8", "int4", "fp8"}));
  app.add_option("--qat-group", o.qat_group, "--qat int4's group size (32: GGUF q4_0's block; 128)")
      ->check(CLI::PositiveNumber);
  app.add_flag("--qat-lsq", o.qat_lsq, "--qat int8 / int4 with learned weight scales (LSQ, started at the absmax "
               "scales) instead of absmax ones; the exports write the learned scales");
  app.add_option("--moments", o.moments, "AdamW moment storage: f32, bf16 or int8 (8-bit blockwise)");
  app.add_option("--optimizer", o.optimizer, "adamw, or adamw8bit (AdamW with 8-bit blockwise moments: --moments int8)")
      ->check(CLI::IsMember({"adamw", "adamw8bit"}));
  app.add_option("--fp8-telemetry", o.fp8_telemetry, "every N steps, print and log each FP8 tensor's amax, scale "
                 "and the fractions saturated and flushed to zero (0: never)")->check(CLI::NonNegativeNumber);
  app.add_option("--fp8-layers", o.fp8_layers, "with an FP8 --precision on a GPU: auto (a layer runs FP8 only where "
                 "the per-shape rule judges it faster than BF16, fitted to --fp8-calibration; printed after the first "
                 "step) or all (every layer but the first and last blocks and the LM head)")
      ->check(CLI::IsMember({"auto", "all"}));
  app.add_option("--fp8-calibration", o.fp8_calibration, "the rule's measured rates: a JSON file that bench_fp8 "
                 "--device cuda --calibration FILE writes on your GPU (default: an H200's, docs/fp8.md)");
  app.add_option("--freeze", o.freeze, "freeze the embeddings (and the tied LM head) and the first N blocks")
      ->check(CLI::NonNegativeNumber);
  std::string preset;
  app.add_option("--preset", preset, "model and batch shape, with their learning rates: tiny (2x64, T 64), small "
                 "(6x384, T 256: nanoGPT's shakespeare-char, lr 1e-3), gpt2 (12x768, T 1024, lr 6e-4), llama-tiny "
                 "(2x64, 4 heads / 2 kv, T 64) or llama-100m (12x768, 12 heads / 4 kv, T 1024, lr 6e-4); explicit "
                 "flags win")
      ->check(CLI::IsMember({"tiny", "small", "gpt2", "llama-tiny", "llama-100m"}));
  app.set_config("--config", "", "a TOML file whose keys are the long flags (layers = 6, precision = \"bf16\"); "
                 "command-line flags win; an unknown key is an error");
  app.config_formatter(std::make_shared<CheckedToml>(app, o.program));
  app.add_option("--init-scale", o.init_scale, "initial loss scale of fp16's GradScaler")->check(CLI::PositiveNumber);
  app.add_option("--init-from", o.init_from, "start from pretrained weights: a Hugging Face GPT-2 or Llama directory, "
                 "or a checkpoint or --save-dir of this program (weights only: a fresh optimizer at step 0)");
  app.add_option("--bucket-mb", o.bucket_mb, "under mpirun: gradient MB per all-reduce bucket (default 25)");
  app.add_flag("--zero1", o.zero1, "under mpirun: shard the AdamW state across the ranks (ZeRO-1)");
  app.add_flag("--cuda-graph", o.cuda_graph, "on a GPU: capture the training step into a CUDA graph after three "
               "warm-up steps and replay it (one launch per step; needs --dropout 0 and one process; steps that "
               "cannot be replayed run eagerly and the reason is printed)");
  app.add_option("--grad-compression", o.grad_compression,
                 "under mpirun: gradients on the wire as none (f32), bf16 or fp8 (MS-AMP's E4M3 all-reduce)");
  app.add_option("--save-dir", o.save_dir, "write checkpoints here (step-N/ directories and a latest pointer); "
                 "one is saved at the end, every --save-every steps and on Ctrl-C or SIGTERM");
  app.add_option("--save-every", o.save_every, "steps between checkpoints (0: only at the end and on a stop)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--keep", o.keep, "checkpoints kept in --save-dir (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--resume", o.resume, "continue a run: a checkpoint directory, a --save-dir (its latest), or "
                 "'latest' (of --save-dir); options not given are taken from the checkpoint");
  app.add_flag_callback("--nvtx", [] { mpt::profile::set_nvtx(true); },
                        "NVTX ranges per step, phase and module for Nsight Systems (same as MPT_NVTX=1): "
                        "nsys profile -t cuda,nvtx ./train_gpt --nvtx ...");
  app.add_option("--stop-after", o.stop_after, "stop (saving a checkpoint) after this many steps of this run, e.g. "
                 "to fit a job's time limit")->check(CLI::NonNegativeNumber);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }

  const auto on_command_line = [&](const char* flag) { return app.count(flag) > 0; };  // or in --config
  const std::set<std::string> from_preset =
      preset.empty() ? std::set<std::string>() : apply_preset(o, preset, on_command_line);
  const auto given = [&](const char* flag) { return on_command_line(flag) || from_preset.count(flag) != 0; };
  if (o.optimizer == "adamw8bit") {
    MPT_CHECK(!given("--moments") || o.moments == "int8", "[{}] --optimizer adamw8bit keeps AdamW's moments in int8; "
              "--moments {} contradicts it", o.program, o.moments);
    o.moments = "int8";
  }
  if (!o.resume.empty()) {
    MPT_CHECK(o.init_from.empty(), "[{}] --init-from {} and --resume {}: a resumed run continues the checkpoint's own "
              "weights; give one of them", o.program, o.init_from, o.resume);
    if (o.resume == "latest") {
      MPT_CHECK(!o.save_dir.empty(), "[{}] --resume latest needs --save-dir (the directory whose latest checkpoint to "
                "continue)", o.program);
      o.resume = o.save_dir;
    }
    const mpt::train::CheckpointInfo info = mpt::train::read_checkpoint_info(o.resume);
    o.resume = info.path.string();
    const nlohmann::json run_config = nlohmann::json::parse(info.run_config_json);
    restore_options(o, run_config, (info.path / "state.json").string(), given);
    // A checkpoint from before the per-shape rule ran every FP8 layer in FP8 (its FP8 state has all their metas).
    if (!given("--fp8-layers") && !run_config.contains("fp8_layers")) o.fp8_layers = "all";
    if (o.save_dir.empty() && info.path.filename().string().starts_with("step-"))
      o.save_dir = info.path.parent_path().string();  // keep saving beside the checkpoint
  }
  if (o.warmup < 0) o.warmup = o.steps / 10;
  MPT_CHECK(o.warmup <= o.steps, "[{}] --warmup {} exceeds --steps {}", o.program, o.warmup, o.steps);
  return o;
}

}  // namespace mpt_examples
