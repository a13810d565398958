// tests/gpu/test_step_counts_gpu.cpp: a GPT training step on the emulated device does no host round trip: after
// warm-up, zero host<->device copies, synchronisations and driver allocations per step in every precision (the loss
// and the loss scale reach the host through one asynchronous copy into pinned memory at logging steps).
// Emulation only: the counters are the cudart double's (tests/support/cuda_emu/README.md).
#if defined(MPT_CUDA_EMULATION)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cublasLt.h"
#include "cuda_emu/counters.h"
#include "cuda_emu/device_work.h"
#include "device_test.h"
#include "test_util.h"
#include "mpt/mpt.h"

namespace mpt {
namespace {

namespace emu = cuda_emu;

constexpr int64_t kB = 4, kT = 16, kVocab = 65, kAccum = 2;

nn::GPTConfig config(int64_t n_layer) {
  nn::GPTConfig c;
  c.vocab_size = kVocab;
  c.block_size = kT;
  c.n_layer = n_layer;  // 3: the FP8 policy keeps the first and last blocks in BF16, h.1 runs FP8
  c.n_head = 4;
  c.n_embd = 64;
  c.where.device = Device::cuda(0);
  return c;
}

amp::Policy policy_for(const std::string& p, int64_t n_layer) {
  const Device dev = Device::cuda(0);
  constexpr std::string_view kStream = "+bf16-stream";  // the residual stream in BF16 (amp::Policy::residual)
  if (p.ends_with(kStream)) return policy_for(p.substr(0, p.size() - kStream.size()), n_layer).residual_in(DType::BF16);
  if (p == "bf16") return amp::Policy::bf16();
  if (p == "fp16") return amp::Policy::fp16();
  auto fp8 = [&](fp8::Fp8Recipe r) {
    return amp::Policy::fp8(n_layer, std::make_shared<fp8::Fp8ScalingState>(r, dev));
  };
  if (p == "fp8-delayed") return fp8(fp8::DelayedScaling{16, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::Hybrid});
  if (p == "fp8-current") return fp8(fp8::CurrentScaling{});
  if (p == "fp8-block") return fp8(fp8::BlockScaling{});
  return amp::Policy::fp32();
}

// What one step cost, from the counters.
struct StepCost {
  emu::Counters c;
  uint64_t driver_allocations() const { return c.mallocs + c.frees + c.host_mallocs + c.host_frees; }
  void print(const std::string& run, const char* what) const {
    std::printf("%-12s %-8s %s\n", run.c_str(), what, emu::to_string(c).c_str());
  }
};

class TrainLoop {
 public:
  explicit TrainLoop(const std::string& precision, int64_t n_layer = 3)
      : model_(config(n_layer)),
        policy_(policy_for(precision, n_layer)),
        scaler_(train::GradScalerOptions{.init_scale = 1024.0, .enabled = precision == "fp16"}, Device::cuda(0)),
        opt_(optim::weight_decay_groups(model_.named_parameters(), 0.1), {.lr = 3e-3, .betas = {0.9, 0.95}}),
        readback_(Device::cuda(0)) {
    // The data of every step, on the device before the first one (a data loader's pinned, asynchronous upload
    // is the data pipeline's business, not the step's).
    std::mt19937_64 rng(7);
    for (int s = 0; s < 8; ++s) {
      std::vector<int64_t> tok(static_cast<size_t>(kB * (kT + 1)));
      for (int64_t& t : tok) t = static_cast<int64_t>(rng() % kVocab);
      const Tensor all = Tensor::from_vector(tok, {kB, kT + 1});
      ids_.push_back(all.slice(1, 0, kT).contiguous().to(Device::cuda(0)));
      targets_.push_back(all.slice(1, 1, kT + 1).contiguous().to(Device::cuda(0)));
    }
  }

  // One optimizer step of kAccum micro-batches with clipping; a logging step requests the loss and the scale.
  void step(int s, bool log) {
    const Tensor& ids = ids_[static_cast<size_t>(s)];
    const Tensor& targets = targets_[static_cast<size_t>(s)];
    const int64_t b = kB / kAccum;
    opt_.zero_grad();
    const train::AccumulateResult acc = train::accumulate_gradients(
        kAccum,
        [&](int64_t i) {
          amp::Autocast autocast(policy_);
          return train::MicroBatchLoss{model_.loss(ids.slice(0, i * b, (i + 1) * b), targets.slice(0, i * b, (i + 1) * b)),
                                     b * kT};
        },
        {.scale_loss = [&](const Tensor& l) { return scaler_.scale(l); }});
    scaler_.unscale_(opt_);
    optim::clip_grad_norm_(model_.parameters(), 1.0);
    scaler_.step(opt_);  // the result is not read: a skip happens on the device
    scaler_.update();
    if (policy_.fp8_state) policy_.fp8_state->update();
    last_loss_ = acc.loss;
    if (log) {
      std::vector<Tensor> values{acc.loss};
      if (scaler_.is_enabled()) values.push_back(scaler_.scale_tensor());
      readback_.request(values);
    }
  }

  // Parameters and optimizer state, on the CPU.
  mpt::StateDict state() const {
    mpt::StateDict out;
    for (const auto& [k, t] : model_.state_dict()) out["model." + k] = t.to(Device::cpu());
    for (const auto& [k, t] : opt_.state_dict()) out["opt." + k] = t.to(Device::cpu());
    return out;
  }
  const ScalarReadback& readback() const { return readback_; }
  const nn::GPT& model() const { return model_; }
  const Tensor& last_loss() const { return last_loss_; }
  const train::GradScaler& scaler() const { return scaler_; }

 private:
  nn::GPT model_;
  amp::Policy policy_;
  train::GradScaler scaler_;
  optim::AdamW opt_;
  ScalarReadback readback_;
  std::vector<Tensor> ids_, targets_;
  Tensor last_loss_;
};

void check_precision(const std::string& precision) {
  MPT_REQUIRE_GPU(8);  // never skips under emulation
  TrainLoop loop(precision);
  loop.step(0, true);  // warm-up: the pool grows, states and FP8 metas are created
  loop.step(1, false);
  emu::reset_counters();
  loop.step(2, false);
  const StepCost plain{emu::counters()};
  emu::reset_counters();
  loop.step(3, true);
  const StepCost logged{emu::counters()};
  plain.print(precision, "step");
  logged.print(precision, "logging");
  for (const StepCost* cost : {&plain, &logged}) {
    const emu::Counters& c = cost->c;
    const std::string what = precision + (cost == &plain ? " step" : " logging step") + ": " + emu::to_string(c);
    EXPECT_EQ(c.h2d, 0u) << what;
    EXPECT_EQ(c.syncs, 0u) << what;
    EXPECT_EQ(c.pageable_copies, 0u) << what;
    EXPECT_EQ(cost->driver_allocations(), 0u) << what << " (cudaMalloc/cudaFree/cudaMallocHost/cudaFreeHost)";
    EXPECT_EQ(c.pool_grows, 0u) << what << " (the pool serves every allocation from memory it holds)";
    EXPECT_GT(c.kernel_launches, 0u) << what;
    EXPECT_GT(c.matmuls, 0u) << what;
    EXPECT_EQ(c.kernel_launches_unsized, 0u) << what << ": every launcher says what its kernel reads and writes";
    EXPECT_GT(c.kernel_bytes_read, 0u) << what;
    EXPECT_GT(c.kernel_bytes_written, 0u) << what;
  }
  EXPECT_EQ(plain.c.d2h, 0u) << precision;
  EXPECT_EQ(logged.c.d2h, 1u) << precision << ": the loss and the scale, one pinned copy";
  EXPECT_EQ(logged.c.d2h_bytes, loop.scaler().is_enabled() ? 8u : 4u) << precision;
  // The values arrive without a wait (the emulated device runs eagerly) and are the step's.
  const auto values = loop.readback().poll();
  ASSERT_TRUE(values.has_value()) << precision;
  EXPECT_EQ(static_cast<float>((*values)[0]), loop.last_loss().item<float>()) << precision;
  EXPECT_TRUE(std::isfinite((*values)[0])) << precision;
  if (loop.scaler().is_enabled()) {
    EXPECT_EQ((*values)[1], loop.scaler().get_scale()) << precision;
  }
}

// Deterministic mode (mpt/core/determinism.h): cuBLASLt is asked for algorithms without split-K (the double then
// offers none of its workspace algorithms, which stand for split-K ones), attention takes the GEMM path, and two
// runs of three steps from the same seed end with the same bits. (The emulated device is deterministic anyway: this
// checks the wiring and the repeatability of everything around the GEMMs, not a GPU's scheduling.)
TEST(GpuDeterminism, TwoRunsGiveTheSameBitsAndNoSplitKIsAsked) {
  MPT_REQUIRE_GPU(8);
  const emu::CublasLtSwitches saved = emu::cublaslt_switches();
  emu::CublasLtSwitches offer_split_k = saved;
  offer_split_k.algo_workspace_bytes = 1 << 20;
  emu::set_cublaslt_switches(offer_split_k);
  set_deterministic(true);
  auto run = [](const std::string& precision) {
    manual_seed(11);
    TrainLoop loop(precision);
    for (int s = 0; s < 3; ++s) loop.step(s, false);
    return loop.state();
  };
  for (const std::string precision : {"bf16", "fp8-delayed"}) {
    const mpt::StateDict a = run(precision);
    EXPECT_EQ(emu::cublaslt_last_reduction_mask(), static_cast<uint32_t>(CUBLASLT_REDUCTION_SCHEME_NONE));
    const mpt::StateDict b = run(precision);
    ASSERT_EQ(a.size(), b.size());
    for (const auto& [k, t] : a) EXPECT_TRUE(testing::same_bits(t, b.at(k))) << precision << " " << k;
  }
  set_deterministic(false);
  {
    TrainLoop loop("fp32");  // new shapes for the plan cache: the heuristic is asked again, all schemes allowed
    loop.step(0, false);
  }
  EXPECT_NE(emu::cublaslt_last_reduction_mask() & CUBLASLT_REDUCTION_SCHEME_MASK, 0u);
  emu::set_cublaslt_switches(saved);
}

// What one more transformer block costs per step (2 micro-batches): the difference between 4 and 3 blocks (the FP8
// policy runs the middle blocks in FP8, so the added block is an FP8 one there). Printed for docs/verification.md;
// a block adds no host<->device copy or synchronisation.
TEST(GpuStepCounts, PerBlock) {
  MPT_REQUIRE_GPU(8);
  for (const std::string precision : {"bf16"}) {  // one precision: the cost of a block, kept short for CI
    emu::Counters c[2];
    for (int64_t layers : {3, 4}) {
      TrainLoop loop(precision, layers);
      loop.step(0, false);
      loop.step(1, false);
      emu::reset_counters();
      loop.step(2, false);
      c[layers - 3] = emu::counters();
    }
    std::printf("%-12s per block per step: launches %llu, matmuls %llu, d2d %llu, pool allocations %llu\n",
                precision.c_str(), static_cast<unsigned long long>(c[1].kernel_launches - c[0].kernel_launches),
                static_cast<unsigned long long>(c[1].matmuls - c[0].matmuls),
                static_cast<unsigned long long>(c[1].d2d - c[0].d2d),
                static_cast<unsigned long long>(c[1].pool_allocs - c[0].pool_allocs));
    // 2 micro-batches x (4 Linears x fprop, dgrad, wgrad + attention's GEMM path: S and P V forward, S again (only
    // the logsumexp is saved), dV, dP, dQ and dK backward).
    EXPECT_EQ(c[1].matmuls - c[0].matmuls, 38u) << precision;
    EXPECT_EQ(c[1].h2d + c[1].d2h + c[1].syncs, 0u) << precision;
  }
}

// The device-work proxy's GEMM FLOPs are the model's (bench_step_cost reports them beside the kernel bytes): per
// token, 6 x (12 C^2 per block + the tied LM head's Vp C) for the Linears' forward, dgrad and wgrad; attention's GEMM
// path (no cuDNN under emulation) runs 7 GEMMs of 2 T^2 hd per head and sample: S and P V forward, S again, dV, dP,
// dQ, dK. 2 micro-batches of 2 sequences.
TEST(GpuStepCounts, GemmFlopsAreTheModelsAndEveryLaunchIsSized) {
  MPT_REQUIRE_GPU(8);
  constexpr uint64_t L = 3, C = 64, T = kT, B = kB, N = B * T;
  TrainLoop loop("bf16", L);
  loop.step(0, false);
  emu::reset_counters();
  loop.step(1, false);
  const emu::Counters c = emu::counters();
  // The LM head runs at its padded width on CUDA (65 -> 128, GPT::set_padded_head): its GEMMs' FLOPs are Vp's.
  const uint64_t Vp = static_cast<uint64_t>(nn::GPT::padded_head_width(kVocab, -1, true));
  ASSERT_EQ(Vp, 128u);
  EXPECT_EQ(c.matmul_flops, 6 * (12 * C * C * L + Vp * C) * N + 14 * B * T * T * C * L) << emu::to_string(c);
  EXPECT_EQ(c.kernel_launches_unsized, 0u) << emu::to_string(c);
}

// FP8 delayed scaling's quantizations, by launching site (cuda_emu::kernel_sites): an activation's or gradient's
// is one cast + transpose launch that folds its amax straight into the meta's amax_history[0] (TransformerEngine's
// layout), with no zeroing and no folding launch around it. The FP8 block (h.1) has 4 inputs per micro-batch: c_attn's
// and the MLP's x come from ln_1 and ln_2 as E4M3 codes (the norms quantize as they store: the same 14 norm launches as
// BF16's), so only their transposes for wgrad are launched (one byte copy each); c_proj's and the MLP's h are cast +
// transposed. Its 4 gradients (c_attn's, c_proj's, the MLP's dy and dpre) are cast + transposed too, and its 4
// weights once per optimizer step (the cached codes), folding their amaxes into the history like the rest: no amax
// is zeroed or folded by a launch of its own. The gradients of the biases behind c_attn, c_proj and the
// MLP's second layer come from the cast + transpose of their dy (TE's cast_transpose_dbias, one finishing launch
// each), so the column reductions left are the BF16 step's.
// One step's launches by launching site (cuda_emu::kernel_sites), after two warm-up steps; its counters into
// `counters` and the sites with their bytes into `sites` when given.
std::map<std::string, uint64_t> step_sites(const std::string& precision, emu::Counters* counters = nullptr,
                                           std::vector<emu::KernelSite>* sites = nullptr) {
  TrainLoop loop(precision);
  loop.step(0, false);
  loop.step(1, false);
  emu::reset_counters();
  emu::set_kernel_sites(true);
  loop.step(2, false);
  emu::set_kernel_sites(false);
  if (counters != nullptr) *counters = emu::counters();
  if (sites != nullptr) *sites = emu::kernel_sites();
  std::map<std::string, uint64_t> launches;
  for (const emu::KernelSite& k : emu::kernel_sites()) {
    launches[k.name] = k.launches;
    EXPECT_GT(k.bytes_read + k.bytes_written, 0u) << precision << " " << k.name;
  }
  for (const auto& [name, n] : launches) std::printf("%-12s %-48s %llu\n", precision.c_str(), name.c_str(),
                                                     static_cast<unsigned long long>(n));
  return launches;
}

// Under BF16 Autocast the Linears' FP32 biases reach cuBLASLt's epilogues as cached BF16 copies (amp::compute_copy,
// rewritten in place by AdamW like the weights'), not cast on every call: after warm-up a step's only casts are,
// per block and micro-batch, the MLP's db1 (the DGELU_BGRAD epilogue writes it in BF16 for the FP32 master's
// gradient) and the attention fallback's three roundings to BF16 (P forward, P and dS backward; cuDNN does them
// inside its kernel): 4, where the four bias casts of the forward made 8. Each cached copy holds the cast's bits of
// its master. The FP8 block's layers (fp8_linear / fp8_mlp, whose FP8 GEMMs add a BF16 bias) take copies too: the
// FP8 step casts exactly as often.
TEST(GpuStepCounts, Bf16BiasesReachTheGemmsAsCachedCopies) {
  MPT_REQUIRE_GPU(8);
  std::map<std::string, uint64_t> launches = step_sites("bf16");
  constexpr uint64_t kBlocks = 3;
  EXPECT_EQ(launches["cast.cu convert"], (1 + 3) * kBlocks * kAccum);
  EXPECT_EQ(step_sites("fp8-delayed")["cast.cu convert"], launches["cast.cu convert"]);
  for (const std::string precision : {"bf16", "fp8-delayed"}) {
    TrainLoop loop(precision);
    for (int s = 0; s < 3; ++s) loop.step(s, false);
    int biases = 0;
    for (const NamedParameter& p : loop.model().named_parameters()) {
      const bool linear_bias = p.name.find("ln") == std::string::npos && p.name.size() > 5 &&
                               p.name.substr(p.name.size() - 5) == ".bias";
      if (!linear_bias) continue;
      const Tensor copy = amp::refreshable_compute_copy(p.tensor);
      ASSERT_TRUE(copy.defined()) << precision << " " << p.name;
      EXPECT_TRUE(testing::same_bits(copy, p.tensor.to(DType::BF16))) << precision << " " << p.name;
      ++biases;
    }
    EXPECT_EQ(biases, static_cast<int>(4 * kBlocks)) << precision;
  }
}

// GPT's tied wte: the LM head's weight gradient is computed first, and the embedding's backward adds into it
// (autograd::Node::apply_partial) instead of zero-filling a [vocab, C] table of its own that the engine then adds:
// the step's fills are the untied position table's and scalars, in either stream dtype. The position table is
// filled in the first micro-batch only: later ones add into the leaf's .grad (the engine offers it, as to the GEMMs).
TEST(GpuStepCounts, TheTiedEmbeddingAddsIntoTheHeadsGradient) {
  MPT_REQUIRE_GPU(8);
  constexpr uint64_t C = 64;
  for (const std::string precision : {"bf16", "bf16+bf16-stream"}) {
    std::vector<emu::KernelSite> sites;
    step_sites(precision, nullptr, &sites);
    uint64_t fills = 0, filled = 0;
    for (const emu::KernelSite& k : sites) {
      if (k.name != "strided.cu launch_fill") continue;
      fills += k.launches;
      filled += k.bytes_written;
    }
    // The position table's FP32 gradient in the first micro-batch, and a few 0-d accumulators (the loss's, clipping's).
    const uint64_t positions = kT * C * 4;
    EXPECT_GE(fills, 1u) << precision;
    EXPECT_GE(filled, positions) << precision;
    EXPECT_LT(filled, positions + 64) << precision << ": a [" << kVocab << ", " << C << "] table was zero-filled";
  }
}

// Gradient accumulation (kAccum micro-batches): every micro-batch after the first adds its weight gradients in the
// weight-gradient GEMMs (beta = 1 into the leaf's FP32 .grad, ops::linear / ops::mlp / fp8_linear / fp8_mlp, the
// padded LM head into its spare rows), so the elementwise adds that remain are the 1-d parameters' and the position
// table's: all of them write fewer bytes than the 2-d weights' gradients, which AccumulateGrad's adds wrote before.
TEST(GpuStepCounts, LaterMicroBatchesAddTheirWeightGradientsInTheGemms) {
  MPT_REQUIRE_GPU(8);
  for (const std::string precision : {"bf16", "bf16+bf16-stream", "fp8-delayed"}) {
    std::vector<emu::KernelSite> sites;
    step_sites(precision, nullptr, &sites);
    uint64_t mapped = 0;
    for (const emu::KernelSite& k : sites)
      if (k.name == "map.cuh launch_map" || k.name == "broadcast.cuh launch_broadcast") mapped += k.bytes_written;
    uint64_t matrices = 0;
    for (const NamedParameter& p : TrainLoop(precision).model().named_parameters())
      if (p.tensor.dim() == 2 && p.name.find("wpe") == std::string::npos)
        matrices += static_cast<uint64_t>(p.tensor.numel()) * 4;
    std::printf("%-18s elementwise bytes written %llu, 2-d weight gradients %llu bytes\n", precision.c_str(),
                static_cast<unsigned long long>(mapped), static_cast<unsigned long long>(matrices));
    EXPECT_LT(mapped, matrices) << precision << ": the weight gradients were added outside their GEMMs";
  }
}

// The small gradients a later micro-batch adds into the first one's (the norms' weights and biases, the Linears'
// biases: new tensors of a few dozen elements here, where the GEMMs add theirs in place) are added at the end of its
// backward in one multi-tensor launch, not in a launch each (autograd/leaf_adds.h): one per later micro-batch, writing
// exactly the vector parameters' FP32 gradients and, at this toy size, the tied table's (vocabulary 65 pads the LM
// head to 128 rows, too many spare ones for the first micro-batch to keep its GEMM's output as the gradient, so later
// GEMMs cannot add into it in place; GPT-2's 50257 -> 50304 can, and its 154 MB table is above the 1 MiB limit anyway).
TEST(GpuStepCounts, LaterMicroBatchesAddTheirSmallGradientsInOneLaunch) {
  MPT_REQUIRE_GPU(8);
  for (const std::string precision : {"bf16", "fp8-delayed"}) {
    std::vector<emu::KernelSite> sites;
    step_sites(precision, nullptr, &sites);
    uint64_t vectors = 0;
    for (const NamedParameter& p : TrainLoop(precision).model().named_parameters())
      if (p.tensor.dim() == 1 || p.name == "wte.weight") vectors += static_cast<uint64_t>(p.tensor.numel()) * 4;
    const auto it = std::find_if(sites.begin(), sites.end(),
                                 [](const emu::KernelSite& k) { return k.name == "optim.cu add_multi"; });
    ASSERT_NE(it, sites.end()) << precision << ": no batched gradient add";
    EXPECT_EQ(it->launches, static_cast<uint64_t>(kAccum - 1)) << precision;
    EXPECT_EQ(it->bytes_written, vectors) << precision << ": every vector gradient, once";
    EXPECT_EQ(it->bytes_read, 2 * vectors) << precision;
  }
}

// The loss's gradient is written in the forward pass (accumulate_gradients offers the upstream gradient before the
// forward: autograd::LossSeed; llm.c's fused classifier): per micro-batch one fused launch reads the logits, after a
// count of the counted targets and before the loss's reduction, and the backward launches nothing over them. With
// the loss scaler (FP16) too: the scale is read on the device.
TEST(GpuStepCounts, TheLossGradientIsWrittenInTheForward) {
  MPT_REQUIRE_GPU(8);
  for (const std::string precision : {"bf16", "fp16"}) {
    std::map<std::string, uint64_t> launches = step_sites(precision);
    EXPECT_EQ(launches["cross_entropy.cu cross_entropy_forward_backward"], kAccum) << precision;
    EXPECT_EQ(launches["cross_entropy.cu cross_entropy_reduce"], 2 * kAccum) << precision;
    EXPECT_EQ(launches.count("cross_entropy.cu cross_entropy_forward"), 0u) << precision;
    EXPECT_EQ(launches.count("cross_entropy.cu cross_entropy_backward"), 0u) << precision;
  }
}

// A dynamically padded batch's key lengths reach the device once per forward (ops::prepare_key_lengths in the
// model), not once per attention call: 2 x 3 layers pageable copies (and host waits) per micro-batch before. The
// loss and every gradient match the CPU's (same initialisation, same lengths): FP32 throughout, the devices differ
// only in summation order (GEMMs, the attention's path), O(K u32) with K <= 256 here, 1.5e-5: normwise 1e-4.
TEST(GpuStepCounts, PaddedBatchCopiesItsLengthsOnce) {
  MPT_REQUIRE_GPU(8);
  nn::GPTConfig c = config(3);
  nn::GPT gpu(c);
  c.where.device = Device::cpu();
  nn::GPT cpu(c);
  std::vector<int64_t> tok(static_cast<size_t>(kB * kT)), tgt(tok.size());
  for (size_t i = 0; i < tok.size(); ++i) {
    tok[i] = static_cast<int64_t>((i * 13 + 5) % kVocab);
    tgt[i] = static_cast<int64_t>((i * 7 + 1) % kVocab);
  }
  const Tensor ids = Tensor::from_vector(tok, {kB, kT}), targets = Tensor::from_vector(tgt, {kB, kT});
  const Tensor lengths = Tensor::from_vector(std::vector<int32_t>{16, 9, 1, 16}, {kB});
  const Tensor ids_d = ids.to(Device::cuda(0)), targets_d = targets.to(Device::cuda(0));
  auto step = [&](nn::GPT& m, const Tensor& x, const Tensor& y) {
    m.zero_grad();
    const Tensor l = m.loss(x, y, ops::LossReduction::Mean, lengths);
    l.backward();
    return l;
  };
  step(gpu, ids_d, targets_d);  // warm-up: positions, plans, the pool
  emu::reset_counters();
  const Tensor loss = step(gpu, ids_d, targets_d);
  const emu::Counters counts = emu::counters();
  EXPECT_EQ(counts.h2d, 1u) << emu::to_string(counts);
  EXPECT_EQ(counts.h2d_bytes, static_cast<uint64_t>(kB * 4)) << emu::to_string(counts);
  const Tensor want = step(cpu, ids, targets);
  EXPECT_NEAR(loss.to(Device::cpu()).item<double>(), want.item<double>(), 1e-4 * std::fabs(want.item<double>()));
  const auto gp = gpu.named_parameters(), cp = cpu.named_parameters();
  ASSERT_EQ(gp.size(), cp.size());
  for (size_t i = 0; i < gp.size(); ++i)
    EXPECT_LE(testing::normwise_error(gp[i].tensor.grad(), cp[i].tensor.grad()), 1e-4) << gp[i].name;
}

TEST(GpuStepCounts, Fp8DelayedQuantizationIsOneLaunchPerTensor) {
  MPT_REQUIRE_GPU(8);
  std::map<std::string, uint64_t> launches = step_sites("fp8-delayed"), bf16 = step_sites("bf16");
  EXPECT_EQ(launches["quantize.cu dbias_finish"], kAccum * 3);
  EXPECT_EQ(launches["reduction.cu run_pass"], bf16["reduction.cu run_pass"]);
  constexpr uint64_t kWeights = 4, kPerMicroBatch = 6, kNormCodes = 2;
  EXPECT_EQ(launches["quantize.cu quantize_transpose"], kAccum * kPerMicroBatch + kWeights);
  EXPECT_EQ(launches["layernorm.cu layer_norm_forward"], bf16["layernorm.cu layer_norm_forward"]);
  EXPECT_EQ(launches["strided.cu launch_copy"], bf16["strided.cu launch_copy"] + kAccum * kNormCodes);
  EXPECT_EQ(launches["quantize.cu zero_amax"], 0u);
  EXPECT_EQ(launches["quantize.cu fold_amax"], 0u);
  EXPECT_EQ(launches["quantize.cu delayed_scaling_update"], 1u);
  emu::reset_counters();
  EXPECT_TRUE(emu::kernel_sites().empty()) << "reset_counters empties the tally";
}

// With the residual stream in BF16 the norms write their layer's codes from it just as from the FP32 stream: the same
// quantization launches (none for the norms' outputs) and byte transposes of the codes, under both per-tensor recipes.
TEST(GpuStepCounts, Fp8NormsOfABf16StreamWriteTheirCodes) {
  MPT_REQUIRE_GPU(8);
  for (const std::string recipe : {"fp8-delayed", "fp8-current"}) {
    SCOPED_TRACE(recipe);
    std::map<std::string, uint64_t> f32 = step_sites(recipe), half = step_sites(recipe + "+bf16-stream");
    for (const char* site : {"quantize.cu quantize_transpose", "layernorm.cu layer_norm_forward",
                             "strided.cu launch_copy", "quantize.cu amax"})
      EXPECT_EQ(half[site], f32[site]) << site;
  }
}

// FP8 current scaling (2026-11-30): h.1's two norms write their layer's codes after an amax pass of their own (two
// launches each, plus the scale), and the MLP's hidden codes come from its pre-activation (gelu + cast + transpose
// after an amax pass of gelu(pre)), so the per-tensor quantizations are delayed scaling's, each after its amax pass
// and scale, and no f32 norm output or GELU output is written.
TEST(GpuStepCounts, Fp8CurrentNormsAndGeluQuantizeFromTheirInputs) {
  MPT_REQUIRE_GPU(8);
  emu::Counters current_counts, delayed_counts;
  std::map<std::string, uint64_t> current = step_sites("fp8-current", &current_counts),
                                   delayed = step_sites("fp8-delayed", &delayed_counts), bf16 = step_sites("bf16");
  constexpr uint64_t kNormCodes = 2;
  const uint64_t quantizations = delayed["quantize.cu quantize_transpose"];
  EXPECT_EQ(current["quantize.cu quantize_transpose"], quantizations);
  EXPECT_EQ(current["quantize.cu amax"], quantizations);
  EXPECT_EQ(current["quantize.cu scale_from_amax"], quantizations + kAccum * kNormCodes);
  EXPECT_EQ(current["layernorm.cu layer_norm_forward"], bf16["layernorm.cu layer_norm_forward"] + kAccum * kNormCodes);
  EXPECT_EQ(current["strided.cu launch_copy"], delayed["strided.cu launch_copy"]);  // the codes' byte transposes
  EXPECT_EQ(current["map.cuh launch_map"], delayed["map.cuh launch_map"]);  // no GELU kernel beside the GEMMs'
  // The first MLP GEMM writes the pre-activation only (no GELU epilogue writing h beside it), as under delayed
  // scaling: the GEMMs move the same bytes.
  EXPECT_EQ(current_counts.matmul_bytes, delayed_counts.matmul_bytes);
  EXPECT_EQ(current_counts.matmuls, delayed_counts.matmuls);
}

// FP8 block scaling's columnwise (wgrad) codes: each of the FP8 block's 4 inputs and 4 gradients per micro-batch is
// quantized along both axes by one kernel reading it (no transposed copy, no second read), and the three dy behind a
// bias give that bias's gradient from the same pass, as does the MLP's dpre (made in that pass from dh, b1's gradient
// with it). The 4 weights' W^T codes come from the launches that quantize W, once per step. The MLP's hidden codes come
// from its pre-activation. The norms before the FP8 layers write BF16 as the BF16 step's do (not the FP32 they wrote
// until 2026-12-01), and their backward reads a BF16 gradient: the norms move the BF16 step's bytes.
TEST(GpuStepCounts, Fp8BlockColumnwiseCodesComeFromOnePass) {
  MPT_REQUIRE_GPU(8);
  std::vector<emu::KernelSite> block_sites, bf16_sites;
  std::map<std::string, uint64_t> block = step_sites("fp8-block", nullptr, &block_sites),
                                   bf16 = step_sites("bf16", nullptr, &bf16_sites);
  for (const char* norm : {"layernorm.cu layer_norm_forward", "layernorm.cu layer_norm_backward"}) {
    auto site = [&](const std::vector<emu::KernelSite>& sites) {
      for (const emu::KernelSite& k : sites)
        if (k.name == norm) return k;
      ADD_FAILURE() << "no " << norm;
      return emu::KernelSite{};
    };
    EXPECT_EQ(block[norm], bf16[norm]) << norm;
    EXPECT_EQ(site(block_sites).bytes_read, site(bf16_sites).bytes_read) << norm;
    EXPECT_EQ(site(block_sites).bytes_written, site(bf16_sites).bytes_written) << norm;
  }
  constexpr uint64_t kWeights = 4, kPerMicroBatch = 8;
  // Each input and gradient is wanted both ways (fprop or dgrad, and wgrad): one pass writes both (2026-12-01; a
  // rowwise and a transposed pass before), and the only other block quantizations are the weights', once per step,
  // W^T's codes from the same launch as W's.
  EXPECT_EQ(block["quantize_block.cu quantize_blockwise_1x128_both"], kAccum * kPerMicroBatch);
  EXPECT_EQ(block["quantize_block.cu quantize_blockwise_1x128_transposed"], 0u);
  EXPECT_EQ(block["quantize_block.cu quantize_blockwise_128x128_both"], kWeights);  // W and W^T
  EXPECT_EQ(block["quantize_block.cu quantize_blockwise"], 0u);
  // Each block-scaled GEMM (3 per FP8 layer) converts both operands' scales into cuBLASLt's layout in one launch.
  EXPECT_EQ(block["gemm_scales.cu block_scales_to_lt"], kAccum * 4 * 3);
  EXPECT_EQ(block["quantize.cu dbias_finish"], kAccum * (3 + 1));
  EXPECT_EQ(block["quantize.cu column_partials"], bf16["quantize.cu column_partials"]);
  // The weights' W^T codes and scales come from the launch that quantizes W (no transposing copies since 2026-12-01).
  EXPECT_EQ(block["strided.cu launch_copy"], bf16["strided.cu launch_copy"]);
  // No GELU or DGELU kernel: cuBLASLt has no GELU epilogues with block scales, so the passes quantizing h and dpre
  // apply them as they read the pre-activation (BlockQuantizeOptions::gelu) or dh and it (::dgelu_aux, b1's gradient
  // from that pass too, since 2026-12-01): neither h nor dpre is written.
  EXPECT_EQ(block["map.cuh launch_map"], bf16["map.cuh launch_map"]);
}

// TransformerEngine's accumulation defaults (fp8::detail::fast_accum_fprop): the per-tensor recipes' forward GEMMs
// (4 FP8 Linears in h.1, 2 micro-batches) ask cuBLASLt for FAST_ACCUM; dgrad and wgrad, and every GEMM of block
// scaling, keep FP32 promotion.
TEST(GpuStepCounts, Fp8ForwardGemmsAccumulateFastUnderPerTensorScaling) {
  MPT_REQUIRE_GPU(8);
  for (const auto& [precision, fast] : std::vector<std::pair<std::string, uint64_t>>{{"fp8-delayed", kAccum * 4},
                                                                                    {"fp8-current", kAccum * 4},
                                                                                    {"fp8-block", 0}}) {
    TrainLoop loop(precision);
    loop.step(0, false);
    const uint64_t before = emu::cublaslt_fast_accum_matmuls();
    loop.step(1, false);
    EXPECT_EQ(emu::cublaslt_fast_accum_matmuls() - before, fast) << precision;
  }
}

// With the CUDA block cache on (the default outside emulation, mpt/core/memory.h): after warm-up a step's tensors
// are served from blocks freed on the default stream, so the allocator makes no pool call at all.
TEST(GpuStepCounts, BlockCacheServesEveryAllocation) {
  MPT_REQUIRE_GPU(8);
  ASSERT_FALSE(cuda_memory_caching()) << "the emulation build starts with the cache off";
  set_cuda_memory_caching(true);
  for (const std::string precision : {"fp8-block"}) {  // the precision with the most tensors per step
    TrainLoop loop(precision);
    loop.step(0, true);
    loop.step(1, false);
    emu::reset_counters();
    loop.step(2, true);
    const emu::Counters c = emu::counters();
    std::printf("%-12s cached   %s\n", precision.c_str(), emu::to_string(c).c_str());
    EXPECT_EQ(c.pool_allocs + c.pool_frees + c.pool_grows, 0u) << precision << ": " << emu::to_string(c);
    EXPECT_EQ(c.h2d + c.syncs, 0u) << precision;
    EXPECT_EQ(c.d2h, 1u) << precision;
  }
  const MemoryStats before = memory_stats(Device::cuda(0));
  EXPECT_GT(before.cached_bytes, 0);
  set_cuda_memory_caching(false);  // the cached blocks go back to the pool
  EXPECT_FALSE(cuda_memory_caching());
  emu::reset_counters();
  empty_cache(Device::cuda(0));
  EXPECT_EQ(emu::counters().pool_frees, 0u) << "nothing was left in the block cache";
}

// A step at full size keeps an H100's SMs busy wherever it moves megabytes: at GPT 1.3B's layer sizes (2048 wide, 16
// heads, 8 x 1024 tokens; 3 blocks so that h.1 runs FP8), recorded without running (emu::set_record_only), no launch
// with fewer blocks than the 132 SMs (emu::kSmsOfAnH100) moves 1 MB. Before 2026-12-01 LayerNorm's dweight/dbias and
// the bias gradients (FP8's fused dbias, bias_grad) were finished by 8 blocks of one thread per column, each reading
// 2-8 MB of partials (kernels/cuda/partial_sums.cuh).
TEST(GpuStepCounts, FullSizeLaunchesMovingMegabytesFillTheSms) {
  MPT_REQUIRE_GPU(8);
  emu::set_record_only(true);
  struct RecordOnlyOff {
    ~RecordOnlyOff() { emu::set_record_only(false); }
  } off;
  for (const std::string precision : {"bf16", "fp8-delayed"}) {
    nn::GPTConfig c = config(3);
    c.vocab_size = 1024, c.block_size = 1024, c.n_head = 16, c.n_embd = 2048;
    nn::GPT model(c);
    const amp::Policy policy = policy_for(precision, 3);
    optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-4});
    const Tensor ids = Tensor::zeros({8, 1024}, DType::I64, Device::cuda(0));
    auto step = [&] {
      opt.zero_grad();
      Tensor loss;
      {
        amp::Autocast autocast(policy);
        loss = model.loss(ids, ids);
      }
      loss.backward();
      optim::clip_grad_norm_(model.parameters(), 1.0);
      opt.step();
      if (policy.fp8_state) policy.fp8_state->update();
    };
    step();  // warm-up: optimizer state, FP8 metas
    emu::reset_counters();
    emu::set_kernel_sites(true);
    step();
    emu::set_kernel_sites(false);
    std::map<std::string, emu::KernelSite> sites;
    for (emu::KernelSite& k : emu::kernel_sites()) sites[k.name] = std::move(k);
    for (const auto& [name, k] : sites) {
      EXPECT_LT(k.few_block_max_bytes, uint64_t{1} << 20)
          << precision << " " << name << ": " << k.few_block_launches << " launches under " << emu::kSmsOfAnH100
          << " blocks (the smallest " << k.min_blocks << "), one of them moving " << k.few_block_max_bytes << " bytes";
    }
    ASSERT_TRUE(sites.contains("layernorm.cu layer_norm_backward")) << precision;
    EXPECT_GE(sites["layernorm.cu layer_norm_backward"].min_blocks, emu::kSmsOfAnH100) << precision;
    if (precision == "fp8-delayed") {
      ASSERT_TRUE(sites.contains("quantize.cu dbias_finish"));
      EXPECT_GE(sites["quantize.cu dbias_finish"].min_blocks, emu::kSmsOfAnH100);
    }
  }
}

TEST(GpuStepCounts, Fp32) { check_precision("fp32"); }
TEST(GpuStepCounts, Bf16) { check_precision("bf16"); }
TEST(GpuStepCounts, Fp16WithGradScaler) { check_precision("fp16"); }
TEST(GpuStepCounts, Fp8Delayed) { check_precision("fp8-delayed"); }
TEST(GpuStepCounts, Fp8Current) { check_precision("fp8-current"); }
TEST(GpuStepCounts, Fp8Block) { check_precision("fp8-block"); }

// Llama's LM head runs at the padded width on CUDA by default too (65 -> 128, LanguageModel::set_padded_head): its
// three GEMMs (forward, dgrad, wgrad) are Vp's, 6 (Vp - V) C flops per token more than the unpadded head's, and the
// loss is the unpadded model's. Untied (its own Linear) and tied (the embedding).
TEST(GpuStepCounts, LlamaLossRunsThePaddedHead) {
  MPT_REQUIRE_GPU(8);
  for (bool tied : {false, true}) {
    nn::LlamaConfig c;
    c.vocab_size = kVocab, c.block_size = kT, c.n_layer = 1, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 64;
    c.tie_embeddings = tied;
    c.where.device = Device::cuda(0);
    nn::Llama padded(c), plain(c);
    plain.set_padded_head(0);
    ASSERT_EQ(padded.padded_head_width(Device::cuda(0)), 128);
    std::vector<int32_t> ids(kB * kT), targets(kB * kT);
    for (size_t i = 0; i < ids.size(); ++i) {
      ids[i] = static_cast<int32_t>((i * 7 + 3) % kVocab);
      targets[i] = static_cast<int32_t>((i * 5 + 1) % kVocab);
    }
    const Tensor x = Tensor::from_vector(ids, {kB, kT}).to(Device::cuda(0));
    const Tensor y = Tensor::from_vector(targets, {kB, kT}).to(Device::cuda(0));
    uint64_t flops[2] = {};
    double loss[2] = {};
    for (int i = 0; i < 2; ++i) {
      emu::reset_counters();
      const Tensor l = (i == 0 ? plain : padded).loss(x, y);
      l.backward();
      flops[i] = emu::counters().matmul_flops;
      loss[i] = l.to(Device::cpu()).to(DType::F64).item<double>();
    }
    EXPECT_EQ(flops[1] - flops[0], uint64_t{6} * (128 - kVocab) * 64 * kB * kT) << (tied ? "tied" : "untied");
    EXPECT_NEAR(loss[1], loss[0], 1e-6 * std::fabs(loss[0])) << (tied ? "tied" : "untied");
  }
}

}  // namespace
}  // namespace mpt
#endif  // MPT_CUDA_EMULATION
