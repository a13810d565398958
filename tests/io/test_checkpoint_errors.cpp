// tests/io/test_checkpoint_errors.cpp: damaged, edited and mismatched checkpoints are refused, naming file and key.
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;

namespace {

class CheckpointErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    saved_.train(2);
    ckpt_ = train::save_checkpoint(dir_.path(), saved_.state());
  }
  // The message of loading the checkpoint into `run` (a fresh fp8-delayed TinyRun by default).
  std::string load_error(TinyRun* run = nullptr) {
    TinyRun fresh("fp8-delayed", 3);
    TinyRun& target = run != nullptr ? *run : fresh;
    return error_message([&] { target.load(dir_.path()); });
  }
  void expect_load_error(const std::string& expected, TinyRun* run = nullptr) {
    const std::string msg = load_error(run);
    EXPECT_NE(msg.find(expected), std::string::npos) << msg;
  }

  TempDir dir_;
  TinyRun saved_{"fp8-delayed"};
  fs::path ckpt_;
};

TEST_F(CheckpointErrors, DamagedTensorFileIsNamed) {
  std::string bytes = read_bytes(ckpt_ / "model.safetensors");
  bytes[bytes.size() / 2] ^= 0x10;
  write_bytes(ckpt_ / "model.safetensors", bytes);
  TinyRun fresh("fp8-delayed", 3);
  const auto before = bytes_of(fresh.model.state_dict());
  expect_load_error("model.safetensors: checksum mismatch: state.json records", &fresh);
  EXPECT_EQ(bytes_of(fresh.model.state_dict()), before) << "nothing may change before every check passed";
}

TEST_F(CheckpointErrors, TruncatedOrMissingFilesAreNamed) {
  const std::string bytes = read_bytes(ckpt_ / "optimizer.safetensors");
  write_bytes(ckpt_ / "optimizer.safetensors", bytes.substr(0, bytes.size() - 1));
  expect_load_error("optimizer.safetensors: checksum mismatch");
  fs::remove(ckpt_ / "optimizer.safetensors");
  expect_load_error("optimizer.safetensors: missing (state.json lists it with");
  fs::remove(ckpt_ / "state.json");
  expect_load_error("holds no state.json");
}

TEST_F(CheckpointErrors, EditedStateJsonFailsItsChecksum) {
  std::string text = read_bytes(ckpt_ / "state.json");
  text.replace(text.find("\"step\": 2"), 9, "\"step\": 3");
  write_bytes(ckpt_ / "state.json", text);
  expect_load_error("state.json: checksum mismatch (stored");
}

TEST_F(CheckpointErrors, NewerFormatIsRefusedFirst) {
  std::string text = read_bytes(ckpt_ / "state.json");
  text.replace(text.find("\"format_version\": 1"), 19, "\"format_version\": 2");  // checksum now wrong too
  write_bytes(ckpt_ / "state.json", text);
  expect_load_error("format_version 2 was written by a newer mptrain; this build reads format_version 1 and older");
}

TEST_F(CheckpointErrors, FieldsOfTheWrongTypeOrSizeAreNamed) {
  const std::string original = read_bytes(ckpt_ / "state.json");
  auto expect_edit = [&](const std::string& expected, auto&& edit) {
    write_bytes(ckpt_ / "state.json", original);
    edit_state_json(ckpt_, edit);
    expect_load_error(expected);
  };
  expect_edit("key \"step\": expected an integer in [0, ", [](auto& j) { j["step"] = "two"; });
  expect_edit("key \"step\": expected an integer in [0, ", [](auto& j) { j["step"] = -1; });
  expect_edit("missing key \"rng.dropout.offset\"", [](auto& j) { j["rng"]["dropout"].erase("offset"); });
  expect_edit("key \"world.rank\": expected an integer in [0, 0]", [](auto& j) { j["world"]["rank"] = 1; });
  // Any number of ranks loads a checkpoint (re-sharding), but only rank 0 writes one, and shards come all or none.
  expect_edit("key \"world.rank\": written by rank 1, expected 0", [](auto& j) {
    j["world"]["size"] = 2;
    j["world"]["rank"] = 1;
  });
  expect_edit("key \"files\": 1 of 2 optimizer shards beside optimizer.safetensors: expected all or none",
              [](auto& j) {
                j["world"]["size"] = 2;
                j["files"]["optimizer-rank00000-of-00002.safetensors"] = {{"bytes", 0}, {"xxh3", "0000000000000000"}};
              });
  expect_edit("unexpected file \"optimizer-rank00002-of-00002.safetensors\"", [](auto& j) {
    j["world"]["size"] = 2;
    j["files"]["optimizer-rank00002-of-00002.safetensors"] = {{"bytes", 0}, {"xxh3", "0000000000000000"}};
  });
  expect_edit("micro_step 1: the checkpoint was saved inside a gradient accumulation window",
              [](auto& j) { j["micro_step"] = 1; });
  expect_edit("key \"lr_schedule.step.values\": expected an array of 1 values",
              [](auto& j) { j["lr_schedule"]["step"]["values"] = nlohmann::json::array({1, 2}); });
  expect_edit("key \"fp8.tensors.h.1.mlp.c_fc.input.amax_history.shape\": expected at most 16777216 elements",
              [](auto& j) { j["fp8"]["tensors"]["h.1.mlp.c_fc.input.amax_history"]["shape"] = {100000, 100000}; });
  expect_edit("key \"fp8.tensors.h.1.mlp.c_fc.input.scale.values[0]\": expected a number or \"inf\"",
              [](auto& j) { j["fp8"]["tensors"]["h.1.mlp.c_fc.input.scale"]["values"][0] = "big"; });
  expect_edit("key \"fp8.tensors.h.1.mlp.c_fc.input.scale.dtype\": expected one of",
              [](auto& j) { j["fp8"]["tensors"]["h.1.mlp.c_fc.input.scale"]["dtype"] = "F16"; });
  expect_edit("key \"files\": unexpected file \"../../x\"",
              [](auto& j) { j["files"]["../../x"] = {{"bytes", 1}, {"xxh3", "0000000000000000"}}; });
  expect_edit("key \"files.model.safetensors.xxh3\": expected 16 lower-case hex digits",
              [](auto& j) { j["files"]["model.safetensors"]["xxh3"] = "xyz"; });
  expect_edit("model.safetensors: checksum mismatch: state.json records 1 bytes",
              [](auto& j) { j["files"]["model.safetensors"]["bytes"] = 1; });
  expect_edit("key \"model.type\": expected \"module\" or a model's type (up to 64 lower-case letters, digits, '_' "
              "and '-', such as \"gpt2\"), got \"Mamba 2\"", [](auto& j) { j["model"]["type"] = "Mamba 2"; });
  expect_edit("key \"model.type\": the checkpoint holds a \"mamba\", this run's model is an nn::GPT (\"gpt2\")",
              [](auto& j) { j["model"]["type"] = "mamba"; });
  expect_edit("key \"model.type\": the checkpoint holds a \"llama\", this run's model is an nn::GPT",
              [](auto& j) { j["model"]["type"] = "llama"; });
  write_bytes(ckpt_ / "state.json", "{\"format_version\": 1, \"checksum\": \"");
  expect_load_error("state.json: not valid JSON");
  write_bytes(ckpt_ / "state.json", "[1, 2]");
  expect_load_error("state.json: expected a JSON object, got array");
}

TEST_F(CheckpointErrors, AnotherModelShapePrecisionOrRecipeIsRefused) {
  {
    TinyRun other("bf16", 3);
    expect_load_error("key \"precision\": the checkpoint was trained in \"fp8-delayed\", this run uses \"bf16\"",
                      &other);
  }
  edit_state_json(ckpt_, [](auto& j) { j["model"]["config"]["n_layer"] = 4; });
  expect_load_error("key \"model.config.n_layer\": the checkpoint's GPT has 4, this run's 3");
  edit_state_json(ckpt_, [](auto& j) {
    j["model"]["config"]["n_layer"] = 3;
    j["fp8"]["recipe"]["margin"] = 1;
  });
  expect_load_error("key \"fp8.recipe\" is {\"amax_algo\":\"max\",\"amax_history_len\":8,\"format\":\"hybrid\","
                    "\"kind\":\"delayed\",\"margin\":1}, this run's recipe is");
  edit_state_json(ckpt_, [](auto& j) {
    j["fp8"]["recipe"]["margin"] = 0;
    j["fp8"] = nullptr;
  });
  expect_load_error("key \"fp8\" is null, but this run has FP8 scaling state");
}

TEST_F(CheckpointErrors, WeightsOfAnotherShapeAreNamedByFileAndTensor) {
  nn::GPTConfig wide = TinyRun::config(3);
  wide.n_embd = 64;
  nn::GPT model(wide);
  train::TrainingState s{.model = &model, .precision = "fp8-delayed"};
  const std::string msg = error_message([&] { train::load_checkpoint(dir_.path(), s); });
  EXPECT_NE(msg.find("key \"model.config.n_embd\": the checkpoint's GPT has 32, this run's 64"), std::string::npos)
      << msg;
}
}  // namespace
