// tests/gpu/test_trainer_graph_gpu.cpp: the Trainer's CUDA-graph step (TrainerOptions::cuda_graph) gives the bits of the same steps run eagerly (micro-batches, schedule, clipping, FP16 skips, FP8 scaling), with one launch and no wait per replay; where it cannot, steps run eagerly and say why (skipped without a GPU).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"
#include "test_util.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

using testing::to_cpu;

constexpr int64_t kB = 2, kT = 8, kVocab = 64, kLayers = 3;

nn::GPTConfig config(Device device, double dropout = 0) {
  nn::GPTConfig c;
  c.vocab_size = kVocab, c.block_size = kT, c.n_layer = kLayers, c.n_head = 2, c.n_embd = 32, c.dropout = dropout;
  c.where.device = device;
  return c;
}

// Micro-batch `micro` of step s: token ids and targets on the CPU (T tokens, or `t` when given).
train::Batch batch(int s, int64_t micro, int64_t t = kT) {
  std::vector<int64_t> ids(static_cast<size_t>(kB * (t + 1)));
  for (size_t i = 0; i < ids.size(); ++i)
    ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(s) * 13 + static_cast<size_t>(micro) * 5) % kVocab);
  const Tensor all = Tensor::from_vector(ids, {kB, t + 1});
  return {all.slice(1, 0, t).contiguous(), all.slice(1, 1, t + 1).contiguous()};
}

struct Options {
  std::string precision = "bf16";
  int64_t grad_accum = 1;
  bool graph = true;
  Device device = Device::cuda(0);
  double dropout = 0;
  int64_t telemetry_every = 0;
  double init_scale = 1024;
  int64_t growth_interval = 2000;
  std::shared_ptr<dist::Communicator> comm{};  // data parallelism (TrainerOptions::comm)
  train::GradCompression compression = train::GradCompression::None;
};

// A GPT and its Trainer (AdamW with weight decay, warm-up + cosine schedule, clipping at 1).
struct TrainRun {
  explicit TrainRun(const Options& o)
      : model(config(o.device, o.dropout)),
        trainer(model, train::adamw({.lr = 1e-3, .betas = {0.9, 0.95}}),
                {.policy = amp::Policy::named(o.precision, kLayers, o.device),
                 .precision_name = o.precision,
                 .grad_accum = o.grad_accum,
                 .clip = 1.0,
                 .scaler = {.init_scale = o.init_scale, .growth_interval = o.growth_interval},
                 .weight_decay = 0.1,
                 .schedule = train::warmup_cosine({.max_lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 2, .total_steps = 20}),
                 .comm = o.comm,
                 .data_parallel = {.compression = o.compression},
                 .fp8_telemetry_every = o.telemetry_every,
                 .cuda_graph = o.graph}) {}
  // Step s's inputs, on the model's device (a copy from pageable host memory would wait for the device).
  std::vector<train::Batch> inputs(int s, int64_t t = kT) {
    std::vector<train::Batch> batches;
    for (int64_t m = 0; m < trainer.options().grad_accum; ++m) {
      batches.push_back({});
      for (const Tensor& x : batch(s, m, t)) batches.back().push_back(x.to(model.config().where.device));
    }
    return batches;
  }
  train::StepMetrics step(const std::vector<train::Batch>& batches) {
    return trainer.step(batches, [this](int64_t, const train::Batch& in) { return model.loss(in[0], in[1]); });
  }
  train::StepMetrics step(int s, int64_t t = kT) { return step(inputs(s, t)); }
  nn::GPT model;
  train::Trainer trainer;
};

void expect_same_state(TrainRun& a, TrainRun& b, const std::string& what) {
  const StateDict ma = a.model.state_dict(), mb = b.model.state_dict();
  for (const auto& [name, t] : mb) EXPECT_TRUE(testing::same_bits(to_cpu(ma.at(name)), to_cpu(t))) << what << " " << name;
  const StateDict oa = a.trainer.optimizer().state_dict(), ob = b.trainer.optimizer().state_dict();
  ASSERT_EQ(oa.size(), ob.size()) << what;
  for (const auto& [name, t] : ob) EXPECT_TRUE(testing::same_bits(to_cpu(oa.at(name)), to_cpu(t))) << what << " " << name;
  if (a.trainer.scaler().is_enabled()) {
    EXPECT_EQ(a.trainer.scaler().get_scale(), b.trainer.scaler().get_scale()) << what;
  }
  if (a.trainer.fp8_state() != nullptr) {
    const auto fa = a.trainer.fp8_state()->state_dict(), fb = b.trainer.fp8_state()->state_dict();
    for (const auto& [name, t] : fb) EXPECT_TRUE(testing::same_bits(fa.at(name), t)) << what << " " << name;
  }
}

// Caching on, as on a GPU (the emulation's tests start with it off): a replay then allocates nothing from the driver.
struct CachingOn {
  CachingOn() { set_cuda_memory_caching(true); }
  ~CachingOn() { set_cuda_memory_caching(false); }
};

// Two warm-ups, the capture, then replays, each step's metrics kept and read only at the end (no host read between
// steps): every loss, grad norm and skip verdict, and the final parameters, optimizer, scaler and FP8 state have the
// bits of the same steps run eagerly. bf16 with two micro-batches; fp16 with a scale that grows every other step
// until gradients overflow (skips inside the replays); fp8-delayed (amax histories and scales on the device).
TEST(GpuTrainerGraph, ReplayedStepsHaveTheBitsOfEagerSteps) {
  MPT_REQUIRE_GPU(8);
  const CachingOn caching;
  for (Options o : {Options{.precision = "bf16", .grad_accum = 2},
                    Options{.precision = "fp16", .init_scale = 1 << 20, .growth_interval = 1},
                    Options{.precision = "fp8-delayed"}}) {
    const int steps = 7;
    Options eager_options = o;
    eager_options.graph = false;
    TrainRun graphed(o), eager(eager_options);
    std::vector<train::StepMetrics> g, e;
    for (int s = 0; s < steps; ++s) {
      SCOPED_TRACE(o.precision + " step " + std::to_string(s));
      const std::vector<train::Batch> in = graphed.inputs(s);
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      g.push_back(graphed.step(in));
#if defined(MPT_CUDA_EMULATION)
      if (s >= 4) {  // a replay: one launch, no synchronisation, nothing from the driver
        const cuda_emu::Counters c = cuda_emu::counters();
        EXPECT_EQ(c.graph_launches, 1u) << o.precision << " step " << s;
        EXPECT_EQ(c.syncs + c.event_syncs, 0u) << o.precision << " step " << s;
        EXPECT_EQ(c.mallocs + c.pool_allocs, 0u) << o.precision << " step " << s;
      }
#endif
      e.push_back(eager.step(s));
    }
    for (int s = 0; s < steps; ++s) {
      EXPECT_TRUE(testing::same_bits(to_cpu(g[s].loss), to_cpu(e[s].loss))) << o.precision << " loss " << s;
      EXPECT_TRUE(testing::same_bits(to_cpu(g[s].grad_norm), to_cpu(e[s].grad_norm))) << o.precision << " norm " << s;
      EXPECT_EQ(static_cast<bool>(g[s].stepped), static_cast<bool>(e[s].stepped)) << o.precision << " step " << s;
      EXPECT_EQ(g[s].lr, e[s].lr) << o.precision << " step " << s;
      EXPECT_EQ(g[s].step, s);
    }
    expect_same_state(graphed, eager, o.precision);
    const train::GraphStatus& st = graphed.trainer.graph_status();
    EXPECT_TRUE(st.captured) << o.precision << ": " << st.off;
    EXPECT_EQ(st.warmups, 3) << o.precision;
    EXPECT_EQ(st.replays, steps - 3) << o.precision;
    EXPECT_EQ(st.eager_steps, 0) << o.precision;
    EXPECT_EQ(graphed.trainer.skipped_steps(), eager.trainer.skipped_steps()) << o.precision;
    if (o.precision == "fp16") {
      EXPECT_GT(eager.trainer.skipped_steps(), 0) << "the scale was meant to overflow within the replays";
    }
    if (o.precision == "fp8-delayed") {
      EXPECT_EQ(graphed.trainer.fp8_state()->num_updates(), steps);
    }
  }
}

// Steps that cannot be replayed run eagerly beside the graph and keep the bits of an all-eager run: FP8 telemetry
// steps (host reads), a step whose inputs have another shape (named in graph_status), and after a checkpoint load
// (the graph is captured again after two warm-ups).
TEST(GpuTrainerGraph, EagerStepsBesideTheGraphKeepTheBits) {
  MPT_REQUIRE_GPU(8);
  const CachingOn caching;
  const Options o{.precision = "fp8-delayed", .telemetry_every = 4};
  Options eager_options = o;
  eager_options.graph = false;
  TrainRun graphed(o), eager(eager_options);
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mpt_trainer_graph_" + std::to_string(::getpid()));
  for (int s = 0; s < 10; ++s) {
    const int64_t t = s == 6 ? kT / 2 : kT;  // step 6: shorter sequences
    const train::StepMetrics g = graphed.step(s, t), e = eager.step(s, t);
    EXPECT_TRUE(testing::same_bits(to_cpu(g.loss), to_cpu(e.loss))) << "step " << s;
    EXPECT_EQ(g.fp8_telemetry.size(), e.fp8_telemetry.size()) << "step " << s;
    const train::GraphStatus& st = graphed.trainer.graph_status();
    if (s == 4) {
      EXPECT_NE(st.last_eager.find("FP8 telemetry"), std::string::npos) << st.last_eager;
    }
    if (s == 6) {
      EXPECT_NE(st.last_eager.find("input 0 of micro-batch 0 is i64[2, 4]; the captured step's is i64[2, 8]"),
                std::string::npos)
          << st.last_eager;
    }
    if (s == 7) {  // a replay after an eager step: the parameters' gradients are the replay's again
      const auto pg = graphed.model.named_parameters(), pe = eager.model.named_parameters();
      for (size_t i = 0; i < pe.size(); ++i) {
        EXPECT_TRUE(testing::same_bits(to_cpu(pg[i].tensor.grad()), to_cpu(pe[i].tensor.grad()))) << pe[i].name;
      }
      graphed.trainer.save(dir / "g");
      graphed.trainer.load(dir / "g");
      EXPECT_FALSE(graphed.trainer.graph_status().captured);
    }
  }
  const train::GraphStatus& st = graphed.trainer.graph_status();
  // 0 telemetry; 1 (current stream), 2, 3 (graph stream) warm-ups; 4 telemetry; 5 capture + replay; 6 other shape;
  // 7 replay; the load; 8 telemetry; 9 the first warm-up again.
  EXPECT_EQ(st.eager_steps, 4);
  EXPECT_EQ(st.replays, 2);
  EXPECT_EQ(st.warmups, 1);
  EXPECT_TRUE(st.off.empty()) << st.off;
  expect_same_state(graphed, eager, "telemetry / shapes / load");
  std::filesystem::remove_all(dir);
}

// A capture that misses a block in the graph's pool (a step that allocates, from its fourth run on, a size no earlier
// run left there: what best fit can do where a previous run's outputs still sit) runs its step as one more warm-up,
// which makes the block, and the next step captures: every step keeps the bits of the same steps run eagerly.
TEST(GpuTrainerGraph, ACaptureThatMissesAPoolBlockRunsAsAWarmUpAndCapturesNext) {
  MPT_REQUIRE_GPU(8);
  const CachingOn caching;
  TrainRun graphed({}), eager({.graph = false});
  int calls = 0;
  const auto loss = [&](int64_t, const train::Batch& in) {
    if (calls++ >= 3) (void)Tensor::empty({int64_t{5} << 20}, DType::F32, in[0].device());  // 20 MiB, new from run 3
    return graphed.model.loss(in[0], in[1]);
  };
  std::vector<train::StepMetrics> g, e;
  for (int s = 0; s < 7; ++s) {
    g.push_back(graphed.trainer.step(graphed.inputs(s), loss));
    e.push_back(eager.step(s));
    if (s == 3) {
      EXPECT_FALSE(graphed.trainer.graph_status().captured) << "the first capture missed the 20 MiB block";
      EXPECT_EQ(graphed.trainer.graph_status().warmups, 4);
    }
  }
  const train::GraphStatus& st = graphed.trainer.graph_status();
  EXPECT_TRUE(st.captured) << st.off;
  EXPECT_TRUE(st.off.empty()) << st.off;
  EXPECT_EQ(st.warmups, 4);
  EXPECT_EQ(st.replays, 3);
  EXPECT_EQ(st.eager_steps, 0);
  for (int s = 0; s < 7; ++s)
    EXPECT_TRUE(testing::same_bits(to_cpu(g[s].loss), to_cpu(e[s].loss))) << "loss " << s;
  expect_same_state(graphed, eager, "after a missed capture");
}

// Where no graph can run the steps run eagerly, and graph_status says why: a model on the CPU; a capture that fails
// three times (dropout draws its Philox offsets on the host), after which training goes on.
TEST(GpuTrainerGraph, RefusalsRunEagerlyAndSayWhy) {
  {
    TrainRun cpu({.precision = "fp32", .device = Device::cpu()});
    for (int s = 0; s < 3; ++s) cpu.step(s);
    EXPECT_NE(cpu.trainer.graph_status().off.find("CUDA graphs need a CUDA device"), std::string::npos)
        << cpu.trainer.graph_status().off;
    EXPECT_EQ(cpu.trainer.graph_status().eager_steps, 3);
  }
  MPT_REQUIRE_GPU(8);
  TrainRun dropout({.dropout = 0.1});
  const train::GraphStatus& st = dropout.trainer.graph_status();
  for (int s = 0; s < 7; ++s) {
    EXPECT_TRUE(std::isfinite(dropout.step(s).loss.item<double>())) << s;
    if (s == 4) {
      EXPECT_EQ(st.warmups, 5) << "the failed captures of steps 3 and 4 ran as warm-ups";
    }
  }
  EXPECT_NE(st.off.find("could not be captured"), std::string::npos) << st.off;
  EXPECT_NE(st.off.find("while a CUDA graph captures the step"), std::string::npos) << st.off;
  EXPECT_FALSE(st.captured);
  EXPECT_EQ(st.eager_steps, 2);  // the third failed capture's step (5) and the one after it
  EXPECT_EQ(dropout.trainer.steps_done(), 7);
  EXPECT_MPT_ERROR(dropout.trainer.step(std::vector<train::Batch>{},
                                        [](int64_t, const train::Batch& in) { return in[0]; }),
                   "0 micro-batches of inputs given, expected grad_accum = 1");
}

// Data parallelism is not captured (graph_status says so) and its eager steps read nothing back either: over one
// process the GradScaler's found_inf and FP8 delayed scaling's amaxes are MAX-reduced on the device (no copy to or
// from the host, no wait), the FP8 wire's passes run per bucket, and the steps keep the bits of the same steps without
// data parallelism (a MAX over one rank, an average of one). fp16 with a scale that overflows (skips), fp8-delayed;
// fp8-delayed with FP8 on the wire as well (its gradients are then MS-AMP's quantization: not compared).
TEST(GpuTrainerGraph, DataParallelStepsRunEagerlyWithoutHostReads) {
  MPT_REQUIRE_GPU(8);
  const CachingOn caching;
  for (Options o : {Options{.precision = "fp16", .init_scale = 1 << 20, .growth_interval = 1},
                    Options{.precision = "fp8-delayed"},
                    Options{.precision = "fp8-delayed", .compression = train::GradCompression::FP8}}) {
    const std::string what = o.precision + (o.compression == train::GradCompression::FP8 ? " FP8 wire" : "");
    Options alone = o;
    alone.graph = false;
    o.comm = dist::single_process();
    TrainRun dp(o), plain(alone);
    for (int s = 0; s < 6; ++s) {
      const std::vector<train::Batch> in = dp.inputs(s);
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      const train::StepMetrics m = dp.step(in);
#if defined(MPT_CUDA_EMULATION)
      const cuda_emu::Counters c = cuda_emu::counters();
      if (s >= 2) {  // after the warm-ups (optimizer state, FP8 metas, the buckets' used flags)
        EXPECT_EQ(c.h2d + c.d2h + c.syncs + c.event_syncs, 0u)
            << what << " step " << s << ": " << cuda_emu::to_string(c);
        EXPECT_EQ(c.graph_launches, 0u) << what;
      }
#endif
      const train::StepMetrics e = plain.step(s);
      if (o.compression == train::GradCompression::None) {
        EXPECT_TRUE(testing::same_bits(to_cpu(m.loss), to_cpu(e.loss))) << what << " loss " << s;
        EXPECT_TRUE(testing::same_bits(to_cpu(m.grad_norm), to_cpu(e.grad_norm))) << what << " norm " << s;
      }
    }
    EXPECT_NE(dp.trainer.graph_status().off.find("data parallelism is not captured"), std::string::npos)
        << dp.trainer.graph_status().off;
    if (o.compression == train::GradCompression::None) expect_same_state(dp, plain, what);
  }
}

}  // namespace
}  // namespace mpt
