// examples/train_gpt.cpp: trains a GPT-2 or a Llama on a text (tinyshakespeare built in) or token files, printing
// progress.
#include <mpt/mpt.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <new>
#include <optional>
#include <random>
#include <set>
#include <nlohmann/json.hpp>
#include <sstream>

#include "mpt/amp/accumulate.h"
#include "mpt/amp/fp8.h"
#include "mpt/amp/grad_scaler.h"
#include "mpt/amp/policy.h"
#include "mpt/core/profile.h"
#include "mpt/data/loader.h"
#include "mpt/data/tokenizer.h"
#include "mpt/dist/data_parallel.h"
#include "mpt/io/checkpoint.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/llama.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/lr_schedule.h"

#include "embedded_text.h"
#include "train_gpt_session.h"

namespace {

struct Options {
  std::string model = "gpt";  // the family: gpt (GPT-2) or llama
  int64_t kv_heads = 0;       // llama: key/value heads (grouped-query attention); 0: --heads
  std::string data;
  std::string tokens;            // a directory from mpt-tokenize (train.tok, val.tok, tokenizer.json) instead of --data
  std::string tokenizer = "char";  // for --data: char or bpe (trained on the text's first nine tenths)
  int64_t vocab_size = 2048;       // the BPE vocabulary
  // The defaults train on the built-in tinyshakespeare to a validation loss near 1.62 in about 3 minutes on 2 CPU
  // cores (docs/examples.md).
  int64_t steps = 2000, batch = 16, seq = 128, layers = 4, heads = 6, embd = 192;
  double lr = 2e-3, min_lr = 2e-4, weight_decay = 0.1, clip = 1.0, dropout = 0.0;
  int64_t warmup = -1, log_every = 25, eval_every = 250, eval_batches = 8, sample_chars = 300;
  uint64_t seed = 1337;
  bool checkpoint = false;
  std::string precision = "fp32";
  int64_t grad_accum = 1;
  std::string log_json;
  std::string moments = "f32";  // AdamW moment storage: f32, bf16, int8
  std::string optimizer = "adamw";  // adamw, or adamw8bit (AdamW with int8 blockwise moments)
  int64_t freeze = -1;              // >= 0: freeze the embeddings and the first `freeze` blocks
  int64_t fp8_telemetry = 0;        // > 0: every this many steps, print and log each FP8 tensor's quantization stats
  double init_scale = 65536;    // the fp16 GradScaler's initial scale
  // Checkpoints (not part of the saved configuration except save_every and keep).
  std::string save_dir, resume;
  int64_t save_every = 0, keep = 3, stop_after = 0;
  // Data parallelism under mpirun (not saved: a run may resume with other settings).
  double bucket_mb = 25;
  bool zero1 = false;
  std::string grad_compression = "none";
};

mpt::dist::GradCompression grad_compression(const std::string& name) {
  if (name == "none") return mpt::dist::GradCompression::None;
  if (name == "bf16") return mpt::dist::GradCompression::BF16;
  if (name == "fp8") return mpt::dist::GradCompression::FP8;
  MPT_THROW("[train_gpt] unknown --grad-compression '{}': expected none, bf16 or fp8", name);
}

// The options a checkpoint records, by the flag that sets them: a resumed run takes each one it is not given.
#define MPT_TRAIN_GPT_SAVED(X)                                                                                       \
  X(data, "--data") X(tokens, "--tokens") X(tokenizer, "--tokenizer") X(vocab_size, "--vocab-size")             \
  X(steps, "--steps") X(batch, "--batch") X(seq, "--seq") X(layers, "--layers")                  \
  X(heads, "--heads") X(embd, "--embd") X(lr, "--lr") X(min_lr, "--min-lr") X(weight_decay, "--weight-decay")      \
  X(clip, "--clip") X(dropout, "--dropout") X(warmup, "--warmup") X(log_every, "--log-every")                       \
  X(eval_every, "--eval-every") X(eval_batches, "--eval-batches") X(sample_chars, "--sample") X(seed, "--seed")     \
  X(checkpoint, "--checkpoint-activations") X(precision, "--precision") X(grad_accum, "--grad-accum")               \
  X(log_json, "--log-json") X(moments, "--moments") X(init_scale, "--init-scale") X(save_every, "--save-every")     \
  X(keep, "--keep") X(optimizer, "--optimizer") X(freeze, "--freeze") X(fp8_telemetry, "--fp8-telemetry")           \
  X(model, "--model") X(kv_heads, "--kv-heads")

nlohmann::json saved_options(const Options& o) {
  nlohmann::json j = nlohmann::json::object();
#define MPT_SAVE(field, flag) j[#field] = o.field;
  MPT_TRAIN_GPT_SAVED(MPT_SAVE)
#undef MPT_SAVE
  return j;
}

// Fills every option not given on the command line (given(flag) false) from a checkpoint's saved configuration.
template <class Given>
void restore_options(Options& o, const nlohmann::json& saved, const std::string& where, Given&& given) {
#define MPT_RESTORE(field, flag)                                                                                   \
  if (!given(flag) && saved.contains(#field)) {                                                                    \
    try {                                                                                                          \
      saved.at(#field).get_to(o.field);                                                                            \
    } catch (const nlohmann::json::exception& e) {                                                                 \
      MPT_THROW("[train_gpt] {}: run_config key \"{}\" ({}): {}", where, #field, flag, e.what());                    \
    }                                                                                                              \
  }
  MPT_TRAIN_GPT_SAVED(MPT_RESTORE)
#undef MPT_RESTORE
}

// The dense peak MFU is measured against, in FLOP/s, and where it comes from. GPUs: the datasheet's dense tensor-core
// rate for the policy's GEMM dtype (H100/H200 SXM, A100, L40S; others unknown: 0). The CPU: measured here, the best of
// three 1024^3 GEMMs (ops::matmul) in that dtype, so MFU is a fraction of what this machine's GEMMs reach.
std::pair<double, std::string> dense_peak(const std::string& precision, mpt::Device device) {
  const bool fp8 = precision.starts_with("fp8"), low = precision != "fp32";
  if (device.is_cuda()) {
    const std::string name = mpt::cuda_status().devices.at(device.index()).name;
    struct Sheet {
      const char* match;
      double fp32, bf16, fp8;  // TFLOP/s, dense (fp32: without TF32)
    };
    for (const Sheet& s : {Sheet{"H200", 66.9, 989.4, 1978.9}, Sheet{"H100", 66.9, 989.4, 1978.9},
                           Sheet{"A100", 19.5, 312.0, 0.0}, Sheet{"L40S", 91.6, 362.1, 733.0}}) {
      if (name.find(s.match) != std::string::npos) {
        const double t = fp8 ? (s.fp8 > 0 ? s.fp8 : s.bf16) : low ? s.bf16 : s.fp32;
        const char* kind = fp8 && s.fp8 > 0 ? "fp8" : low ? "bf16" : "fp32";
        return {t * 1e12, fmt::format("{} datasheet, {} dense", s.match, kind)};
      }
    }
    return {0.0, fmt::format("no datasheet peak for {}", name)};
  }
  const mpt::DType dt = precision == "fp16" ? mpt::DType::F16 : low ? mpt::DType::BF16 : mpt::DType::F32;
  const mpt::Tensor a = mpt::Tensor::full({1024, 1024}, 0.5, dt);  // no random draw: the dropout stream is untouched
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {  // the first run warms oneDNN's primitive cache
    const auto t0 = std::chrono::steady_clock::now();
    (void)mpt::ops::matmul(a, a).data_ptr();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (i > 0) best = std::min(best, s);
  }
  return {2.0 * 1024 * 1024 * 1024 / best, fmt::format("measured {} GEMM", mpt::dtype_name(dt))};
}

// Model and batch shapes by name; each sets only what the command line (or --config) does not.
struct Preset {
  const char* model;
  int64_t layers, heads, kv_heads, embd, seq, batch;
};
const std::map<std::string, Preset>& presets() {
  static const std::map<std::string, Preset> p{
      {"tiny", {"gpt", 2, 2, 0, 64, 64, 8}},        // seconds on a CPU: smoke tests and first looks
      {"small", {"gpt", 6, 6, 0, 384, 256, 16}},    // nanoGPT's shakespeare-char model
      {"gpt2", {"gpt", 12, 12, 0, 768, 1024, 8}},   // GPT-2 124M's shape (with a GPT-2 tokenizer: --tokens)
      {"llama-tiny", {"llama", 2, 4, 2, 64, 64, 8}},         // nn::llama_preset("llama-tiny")
      {"llama-100m", {"llama", 12, 12, 4, 768, 1024, 8}}};  // about 100M parameters with a 32k vocabulary
  return p;
}

// Returns the flags it set.
template <class Given>
std::set<std::string> apply_preset(Options& o, const std::string& name, Given&& given) {
  const auto it = presets().find(name);
  MPT_CHECK(it != presets().end(), "[train_gpt] unknown --preset '{}': expected tiny, small, gpt2, llama-tiny or "
            "llama-100m", name);
  const Preset& p = it->second;
  MPT_CHECK(!given("--model") || o.model == p.model, "[train_gpt] --preset {} is a {} model; --model {} contradicts it",
            name, p.model, o.model);
  std::set<std::string> set;
  if (!given("--model")) o.model = p.model, set.insert("--model");
  if (!given("--kv-heads")) o.kv_heads = p.kv_heads, set.insert("--kv-heads");
  const auto put = [&](const char* flag, int64_t& field, int64_t value) {
    if (!given(flag)) field = value, set.insert(flag);
  };
  put("--layers", o.layers, p.layers);
  put("--heads", o.heads, p.heads);
  put("--embd", o.embd, p.embd);
  put("--seq", o.seq, p.seq);
  put("--batch", o.batch, p.batch);
  return set;
}

mpt::ops::MomentStorage moment_storage(const std::string& name) {
  if (name == "f32") return mpt::ops::MomentStorage::F32;
  if (name == "bf16") return mpt::ops::MomentStorage::BF16;
  if (name == "int8") return mpt::ops::MomentStorage::Int8;
  MPT_THROW("[train_gpt] unknown --moments '{}': expected f32, bf16 or int8 (8-bit blockwise)", name);
}

// Appends one JSON object per line to --log-json (nothing without it). A resumed run continues the file.
class JsonLog {
 public:
  JsonLog(const std::string& path, bool append) {
    if (path.empty()) return;
    out_.open(path, append ? std::ios::app : std::ios::trunc);
    MPT_CHECK(out_, "[train_gpt] cannot write the log '{}'", path);
  }
  void write(const nlohmann::json& j) {
    if (out_.is_open()) out_ << j.dump() << "\n" << std::flush;
  }

 private:
  std::ofstream out_;
};

// Each FP8 tensor's last quantization (amax, scale, the fractions saturated and flushed to zero), printed as a table
// and logged as {"step", "fp8_telemetry": {name: {...}}}.
void report_fp8_telemetry(const mpt::amp::Fp8ScalingState& state, int64_t step, JsonLog& log) {
  nlohmann::json all = nlohmann::json::object();
  fmt::print("fp8 telemetry, step {}:\n{:<34} {:>11} {:>11} {:>10} {:>10}\n", step, "tensor", "amax", "scale",
             "saturated", "flushed");
  for (const auto& [name, t] : state.telemetry()) {
    if (t.count == 0) continue;  // not quantized yet (e.g. a weight served from the cache)
    fmt::print("{:<34} {:>11.4g} {:>11.4g} {:>9.4f}% {:>9.4f}%\n", name, t.amax, t.scale, 100 * t.saturated,
               100 * t.flushed);
    all[name] = {{"amax", t.amax}, {"scale", t.scale}, {"saturated", t.saturated}, {"flushed", t.flushed},
                 {"numel", t.numel}};
  }
  log.write({{"step", step}, {"fp8_telemetry", all}});
}


// The training text: the file at `path`, or the built-in tinyshakespeare when `path` is empty. A file must be a
// readable, non-empty regular file long enough for a training and a validation window of `seq` + 1 characters.
std::string read_text(const std::string& path, int64_t seq) {
  std::string text;
  if (path.empty()) {
    text = std::string(mpt_examples::tinyshakespeare());
  } else {
    namespace fs = std::filesystem;
    std::error_code ec;
    const fs::file_status st = fs::status(path, ec);
    MPT_CHECK(fs::exists(st), "[train_gpt] cannot open the training text '{}': no such file (--data and MPT_DATA "
              "name a text file; without them the built-in tinyshakespeare is used)", path);
    MPT_CHECK(!fs::is_directory(st), "[train_gpt] the training text '{}' is a directory; --data expects a text file",
              path);
    std::ifstream in(path, std::ios::binary);
    MPT_CHECK(in, "[train_gpt] cannot open the training text '{}': {}", path, std::strerror(errno));
    std::ostringstream s;
    s << in.rdbuf();
    MPT_CHECK(!in.bad(), "[train_gpt] cannot read the training text '{}': {}", path, std::strerror(errno));
    text = s.str();
    MPT_CHECK(!text.empty(), "[train_gpt] the training text '{}' is empty; --data expects a text file (every byte is "
              "a token)", path);
  }
  // The last tenth is the validation split; each split needs one window of seq + 1 characters plus a start offset.
  const auto need = static_cast<size_t>(10 * (seq + 2));
  MPT_CHECK(text.size() >= need, "[train_gpt] the training text '{}' has {} characters; with --seq {} it needs at "
            "least {} (a tenth is held out for validation and each split needs a window of seq + 2)",
            path.empty() ? "tinyshakespeare (built in)" : path, text.size(), seq, need);
  return text;
}

// The mean loss over --eval-batches batches of the validation split: the same windows at every evaluation (a sampler
// seeded with --seed + 1, from its start), the same on every rank.
// The token streams a run trains and validates on, their tokenizer, and what identifies them in a checkpoint.
struct Corpus {
  std::unique_ptr<mpt::data::Tokenizer> tokenizer;
  std::shared_ptr<const mpt::data::TokenSource> train, val;
  std::string description;
  nlohmann::json identity;
};

uint64_t file_fingerprint(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return mpt_examples::text_fingerprint(s.str());
}

// --tokens DIR: mpt-tokenize's files, mapped. Otherwise the text (--data, or the built-in one) tokenized here: by
// bytes, or by a BPE model trained on its first nine tenths; the last tenth of the ids is the validation split.
Corpus load_corpus(const Options& o) {
  Corpus c;
  if (!o.tokens.empty()) {
    const std::filesystem::path dir(o.tokens);
    for (const char* name : {"train.tok", "val.tok", "tokenizer.json"})
      MPT_CHECK(std::filesystem::is_regular_file(dir / name), "[train_gpt] --tokens {}: no {} there (make the "
                "directory with: mpt-tokenize --input TEXT --out {})", o.tokens, name, o.tokens);
    c.tokenizer = mpt::data::load_tokenizer(dir / "tokenizer.json");
    c.train = std::make_shared<const mpt::data::TokenFile>(dir / "train.tok");
    c.val = std::make_shared<const mpt::data::TokenFile>(dir / "val.tok");
    for (const auto& t : {c.train, c.val})
      MPT_CHECK(t->vocab_size() == c.tokenizer->vocab_size(), "[train_gpt] --tokens {}: a token file has vocabulary "
                "{} but tokenizer.json {}: the files come from different mpt-tokenize runs", o.tokens,
                t->vocab_size(), c.tokenizer->vocab_size());
    c.description = fmt::format("{} (token files", o.tokens);
    c.identity = {{"tokens_train", c.train->size()}, {"tokens_val", c.val->size()},
                  {"tokenizer_fnv1a", file_fingerprint(dir / "tokenizer.json")}};
  } else {
    const std::string text = read_text(o.data, o.seq);
    const size_t cut = text.size() * 9 / 10;
    if (o.tokenizer == "bpe") {
      c.tokenizer = std::make_unique<mpt::data::BpeTokenizer>(mpt::data::BpeTokenizer::train(
          std::string_view(text).substr(0, cut), {.vocab_size = o.vocab_size}));
    } else {
      MPT_CHECK(o.tokenizer == "char", "[train_gpt] unknown --tokenizer '{}': expected char or bpe", o.tokenizer);
      c.tokenizer = std::make_unique<mpt::data::CharTokenizer>(mpt::data::CharTokenizer::from_text(text));
    }
    const std::vector<int32_t> ids = c.tokenizer->encode(text);
    const auto split = static_cast<std::ptrdiff_t>(ids.size() * 9 / 10);
    const int64_t v = c.tokenizer->vocab_size();
    c.train = std::make_shared<const mpt::data::TokenVector>(std::vector<int32_t>(ids.begin(), ids.begin() + split), v);
    c.val = std::make_shared<const mpt::data::TokenVector>(std::vector<int32_t>(ids.begin() + split, ids.end()), v);
    c.description = fmt::format("{} ({} characters", o.data.empty() ?
                                "tinyshakespeare (built in; --data or MPT_DATA choose another text)" : o.data,
                                text.size());
    c.identity = {{"text_bytes", text.size()}, {"text_fnv1a", mpt_examples::text_fingerprint(text)},
                  {"tokenizer", o.tokenizer}, {"vocab", v}};
  }
  return c;
}

double evaluate(const mpt::nn::LanguageModel& model, const std::shared_ptr<const mpt::data::TokenSource>& val, const Options& o,
                mpt::Device device, const mpt::amp::Policy& policy) {
  mpt::autograd::NoGradGuard no_grad;
  mpt::amp::Autocast autocast(policy);
  mpt::data::DataLoader loader(val, {.batch = o.batch, .seq = o.seq, .seed = o.seed + 1, .prefetch = 1,
                                     .device = device});
  double total = 0;
  for (int64_t i = 0; i < o.eval_batches; ++i) {
    const mpt::data::Batch b = loader.next();
    total += model.loss(b.x, b.y).item<double>();
  }
  return total / static_cast<double>(o.eval_batches);
}

// Samples `n` tokens after a newline (temperature 1, top-all) and decodes them. Each token runs the model on that token
// alone against the keys and values of the ones before (LanguageModel::forward_cached); a full context starts again
// from its last half as a prompt.
std::string sample(const mpt::nn::LanguageModel& model, const mpt::data::Tokenizer& tokenizer, int64_t n, mpt::Device device,
                   uint64_t seed, const mpt::amp::Policy& policy) {
  mpt::autograd::NoGradGuard no_grad;
  mpt::amp::Autocast autocast(policy);
  std::mt19937_64 rng(seed);
  const auto* chars = dynamic_cast<const mpt::data::CharTokenizer*>(&tokenizer);
  const int64_t newline = chars != nullptr ? std::max(chars->id_of('\n'), 0) : tokenizer.encode("\n").at(0);
  const int64_t T = model.context_length();
  std::vector<int64_t> context{newline};
  mpt::nn::KvCache cache;
  mpt::Tensor logits = model.forward_cached(mpt::Tensor::from_vector(context, {1, 1}, device), cache);
  for (int64_t i = 0; i < n; ++i) {
    const std::vector<float> p = mpt::ops::softmax(logits.to(mpt::DType::F32)).to_vector<float>();
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    context.push_back(pick(rng));
    if (cache.length < T) {
      logits = model.forward_cached(mpt::Tensor::from_vector(std::vector<int64_t>{context.back()}, {1, 1}, device),
                                    cache);
    } else {
      cache.clear();
      const int64_t keep = std::max<int64_t>(T / 2, 1);
      const std::vector<int64_t> w(context.end() - keep, context.end());
      logits = model.forward_cached(mpt::Tensor::from_vector(w, {1, keep}, device), cache);
    }
  }
  return tokenizer.decode(std::vector<int32_t>(context.begin() + 1, context.end()));
}

// Refuses a configuration whose weights, optimizer state and activations cannot fit in the device's memory,
// before allocating any of it.
void check_memory(const mpt::nn::GPTConfig& config, const Options& o, mpt::Device device) {
  const bool low_precision = o.precision != "fp32";
  const int64_t optimizer_bytes = o.moments == "int8" ? 2 : o.moments == "bf16" ? 4 : 8;
  const mpt::nn::TrainingMemory m = mpt::nn::estimate_training_memory(
      config, {.batch = o.batch, .seq = o.seq, .optimizer_bytes_per_parameter = optimizer_bytes,
               .compute_copy_bytes_per_parameter = low_precision ? 2 : 0, .activation_checkpointing = o.checkpoint});
  const int64_t available = mpt::available_memory(device);
  const auto gib = [](int64_t bytes) { return static_cast<double>(bytes) / (1ull << 30); };
  MPT_CHECK(m.total() <= available,
            "[train_gpt] this configuration needs about {:.3g} GiB on {} ({:.4g}M parameters: {:.3g} GiB of weights, "
            "{:.3g} GiB of gradients, {:.3g} GiB of AdamW state; {:.3g} GiB of activations for batch {} x {}), but "
            "about {:.3g} GiB is available: reduce --batch, --seq, --layers or --embd{}",
            gib(m.total()), device, static_cast<double>(m.parameters) / 1e6, gib(m.weights), gib(m.gradients),
            gib(m.optimizer), gib(m.activations), o.batch, o.seq, gib(available),
            o.checkpoint ? "" : ", or add --checkpoint-activations");
}

// Where a checkpoint continues the run: the loader's position (of the batches trained on, not the prefetched ones)
// and the counters of the run so far.
nlohmann::json data_state(const mpt::data::DataLoader& loader, int64_t skipped, const nlohmann::json& corpus) {
  return {{"loader", nlohmann::json::parse(loader.state_json())}, {"skipped_steps", skipped}, {"corpus", corpus}};
}

void restore_data_state(const std::string& json_text, const std::string& where, const nlohmann::json& corpus,
                        mpt::data::DataLoader& loader, int64_t& skipped) {
  const nlohmann::json d = nlohmann::json::parse(json_text);
  try {
    MPT_CHECK(d.contains("loader") && d.contains("corpus"), "[train_gpt] {}: the checkpoint was saved by an older "
              "train_gpt, whose random windows this version no longer draws: start a new run (or resume with the "
              "version that saved it)", where);
    const nlohmann::json& saved = d.at("corpus");
    MPT_CHECK(saved == corpus, "[train_gpt] {}: the checkpoint was trained on other data ({}); this run reads {} (give "
              "the same --data, --tokens, --tokenizer and --vocab-size)", where, saved.dump(), corpus.dump());
    loader.load_state_json(d.at("loader").dump());
    skipped = d.at("skipped_steps").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    MPT_THROW("[train_gpt] {}: the checkpoint's data state: {}", where, e.what());
  }
}

mpt::nn::GPTConfig gpt_config(const Options& o, int64_t vocab, mpt::Device device) {
  mpt::nn::GPTConfig config;
  config.vocab_size = vocab;
  config.block_size = o.seq;
  config.n_layer = o.layers;
  config.n_head = o.heads;
  config.n_embd = o.embd;
  config.dropout = o.dropout;
  config.where.device = device;
  config.seed = o.seed;
  return config;
}

// The model --model names, on `device`: GPT-2 or Llama.
std::unique_ptr<mpt::nn::LanguageModel> make_model(const Options& o, int64_t vocab, mpt::Device device) {
  mpt::manual_seed(o.seed);  // the dropout stream
  if (o.model == "llama") {
    MPT_CHECK(o.dropout == 0, "[train_gpt] --model llama has no dropout (Llama trains without it); drop --dropout {}",
              o.dropout);
    MPT_CHECK(o.kv_heads == 0 || o.heads % o.kv_heads == 0, "[train_gpt] --kv-heads {} must divide --heads {} (each "
              "key/value head serves a group of query heads)", o.kv_heads, o.heads);
    mpt::nn::LlamaConfig c;
    c.vocab_size = vocab;
    c.block_size = o.seq;
    c.n_layer = o.layers;
    c.n_head = o.heads;
    c.n_kv_head = o.kv_heads > 0 ? o.kv_heads : o.heads;
    c.n_embd = o.embd;
    c.ffn_multiple_of = o.embd >= 256 ? 256 : 32;
    c.where.device = device;
    c.seed = o.seed;
    return std::make_unique<mpt::nn::Llama>(c);
  }
  MPT_CHECK(o.model == "gpt", "[train_gpt] unknown --model '{}': expected gpt or llama", o.model);
  MPT_CHECK(o.kv_heads == 0 || o.kv_heads == o.heads, "[train_gpt] --kv-heads {} is for --model llama (GPT-2 has "
            "one key/value head per query head)", o.kv_heads);
  return std::make_unique<mpt::nn::GPT>(gpt_config(o, vocab, device));
}

void run(const Options& o) {
  // Under mpirun: one process per rank, each on its share of every batch; only rank 0 prints.
  const std::shared_ptr<mpt::dist::Communicator> comm = mpt::dist::world();
  const int world = comm->size(), rank = comm->rank();
  if (rank != 0)
    MPT_CHECK(std::freopen("/dev/null", "w", stdout) != nullptr, "[train_gpt] rank {}: no /dev/null", rank);
  // Gradients travel over NCCL between GPUs (rank r on cuda:(r % GPUs)), over MPI between CPU processes.
  mpt::Device device = mpt::Device::best();
  std::shared_ptr<mpt::dist::Communicator> grad_comm = comm;
  if (world > 1 && device.is_cuda()) {
    grad_comm = mpt::dist::nccl_world();
    device = mpt::Device::cuda(rank % mpt::cuda_status().device_count);
  }
  fmt::print("device: {} ({})\n", device,
             world > 1 ? fmt::format("{} ranks under mpirun, gradients over {}", world, grad_comm->backend())
                       : mpt::Device::best_reason());
  if (world > 1) {
    fmt::print("data parallel: {} ranks x batch {} = {} sequences per step; buckets {} MB; gradients {}{}\n", world,
               o.batch, world * o.batch, o.bucket_mb, o.grad_compression, o.zero1 ? "; ZeRO-1 optimizer shards" : "");
  }
  const Corpus corpus = load_corpus(o);
  const mpt::data::Tokenizer& tokenizer = *corpus.tokenizer;
  const std::shared_ptr<const mpt::data::TokenSource>& train = corpus.train;
  const std::shared_ptr<const mpt::data::TokenSource>& val = corpus.val;

  const int64_t vocab = tokenizer.vocab_size();
  if (o.model == "gpt") check_memory(gpt_config(o, vocab, device), o, device);
  // One batch of windows of seq + 1 tokens must fit in the validation split (the sampler takes whole windows; the
  // training split's loader says the same of it).
  MPT_CHECK(val->size() / (o.seq + 1) >= o.batch, "[train_gpt] the validation split has {} tokens, fewer than one "
            "batch of {} windows of {} (--seq + 1): use more data, or a smaller --batch or --seq", val->size(),
            o.batch, o.seq + 1);
  MPT_CHECK(o.embd % o.heads == 0, "[train_gpt] --embd {} is not a multiple of --heads {}", o.embd, o.heads);
  std::unique_ptr<mpt::nn::LanguageModel> model_ptr = make_model(o, vocab, device);
  mpt::nn::LanguageModel& model = *model_ptr;
  model.set_activation_checkpointing(o.checkpoint);
  if (o.freeze >= 0) {  // before DataParallel and the optimizer, which then leave the frozen parameters out
    MPT_CHECK(o.freeze <= o.layers, "[train_gpt] --freeze {} exceeds --layers {}", o.freeze, o.layers);
    model.freeze(o.freeze);
  }
  fmt::print("data: {}, vocab {}; {} train / {} val tokens; {} tokenizer)\n", corpus.description, vocab,
             train->size(), val->size(), tokenizer.kind());
  fmt::print("model: {}: {:.2f}M parameters; batch {} x {}\n", model.describe(),
             static_cast<double>(model.num_parameters()) / 1e6, o.batch, o.seq);
  if (o.freeze >= 0) {
    fmt::print("frozen: the embeddings (and a tied LM head) and {} of {} blocks; {:.2f}M of {:.2f}M parameters "
               "train\n", o.freeze, o.layers, static_cast<double>(model.num_parameters(true)) / 1e6,
               static_cast<double>(model.num_parameters()) / 1e6);
  }

  const mpt::amp::Policy policy =
      mpt::amp::Policy::named(o.precision, o.layers, device, o.model == "llama" ? "model.layers" : "h");
  mpt::amp::GradScaler scaler(
      mpt::amp::GradScalerOptions{.init_scale = o.init_scale, .enabled = o.precision == "fp16"}, device);
  fmt::print("precision: {} (GEMMs; FP32 master weights, norms, loss and residual stream){}; {} micro-batch(es) per "
             "step; AdamW moments {}\n", o.precision, scaler.is_enabled() ? ", dynamic loss scaling" : "",
             o.grad_accum, o.moments);
  MPT_CHECK(o.bucket_mb > 0, "[train_gpt] --bucket-mb {} must be positive", o.bucket_mb);
  mpt::dist::DataParallel dp(model, grad_comm,
                             {.bucket_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20)),
                              .compression = grad_compression(o.grad_compression), .zero1 = o.zero1});
  dp.attach(scaler);
  if (policy.fp8_state) dp.attach(*policy.fp8_state);
  mpt::optim::AdamW opt(dp.shard(mpt::optim::weight_decay_groups(model.named_parameters(), o.weight_decay)),
                        {.lr = o.lr, .betas = {0.9, 0.95}, .moments = moment_storage(o.moments)});
  mpt::optim::WarmupCosineLr schedule(
      opt, {.max_lr = o.lr, .min_lr = o.min_lr, .warmup_steps = o.warmup, .total_steps = o.steps});
  // This rank's batches (its share of each global batch of ranks x --batch windows), read on a worker thread while
  // the step runs; on a GPU copied asynchronously from page-locked memory.
  mpt::data::DataLoader loader(train, {.batch = o.batch, .seq = o.seq, .rank = rank, .world = world, .seed = o.seed,
                                       .prefetch = 2, .device = device});
  int64_t skipped = 0, start_step = 0;
  mpt::io::TrainingState state{.model = &model, .optimizer = &opt, .schedule = &schedule, .scaler = &scaler,
                               .fp8 = policy.fp8_state.get(), .precision = o.precision, .comm = comm.get(),
                               .optimizer_sharded = o.zero1};
  if (!o.resume.empty()) {
    const mpt::io::CheckpointInfo info = mpt::io::load_checkpoint(o.resume, state);
    restore_data_state(info.data_json, (info.path / "state.json").string(), corpus.identity, loader, skipped);
    start_step = info.step;
    MPT_CHECK(start_step < o.steps, "[train_gpt] the checkpoint {} is at step {}, the end of this run (--steps {}): "
              "give a larger --steps to train on", info.path.string(), start_step, o.steps);
    fmt::print("resumed from {} at step {} (saved by mptrain {})\n", info.path.string(), start_step,
               info.library_version);
  }
  auto save = [&](int64_t steps_done) {
    const auto t0 = std::chrono::steady_clock::now();
    state.step = steps_done;
    state.run_config_json = saved_options(o).dump();
    state.data_json = data_state(loader, skipped, corpus.identity).dump();
    const std::filesystem::path dir = mpt::io::save_checkpoint(o.save_dir, state, {.keep = o.keep});
    // Beside the checkpoints, for programs that start from them (examples/finetune); rank 0 only, written durably.
    if (rank == 0) tokenizer.save(std::filesystem::path(o.save_dir) / "tokenizer.json");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("saved checkpoint {} ({:.0f} ms)\n", dir.string(), ms);
    return dir;
  };
  const std::string log_json = rank == 0 ? o.log_json : std::string();  // one log per job
  mpt_examples::truncate_log_for_resume(log_json, start_step);
  JsonLog log(log_json, start_step > 0);
  mpt_examples::install_stop_handlers();
  const double tokens_per_step = static_cast<double>(o.batch * o.seq * o.grad_accum * world);  // every rank's
  double hidden_sum = 0, wait_ms_sum = 0;
  double window_ms = 0, total_ms = 0, val_loss = 0;
  int64_t window_steps = 0;
  const double model_flops = model.flops_per_token(o.seq);
  const auto [peak_flops, peak_source] = dense_peak(o.precision, device);
  fmt::print("MFU against {:.4g} TFLOP/s ({}); {:.4g} MFLOP per token\n", peak_flops / 1e12, peak_source,
             model_flops / 1e6);
  // Not when stdout is a file or a pipe, nor under mpirun (OpenMPI gives its ranks a pseudo-terminal even when the
  // job's output goes to a file).
  const bool progress_bar = ::isatty(STDOUT_FILENO) != 0 && world == 1;
  MPT_CHECK(o.fp8_telemetry == 0 || policy.fp8_state, "[train_gpt] --fp8-telemetry needs an FP8 --precision "
            "(fp8-delayed, fp8-current or fp8-block), not {}", o.precision);
  for (int64_t step = start_step; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    // Telemetry reads every quantized tensor back (a synchronisation per tensor): only on the steps asked for.
    const bool telemetry_step = o.fp8_telemetry > 0 && step % o.fp8_telemetry == 0;
    if (telemetry_step) policy.fp8_state->set_collect_telemetry(true);
    const mpt::profile::Range step_range("step");
    opt.zero_grad();
    model.zero_grad();  // with ZeRO-1 the optimizer holds only this rank's parameters
    std::optional<mpt::dist::DataParallel::NoSync> no_sync;  // every micro-batch's backward but the last
    const mpt::amp::AccumulateResult acc = mpt::amp::accumulate_gradients(
        o.grad_accum,
        [&](int64_t micro) {
          if (micro + 1 < o.grad_accum) no_sync.emplace(dp); else no_sync.reset();
          const mpt::data::Batch b = loader.next();
          mpt::amp::Autocast autocast(policy);
          return mpt::amp::MicroBatchLoss{model.loss(b.x, b.y), o.batch * o.seq};
        },
        {.normalization = mpt::amp::LossNormalization::MicroBatchMean, .total_tokens = 0,
         .scale_loss = [&](const mpt::Tensor& l) { return scaler.scale(l); }});
    dp.finish();  // the averaged gradients (waits for the buckets still in flight)
    hidden_sum += dp.last_step().hidden_fraction();
    wait_ms_sum += dp.last_step().finish_wait_s * 1e3;
    scaler.unscale_(opt);  // clipping sees the true gradients
    const mpt::Tensor norm_t = dp.clip_grad_norm_(o.clip);
    const double lr = schedule.current_lr();
    // The skip happens on the device; reading whether it did waits for the device, so only with a loss scaler.
    const mpt::amp::StepResult stepped = scaler.step(opt);
    if (scaler.is_enabled() && !stepped) ++skipped;
    dp.sync_parameters();  // ZeRO-1: every rank's updated shard everywhere
    scaler.update();
    if (telemetry_step) {
      report_fp8_telemetry(*policy.fp8_state, step, log);
      policy.fp8_state->set_collect_telemetry(false);
    }
    if (policy.fp8_state) policy.fp8_state->update();  // delayed scaling: next step's scales from the amax history
    schedule.step();
    // The loss and the norm stay on the device between logging steps: a step on a GPU does not wait for it.
    const bool log_step = step % o.log_every == 0 || step + 1 == o.steps;
    double loss_value = 0, norm = 0;
    if (log_step) {
      loss_value = acc.value();
      norm = norm_t.item<double>();
      if (world > 1) {  // the global batch's loss (each rank's is its share's); every rank logs at the same steps
        mpt::Tensor l = mpt::Tensor::full({1}, loss_value, mpt::DType::F32);
        comm->all_reduce(l, mpt::dist::ReduceOp::Avg)->wait();
        loss_value = l.to_vector<float>()[0];
      }
      MPT_CHECK(std::isfinite(loss_value), "[train_gpt] the loss became {} at step {}", loss_value, step);
    }
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    window_ms += ms;
    ++window_steps;
    total_ms += ms;
    const auto eta_s = static_cast<int64_t>(total_ms / 1e3 / static_cast<double>(step + 1 - start_step) *
                                            static_cast<double>(o.steps - step - 1));
    if (progress_bar) {  // a terminal: one line redrawn after every step, cleared before any other output
      const int width = 30, filled = static_cast<int>(width * (step + 1) / o.steps);
      fmt::print("\r[{}{}] {:3}% step {}/{} ETA {}:{:02} ", std::string(static_cast<size_t>(filled), '#'),
                 std::string(static_cast<size_t>(width - filled), '.'), 100 * (step + 1) / o.steps, step + 1, o.steps,
                 eta_s / 60, eta_s % 60);
      std::fflush(stdout);
      if (log_step || step + 1 == o.steps || (o.eval_every > 0 && (step + 1) % o.eval_every == 0))
        fmt::print("\r{}\r", std::string(80, ' '));
    }
    if (log_step) {
      const double tps = tokens_per_step * static_cast<double>(window_steps) / window_ms * 1e3;
      // Time the step waited for its batches (the loader's worker was behind), per step of the window.
      const double data_wait_ms = loader.take_wait_seconds() * 1e3 / static_cast<double>(window_steps);
      const double mem_mib = static_cast<double>(mpt::memory_stats(device).peak_bytes) / (1 << 20);
      // tps counts every rank's tokens; each rank has its own device and peak.
      const double mfu = peak_flops > 0 ? tps / world * model_flops / peak_flops : 0.0;
      fmt::print("step {:5}/{} | loss {:.4f} | lr {:.2e} | grad norm {:.3f} | {:7.1f} ms | {:8.0f} tok/s | data wait "
                 "{:.2f} ms | MFU {} | peak mem {:.0f} MiB | ETA {}:{:02}{}{}\n", step, o.steps, loss_value, lr, norm,
                 ms, tps, data_wait_ms,
                 peak_flops > 0 ? fmt::format("{:.1f}%", 100 * mfu) : std::string("n/a"),
                 mem_mib, eta_s / 60, eta_s % 60,
                 scaler.is_enabled() ? fmt::format(" | scale {:g}", scaler.get_scale()) : std::string(),
                 world > 1 ? fmt::format(" | comm hidden {:.0f}%, wait {:.1f} ms", 100 * hidden_sum / window_steps,
                                         wait_ms_sum / window_steps)
                           : std::string());
      hidden_sum = wait_ms_sum = 0;
      nlohmann::json record{{"step", step}, {"loss", loss_value}, {"lr", lr}, {"grad_norm", norm},
                            {"tokens_per_s", tps}, {"data_wait_ms", data_wait_ms}};
      if (peak_flops > 0) record["mfu"] = mfu;
      if (scaler.is_enabled()) record["loss_scale"] = scaler.get_scale();
      log.write(record);
      window_ms = 0;
      window_steps = 0;
      std::fflush(stdout);
    }
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || step + 1 == o.steps) {
      model.eval();
      val_loss = evaluate(model, val, o, device, policy);
      fmt::print("step {:5} | val loss {:.4f}\n", step, val_loss);
      log.write({{"step", step}, {"val_loss", val_loss}});
      model.train();
    }
    // Checkpoints after the step (and its evaluation, whose FP8 amaxes feed the next delayed-scaling update).
    const bool last = step + 1 == o.steps;
    bool stop = !last && (mpt_examples::stop_requested() ||
                          (o.stop_after > 0 && step + 1 - start_step >= o.stop_after));
    if (world > 1) {  // a signal reaches the ranks at different moments: they stop (and save) together
      mpt::Tensor flag = mpt::Tensor::full({1}, stop ? 1.0 : 0.0, mpt::DType::F32);
      comm->all_reduce(flag, mpt::dist::ReduceOp::Max)->wait();
      stop = !last && flag.to_vector<float>()[0] > 0;
    }
    if (!o.save_dir.empty() && (last || stop || (o.save_every > 0 && (step + 1) % o.save_every == 0))) save(step + 1);
    if (stop) {
      if (o.save_dir.empty()) {
        fmt::print("stopped after step {} of {}: nothing saved (give --save-dir DIR to save a checkpoint on "
                   "Ctrl-C)\n", step + 1, o.steps);
      } else {
        fmt::print("stopped after step {} of {}; resume with: train_gpt --resume {}\n", step + 1, o.steps,
                   o.save_dir);
      }
      return;
    }
  }
  const int64_t steps_run = o.steps - start_step;
  const double mean_tps = steps_run > 0 ? tokens_per_step * static_cast<double>(steps_run) / total_ms * 1e3 : 0.0;
  fmt::print("done: {} steps in {:.0f} s ({} skipped by the loss scaler), mean {:.0f} tok/s, final val loss {:.4f}\n",
             steps_run, total_ms / 1e3, skipped, mean_tps, val_loss);
  log.write({{"final", true}, {"precision", o.precision}, {"steps", o.steps}, {"skipped", skipped},
             {"tokens_per_s", mean_tps}, {"val_loss", val_loss}});
  const auto stats = mpt::memory_stats(device);
  fmt::print("peak memory on {}: {:.1f} MiB\n", device, static_cast<double>(stats.peak_bytes) / (1 << 20));
  if (o.sample_chars > 0) {
    model.eval();
    fmt::print("sample:\n{}\n", sample(model, tokenizer, o.sample_chars, device, o.seed, policy));
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"mptrain train_gpt: a GPT-2 or a Llama trained on a text (by characters or BPE) or on token files (CPU "
               "when no GPU is usable)"};
  Options o;
  const char* env = std::getenv("MPT_DATA");
  o.data = env != nullptr ? env : "";
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
  app.add_option("--grad-accum", o.grad_accum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  app.add_option("--log-json", o.log_json, "write progress as JSON lines to this file");
  app.add_option("--moments", o.moments, "AdamW moment storage: f32, bf16 or int8 (8-bit blockwise)");
  app.add_option("--optimizer", o.optimizer, "adamw, or adamw8bit (AdamW with 8-bit blockwise moments: --moments int8)")
      ->check(CLI::IsMember({"adamw", "adamw8bit"}));
  app.add_option("--fp8-telemetry", o.fp8_telemetry, "every N steps, print and log each FP8 tensor's amax, scale "
                 "and the fractions saturated and flushed to zero (0: never)")->check(CLI::NonNegativeNumber);
  app.add_option("--freeze", o.freeze, "freeze the embeddings (and the tied LM head) and the first N blocks")
      ->check(CLI::NonNegativeNumber);
  std::string preset;
  app.add_option("--preset", preset, "model and batch shape: tiny (2x64, T 64), small (6x384, T 256: nanoGPT's "
                 "shakespeare-char), gpt2 (12x768, T 1024), llama-tiny (2x64, 4 heads / 2 kv, T 64) or llama-100m "
                 "(12x768, 12 heads / 4 kv, T 1024); explicit flags win")
      ->check(CLI::IsMember({"tiny", "small", "gpt2", "llama-tiny", "llama-100m"}));
  app.set_config("--config", "", "a TOML file whose keys are the long flags (layers = 6, precision = \"bf16\"); "
                 "command-line flags win");
  app.add_option("--init-scale", o.init_scale, "initial loss scale of fp16's GradScaler")->check(CLI::PositiveNumber);
  app.add_option("--bucket-mb", o.bucket_mb, "under mpirun: gradient MB per all-reduce bucket (default 25)");
  app.add_flag("--zero1", o.zero1, "under mpirun: shard the AdamW state across the ranks (ZeRO-1)");
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
  CLI11_PARSE(app, argc, argv);
  try {
    const auto on_command_line = [&](const char* flag) { return app.count(flag) > 0; };
    const std::set<std::string> from_preset =
        preset.empty() ? std::set<std::string>() : apply_preset(o, preset, on_command_line);
    const auto given = [&](const char* flag) { return on_command_line(flag) || from_preset.count(flag) != 0; };
    if (o.optimizer == "adamw8bit") {
      MPT_CHECK(!given("--moments") || o.moments == "int8", "[train_gpt] --optimizer adamw8bit keeps AdamW's moments "
                "in int8; --moments {} contradicts it", o.moments);
      o.moments = "int8";
    }
    if (!o.resume.empty()) {
      if (o.resume == "latest") {
        MPT_CHECK(!o.save_dir.empty(), "[train_gpt] --resume latest needs --save-dir (the directory whose latest "
                  "checkpoint to continue)");
        o.resume = o.save_dir;
      }
      const mpt::io::CheckpointInfo info = mpt::io::read_checkpoint_info(o.resume);
      o.resume = info.path.string();
      restore_options(o, nlohmann::json::parse(info.run_config_json), (info.path / "state.json").string(),
                      given);
      if (o.save_dir.empty() && info.path.filename().string().starts_with("step-"))
        o.save_dir = info.path.parent_path().string();  // keep saving beside the checkpoint
    }
    if (o.warmup < 0) o.warmup = o.steps / 10;
    MPT_CHECK(o.warmup <= o.steps, "[train_gpt] --warmup {} exceeds --steps {}", o.warmup, o.steps);
    run(o);
  } catch (const std::bad_alloc&) {  // host memory outside mptrain's tensors (which throw mpt::Error with the shape)
    std::fprintf(stderr, "train_gpt: out of host memory (std::bad_alloc); reduce --batch, --seq, --layers or --embd\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
