// tests/amp/test_fp8_rule.cpp: the per-shape FP8/BF16 rule: its fit to a calibration, its estimates against values
// worked by hand, the H200's decisions at GPT sizes, calibration files and the policy's use of the rule.
#include <gtest/gtest.h>

#include <fstream>
#include <memory>

#include "io_test_util.h"
#include "mpt/amp/fp8_rule.h"
#include "mpt/amp/policy.h"
#include "mpt/fp8/scaling.h"
#include "test_util.h"

namespace mpt {
namespace {

using amp::Fp8Calibration;
using amp::Fp8GemmRule;
using amp::Fp8RecipeKind;
using amp::Precision;

constexpr Fp8RecipeKind kRecipes[] = {Fp8RecipeKind::Delayed, Fp8RecipeKind::Current, Fp8RecipeKind::Block};

// The model, fitted at the calibration's shape, gives back the layer times measured there.
TEST(Fp8Rule, TheFitGivesBackTheMeasuredLayerTimesAtTheCalibrationShape) {
  const Fp8Calibration c = Fp8Calibration::h200();
  const Fp8GemmRule rule(c, c.tokens);
  for (size_t i = 0; i < 3; ++i) {
    const amp::Fp8LayerEstimate e = rule.estimate(kRecipes[i], c.in, c.out);
    EXPECT_NEAR(e.bf16_ms, c.bf16_layer_ms, 1e-12);
    EXPECT_NEAR(e.fp8_ms, c.fp8_layer_ms[i], 1e-12) << to_string(kRecipes[i]);
  }
}

// Worked by hand from the H200 calibration (docs/fp8.md, "Which layers run FP8"): F = 6 N K M flops; BF16 at
// F / 766.596 TFLOP/s (1.138 ms less the weight cast's 100.66 MB at 1,616 GB/s) plus that cast; fp8-delayed at
// F / 1279.842 TFLOP/s (3 / (1/1411 + 2/1223)) plus 4NK + 4NM + 6KM bytes at 1,096.894 GB/s (436.21 MB in the
// 0.39768 ms the GEMMs leave of 1.042 ms).
TEST(Fp8Rule, EstimatesMatchTheModelWorkedByHand) {
  const Fp8GemmRule rule(Fp8Calibration::h200(), 8192);
  EXPECT_NEAR(rule.rates().bf16_tflops, 766.596, 1e-3);
  EXPECT_NEAR(rule.rates().fp8_tflops[0], 1279.842, 1e-3);
  EXPECT_NEAR(rule.rates().quant_gbps[0], 1096.894, 1e-3);
  EXPECT_NEAR(rule.rates().quant_gbps[1], 1373.282, 1e-3);  // 671.09 MB in 1.133 - 0.64432 ms
  EXPECT_NEAR(rule.rates().quant_gbps[2], 905.566, 1e-3);   // 436.21 MB in 1.256 - 824.63 / 1065 ms
  // GPT-2 124M's c_attn [768 -> 2304]: F = 86.97 GFLOP: BF16 0.11345 + 0.00657; FP8 0.06795 + 111.28 MB -> 0.10145.
  const amp::Fp8LayerEstimate small = rule.estimate(Fp8RecipeKind::Delayed, 768, 2304);
  EXPECT_NEAR(small.bf16_ms, 0.12002, 1e-5);
  EXPECT_NEAR(small.fp8_ms, 0.16941, 1e-5);
  EXPECT_FALSE(small.fp8());
  // GPT 1.3B's c_attn [2048 -> 6144]: F = 618.48 GFLOP: BF16 0.80677 + 0.04671; FP8 0.48324 + 343.93 MB -> 0.31356.
  const amp::Fp8LayerEstimate large = rule.estimate(Fp8RecipeKind::Delayed, 2048, 6144);
  EXPECT_NEAR(large.bf16_ms, 0.85350, 1e-5);
  EXPECT_NEAR(large.fp8_ms, 0.79680, 1e-5);
  EXPECT_TRUE(large.fp8());
}

// What the H200's rule decides at batch 8 x 1024: GPT-2 124M and 350M run every layer in BF16 (end to end their FP8
// steps were 0.85x and 0.86x of BF16 on that GPU); at 1.3B delayed scaling keeps c_attn and the MLP in FP8 and runs
// attn.c_proj [2048 -> 2048] in BF16; block scaling gains nowhere (0.91x measured end to end).
TEST(Fp8Rule, TheH200RuleAtGptSizes) {
  const Fp8GemmRule rule(Fp8Calibration::h200(), 8 * 1024);
  for (const int64_t c : {768, 1024}) {
    for (Fp8RecipeKind r : kRecipes) {
      EXPECT_FALSE(rule.estimate(r, c, 3 * c).fp8()) << c;
      EXPECT_FALSE(rule.estimate(r, c, c).fp8()) << c;
      EXPECT_FALSE(rule.estimate(r, c, 4 * c).fp8()) << c;
      EXPECT_FALSE(rule.estimate(r, 4 * c, c).fp8()) << c;
    }
  }
  EXPECT_TRUE(rule.estimate(Fp8RecipeKind::Delayed, 2048, 6144).fp8());
  EXPECT_FALSE(rule.estimate(Fp8RecipeKind::Delayed, 2048, 2048).fp8());
  EXPECT_TRUE(rule.estimate(Fp8RecipeKind::Delayed, 2048, 8192).fp8());
  EXPECT_TRUE(rule.estimate(Fp8RecipeKind::Delayed, 8192, 2048).fp8());
  EXPECT_FALSE(rule.estimate(Fp8RecipeKind::Current, 2048, 6144).fp8());
  EXPECT_TRUE(rule.estimate(Fp8RecipeKind::Current, 2048, 8192).fp8());
  for (const int64_t k : {2048, 8192}) EXPECT_FALSE(rule.estimate(Fp8RecipeKind::Block, k, 10240 - k).fp8());
  // More tokens per micro-batch amortize the weight's quantization: 124M's MLP still loses at 64k tokens.
  EXPECT_FALSE(Fp8GemmRule(Fp8Calibration::h200(), 65536).estimate(Fp8RecipeKind::Delayed, 768, 3072).fp8());
}

TEST(Fp8Rule, CalibrationFilesRoundTripAndBadOnesSayWhy) {
  const testing::TempDir dir;
  const std::string path = (dir / "h200.json").string();
  Fp8Calibration c = Fp8Calibration::h200();
  c.save(path);
  const Fp8Calibration back = Fp8Calibration::load(path);
  EXPECT_EQ(back.device, c.device);
  EXPECT_EQ(back.tokens, c.tokens);
  EXPECT_EQ(back.in, c.in);
  EXPECT_EQ(back.out, c.out);
  EXPECT_EQ(back.bf16_layer_ms, c.bf16_layer_ms);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(back.fp8_layer_ms[i], c.fp8_layer_ms[i]);
  EXPECT_EQ(back.fp8_fprop_tflops, c.fp8_fprop_tflops);
  EXPECT_EQ(back.fp8_tflops, c.fp8_tflops);
  EXPECT_EQ(back.block_tflops, c.block_tflops);
  EXPECT_EQ(back.elementwise_gbps, c.elementwise_gbps);

  EXPECT_MPT_ERROR(Fp8Calibration::load((dir / "none.json").string()), "cannot open the calibration");
  std::ofstream((dir / "partial.json").string()) << R"({"device": "x", "tokens": 8, "in": 8, "out": 8})";
  EXPECT_MPT_ERROR(Fp8Calibration::load((dir / "partial.json").string()), "bf16_layer_ms");
  c.fp8_layer_ms[1] = -1;
  EXPECT_MPT_ERROR(c.save((dir / "bad.json").string()), "fp8_layer_ms.current must be a positive number");
  c = Fp8Calibration::h200();
  c.fp8_layer_ms[0] = 0.5;  // less than the FP8 GEMMs alone take (0.644 ms)
  EXPECT_MPT_ERROR(amp::Fp8Rates::fit(c), "fp8-delayed layer's 0.5 ms are less than its GEMMs alone");
  EXPECT_MPT_ERROR(Fp8GemmRule(Fp8Calibration::h200(), 0), "tokens per micro-batch must be positive");
}

// The policy asks the rule only for layers the overrides give FP8, and the rule judges CPU layers only when told to.
TEST(Fp8Rule, ThePolicyTurnsFp8LayersTheRuleRejectsToBf16) {
  amp::Policy p = amp::Policy::fp8(4, std::make_shared<fp8::Fp8ScalingState>());
  p.fp8_rule = std::make_shared<const Fp8GemmRule>(Fp8Calibration::h200(), 8192);
  EXPECT_EQ(p.at("h.1.mlp.c_fc", 768, 3072, Device::cpu()), Precision::FP8);  // the CPU: not judged
  EXPECT_TRUE(p.fp8_rule->decisions().empty());
  EXPECT_EQ(p.fp8_rule->report(), "");  // nothing judged: nothing for a program to print
  EXPECT_EQ(amp::fp8_rule_report(p.fp8_rule), "");
  EXPECT_EQ(amp::fp8_rule_report(nullptr), "");
  EXPECT_EQ(amp::fp8_rule_named("all", "", 8192), nullptr);
  EXPECT_MPT_ERROR(amp::fp8_rule_named("some", "", 8192), "unknown FP8 layer choice 'some'");
  EXPECT_EQ(amp::fp8_rule_named("auto", "", 4096)->tokens(), 4096);
  p.fp8_rule = std::make_shared<const Fp8GemmRule>(Fp8Calibration::h200(), 8192, /*on_cpu_too=*/true);
  EXPECT_EQ(p.at("h.1.mlp.c_fc", 768, 3072, Device::cpu()), Precision::BF16);
  EXPECT_EQ(p.at("h.1.mlp.c_fc", 2048, 8192, Device::cpu()), Precision::FP8);
  EXPECT_EQ(p.at("h.1.mlp.c_fc", 2048, 8192, Device::cpu()), Precision::FP8);  // asked again: the recorded decision
  EXPECT_EQ(p.at("h.0.mlp.c_fc", 2048, 8192, Device::cpu()), Precision::BF16);  // the override, not the rule
  EXPECT_EQ(p.at("h.1.mlp.c_fc"), Precision::FP8);                               // the overrides alone
  const std::vector<Fp8GemmRule::Decision> d = p.fp8_rule->decisions();
  ASSERT_EQ(d.size(), 1u);  // one layer, decided twice: the latest shape kept
  EXPECT_EQ(d[0].path, "h.1.mlp.c_fc");
  EXPECT_EQ(d[0].in, 2048);
  EXPECT_TRUE(d[0].estimate.fp8());
  (void)p.at("h.2.attn.c_proj", 2048, 2048, Device::cpu());
  const std::string report = amp::fp8_rule_report(p.fp8_rule);
  EXPECT_EQ(report, p.fp8_rule->report());
  EXPECT_TRUE(testing::contains(report, "8192 tokens per micro-batch): 1 of 2 judged run FP8; ")) << report;
  EXPECT_TRUE(testing::contains(report, "[2048 -> 2048] x1 BF16 (fp8 0.306 ms, bf16 0.28"))
      << report;
  amp::Policy bf16 = amp::Policy::bf16();
  bf16.fp8_rule = p.fp8_rule;
  EXPECT_EQ(bf16.at("x", 2048, 8192, Device::cpu()), Precision::BF16);  // no FP8 to judge
}

}  // namespace
}  // namespace mpt
