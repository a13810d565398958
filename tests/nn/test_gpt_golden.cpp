// tests/nn/test_gpt_golden.cpp: the tiny GPT-2 and AdamW against PyTorch goldens (tools/make_goldens.py), FP32 and BF16, on the CPU or on MPT_TEST_DEVICE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/amp/policy.h"
#include "mpt/io/safetensors.h"
#include "mpt/mpt.h"
#include "mpt/nn/gpt.h"
#include "mpt/optim/adamw.h"

namespace mpt {
namespace {

// The settings tools/make_goldens.py used (its "config" metadata is checked against them below).
constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.95, kEps = 1e-5, kDecay = 0.1;
constexpr int kSteps = 3;

// The device the model, its inputs and the optimizer live on: MPT_TEST_DEVICE (e.g. "cuda:0"), default the CPU. The
// comparisons copy results back to the CPU; the tolerances are the same on every device.
Device device_under_test() { return testing::test_device(); }

nn::GPTConfig golden_config(DType dtype) {
  nn::GPTConfig c;
  c.where.device = device_under_test();
  c.vocab_size = 65;
  c.block_size = 32;
  c.n_layer = 2;
  c.n_head = 4;
  c.n_embd = 48;
  c.where.dtype = dtype;
  return c;
}

// max |got - want| / max |want| over a tensor: the normwise relative error the generator reports as f64_err.
// (to_vector copies a device tensor to the CPU first.)
double relative_error(const Tensor& got, const Tensor& want) {
  const std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  double num = 0, den = 0;
  for (size_t i = 0; i < w.size(); ++i) num = std::max(num, std::abs(g[i] - w[i])), den = std::max(den, std::abs(w[i]));
  return den > 0 ? num / den : num;
}

class GptGolden : public ::testing::Test {
 public:
  static void SetUpTestSuite() { file_ = new io::SafetensorsFile(MPT_GOLDENS_DIR "/tiny_gpt.safetensors"); }
  static void TearDownTestSuite() { delete file_, file_ = nullptr; }
  // Skips (reported as skipped, with the reason) when MPT_TEST_DEVICE names a device this build cannot use.
  void SetUp() override {
    const std::string reason = testing::device_unusable_reason(device_under_test());
    if (!reason.empty()) GTEST_SKIP() << "MPT_TEST_DEVICE=" << device_under_test().str() << ": " << reason;
  }

  static Tensor golden(const std::string& key) { return file_->tensor(key); }
  // A golden input on the device under test.
  static Tensor golden_input(const std::string& key) { return golden(key).to(device_under_test()); }
  static double torch_error(const std::string& run, const std::string& key) {
    return std::stod(file_->metadata().at("f64_err." + run + "." + key));
  }
  static mpt::StateDict initial_weights_of(const nn::Module& model) {
    mpt::StateDict sd;
    for (const auto& [name, t] : model.state_dict()) sd[name] = golden("init." + name);
    return sd;
  }
  static optim::AdamW make_adamw(const nn::Module& master) {
    return optim::AdamW(optim::weight_decay_groups(master.named_parameters(), kDecay),
                        {.lr = kLr, .betas = {kBeta1, kBeta2}, .eps = kEps});
  }

  // One comparison: the error and the tolerance it must meet.
  struct Check {
    std::string key;
    double error, tolerance;
  };
  static void expect_all(const std::vector<Check>& checks, const char* run) {
    std::vector<Check> sorted = checks;
    std::sort(sorted.begin(), sorted.end(),
              [](const Check& a, const Check& b) { return a.error / a.tolerance > b.error / b.tolerance; });
    std::printf("%s: %zu tensors; worst error/tolerance ratios:\n", run, sorted.size());
    for (size_t i = 0; i < std::min<size_t>(6, sorted.size()); ++i)
      std::printf("  %-34s error %.3e  tolerance %.3e\n", sorted[i].key.c_str(), sorted[i].error, sorted[i].tolerance);
    double worst = 0;
    for (const Check& c : checks) {
      EXPECT_LE(c.error, c.tolerance) << run << ": " << c.key;
      worst = std::max(worst, c.error);
    }
    std::printf("%s: worst relative error %.3e\n", run, worst);
  }

  static io::SafetensorsFile* file_;
};
io::SafetensorsFile* GptGolden::file_ = nullptr;

TEST_F(GptGolden, GeneratorSettingsMatchTheTest) {
  const std::string& config = file_->metadata().at("config");
  for (const char* expected : {"\"n_embd\":48", "\"n_head\":4", "\"n_layer\":2", "\"vocab_size\":65",
                               "\"block_size\":32", "\"betas\":[0.9,0.95]", "\"eps\":1e-05", "\"lr\":0.001",
                               "\"decay\":0.1", "\"gelu\":\"tanh\"", "\"steps\":3"})
    EXPECT_NE(config.find(expected), std::string::npos) << expected << " not in " << config;
}

// FP32: every logit, the loss, every gradient and the weights after each of 3 AdamW steps within 1e-5 of PyTorch's
// float32 values (relative to each tensor's largest magnitude).
TEST_F(GptGolden, Fp32MatchesPyTorchWithin1e5) {
  nn::GPT model(golden_config(DType::F32));
  model.load_state_dict(initial_weights_of(model));
  optim::AdamW opt = make_adamw(model);
  const Tensor ids = golden_input("input.ids"), targets = golden_input("input.targets");
  ASSERT_EQ(model.parameters().front().device(), device_under_test());
  std::vector<Check> checks;
  for (int step = 1; step <= kSteps; ++step) {
    const Tensor logits = model.forward(ids);
    const Tensor loss = nn::cross_entropy(logits, targets);
    const std::string loss_key = "loss.step" + std::to_string(step);
    checks.push_back({loss_key, relative_error(loss, golden(loss_key)), 1e-5});
    if (step == 1) checks.push_back({"logits", relative_error(logits, golden("logits")), 1e-5});
    loss.backward();
    if (step == 1)
      for (const auto& p : model.named_parameters())
        checks.push_back({"grad." + p.name, relative_error(p.tensor.grad(), golden("grad." + p.name)), 1e-5});
    opt.step();
    opt.zero_grad();
    for (const auto& p : model.named_parameters()) {
      const std::string key = "step" + std::to_string(step) + "." + p.name;
      checks.push_back({key, relative_error(p.tensor, golden(key)), 1e-5});
    }
  }
  ASSERT_EQ(checks.size(), 3u + 1u + 3u * 28u + 28u);
  expect_all(checks, "fp32");
}

// BF16 mixed precision as the generator ran it: float32 masters and AdamW, each step's forward and backward on a
// bf16 copy of the masters (rounded to nearest even), the loss from the bf16 logits in float32, bf16 gradients fed
// to the float32 AdamW. The golden float32 values stand in for float64 (they are within 3e-6 of it, f64_err.fp32).
// Tolerance per tensor: 3x PyTorch's own bf16 error against float64 (f64_err.bf16), i.e. mptrain's bf16 run may
// be at most 3 times as far from the exact values as PyTorch's. Weights after step s also get the floor that the
// allowed gradient noise implies: at most 3 f64_err.bf16.grad.P max|grad.P| (the noise admitted for the gradient),
// which moves AdamW's update m / (sqrt(v) + eps) (|du/dg| <= 1 / eps) by at most min(2, noise / eps) per step, i.e.
// s lr min(2, noise / eps) / max|w|. With bf16 noise far above eps = 1e-5 this is the trivial bound (2 s lr)
// for most tensors: elementwise, weights after a bf16 step are not better determined than that (PyTorch's own
// errors there reach 6e-2); the losses, logits and gradients are the informative bf16 checks.
// Three ways to run BF16 with FP32 masters: by hand with a second, BF16 model (`Bf16Run::SecondModel`: PyTorch's
// regime, every activation in BF16), with amp::Autocast (GEMMs in BF16, LayerNorm, residual stream and loss in
// FP32), and with amp::Autocast keeping the residual stream in BF16 (amp::Policy::residual: the golden's regime for the
// stream, the norms computed in FP32 from it).
enum class Bf16Run { SecondModel, Autocast, AutocastBf16Stream };
void run_bf16(Bf16Run run, std::vector<GptGolden::Check>& checks);

TEST_F(GptGolden, Bf16MixedPrecisionWithinDerivedTolerances) {
  std::vector<Check> checks;
  run_bf16(Bf16Run::SecondModel, checks);
  expect_all(checks, "bf16");
}

// Autocast is more accurate than PyTorch's all-BF16 run it is held to (FP32 residual stream and norms), so the same
// tolerances apply.
TEST_F(GptGolden, Bf16AutocastWithinDerivedTolerances) {
  std::vector<Check> checks;
  run_bf16(Bf16Run::Autocast, checks);
  expect_all(checks, "bf16 autocast");
}

// With the stream in BF16 the run is PyTorch's regime (the embeddings' sum and every residual add rounded to BF16),
// so PyTorch's own BF16 error is the measure again.
TEST_F(GptGolden, Bf16StreamAutocastWithinDerivedTolerances) {
  std::vector<Check> checks;
  run_bf16(Bf16Run::AutocastBf16Stream, checks);
  expect_all(checks, "bf16 autocast, bf16 stream");
}

void run_bf16(Bf16Run run, std::vector<GptGolden::Check>& checks) {
  const bool autocast = run != Bf16Run::SecondModel;
  using G = GptGolden;
  nn::GPT master(golden_config(DType::F32)), low(golden_config(DType::BF16));
  master.load_state_dict(G::initial_weights_of(master));
  optim::AdamW opt = G::make_adamw(master);
  const auto master_params = master.named_parameters();
  const auto low_params = low.named_parameters();
  const Tensor ids = G::golden_input("input.ids"), targets = G::golden_input("input.targets");
  ASSERT_EQ(master.parameters().front().device(), device_under_test());
  auto add = [&](const std::string& key, const Tensor& got, double floor = 0) {
    checks.push_back({key, relative_error(got, G::golden(key)), std::max(3 * G::torch_error("bf16", key), floor)});
  };
  for (int step = 1; step <= kSteps; ++step) {
    Tensor logits;
    if (autocast) {
      amp::Policy policy = amp::Policy::bf16();
      if (run == Bf16Run::AutocastBf16Stream) policy.residual_in(DType::BF16);
      amp::Autocast ac(policy);
      logits = master.forward(ids);
    } else {
      low.load_state_dict(master.state_dict());
      logits = low.forward(ids);
    }
    ASSERT_EQ(logits.dtype(), DType::BF16);
    const Tensor loss = nn::cross_entropy(logits, targets);
    add("loss.step" + std::to_string(step), loss);
    if (step == 1) add("logits", logits);
    loss.backward();
    for (size_t i = 0; i < master_params.size(); ++i) {
      const Tensor g = autocast ? master_params[i].tensor.grad() : low_params[i].tensor.grad();
      ASSERT_EQ(g.dtype(), autocast ? DType::F32 : DType::BF16);
      if (step == 1) add("grad." + master_params[i].name, g);
      if (!autocast) master_params[i].tensor.set_grad(g);
    }
    opt.step();
    opt.zero_grad();
    low.zero_grad();
    for (const auto& p : master_params) {
      const std::string key = "step" + std::to_string(step) + "." + p.name;
      const double max_w = ops::amax(G::golden(key)).item<double>();
      const double noise =
          3 * G::torch_error("bf16", "grad." + p.name) * ops::amax(G::golden("grad." + p.name)).item<double>();
      add(key, p.tensor, step * kLr * std::min(2.0, noise / kEps) / max_w);
    }
  }
}

}  // namespace
}  // namespace mpt
