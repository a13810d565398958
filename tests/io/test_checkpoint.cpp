// tests/io/test_checkpoint.cpp: training-state checkpoints: bit-exact resume in process, layout, keep-K, `latest`.
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;

namespace {

// Train 6 steps straight, and 3 + save + load into a differently initialised run + 3: identical losses, weights,
// optimizer state, scaler, schedule and FP8 state.
void expect_bit_exact_resume(const std::string& precision, double init_scale = 65536) {
  TempDir dir;
  TinyRun straight(precision, 1, init_scale);
  straight.train(6);

  TinyRun first(precision, 1, init_scale);
  first.train(3);
  train::save_checkpoint(dir.path(), first.state());
  TinyRun second(precision, 99, init_scale);  // other weights and data until the load replaces them
  const train::CheckpointInfo info = second.load(dir.path());
  EXPECT_EQ(info.step, 3);
  EXPECT_EQ(info.path, dir.path() / "step-00000003");
  second.losses = first.losses;
  second.skipped = first.skipped;
  second.train(3);

  EXPECT_TRUE(same_bits(straight.losses, second.losses)) << precision;
  EXPECT_EQ(bytes_of(straight.model.state_dict()), bytes_of(second.model.state_dict())) << precision;
  EXPECT_EQ(bytes_of(straight.opt.state_dict()), bytes_of(second.opt.state_dict())) << precision;
  EXPECT_EQ(bytes_of(straight.scaler.state_dict()), bytes_of(second.scaler.state_dict())) << precision;
  EXPECT_EQ(straight.schedule.current_step(), second.schedule.current_step());
  if (straight.policy.fp8_state) {
    EXPECT_EQ(bytes_of(straight.policy.fp8_state->state_dict()), bytes_of(second.policy.fp8_state->state_dict()));
  }
}

}  // namespace

TEST(Checkpoint, ResumesBitExactlyFp32) { expect_bit_exact_resume("fp32"); }
TEST(Checkpoint, ResumesBitExactlyBf16) { expect_bit_exact_resume("bf16"); }
TEST(Checkpoint, ResumesBitExactlyFp8Delayed) { expect_bit_exact_resume("fp8-delayed"); }
TEST(Checkpoint, ResumesBitExactlyFp8Current) { expect_bit_exact_resume("fp8-current"); }

TEST(Checkpoint, ResumesBitExactlyFp16AfterSkippedSteps) {
  // Weight gradients land in FP32 (ops::linear), so only activation gradients can overflow FP16: a scale of 1e7
  // does in the first steps.
  constexpr double kInitScale = 1e7;
  TinyRun probe("fp16", 1, kInitScale);
  probe.train(6);
  ASSERT_GT(probe.skipped, 0) << "init_scale " << kInitScale << " should overflow FP16 in the first steps";
  ASSERT_LT(probe.skipped, 6);
  expect_bit_exact_resume("fp16", kInitScale);
}

TEST(Checkpoint, DirectoryHoldsHuggingFaceWeightsOptimizerAndManifest) {
  TempDir dir;
  TinyRun run("fp8-delayed");
  run.train(2);
  const fs::path ckpt = train::save_checkpoint(dir.path(), run.state());
  EXPECT_EQ(ckpt, dir.path() / "step-00000002");
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"latest", "step-00000002"}));
  EXPECT_EQ(read_bytes(dir / "latest"), "step-00000002\n");
  std::vector<std::string> files;
  for (const auto& e : fs::directory_iterator(ckpt)) files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  EXPECT_EQ(files, (std::vector<std::string>{"config.json", "model.safetensors", "optimizer.safetensors",
                                             "state.json"}));

  const io::SafetensorsFile model(ckpt / "model.safetensors");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  EXPECT_EQ(model.entry("transformer.h.0.attn.c_attn.weight").shape, (Shape{32, 96}));  // Conv1D: [in, out]
  EXPECT_EQ(model.entry("transformer.wte.weight").shape, (Shape{32, 32}));
  EXPECT_FALSE(model.contains("lm_head.weight"));
  const Tensor w = model.tensor("transformer.h.0.mlp.c_fc.weight");
  EXPECT_EQ(bytes_of({{"w", w}}), bytes_of({{"w", run.model.block(0).mlp().c_fc().weight().t().contiguous()}}));
  const io::SafetensorsFile opt(ckpt / "optimizer.safetensors");
  EXPECT_TRUE(opt.contains("h.0.attn.c_attn.weight.exp_avg"));
  EXPECT_EQ(opt.entry("h.0.attn.c_attn.weight.exp_avg").dtype, DType::U8);  // 8-bit moments
  EXPECT_TRUE(opt.contains("h.0.attn.c_attn.weight.exp_avg_absmax"));

  const nlohmann::json j = nlohmann::json::parse(read_bytes(ckpt / "state.json"));
  EXPECT_EQ(j.at("format_version"), 1);
  EXPECT_EQ(j.at("library").at("version"), version());
  EXPECT_EQ(j.at("step"), 2);
  EXPECT_EQ(j.at("micro_step"), 0);
  EXPECT_EQ(j.at("world"), (nlohmann::json{{"size", 1}, {"rank", 0}}));
  EXPECT_EQ(j.at("precision"), "fp8-delayed");
  EXPECT_EQ(j.at("model").at("type"), "gpt2");
  EXPECT_EQ(j.at("model").at("config").at("n_layer"), 3);
  EXPECT_EQ(j.at("rng").at("dropout").at("offset"), default_generator().offset());
  EXPECT_EQ(j.at("lr_schedule").at("step").at("values"), nlohmann::json::array({2}));
  EXPECT_TRUE(j.at("grad_scaler").is_null());  // disabled outside fp16
  EXPECT_EQ(j.at("fp8").at("recipe").at("kind"), "delayed");
  EXPECT_EQ(j.at("fp8").at("metas").size(), 12u);  // the middle block's four linears x (input, weight, grad_output)
  EXPECT_EQ(j.at("fp8").at("tensors").at("h.1.mlp.c_fc.input.amax_history").at("shape"),
            nlohmann::json::array({8}));
  for (const char* f : {"model.safetensors", "optimizer.safetensors", "config.json"})
    EXPECT_EQ(j.at("files").at(f).at("bytes"), fs::file_size(ckpt / f)) << f;
  EXPECT_TRUE(j.at("data").contains("sampler"));
}

TEST(Checkpoint, KeepsTheNewestKAndPointsLatestAtTheNewest) {
  TempDir dir;
  TinyRun run;
  for (int i = 0; i < 5; ++i) {
    run.train(1);
    train::save_checkpoint(dir.path(), run.state(), {.keep = 2});
  }
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"latest", "step-00000004", "step-00000005"}));
  EXPECT_EQ(train::resolve_checkpoint(dir.path()), dir.path() / "step-00000005");
  EXPECT_EQ(train::read_checkpoint_info(dir.path()).step, 5);
}

TEST(Checkpoint, ResavingAStepReplacesItAndLeftoversOfKilledSavesGo) {
  TempDir dir;
  TinyRun run;
  run.train(1);
  train::save_checkpoint(dir.path(), run.state());
  fs::create_directories(dir / ".tmp-step-00000009-12345");
  fs::create_directories(dir / ".trash-step-00000000");
  run.train(1);
  train::TrainingState s = run.state();
  s.step = 1;  // the same step again, with other weights
  train::save_checkpoint(dir.path(), s);
  EXPECT_EQ(dir.listing(), (std::vector<std::string>{"latest", "step-00000001"}));
  TinyRun other("fp32", 5);
  other.load(dir.path());
  EXPECT_EQ(bytes_of(other.model.state_dict()), bytes_of(run.model.state_dict()));
}

TEST(Checkpoint, ResolvesLatestOrTheHighestStep) {
  TempDir dir;
  TinyRun run;
  for (int i = 0; i < 3; ++i) {
    run.train(1);
    train::save_checkpoint(dir.path(), run.state());
  }
  write_bytes(dir / "latest", "step-00000002\n");
  EXPECT_EQ(train::resolve_checkpoint(dir.path()), dir.path() / "step-00000002");
  fs::remove(dir / "latest");
  EXPECT_EQ(train::resolve_checkpoint(dir.path()), dir.path() / "step-00000003");
  write_bytes(dir / "latest", "../../etc\n");
  EXPECT_NE(error_message([&] { train::resolve_checkpoint(dir.path()); })
                .find("expected the name of a step-<number> directory, got \"../../etc\""),
            std::string::npos);
  write_bytes(dir / "latest", "step-00000007\n");
  EXPECT_NE(error_message([&] { train::resolve_checkpoint(dir.path()); })
                .find("names \"step-00000007\", which holds no state.json"),
            std::string::npos);
  TempDir empty;
  EXPECT_NE(error_message([&] { train::resolve_checkpoint(empty.path()); }).find("holds no checkpoint"),
            std::string::npos);
  EXPECT_NE(error_message([&] { train::resolve_checkpoint(empty / "nope"); }).find("is not a directory"),
            std::string::npos);
}

TEST(Checkpoint, AnyModuleIsSavedByItsStateDictNames) {
  TempDir dir;
  Generator other(77);  // b starts with other weights
  nn::Linear a(4, 3), b(4, 3, true, {}, other);
  train::TrainingState sa{.model = &a};
  train::save_checkpoint(dir.path(), sa);
  EXPECT_TRUE(io::SafetensorsFile(dir / "step-00000000/model.safetensors").contains("weight"));
  train::TrainingState sb{.model = &b};
  train::load_checkpoint(dir.path(), sb);
  EXPECT_EQ(bytes_of(a.state_dict()), bytes_of(b.state_dict()));
  nn::Linear c(5, 3);
  train::TrainingState sc{.model = &c};
  EXPECT_NE(error_message([&] { train::load_checkpoint(dir.path(), sc); })
                .find("the model \"weight\" has shape [3, 4], but this run's is [3, 5]"),
            std::string::npos);
}

TEST(Checkpoint, RefusesToSaveInsideAnAccumulationWindow) {
  TempDir dir;
  TinyRun run;
  train::TrainingState s = run.state();
  s.micro_step = 1;
  EXPECT_NE(error_message([&] { train::save_checkpoint(dir.path(), s); }).find("checkpoints are taken at step boundaries"),
            std::string::npos);
  EXPECT_TRUE(dir.listing().empty());
}
