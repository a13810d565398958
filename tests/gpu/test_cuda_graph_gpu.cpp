// tests/gpu/test_cuda_graph_gpu.cpp: a whole training step captured into a CUDA graph (mpt::CudaGraph) and replayed gives the bits of the same steps run eagerly, LR schedule included; what a graph refuses (skipped without a GPU).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <utility>
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

constexpr int64_t kB = 2, kT = 8, kVocab = 64;

nn::GPTConfig config(double dropout = 0) {
  nn::GPTConfig c;
  c.vocab_size = kVocab, c.block_size = kT, c.n_layer = 3, c.n_head = 2, c.n_embd = 32, c.dropout = dropout;
  c.where.device = Device::cuda(0);
  return c;
}

amp::Policy policy_for(const std::string& p) {  // "fp16" or "fp8-delayed"
  if (p == "fp16") return amp::Policy::fp16();
  return amp::Policy::fp8(3, std::make_shared<fp8::Fp8ScalingState>(fp8::DelayedScaling{}, Device::cuda(0)));
}

// Step s's tokens, on the CPU.
std::pair<Tensor, Tensor> batch(int s) {
  std::vector<int64_t> ids(static_cast<size_t>(kB * (kT + 1)));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + static_cast<size_t>(s) * 13) % kVocab);
  const Tensor all = Tensor::from_vector(ids, {kB, kT + 1});
  return {all.slice(1, 0, kT).contiguous(), all.slice(1, 1, kT + 1).contiguous()};
}

double lr_at(int s) { return 1e-3 * (1.0 + s) / 3.0; }  // a schedule: the graph must see each step's value

// A model, its optimizer and scaler, and one training step on given inputs (forward, backward, clip, AdamW).
struct Trainer {
  explicit Trainer(const std::string& precision)
      : model(config()),
        policy(policy_for(precision)),
        scaler(train::GradScalerOptions{.init_scale = 1024.0, .enabled = precision == "fp16"}, Device::cuda(0)),
        opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = lr_at(0), .betas = {0.9, 0.95}}) {
    for (const auto& p : model.named_parameters()) params.push_back(p.tensor);
  }
  void set_lr(double lr) {
    for (auto& g : opt.param_groups()) g.lr = lr;
  }
  void step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    {
      amp::Autocast autocast(policy);
      loss = model.loss(x, y);
    }
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    optim::clip_grad_norm_(params, 1.0);
    scaler.step(opt);
    scaler.update();
    if (policy.fp8_state) policy.fp8_state->update();
  }
  nn::GPT model;
  amp::Policy policy;
  train::GradScaler scaler;
  optim::AdamW opt;
  std::vector<Tensor> params;
  Tensor loss;
};

// Two warm-up steps, the capture, then three replays with a new batch and learning rate each: every replayed loss
// and, at the end, every parameter and optimizer state has the bits of the same five steps run eagerly on the
// default stream.
TEST(GpuCudaGraph, ReplayedStepsHaveTheBitsOfEagerSteps) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  // fp16 (FP32 masters and autocast's weight casts, as bf16; the GradScaler's device state), fp8-delayed (amax
  // histories and scales updated on the device; h.1 runs FP8). Two precisions: an emulated step takes about a second.
  for (const std::string precision : {"fp16", "fp8-delayed"}) {
    Trainer eager(precision), graphed(precision);
    Tensor x = Tensor::empty({kB, kT}, DType::I64, dev), y = Tensor::empty({kB, kT}, DType::I64, dev);  // static
    CudaGraph graph(dev);
    const std::function<void()> step = [&] { graphed.step(x, y); };
    for (int s = 0; s < 5; ++s) {
      const auto [xs, ys] = batch(s);
      x.copy_(xs);
      y.copy_(ys);
      graphed.set_lr(lr_at(s));
      eager.set_lr(lr_at(s));
      if (s < 2) {  // the warm-ups are real steps
        graph.warmup(step);
        eager.step(xs.to(dev), ys.to(dev));
        continue;
      }
      if (s == 2) graph.capture(step);  // records only
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      graph.replay();
#if defined(MPT_CUDA_EMULATION)
      const cuda_emu::Counters c = cuda_emu::counters();
      EXPECT_EQ(c.graph_launches, 1u) << precision;
      EXPECT_EQ(c.syncs, 0u) << precision << ": a replay never waits for the device";
      EXPECT_EQ(c.pool_allocs + c.mallocs, 0u) << precision << ": a replay allocates nothing";
#endif
      eager.step(xs.to(dev), ys.to(dev));
      EXPECT_TRUE(testing::same_bits(to_cpu(graphed.loss), to_cpu(eager.loss))) << precision << " loss at step " << s;
    }
    const mpt::StateDict g = graphed.model.state_dict(), e = eager.model.state_dict();
    for (const auto& [name, t] : e) {
      EXPECT_TRUE(testing::same_bits(to_cpu(g.at(name)), to_cpu(t))) << precision << " " << name;
    }
    const mpt::StateDict go = graphed.opt.state_dict(), eo = eager.opt.state_dict();
    ASSERT_EQ(go.size(), eo.size());
    for (const auto& [name, t] : eo) {
      EXPECT_TRUE(testing::same_bits(to_cpu(go.at(name)), to_cpu(t))) << precision << " " << name;
    }
    if (precision == "fp16") {
      EXPECT_EQ(graphed.scaler.get_scale(), eager.scaler.get_scale());
    }
  }
}

// Replays queued back to back, the learning rate changed before each and nothing read in between: a replay's
// learning rate must be the one set before it, although the host writes the next one while earlier replays may
// still be queued (the emulated device refuses a pinned source rewritten before its copy is known done, E8.4).
TEST(GpuCudaGraph, QueuedReplaysEachReadTheirOwnLearningRate) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  Trainer eager("fp16"), graphed("fp16");
  Tensor x = Tensor::empty({kB, kT}, DType::I64, dev), y = Tensor::empty({kB, kT}, DType::I64, dev);
  const auto [xs, ys] = batch(0);
  x.copy_(xs);
  y.copy_(ys);
  const Tensor xe = xs.to(dev), ye = ys.to(dev);
  CudaGraph graph(dev);
  const std::function<void()> step = [&] { graphed.step(x, y); };
  for (int s = 0; s < 2 + 2 * CudaGraph::kReplaySlots; ++s) {
    graphed.set_lr(lr_at(s));
    eager.set_lr(lr_at(s));
    if (s < 2) {
      graph.warmup(step);
    } else {
      if (s == 2) graph.capture(step);
      graph.replay();
    }
    eager.step(xe, ye);
  }
  const mpt::StateDict g = graphed.model.state_dict(), e = eager.model.state_dict();
  for (const auto& [name, t] : e) EXPECT_TRUE(testing::same_bits(to_cpu(g.at(name)), to_cpu(t))) << name;
}

// A graph's private pool takes its blocks from the device's pool: constructing the graph gives the block cache's idle
// memory back to it first (the eager steps before it left a step's activations there, which would otherwise be held
// beside the graph's own; the emulated GPT-2 124M reserve with the graph fell from 8.9 to 6.3 GB).
TEST(GpuCudaGraph, ConstructionGivesTheBlockCachesIdleMemoryBack) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  const bool was = cuda_memory_caching();
  set_cuda_memory_caching(true);
  empty_cache(dev);
  const int64_t cached = memory_stats(dev).cached_bytes;  // what earlier graphs' pools hold beside their outputs
  const Tensor kept = Tensor::zeros({1000}, DType::F32, dev);
  { const Tensor freed = Tensor::zeros({3 << 20}, DType::F32, dev); }  // its block waits in the cache
  ASSERT_GE(memory_stats(dev).cached_bytes, cached + (int64_t{12} << 20));
  {
    CudaGraph graph(dev);
    EXPECT_LT(memory_stats(dev).cached_bytes, cached + (int64_t{2} << 20)) << "only the live block's segment is left";
    EXPECT_EQ(to_cpu(kept).to_vector<float>(), std::vector<float>(1000, 0.0f));
  }
  set_cuda_memory_caching(was);
}

// A graph's private pool splits and merges blocks as the eager block cache does: memory a step freed as one size
// serves its later requests of others (exact-size pools held both: the emulated GPT-2 124M graph step's reserve was
// 1.23x the eager step's), and a capture that repeats its warm-ups' sizes finds every block it needs. The step
// drops its previous output first, as the Trainer's step drops the gradients.
TEST(GpuCudaGraph, PrivatePoolServesOneSizeFromAnothersFreedBlock) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  constexpr int64_t kMiB = int64_t{1} << 18;  // floats
  Tensor out;
  CudaGraph graph(dev);
  const int64_t before = memory_stats(dev).reserved_bytes;
  const std::function<void()> step = [&] {
    out = Tensor();
    { const Tensor big = Tensor::full({32 * kMiB}, 1.0, DType::F32, dev); }  // freed
    const Tensor a = Tensor::full({16 * kMiB}, 2.0, DType::F32, dev);       // a and b: the two halves of its memory
    const Tensor b = Tensor::full({16 * kMiB}, 3.0, DType::F32, dev);
    out = ops::add(a, b);  // 16 MiB more, the step's output
  };
  graph.warmup(step);
  graph.warmup(step);
  const int64_t grown = memory_stats(dev).reserved_bytes - before;
  // 32 MiB for big, then a and b, and 16 MiB for out: 48 MiB (2 MiB of slack for the allocator's rounding). The
  // exact-size pool held 32 + 16 + 16 + 16 = 80 MiB.
  EXPECT_GE(grown, int64_t{48} << 20);
  EXPECT_LE(grown, int64_t{50} << 20);
  graph.capture(step);
  graph.replay();
  EXPECT_EQ(to_cpu(out.slice(0, 0, 4)).to_vector<float>(), std::vector<float>(4, 5.0f));
  EXPECT_EQ(memory_stats(dev).reserved_bytes - before, grown) << "the capture and the replay took no memory";
}

// The eager steps' blocks freed while the graph warms up (the Trainer's gradients, released as the first warm-up
// starts) go back to the device's pool before the graph's pool takes new memory, so the two do not add up; a graph's
// outputs stay valid after the graph is gone, and their memory goes back when they do.
TEST(GpuCudaGraph, WarmUpReusesTheEagerBlocksItFreesAndOutputsOutliveTheGraph) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  const bool was = cuda_memory_caching();
  set_cuda_memory_caching(true);
  constexpr int64_t kN = int64_t{6} << 20;  // floats: 24 MiB
  Tensor eager = Tensor::zeros({kN}, DType::F32, dev);
  Tensor out;
  int64_t before = 0;
  {
    CudaGraph graph(dev);
    before = memory_stats(dev).reserved_bytes;
    graph.warmup([&] {
      eager = Tensor();  // into the block cache, idle
      out = Tensor::full({kN}, 7.0, DType::F32, dev);
    });
    EXPECT_LE(memory_stats(dev).reserved_bytes, before + (int64_t{2} << 20)) << "the eager block's memory served";
  }
  EXPECT_EQ(to_cpu(out.slice(0, kN - 3, kN)).to_vector<float>(), std::vector<float>(3, 7.0f));
  const int64_t with_out = memory_stats(dev).reserved_bytes;
  out = Tensor();
  empty_cache(dev);  // the pool keeps freed memory until trimmed
  EXPECT_LE(memory_stats(dev).reserved_bytes, with_out - kN * 4) << "the retired pool's segment went back";
  set_cuda_memory_caching(was);
}

// What the ops cached for a graph's stream goes back when the graph does (the cuBLASLt workspace, 32 MiB on Hopper,
// kept the graph's pool, and itself, for the rest of the process): with the graph's outputs gone, the device holds
// what it held before the graph.
TEST(GpuCudaGraph, ADestroyedGraphGivesBackItsStreamsWorkspaceAndPool) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  const Tensor a = Tensor::full({64, 64}, 1.0, DType::BF16, dev), b = Tensor::full({64, 64}, 0.5, DType::BF16, dev);
  (void)ops::matmul(a, b);  // the current stream's workspace, made before the baseline
  empty_cache(dev);
  const int64_t before = memory_stats(dev).reserved_bytes;
  Tensor out;
  {
    CudaGraph graph(dev);
    graph.warmup([&] { out = ops::matmul(a, b); });
    EXPECT_GT(memory_stats(dev).reserved_bytes, before) << "the graph's pool holds its workspace and output";
  }
  EXPECT_EQ(to_cpu(out.slice(0, 0, 1).slice(1, 0, 2)).to(DType::F32).to_vector<float>(),
            std::vector<float>(2, 32.0f));
  out = Tensor();
  empty_cache(dev);
  EXPECT_EQ(memory_stats(dev).reserved_bytes, before);
}

// What a capture refuses, each with an error naming the reason: dropout (host-drawn Philox offsets), a step that
// allocates a size its warm-up did not, an SGD learning rate changed after the capture, replay before capture.
TEST(GpuCudaGraph, RefusesWhatAReplayCouldNotRepeat) {
  MPT_REQUIRE_GPU(8);
  const Device dev = Device::cuda(0);
  const auto [x0, y0] = batch(0);
  const Tensor x = x0.to(dev), y = y0.to(dev);
  {
    nn::GPT model(config(0.1));
    CudaGraph graph(dev);
    const std::function<void()> step = [&] { model.loss(x, y).backward(); };
    graph.warmup(step);
    graph.warmup(step);
    EXPECT_MPT_ERROR(graph.capture(step), "while a CUDA graph captures the step");
    EXPECT_FALSE(graph.captured());
    EXPECT_MPT_ERROR(graph.replay(), "replay() before capture()");
  }
  {
    int64_t n = 1000;
    CudaGraph graph(dev);
    // 16 MiB more per run: each run's block is larger than every segment the earlier runs left.
    const std::function<void()> step = [&] { (void)Tensor::empty({n += 4 << 20}, DType::F32, dev); };
    graph.warmup(step);
    graph.warmup(step);
    EXPECT_MPT_ERROR(graph.capture(step), "that its warm-up runs did not leave for reuse");
  }
  {
    nn::GPT model(config());
    std::vector<Tensor> params;
    for (const auto& p : model.named_parameters()) params.push_back(p.tensor);
    optim::SGD opt(params, {.lr = 0.1, .momentum = 0.9});
    CudaGraph graph(dev);
    const std::function<void()> step = [&] {
      opt.zero_grad();
      model.loss(x, y).backward();
      opt.step();
    };
    graph.warmup(step);
    graph.warmup(step);
    graph.capture(step);
    graph.replay();  // unchanged: fine
    opt.param_groups()[0].lr = 0.05;
    EXPECT_MPT_ERROR(graph.replay(), "coefficients are fixed at capture");
  }
  EXPECT_MPT_ERROR(CudaGraph(Device::cpu()), "CUDA graphs need a CUDA device");
}

}  // namespace
}  // namespace mpt
