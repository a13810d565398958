// examples/finetune.cpp: fine-tunes a train_gpt checkpoint into a classifier of who speaks a line of tinyshakespeare.
#include <mpt/mpt.h>

#include <fmt/ranges.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>
#include <sstream>
#include <variant>

#include "mpt/amp/policy.h"
#include "mpt/data/batching.h"
#include "mpt/data/tokenizer.h"
#include "mpt/train/checkpoint.h"
#include "mpt/nn/hf_gpt2.h"
#include "mpt/nn/gpt.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/embedding.h"
#include "mpt/ops/reduction.h"
#include "mpt/ops/softmax.h"
#include "mpt/optim/adamw.h"
#include "mpt/optim/clip.h"
#include "mpt/optim/lr_schedule.h"

#include "embedded_text.h"
#include "speakers.h"

namespace {

struct Options {
  std::string checkpoint;   // a train_gpt --save-dir (its latest checkpoint) or one step-* directory in it
  std::string tokenizer;    // default: the save directory's tokenizer.json (train_gpt writes it beside its checkpoints)
  std::string data;         // the play; default the built-in tinyshakespeare
  int speakers = 8, held_out_every = 10;
  int64_t freeze = -1;  // the embeddings and the first N blocks; -1: half the blocks
  int64_t steps = 600, batch = 32, max_len = 0, bucket_batches = 16, eval_every = 200, log_every = 50;
  int64_t max_eval = 0;  // held-out lines evaluated (0: all)
  double lr = 1e-3, weight_decay = 0.01;
  std::string optimizer = "adamw8bit", precision = "fp32", pool = "mean";
  std::string fp8_layers = "auto", fp8_calibration;  // train_gpt's --fp8-layers / --fp8-calibration
  uint64_t seed = 1;
};

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[finetune] cannot read '{}'", path.string());
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The GPT of a train_gpt checkpoint: its config.json (Hugging Face GPT-2 layout) and weights, every file's checksum
// verified (train::load_checkpoint of the model alone).
std::unique_ptr<mpt::nn::GPT> load_model(const mpt::train::CheckpointInfo& info, mpt::Device device) {
  mpt::nn::GPTConfig config = mpt::nn::parse_hf_gpt2_config(read_file(info.path / "config.json"),
                                                            (info.path / "config.json").string());
  config.where.device = device;
  auto model = std::make_unique<mpt::nn::GPT>(config);
  mpt::train::TrainingState state{.model = model.get(), .precision = info.precision};
  mpt::train::load_checkpoint(info.path, state);
  return model;
}

// A classifier on the GPT: a linear layer on the final hidden states, pooled over each line's real tokens (mean) or
// taken at its last real token (last). A Module, so the Trainer finds every trainable parameter in it.
class Classifier : public mpt::nn::Module {
 public:
  Classifier(std::shared_ptr<mpt::nn::GPT> gpt, std::shared_ptr<mpt::nn::Linear> head, bool mean_pool)
      : Module("Classifier"),
        gpt_(register_module("gpt", std::move(gpt))),
        head_(register_module("head", std::move(head))),
        mean_pool_(mean_pool) {}

  const mpt::nn::Linear& head() const { return *head_; }

  // ids [B, T] on the model's device, lengths (B,) i32 on the CPU -> logits [B, classes].
  mpt::Tensor operator()(const mpt::Tensor& ids, const mpt::Tensor& lengths) const {
    const int64_t B = ids.size(0), T = ids.size(1);
    const mpt::Tensor h = gpt_->features(ids, lengths);  // [B, T, C]
    const auto len = lengths.to_vector<int32_t>();
    if (mean_pool_) {  // sum_t w[b, t] h[b, t] with w = 1 / len over the real positions, 0 over the padding
      std::vector<float> w(static_cast<size_t>(B * T), 0.0f);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < len[static_cast<size_t>(b)]; ++t)
          w[static_cast<size_t>(b * T + t)] = 1.0f / static_cast<float>(len[static_cast<size_t>(b)]);
      const mpt::Tensor weights = mpt::Tensor::from_vector(w, {B, T, 1}, ids.device()).to(h.dtype());
      return (*head_)(mpt::ops::sum(mpt::ops::mul(h, weights), 1));
    }
    std::vector<int64_t> last(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) last[static_cast<size_t>(b)] = b * T + len[static_cast<size_t>(b)] - 1;
    // A gather of B rows of the [B * T, C] states (its backward scatters into them).
    const mpt::Tensor rows = mpt::Tensor::from_vector(last, {B}, ids.device());
    return (*head_)(mpt::ops::embedding(rows, h.reshape({B * T, h.size(2)})));
  }

 private:
  std::shared_ptr<mpt::nn::GPT> gpt_;
  std::shared_ptr<mpt::nn::Linear> head_;
  bool mean_pool_;
};

struct Batch {
  mpt::Tensor ids, lengths, labels;
  double padding = 0;
};

Batch make_batch(const std::vector<std::vector<int32_t>>& tokens, const std::vector<mpt_examples::SpeakerLine>& lines,
                 const std::vector<int64_t>& index, int64_t max_len, mpt::Device device) {
  std::vector<std::vector<int32_t>> samples;
  std::vector<int64_t> labels;
  for (int64_t i : index) {
    samples.push_back(tokens[static_cast<size_t>(i)]);
    labels.push_back(lines[static_cast<size_t>(i)].label);
  }
  const mpt::data::PaddedBatch p = mpt::data::pad_batch(samples, {.max_length = max_len, .truncate = true});
  return {p.ids.to(device), p.lengths,
          mpt::Tensor::from_vector(labels, {static_cast<int64_t>(labels.size())}, device), p.padding_fraction()};
}

// Held-out accuracy: the lines in order of length (little padding), `batch` at a time.
double accuracy(const Classifier& model, const std::vector<std::vector<int32_t>>& tokens,
                const std::vector<mpt_examples::SpeakerLine>& lines, int64_t count, const Options& o,
                int64_t max_len, mpt::Device device) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return tokens[static_cast<size_t>(a)].size() < tokens[static_cast<size_t>(b)].size();
  });
  int64_t right = 0;
  for (int64_t start = 0; start < count; start += o.batch) {
    const std::vector<int64_t> index(order.begin() + start, order.begin() + std::min(count, start + o.batch));
    const Batch b = make_batch(tokens, lines, index, max_len, device);
    const auto logits = model(b.ids, b.lengths).to(mpt::Device::cpu()).to(mpt::DType::F32).to_vector<float>();
    const int64_t classes = model.head().out_features();
    for (size_t r = 0; r < index.size(); ++r) {
      const auto row = logits.begin() + static_cast<std::ptrdiff_t>(r) * classes;
      const auto best = std::max_element(row, row + classes) - row;
      right += best == lines[static_cast<size_t>(index[r])].label;
    }
  }
  return static_cast<double>(right) / static_cast<double>(count);
}

// Bytes of optimizer state (moments, 8-bit block scales, step counts), from its state_dict.
int64_t optimizer_bytes(const mpt::optim::Optimizer& opt) {
  int64_t bytes = 0;
  for (const auto& [key, t] : opt.state_dict())
    if (key.rfind("group", 0) != 0 || key.find(".param") != std::string::npos) bytes += t.nbytes();
  return bytes;
}

double mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

void run(const Options& o) {
  const mpt::Device device = mpt::Device::best();
  fmt::print("device: {} ({})\n", device, mpt::Device::best_reason());
  const mpt::train::CheckpointInfo info = mpt::train::read_checkpoint_info(o.checkpoint);
  const std::filesystem::path tok_path =
      o.tokenizer.empty() ? info.path.parent_path() / "tokenizer.json" : std::filesystem::path(o.tokenizer);
  MPT_CHECK(std::filesystem::is_regular_file(tok_path), "[finetune] no tokenizer at '{}': train_gpt writes it beside "
            "its checkpoints (a run before it did not: give --tokenizer)", tok_path.string());
  const std::unique_ptr<mpt::data::Tokenizer> tokenizer = mpt::data::load_tokenizer(tok_path);
  std::shared_ptr<mpt::nn::GPT> gpt = load_model(info, device);
  const mpt::nn::GPTConfig& c = gpt->config();
  MPT_CHECK(tokenizer->vocab_size() == c.vocab_size, "[finetune] the tokenizer '{}' has {} ids but the checkpoint's "
            "model {}: they come from different runs", tok_path.string(), tokenizer->vocab_size(), c.vocab_size);
  fmt::print("pretrained: {} (step {}): {} layers, {} heads, {} wide, context {}, vocab {} ({} tokenizer)\n",
             info.path.string(), info.step, c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size,
             tokenizer->kind());

  const std::string text = o.data.empty() ? std::string(mpt_examples::tinyshakespeare()) : read_file(o.data);
  const mpt_examples::SpeakerSet set = mpt_examples::speaker_lines(text, o.speakers, o.held_out_every);
  auto encode = [&](const std::vector<mpt_examples::SpeakerLine>& lines) {
    std::vector<std::vector<int32_t>> t;
    for (const auto& l : lines) {
      t.push_back(tokenizer->encode(l.text));
      MPT_CHECK(!t.back().empty(), "[finetune] the line \"{}\" (speech {}) encodes to no tokens with the {} tokenizer "
                "'{}'", l.text, l.speech, tokenizer->kind(), tok_path.string());
    }
    return t;
  };
  const auto train_tokens = encode(set.train), held_tokens = encode(set.held_out);
  std::vector<int64_t> counts(set.names.size()), lengths;
  for (const auto& l : set.train) ++counts[static_cast<size_t>(l.label)];
  for (const auto& t : train_tokens) lengths.push_back(static_cast<int64_t>(t.size()));
  const int64_t majority = std::max_element(counts.begin(), counts.end()) - counts.begin();
  const int64_t n_eval = o.max_eval > 0 ? std::min<int64_t>(o.max_eval, set.held_out.size()) : set.held_out.size();
  int64_t majority_right = 0;
  for (int64_t i = 0; i < n_eval; ++i) majority_right += set.held_out[static_cast<size_t>(i)].label == majority;
  const double baseline = static_cast<double>(majority_right) / static_cast<double>(n_eval);
  fmt::print("task: which of {} speakers says a line: {} training lines, {} held out (every {}th speech); "
             "speakers: {}\n", set.names.size(), set.train.size(), n_eval, o.held_out_every,
             fmt::join(set.names, ", "));

  // Freeze the embeddings (the tied LM head with them, unused here) and the first N blocks.
  const int64_t freeze = o.freeze >= 0 ? o.freeze : c.n_layer / 2;
  MPT_CHECK(freeze <= c.n_layer, "[finetune] --freeze {} exceeds the model's {} blocks", freeze, c.n_layer);
  gpt->wte().requires_grad_(false);
  gpt->wpe().requires_grad_(false);
  for (int64_t i = 0; i < freeze; ++i) gpt->block(static_cast<size_t>(i)).requires_grad_(false);
  mpt::Generator gen(o.seed);
  MPT_CHECK(o.pool == "mean" || o.pool == "last", "[finetune] unknown --pool '{}': expected mean or last", o.pool);
  Classifier model(gpt, std::make_shared<mpt::nn::Linear>(c.n_embd, static_cast<int64_t>(set.names.size()), true,
                                                          mpt::nn::Placement{mpt::DType::F32, device}, gen),
                   o.pool == "mean");
  const int64_t trainable = model.num_parameters(true), total = model.num_parameters();
  fmt::print("frozen: the embeddings and {} of {} blocks; {:.3f}M of {:.3f}M parameters train (a head of {} classes "
             "on the {})\n", freeze, c.n_layer, trainable / 1e6, total / 1e6, set.names.size(),
             o.pool == "mean" ? "mean of the real tokens' states" : "last real token's state");

  MPT_CHECK(o.optimizer == "adamw" || o.optimizer == "adamw8bit", "[finetune] unknown --optimizer '{}': expected "
            "adamw or adamw8bit", o.optimizer);
  const auto moments = o.optimizer == "adamw8bit" ? mpt::ops::MomentStorage::Int8 : mpt::ops::MomentStorage::F32;
  // The Trainer owns the step in every precision: FP16 gets its loss scaler, the FP8 recipes their scale updates. The
  // blocks are "gpt.h.<i>"; the 8-class head stays in BF16 under FP8 (too narrow for FP8 GEMMs to pay).
  const int64_t max_len = o.max_len > 0 ? std::min(o.max_len, c.block_size) : c.block_size;
  mpt::amp::Policy policy = mpt::amp::Policy::named(o.precision, c.n_layer, device, "gpt.h");
  if (policy.fp8_state != nullptr) {
    policy.override_module("head", mpt::amp::Precision::BF16);
    // Judged at a full batch of the longest lines (dynamic padding's shorter batches keep the decisions).
    policy.fp8_rule = mpt::amp::fp8_rule_named(o.fp8_layers, o.fp8_calibration, o.batch * max_len);
  }
  mpt::train::Trainer trainer(
      model, mpt::train::adamw({.lr = o.lr, .moments = moments}),
      {.policy = policy, .precision_name = o.precision, .clip = 1.0, .weight_decay = o.weight_decay,
       .schedule = mpt::train::warmup_cosine(
           {.max_lr = o.lr, .min_lr = o.lr / 10, .warmup_steps = o.steps / 10, .total_steps = o.steps})});
  mpt::data::LengthBucketSampler sampler(
      {.lengths = lengths, .batch = o.batch, .bucket_batches = o.bucket_batches, .seed = o.seed});
  fmt::print("training: {} steps of {} lines (dynamic padding, length buckets of {} batches, at most {} tokens), "
             "{} ({} moments), lr {:g}, {}{}\n", o.steps, o.batch, o.bucket_batches, max_len, o.optimizer,
             moments == mpt::ops::MomentStorage::Int8 ? "8-bit" : "FP32", o.lr, o.precision,
             trainer.scaler().is_enabled() ? " with dynamic loss scaling" : "");
  fmt::print("majority-class baseline (always '{}'): held-out accuracy {:.4f}\n",
             set.names[static_cast<size_t>(majority)], baseline);

  double loss_sum = 0, pad_sum = 0, ms_sum = 0, acc = 0;
  int64_t window = 0;
  for (int64_t step = 0; step < o.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    const Batch b = make_batch(train_tokens, set.train, sampler.next(), max_len, device);
    const mpt::train::StepMetrics m = trainer.step([&](int64_t) {
      return mpt::ops::softmax_cross_entropy(model(b.ids, b.lengths), b.labels).loss;
    });
    const double lr = m.lr;
    loss_sum += m.loss.item<double>();
    pad_sum += b.padding;
    ms_sum += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    ++window;
    const bool last = step + 1 == o.steps;
    if ((step + 1) % o.log_every == 0 || last) {
      fmt::print("step {:4d}/{} | loss {:.4f} | lr {:.2e} | padding {:.1f}% | {:.0f} ms/step\n", step + 1, o.steps,
                 loss_sum / window, lr, 100 * pad_sum / window, ms_sum / window);
      loss_sum = pad_sum = ms_sum = 0;
      window = 0;
    }
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      acc = trainer.evaluate([&] { return accuracy(model, held_tokens, set.held_out, n_eval, o, max_len, device); });
      fmt::print("step {:4d} | held-out accuracy {:.4f} (majority baseline {:.4f})\n", step + 1, acc, baseline);
    }
  }
  fmt::print("final held-out accuracy {:.4f} on {} lines of {} speakers; majority-class baseline {:.4f}\n", acc,
             n_eval, set.names.size(), baseline);
  if (trainer.scaler().is_enabled())
    fmt::print("loss scaler: scale {:g} after {} steps, {} skipped\n", trainer.scaler().get_scale(), o.steps,
               trainer.skipped_steps());
  if (const std::string r = mpt::amp::fp8_rule_report(policy.fp8_rule); !r.empty()) fmt::print("{}\n", r);
  if (const mpt::fp8::Fp8ScalingState* fp8 = trainer.fp8_state()) {
    if (std::holds_alternative<mpt::fp8::DelayedScaling>(fp8->recipe()))
      fmt::print("fp8 scaling: {} updates of {} tensors' scales\n", fp8->num_updates(), fp8->metas().size());
    else
      fmt::print("fp8 scaling: {} tensors scaled by their own amax at every quantization\n", fp8->metas().size());
  }

  // What the optimizer holds, against FP32 AdamW (8 bytes per parameter) on every parameter.
  const bool int8 = moments == mpt::ops::MomentStorage::Int8;
  const int64_t held = optimizer_bytes(trainer.optimizer()), fp32_all = 8 * total, fp32_trainable = 8 * trainable;
  fmt::print("optimizer state: {:.2f} MiB ({} moments on {:.3f}M trainable parameters); FP32 AdamW on all {:.3f}M "
             "would hold {:.2f} MiB: freezing saves {:.2f} MiB{}\n", mib(held), int8 ? "8-bit" : "FP32",
             trainable / 1e6, total / 1e6, mib(fp32_all), mib(fp32_all - fp32_trainable),
             int8 ? fmt::format(", 8-bit moments save {:.2f} MiB", mib(fp32_trainable - held)) : std::string());
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"mptrain finetune: a train_gpt checkpoint fine-tuned to tell which of tinyshakespeare's most frequent "
               "speakers says a line (frozen layers, dynamic padding, 8-bit AdamW)"};
  app.add_option("--checkpoint", o.checkpoint, "a train_gpt --save-dir (its latest checkpoint) or a step-* directory")
      ->required();
  app.add_option("--tokenizer", o.tokenizer, "the tokenizer JSON (default: tokenizer.json beside the checkpoints)");
  app.add_option("--data", o.data, "the play's text (default: the built-in tinyshakespeare)");
  app.add_option("--speakers", o.speakers, "classes: the speakers with the most lines")->check(CLI::Range(2, 1000));
  app.add_option("--held-out-every", o.held_out_every, "hold out every Nth speech")->check(CLI::Range(2, 1000000));
  app.add_option("--freeze", o.freeze, "freeze the embeddings and the first N blocks (default: half of them)");
  app.add_option("--steps", o.steps, "optimizer steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "lines per step")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "peak learning rate (warmup 10%, cosine to a tenth)")->check(CLI::PositiveNumber);
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices only)")->check(CLI::NonNegativeNumber);
  app.add_option("--optimizer", o.optimizer, "adamw (FP32 moments) or adamw8bit (8-bit blockwise moments)");
  app.add_option("--precision", o.precision, "fp32, bf16, fp16 (with dynamic loss scaling), fp8-delayed, fp8-current "
                 "or fp8-block (the first and last blocks and the head in BF16)")
      ->check(CLI::IsMember({"fp32", "bf16", "fp16", "fp8-delayed", "fp8-current", "fp8-block"}));
  app.add_option("--fp8-layers", o.fp8_layers, "with an FP8 --precision on a GPU: auto (a layer runs FP8 only where the "
                 "per-shape rule judges it faster than BF16; docs/fp8.md) or all")
      ->check(CLI::IsMember({"auto", "all"}));
  app.add_option("--fp8-calibration", o.fp8_calibration, "the rule's measured rates (bench_fp8 --calibration FILE; "
                 "default an H200's)");
  app.add_option("--pool", o.pool, "what the head reads: mean (of the real tokens' final states) or last (token's)");
  app.add_option("--max-len", o.max_len, "tokens kept per line (0: the model's context)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--bucket-batches", o.bucket_batches, "batches per length-sorted window (1: random batches)")
      ->check(CLI::PositiveNumber);
  app.add_option("--eval-every", o.eval_every, "steps between held-out evaluations (0: at the end only)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--max-eval", o.max_eval, "held-out lines evaluated (0: all)")->check(CLI::NonNegativeNumber);
  app.add_option("--log-every", o.log_every, "steps per progress line")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "the head's initialisation and the batch order");
  CLI11_PARSE(app, argc, argv);
  try {
    run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finetune: %s\n", e.what());
    return 1;
  }
  return 0;
}
