// examples/train_gpt.cpp: trains a GPT-2 or a Llama on a text (tinyshakespeare built in) or token files, printing
// progress. Its options, data and progress lines live in examples/common/; each optimizer step is a Trainer's.
#include <mpt/mpt.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <new>

#include "common/corpus.h"
#include "common/models.h"
#include "common/progress.h"
#include "common/run_options.h"
#include "mpt/amp/fp8_rule.h"
#include "mpt/amp/policy.h"
#include "mpt/amp/qat.h"
#include "mpt/nn/quantize.h"
#include "mpt/data/loader.h"
#include "mpt/train/init_from.h"
#include "mpt/train/trainer.h"
#include "train_gpt_session.h"

namespace {

namespace ex = mpt_examples;

mpt::ops::MomentStorage moment_storage(const ex::Options& o) {
  if (o.moments == "f32") return mpt::ops::MomentStorage::F32;
  if (o.moments == "bf16") return mpt::ops::MomentStorage::BF16;
  if (o.moments == "int8") return mpt::ops::MomentStorage::Int8;
  MPT_THROW("[train_gpt] unknown --moments '{}': expected f32, bf16 or int8 (8-bit blockwise)", o.moments);
}

mpt::train::GradCompression grad_compression(const ex::Options& o) {
  if (o.grad_compression == "none") return mpt::train::GradCompression::None;
  if (o.grad_compression == "bf16") return mpt::train::GradCompression::BF16;
  if (o.grad_compression == "fp8") return mpt::train::GradCompression::FP8;
  MPT_THROW("[train_gpt] unknown --grad-compression '{}': expected none, bf16 or fp8", o.grad_compression);
}

void run(const ex::Options& o) {
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
  mpt::amp::Policy policy =
      mpt::amp::Policy::named(o.precision, o.layers, device, o.model == "llama" ? "model.layers" : "h");
  if (o.residual != "f32") policy.residual_in(mpt::amp::parse_residual_dtype(o.residual));
  if (o.grads != "f32") policy.grads_in(mpt::amp::parse_grad_dtype(o.grads));
  // resumes only with the same stream and gradient dtype
  std::string precision_name = mpt::amp::precision_name(o.precision, policy);
  if (!o.qat.empty()) {  // QAT: fake-quantized Linear weights (and inputs) under the same GEMM precision
    MPT_CHECK(!policy.fp8_state, "[train_gpt] --qat {} fake-quantizes for FP32, BF16 or FP16 GEMMs; --precision {} "
              "runs them in FP8", o.qat, o.precision);
    policy.qat = std::make_shared<const mpt::amp::QatPolicy>(
        mpt::amp::QatPolicy::linears_but_head(mpt::amp::QatScheme::named(o.qat, o.qat_group)));
    precision_name += "+qat-" + policy.qat->all->name;  // a checkpoint resumes only under the same scheme
    if (o.qat_lsq) precision_name += "+lsq";
  }
  MPT_CHECK(!o.qat_lsq || (!o.qat.empty() && o.qat != "fp8"), "[train_gpt] --qat-lsq learns the scales of --qat int8 "
            "or int4 weights, not {}", o.qat.empty() ? std::string("a run without --qat") : "--qat " + o.qat);
  if (policy.fp8_state) policy.fp8_rule = mpt::amp::fp8_rule_named(o.fp8_layers, o.fp8_calibration, o.batch * o.seq);
  MPT_CHECK(o.fp8_telemetry == 0 || policy.fp8_state, "[train_gpt] --fp8-telemetry needs an FP8 --precision "
            "(fp8-delayed, fp8-current or fp8-block), not {}", o.precision);
  MPT_CHECK(o.bucket_mb > 0, "[train_gpt] --bucket-mb {} must be positive", o.bucket_mb);

  // The data, and the model it sizes (the vocabulary).
  const ex::Corpus corpus = ex::load_corpus(o);
  const int64_t vocab = corpus.tokenizer->vocab_size();
  ex::check_memory(o, vocab, device);
  // One batch of windows of seq + 1 tokens must fit in the validation split (the sampler takes whole windows; the
  // training split's loader says the same of it).
  MPT_CHECK(corpus.val->size() / (o.seq + 1) >= o.batch, "[train_gpt] the validation split has {} tokens, fewer "
            "than one batch of {} windows of {} (--seq + 1): use more data, or a smaller --batch or --seq",
            corpus.val->size(), o.batch, o.seq + 1);
  const std::unique_ptr<mpt::nn::LanguageModel> model_ptr = ex::make_model(o, vocab, device);
  mpt::nn::LanguageModel& model = *model_ptr;
  if (!o.init_from.empty()) {  // weights only: the optimizer, schedule and data start afresh at step 0
    mpt::train::init_from(model, o.init_from);
    fmt::print("init: started from the weights of {} (a fresh optimizer at step 0)\n", o.init_from);
  }
  if (o.qat_lsq) {  // after --init-from: the scales start at the absmax scales of the weights QAT starts from
    const auto scales = mpt::nn::learn_quantization_scales(model, *policy.qat);
    fmt::print("qat: {} learned weight scales (LSQ), started at the absmax scales\n", scales.size());
  }
  model.set_activation_checkpointing(o.checkpoint);
  if (o.freeze >= 0) {  // before the Trainer, whose optimizer then leaves the frozen parameters out
    MPT_CHECK(o.freeze <= o.layers, "[train_gpt] --freeze {} exceeds --layers {}", o.freeze, o.layers);
    model.freeze(o.freeze);
  }
  fmt::print("data: {}, vocab {}; {} train / {} val tokens; {} tokenizer)\n", corpus.description, vocab,
             corpus.train->size(), corpus.val->size(), corpus.tokenizer->kind());
  fmt::print("model: {}: {:.2f}M parameters; batch {} x {}\n", model.describe(),
             static_cast<double>(model.num_parameters()) / 1e6, o.batch, o.seq);
  if (o.freeze >= 0) {
    fmt::print("frozen: the embeddings (and a tied LM head) and {} of {} blocks; {:.2f}M of {:.2f}M parameters "
               "train\n", o.freeze, o.layers, static_cast<double>(model.num_parameters(true)) / 1e6,
               static_cast<double>(model.num_parameters()) / 1e6);
  }

  // The optimizer step, all of it: micro-batches, autocast, loss scaling, FP8 scales, data parallelism, clipping,
  // AdamW and its warmup-cosine schedule.
  mpt::train::Trainer trainer(
      model, mpt::train::adamw({.lr = o.lr, .betas = {0.9, 0.95}, .moments = moment_storage(o)}),
      {.policy = policy,
       .precision_name = precision_name,
       .grad_accum = o.grad_accum,
       .clip = o.clip,
       .scaler = {.init_scale = o.init_scale},
       .weight_decay = o.weight_decay,
       .schedule = mpt::train::warmup_cosine(
           {.max_lr = o.lr, .min_lr = o.min_lr, .warmup_steps = o.warmup, .total_steps = o.steps}),
       .comm = world > 1 ? grad_comm : nullptr,
       .data_parallel = {.bucket_bytes = static_cast<int64_t>(o.bucket_mb * (1 << 20)),
                         .compression = grad_compression(o), .zero1 = o.zero1},
       .tokens_per_micro_batch = o.batch * o.seq,
       .flops_per_token = model.flops_per_token(o.seq),
       .fp8_telemetry_every = o.fp8_telemetry,
       .cuda_graph = o.cuda_graph});
  fmt::print("precision: {} (GEMMs; FP32 master weights, norms and loss; residual stream {}; gradients {}){}; {} "
             "micro-batch(es) per step; AdamW moments {}\n", precision_name, o.residual, o.grads,
             trainer.scaler().is_enabled() ? ", dynamic loss scaling" : "", o.grad_accum, o.moments);
  // This rank's batches (its share of each global batch of ranks x --batch windows), read on a worker thread while
  // the step runs; on a GPU copied asynchronously from page-locked memory.
  mpt::data::DataLoader loader(corpus.train, {.batch = o.batch, .seq = o.seq, .rank = rank, .world = world,
                                              .seed = o.seed, .prefetch = 2, .device = device});
  int64_t start_step = 0;
  if (!o.resume.empty()) {
    const mpt::train::CheckpointInfo info = trainer.load(o.resume);
    ex::restore_data_state(info.data_json, (info.path / "state.json").string(), corpus, o, loader);
    start_step = info.step;
    MPT_CHECK(start_step < o.steps, "[train_gpt] the checkpoint {} is at step {}, the end of this run (--steps {}): "
              "give a larger --steps to train on", info.path.string(), start_step, o.steps);
    fmt::print("resumed from {} at step {} (saved by mptrain {})\n", info.path.string(), start_step,
               info.library_version);
  }
  const auto save = [&] {
    const auto t0 = std::chrono::steady_clock::now();
    const std::filesystem::path dir = trainer.save(o.save_dir, {.keep = o.keep}, ex::saved_options(o).dump(),
                                                   ex::data_state(loader, corpus).dump());
    // Beside the checkpoints, for programs that start from them (examples/finetune); rank 0 only.
    if (rank == 0) corpus.tokenizer->save(std::filesystem::path(o.save_dir) / "tokenizer.json");
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("saved checkpoint {} ({:.0f} ms)\n", dir.string(), ms);
  };
  const std::string log_json = rank == 0 ? o.log_json : std::string();  // one log per job
  ex::truncate_log_for_resume(log_json, start_step);
  ex::JsonLog log(log_json, start_step > 0);
  ex::install_stop_handlers();
  const mpt::DensePeak& peak = trainer.peak();
  fmt::print("MFU against {} ({}); {:.4g} MFLOP per token\n",
             peak.flops > 0 ? fmt::format("{:.4g} TFLOP/s", peak.flops / 1e12) : std::string("no known peak"),
             peak.source, trainer.options().flops_per_token / 1e6);

  if (policy.qat && start_step == 0) {
    // Where QAT starts: the full-precision model, and the same weights quantized (post-training quantization).
    mpt::amp::Policy full = policy;
    full.qat = nullptr;
    const double fp = trainer.evaluate([&] {
      mpt::amp::Autocast no_qat(full);
      return ex::validation_loss(model, corpus, o, device);
    });
    const double ptq = trainer.evaluate([&] { return ex::validation_loss(model, corpus, o, device); });
    fmt::print("before QAT: val loss {:.4f} ({}) | {:.4f} quantized ({}, post-training quantization)\n", fp,
               o.precision, ptq, policy.qat->all->name);
    log.write({{"step", -1}, {"val_loss_full_precision", fp}, {"val_loss_ptq", ptq}, {"qat", policy.qat->all->name}});
  }
  ex::Progress progress(o, start_step, world, log);
  double val_loss = 0;
  for (int64_t step = start_step; step < o.steps; ++step) {
    std::vector<mpt::train::Batch> inputs;  // every micro-batch's, so that a CUDA graph can replay the whole step
    for (int64_t micro = 0; micro < o.grad_accum; ++micro) {
      const mpt::data::Batch b = loader.next();
      inputs.push_back({b.x, b.y});
    }
    const mpt::train::StepMetrics m = trainer.step(inputs, [&](int64_t, const mpt::train::Batch& in) {
      return mpt::train::MicroBatchLoss{model.loss(in[0], in[1]), o.batch * o.seq};
    });
    progress.after_step(m, trainer, loader);
    // The layers the rule judged (on a GPU) and what it chose, on the console and in the JSON log.
    if (const std::string report = step == start_step ? mpt::amp::fp8_rule_report(policy.fp8_rule) : "";
        !report.empty()) {
      fmt::print("{}\n", report);
      log.write({{"step", step}, {"fp8_rule", report}});
    }
    const bool last = step + 1 == o.steps;
    if ((o.eval_every > 0 && (step + 1) % o.eval_every == 0) || last) {
      val_loss = trainer.evaluate([&] { return ex::validation_loss(model, corpus, o, device); });
      fmt::print("step {:5} | val loss {:.4f}\n", step, val_loss);
      log.write({{"step", step}, {"val_loss", val_loss}});
    }
    // Checkpoints after the step and its evaluation (whose FP8 amaxes feed the next delayed-scaling update). A signal
    // reaches the ranks at different moments: they stop (and save) together.
    const bool stop = !last && trainer.any_rank(ex::stop_requested() ||
                                                (o.stop_after > 0 && step + 1 - start_step >= o.stop_after));
    if (!o.save_dir.empty() && (last || stop || (o.save_every > 0 && (step + 1) % o.save_every == 0))) save();
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
  progress.summary(trainer, val_loss, device);
  if (o.cuda_graph) {
    const mpt::train::GraphStatus& g = trainer.graph_status();
    fmt::print("CUDA graph: {} replayed steps, {} warm-up steps, {} other eager steps{}\n", g.replays, g.warmups,
               g.eager_steps, g.off.empty() ? std::string() : fmt::format(" (off: {})", g.off));
  }
  if (o.sample_chars > 0) {
    const std::string text =
        trainer.evaluate([&] { return ex::sample(model, *corpus.tokenizer, o.sample_chars, device, o.seed); });
    fmt::print("sample:\n{}\n", text);
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::variant<ex::Options, int> parsed = ex::parse_options(argc, argv, {.program = "train_gpt"});
    if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
    run(std::get<ex::Options>(parsed));
  } catch (const std::bad_alloc&) {  // host memory outside mptrain's tensors (which throw mpt::Error with the shape)
    std::fprintf(stderr, "train_gpt: out of host memory (std::bad_alloc); reduce --batch, --seq, --layers or --embd\n");
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt: %s\n", e.what());
    return 1;
  }
  return 0;
}
