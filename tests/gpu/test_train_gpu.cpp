// tests/gpu/test_train_gpu.cpp: a tiny GPT trained for a few AdamW steps on cuda:0 against the same run on the CPU: FP32, BF16 autocast, FP16 with GradScaler (and a skipped step), FP8 delayed/current/block, gradient accumulation, activation checkpointing (skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"

namespace mpt {
namespace {

using testing::normwise_error;
using testing::to_cpu;

constexpr double kLr = 3e-3, kEps = 1e-5, kBeta1 = 0.9, kBeta2 = 0.95;  // the AdamW settings of train()

struct TrainRun {
  std::string precision = "fp32";  // fp32, bf16, fp16, fp8-delayed, fp8-current, fp8-block (+bf16-stream, +bf16-grads)
  int steps = 3;
  int64_t accum = 1;               // micro-batches per step (the batch of 4 sequences split k ways)
  bool checkpoint = false;
  int inject_inf_step = -1;        // this step's gradients get an Inf before unscale_ (the step must be skipped)
  double dropout = 0;
  ops::MomentStorage moments = ops::MomentStorage::F32;
};

struct Trace {
  std::vector<double> losses;
  std::vector<bool> stepped;
  std::vector<double> scales;             // GradScaler's scale after each update
  mpt::StateDict grads1;                   // the first step's (unscaled) gradients, on the CPU
  std::vector<mpt::StateDict> grads;       // every step's, likewise
  std::vector<mpt::StateDict> params;      // after each step, on the CPU
  mpt::StateDict opt_state1;               // after the first step, on the CPU
  mpt::StateDict opt_state;                // at the end, on the CPU
  std::map<std::string, Tensor> fp8_state;
  std::vector<std::map<std::string, Tensor>> fp8_states;  // after each step's update, likewise (with telemetry)
};

// A run that starts at step `step` from another run's parameters and FP8 scaling state after step - 1 (the batches
// of the earlier steps are drawn and skipped): the CPU replay of one GPU step at the GPU's own inputs.
struct Resume {
  int step = 0;
  mpt::StateDict params;
  std::map<std::string, Tensor> fp8_state;
};

nn::GPTConfig config(Device device, double dropout) {
  nn::GPTConfig c;
  c.vocab_size = 65;
  c.block_size = 32;
  c.n_layer = 3;  // the FP8 policy keeps the first and last blocks in BF16: h.1 runs FP8
  c.n_head = 4;
  c.n_embd = 64;  // FP8 GEMMs want K and N multiples of 16
  c.dropout = dropout;
  c.where.device = device;
  return c;
}

amp::Policy policy_for(const std::string& p, Device device) {
  constexpr std::string_view kGrads = "+bf16-grads";  // the masters' gradients in BF16 (amp::Policy::grads)
  if (p.ends_with(kGrads)) return policy_for(p.substr(0, p.size() - kGrads.size()), device).grads_in(DType::BF16);
  constexpr std::string_view kStream = "+bf16-stream";  // the residual stream in BF16 (amp::Policy::residual)
  if (p.ends_with(kStream)) return policy_for(p.substr(0, p.size() - kStream.size()), device).residual_in(DType::BF16);
  if (p == "bf16") return amp::Policy::bf16();
  if (p == "fp16") return amp::Policy::fp16();
  auto fp8 = [&](fp8::Fp8Recipe r) { return amp::Policy::fp8(3, std::make_shared<fp8::Fp8ScalingState>(r, device)); };
  if (p == "fp8-delayed") return fp8(fp8::DelayedScaling{16, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::Hybrid});
  if (p == "fp8-current") return fp8(fp8::CurrentScaling{});
  if (p == "fp8-block") return fp8(fp8::BlockScaling{});
  return amp::Policy::fp32();
}

mpt::StateDict on_cpu(const mpt::StateDict& d) {
  mpt::StateDict out;
  for (const auto& [k, t] : d) out[k] = t.defined() ? to_cpu(t).clone() : t;
  return out;
}

// The FP8 scaling state (scales, amax histories) and the last quantization's telemetry (amax, scale), on the CPU.
std::map<std::string, Tensor> fp8_snapshot(const fp8::Fp8ScalingState& state) {
  std::map<std::string, Tensor> out = on_cpu(state.state_dict());
  for (const auto& [name, st] : state.telemetry()) {
    out[name + ".telemetry.amax"] = Tensor::full({}, st.amax, DType::F32);
    out[name + ".telemetry.scale"] = Tensor::full({}, st.scale, DType::F32);
  }
  return out;
}

Trace train(Device device, const TrainRun& run, const Resume* resume = nullptr) {
  const int64_t B = 4, T = 16;
  manual_seed(2024);  // dropout draws from the default generator: the same stream on both runs
  nn::GPT init(config(Device::cpu(), run.dropout));
  nn::GPT model(config(device, run.dropout));
  model.load_state_dict(resume ? resume->params : init.state_dict());
  model.set_activation_checkpointing(run.checkpoint);
  const amp::Policy policy = policy_for(run.precision, device);
  if (policy.fp8_state) policy.fp8_state->set_collect_telemetry(true);
  if (policy.grads)  // what the Trainer does with the policy's gradient dtype
    for (const auto& p : model.named_parameters()) autograd::set_grad_dtype(p.tensor, *policy.grads);
  if (resume && policy.fp8_state) {  // the metas registered by name (one process: their order does not matter)
    std::map<std::string, Tensor> fp8;
    const std::string suffix = ".amax_history";
    for (const auto& [k, t] : resume->fp8_state) {
      if (k.find(".telemetry.") != std::string::npos) continue;
      fp8[k] = t;
      if (!k.ends_with(suffix)) continue;
      const std::string name = k.substr(0, k.size() - suffix.size());
      policy.fp8_state->register_tensor(name, name.ends_with(".weight")        ? fp8::Fp8Role::Weight
                                              : name.ends_with(".grad_output") ? fp8::Fp8Role::GradOutput
                                                                               : fp8::Fp8Role::Input);
    }
    policy.fp8_state->load_state_dict(fp8);
  }
  train::GradScaler scaler(train::GradScalerOptions{.init_scale = 1024.0, .growth_interval = 2,
                                                .enabled = run.precision == "fp16"},
                         device);
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1),
                   {.lr = kLr, .betas = {kBeta1, kBeta2}, .eps = kEps, .moments = run.moments});
  std::mt19937_64 rng(7);
  Trace tr;
  for (int step = 0; step < run.steps; ++step) {
    std::vector<int64_t> tok(static_cast<size_t>(B * (T + 1)));
    for (int64_t& t : tok) t = static_cast<int64_t>(rng() % 65);
    const Tensor all = Tensor::from_vector(tok, {B, T + 1});
    if (resume && step < resume->step) continue;
    const Tensor ids = all.slice(1, 0, T).contiguous().to(device), targets = all.slice(1, 1, T + 1).contiguous().to(device);
    const int64_t b = B / run.accum;
    opt.zero_grad();
    const train::AccumulateResult acc = train::accumulate_gradients(
        run.accum,
        [&](int64_t i) {
          amp::Autocast autocast(policy);
          return train::MicroBatchLoss{model.loss(ids.slice(0, i * b, (i + 1) * b), targets.slice(0, i * b, (i + 1) * b)),
                                     b * T};
        },
        {.scale_loss = [&](const Tensor& l) { return scaler.scale(l); }});
    if (step == run.inject_inf_step)
      model.named_parameters()[2].tensor.grad().view({-1}).slice(0, 3, 4).fill_(std::numeric_limits<double>::infinity());
    scaler.unscale_(opt);
    tr.grads.emplace_back();
    for (const auto& p : model.named_parameters()) tr.grads.back()[p.name] = to_cpu(p.tensor.grad()).clone();
    if (step == 0) tr.grads1 = tr.grads.front();
    tr.losses.push_back(acc.value());
    tr.stepped.push_back(scaler.step(opt));
    scaler.update();
    tr.scales.push_back(scaler.get_scale());
    if (policy.fp8_state) {
      policy.fp8_state->update();
      tr.fp8_states.push_back(fp8_snapshot(*policy.fp8_state));
    }
    tr.params.push_back(on_cpu(model.state_dict()));
    if (step == 0) tr.opt_state1 = on_cpu(opt.state_dict());
  }
  tr.opt_state = on_cpu(opt.state_dict());
  if (policy.fp8_state) tr.fp8_state = fp8_snapshot(*policy.fp8_state);
  return tr;
}

// Error budgets, as normwise relative errors (max |a - b| / max |b|) per tensor.
// FP32: |gpu - cpu| <= 1e-5, the tolerance the FP32 PyTorch golden meets with its own GEMM order
// (tests/nn/test_gpt_golden.cpp); the GEMMs, attention and the row reductions (test_ops_gpu.cpp) are the only
// non-bit-exact ops here.
// Each step's loss is one number, held to twice the CPU's error scale so far (its largest loss error up to that step:
// the CPU's can land near the reference by chance at one step). FP8 runs check their losses after the first step at
// replayed inputs instead (fp8_run).
// Reduced precision (accuracy parity): the GPU run's error against the CPU FP32 run may be at most twice the CPU run's
// own error against it (floor 1e-5). The devices round different FP32 values to BF16/FP16/FP8 (cuBLASLt vs oneDNN
// accumulation), and CUDA's attention rounds P to the activation dtype for P V where the CPU's flash kernel keeps it
// in FP32 (include/mpt/ops/attention.h): up to about twice the roundings on that path. A wrong kernel, scale or
// recipe makes the GPU run far less accurate than the CPU's; |gpu - cpu| <= 3 x the CPU's error then follows.
// The gradients' difference is then bounded by b = 3 x the CPU's error (1e-5 in FP32), normwise. The AdamW state after
// the first step follows from it: exp_avg = (1 - b1) g within b, exp_avg_sq = (1 - b2) g^2 within 2 b + b^2. At the
// end it is checked for parity 4: by then the runs' parameters differ by up to the AdamW floor below, and the later
// gradients and moments inherit that (the exp_avg_sq of BF16 and FP8-block runs reach 1.1-1.4 x parity 2).
// Final parameters additionally get the AdamW floor of the golden test: a gradient difference of `noise` (the
// gradient budget times max |grad|) moves the update m / (sqrt(v) + eps) by at most min(2, noise / eps) per step,
// i.e. steps * lr * min(2, noise / eps) / max |w| (near-zero gradients such as the attention key bias's, which is
// rounding noise on both devices, make AdamW's step sign arbitrary).
struct Budget {
  const Trace* fp32 = nullptr;  // the CPU FP32 run, for reduced-precision budgets
  double floor = 1e-5;
  // The losses compare checks; the caller checks later ones at replayed inputs.
  size_t loss_steps = std::numeric_limits<size_t>::max();
  double of(double precision_error, double parity = 2) const { return std::max(floor, parity * precision_error); }
};

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::max(m, std::abs(v));
  return m;
}

// FP32 moments at the end, |gpu - cpu| / max |cpu| (0 for other state). Each run's moments are a weighted sum of its own
// gradients over the steps taken: exp_avg = sum_s (1 - b1) b1^(S-1-s) g_s, so |m_gpu - m_cpu| <= sum_s (1 - b1)
// b1^(S-1-s) D_s with D_s = max |g_gpu,s - g_cpu,s|; exp_avg_sq likewise with b2 and |g_gpu^2 - g_cpu^2| <=
// D_s (2 max |g_cpu,s| + D_s). The later steps' gradient differences do not stay within the first step's: they are
// taken at parameters that already differ by AdamW's amplification of near-zero gradients (the final parameters' floor
// in compare), and on an H200 (2026-11-26) they carried c_fc's exp_avg to 1.1-2.6x the first step's 1e-5. So the end
// moments are held to what AdamW makes of each run's own gradients, plus FP32 rounding: a wrong moment update fails.
double moments_bound(const Trace& gpu, const Trace& cpu, const std::string& key) {
  const bool avg = key.ends_with(".exp_avg"), sq = key.ends_with(".exp_avg_sq");
  if (!avg && !sq) return 0;
  const std::string name = key.substr(0, key.rfind('.'));
  double bound = 0;
  const double beta = avg ? kBeta1 : kBeta2;
  for (size_t s = 0; s < cpu.grads.size(); ++s) {
    if (!cpu.stepped.at(s) || !cpu.grads[s].count(name)) continue;
    bound *= beta;  // the older steps' weights shrink by beta each step
    const std::vector<double> g = to_cpu(gpu.grads.at(s).at(name)).to_vector<double>(),
                              c = to_cpu(cpu.grads[s].at(name)).to_vector<double>();
    double d = 0, m = 0;
    for (size_t i = 0; i < c.size(); ++i) d = std::max(d, std::abs(g[i] - c[i])), m = std::max(m, std::abs(c[i]));
    bound += (1 - beta) * (avg ? d : d * (2 * m + d));
  }
  const double moment_max = max_abs(cpu.opt_state.at(key));
  return moment_max > 0 ? bound / moment_max + 1e-6 : 0;  // + FP32 rounding of the sums (a few ulps, normwise)
}

void compare(const Trace& gpu, const Trace& cpu, const Budget& budget, const std::string& run) {
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size()) << run;
  std::printf("%s: losses (cuda/cpu)", run.c_str());
  double e_cpu_scale = 0;
  for (size_t s = 0; s < std::min(cpu.losses.size(), budget.loss_steps); ++s) {
    std::printf(" %.6f/%.6f", gpu.losses[s], cpu.losses[s]);
    const double ref = budget.fp32 ? budget.fp32->losses[s] : cpu.losses[s];
    const double e_cpu = std::abs(cpu.losses[s] - ref) / std::abs(ref), e_gpu = std::abs(gpu.losses[s] - ref) / std::abs(ref);
    e_cpu_scale = std::max(e_cpu_scale, e_cpu);
    EXPECT_LE(e_gpu, budget.of(e_cpu_scale)) << run << " loss step " << s << " (CPU's error " << e_cpu
                                             << ", its largest so far " << e_cpu_scale << ")";
  }
  std::printf("\n");
  EXPECT_EQ(gpu.stepped, cpu.stepped) << run;
  EXPECT_EQ(gpu.scales, cpu.scales) << run << ": the GradScaler's scale sequence";
  double worst = 0;
  std::string worst_key;
  auto check = [&](const Tensor& g, const Tensor& c, const Tensor* f32, const std::string& key, double extra = 0,
                   double parity = 2) {
    ASSERT_EQ(g.dtype(), c.dtype()) << run << " " << key;
    ASSERT_EQ(g.shape(), c.shape()) << run << " " << key;
    if (!is_floating(c.dtype())) {
      EXPECT_TRUE(testing::same_bits(g, c)) << run << " " << key;
      return;
    }
    // FP32: against the CPU run; reduced precision: both against the CPU FP32 run.
    const double e_cpu = f32 ? normwise_error(c, *f32) : 0;
    const double err = f32 ? normwise_error(g, *f32) : normwise_error(g, c);
    const double allowed = std::max(extra, budget.of(e_cpu, parity));
    EXPECT_LE(err, allowed) << run << " " << key << (f32 ? " (error against FP32; the CPU's: " : "")
                            << (f32 ? std::to_string(e_cpu) + ")" : "");
    if (err / allowed > worst) worst = err / allowed, worst_key = key;
  };
  std::map<std::string, double> grad_diff;  // b per parameter: the budget of |g_gpu - g_cpu| / max |g|
  for (const auto& [k, c] : cpu.grads1) {
    const Tensor* f32 = budget.fp32 ? &budget.fp32->grads1.at(k) : nullptr;
    grad_diff[k] = f32 ? std::max(budget.floor, 3 * normwise_error(c, *f32)) : budget.floor;
    check(gpu.grads1.at(k), c, f32, "grad step 0 " + k);
  }
  const double steps = static_cast<double>(cpu.params.size());
  for (const auto& [k, c] : cpu.params.back()) {
    const double noise = grad_diff.at(k) * max_abs(cpu.grads1.at(k));
    const double adam_floor = steps * kLr * std::min(2.0, noise / kEps) / max_abs(c);
    check(gpu.params.back().at(k), c, budget.fp32 ? &budget.fp32->params.back().at(k) : nullptr, "final " + k,
          adam_floor);
  }
  ASSERT_EQ(gpu.opt_state1.size(), cpu.opt_state1.size()) << run;
  for (const auto& [k, c] : cpu.opt_state1) {
    auto ends_with = [&](const std::string& suffix) {
      return k.size() > suffix.size() && k.compare(k.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    const std::string name = k.substr(0, k.rfind('.'));
    double allowed = budget.floor;
    if (ends_with(".exp_avg") && grad_diff.count(name)) allowed = grad_diff.at(name);
    if (ends_with(".exp_avg_sq") && grad_diff.count(name)) allowed = 2 * grad_diff.at(name) + std::pow(grad_diff.at(name), 2);
    const Tensor& g = gpu.opt_state1.at(k);
    if (!is_floating(c.dtype())) {
      EXPECT_TRUE(testing::same_bits(g, c)) << run << " optimizer step 0 " << k;
      continue;
    }
    const double err = normwise_error(g, c);
    EXPECT_LE(err, allowed) << run << " optimizer step 0 " << k << " (|gpu - cpu|)";
    if (err / allowed > worst) worst = err / allowed, worst_key = "optimizer step 0 " + k;
  }
  ASSERT_EQ(gpu.opt_state.size(), cpu.opt_state.size()) << run;
  for (const auto& [k, c] : cpu.opt_state) {
    const bool comparable = budget.fp32 && budget.fp32->opt_state.count(k) &&
                            budget.fp32->opt_state.at(k).dtype() == c.dtype();
    check(gpu.opt_state.at(k), c, comparable ? &budget.fp32->opt_state.at(k) : nullptr, "optimizer end " + k,
          comparable ? 0 : moments_bound(gpu, cpu, k), 4);
  }
  std::printf("%s: worst error / budget %.3g (%s)\n", run.c_str(), worst, worst_key.c_str());
}

TEST(GpuTraining, Fp32MatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const TrainRun run{};
  compare(train(Device::cuda(0), run), train(Device::cpu(), run), {}, "fp32");
}

// Dropout masks come from the same Philox stream on both devices.
TEST(GpuTraining, Fp32WithDropoutMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const TrainRun run{.dropout = 0.1};
  compare(train(Device::cuda(0), run), train(Device::cpu(), run), {}, "fp32 dropout");
}

// Gradient accumulation (2 micro-batches) and activation checkpointing on the device. (BF16 and 8-bit AdamW moments
// are bit-exact at the op level, GpuOptimOps; in training, FP32-level differences of a moment flip its BF16 rounding
// or 8-bit code by a whole step now and then, which an FP32 budget does not cover.)
TEST(GpuTraining, AccumulationAndCheckpointingMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const TrainRun run{.accum = 2, .checkpoint = true};
  const Trace gpu = train(Device::cuda(0), run);
  compare(gpu, train(Device::cpu(), run), {}, "fp32 accumulate 2 checkpointed");
  // Recomputing the blocks in backward repeats the same device ops on the same inputs: the same bits as without.
  TrainRun plain = run;
  plain.checkpoint = false;
  plain.steps = 1;
  const Trace gpu_plain = train(Device::cuda(0), plain);
  for (const auto& [k, t] : gpu_plain.grads1)
    testing::expect_match(gpu.grads1.at(k), t, testing::Match::exact(DType::F32, 2), "checkpointed vs not: grad " + k);
}

TEST(GpuTraining, Bf16AutocastWithFp32MastersMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Trace fp32 = train(Device::cpu(), TrainRun{});
  const TrainRun run{.precision = "bf16"};
  compare(train(Device::cuda(0), run), train(Device::cpu(), run), {&fp32}, "bf16 autocast");
}

// The residual stream in BF16 (llm.c's regime): the norms read and write BF16 beside FP32 weights on both devices.
TEST(GpuTraining, Bf16StreamMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Trace fp32 = train(Device::cpu(), TrainRun{});
  const TrainRun run{.precision = "bf16+bf16-stream"};
  compare(train(Device::cuda(0), run), train(Device::cpu(), run), {&fp32}, "bf16 autocast, bf16 stream");
}

// BF16 gradients of the FP32 masters (llm.c's regime), two micro-batches: the second added into the BF16 gradient
// by cuBLASLt (beta = 1 on a BF16 C) on the device and by the CPU GEMM likewise. Both round the same FP32
// sums to BF16, so the parity budget of the other BF16 runs holds.
TEST(GpuTraining, Bf16GradientsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Trace fp32 = train(Device::cpu(), TrainRun{.accum = 2});
  const TrainRun run{.precision = "bf16+bf16-grads", .accum = 2};
  const Trace gpu = train(Device::cuda(0), run);
  for (const auto& [k, t] : gpu.grads1) EXPECT_EQ(t.dtype(), DType::BF16) << k;
  compare(gpu, train(Device::cpu(), run), {&fp32}, "bf16 autocast, bf16 gradients");
}

// FP16 with dynamic loss scaling: an Inf injected into one gradient at step 1 makes both devices skip that step (the
// parameters keep their bits) and back the scale off; growth_interval 2 makes it grow again by the end.
TEST(GpuTraining, Fp16GradScalerSkipsTheSameStepAndMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Trace fp32 = train(Device::cpu(), TrainRun{.steps = 5});
  const TrainRun run{.precision = "fp16", .steps = 5, .inject_inf_step = 1};
  const Trace gpu = train(Device::cuda(0), run), cpu = train(Device::cpu(), run);
  compare(gpu, cpu, {&fp32}, "fp16 grad scaler");
  EXPECT_EQ(gpu.stepped, (std::vector<bool>{true, false, true, true, true}));
  EXPECT_EQ(gpu.scales, (std::vector<double>{1024, 512, 512, 1024, 1024}));
  for (const auto& [k, t] : gpu.params[0])
    EXPECT_TRUE(testing::same_bits(gpu.params[1].at(k), t)) << "the skipped step changed " << k << " on the device";
}

// FP8 recipes: losses, gradients, parameters and AdamW state within the budget, and the scaling state (amax
// histories, scales, scale_invs; the telemetry's last amax and scale) after every step elementwise within one E4M3
// step (2^-3 relative, tolerance(f8e4m3).rtol) of the CPU's at the same inputs. An amax is max |t| of one tensor t:
// |amax(t_gpu) - amax(t_cpu)| <= max |t_gpu - t_cpu|, so it differs by at most the tensors' own difference. At
// step 0 both devices start from the same parameters and state, and the tensors differ by the per-op budgets above
// (the gradients into the attention projection by ~5% at most here). From step 1 on, the runs' parameters differ by
// AdamW's amplification of near-zero gradients (the final parameters' floor in compare), and the extreme element
// of a gradient moves with them: on an H200 (2026-11-28) c_attn's grad_output amax of step 2 was 12.7% above the
// CPU run's. So each later step s is replayed on the CPU from the GPU's own parameters and scaling state after
// s - 1 (Resume): the same inputs again, the per-op budget again. An amax of the wrong tensor, or taken after
// scaling, is off by far more. The loss of step s > 0 likewise: the GPU's against the CPU FP32 run replayed from the
// same parameters, within twice the CPU FP8 replay's error (its largest so far). Against the unreplayed runs it moves
// by the parameters' AdamW floor: with two micro-batches under current scaling, step 1's loss was 3.7e-4 from FP32's
// on the GPU and 5.1e-5 on the CPU, while from the GPU's own parameters both devices were within 2e-5 of FP32.
void fp8_run(const std::string& precision, int64_t accum = 1) {
  const Trace fp32 = train(Device::cpu(), TrainRun{.accum = accum});
  const TrainRun run{.precision = precision, .accum = accum};
  const Trace gpu = train(Device::cuda(0), run), cpu = train(Device::cpu(), run);
  compare(gpu, cpu, {.fp32 = &fp32, .loss_steps = 1}, precision);
  ASSERT_FALSE(cpu.fp8_state.empty()) << precision;
  ASSERT_EQ(gpu.fp8_states.size(), static_cast<size_t>(run.steps)) << precision;
  const Budget losses{};
  double e_cpu_scale = std::abs(cpu.losses[0] - fp32.losses[0]) / std::abs(fp32.losses[0]);
  for (int s = 0; s < run.steps; ++s) {
    std::map<std::string, Tensor> want = cpu.fp8_states.at(0);
    if (s > 0) {
      const auto before = static_cast<size_t>(s - 1);
      const Resume from{s, gpu.params.at(before), gpu.fp8_states.at(before)};
      TrainRun one = run;
      one.steps = s + 1;
      const Trace replay = train(Device::cpu(), one, &from);
      want = replay.fp8_states.at(0);
      TrainRun one32 = one;
      one32.precision = "fp32";
      const Resume from32{s, gpu.params.at(before), {}};
      const double ref = train(Device::cpu(), one32, &from32).losses.at(0);
      const double e_cpu = std::abs(replay.losses.at(0) - ref) / std::abs(ref);
      const double e_gpu = std::abs(gpu.losses[static_cast<size_t>(s)] - ref) / std::abs(ref);
      e_cpu_scale = std::max(e_cpu_scale, e_cpu);
      EXPECT_LE(e_gpu, losses.of(e_cpu_scale)) << precision << " loss step " << s << " at the GPU's parameters ("
                                               << gpu.losses[static_cast<size_t>(s)] << "; CPU " << replay.losses.at(0)
                                               << ", FP32 " << ref << ")";
    }
    const std::map<std::string, Tensor>& got = gpu.fp8_states.at(static_cast<size_t>(s));
    std::vector<std::string> gk, ck;
    for (const auto& kv : got) gk.push_back(kv.first);
    for (const auto& kv : want) ck.push_back(kv.first);
    ASSERT_EQ(gk, ck) << precision << " step " << s;
    for (const auto& [k, c] : want) {
      testing::expect_match(got.at(k), c, testing::Match::close({0x1p-3, 0}),
                            precision + " step " + std::to_string(s) + " state " + k);
    }
  }
}

TEST(GpuTraining, Fp8DelayedScalingMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-delayed");
}

TEST(GpuTraining, Fp8CurrentScalingMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-current");
}

TEST(GpuTraining, Fp8BlockScalingMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-block");
}

// Two micro-batches: the second's FP8 weight gradients are added into the FP32 ones by cuBLASLt's FP8 GEMMs (beta = 1,
// an FP32 C; fp8::detail::gemm_tn's add_into), per-tensor and block-scaled, which vendor-semantics R4.3 documents and
// only a GPU can confirm.
TEST(GpuTraining, Fp8CurrentScalingAccumulatedMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-current", 2);
}

TEST(GpuTraining, Fp8BlockScalingAccumulatedMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-block", 2);
}

// A BF16 stream under FP8: the norms write BF16 (their FP8 codes need the FP32 stream) and the FP8 layers quantize it.
TEST(GpuTraining, Fp8DelayedScalingWithABf16StreamMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  fp8_run("fp8-delayed+bf16-stream");
}

}  // namespace
}  // namespace mpt
