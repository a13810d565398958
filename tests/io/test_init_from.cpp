// tests/io/test_init_from.cpp: train::init_from (weights from Hugging Face directories and checkpoints), config.json
// token ids, and checkpoints of a model known only through nn::Exportable.
#include <gtest/gtest.h>

#include "checkpoint_test_util.h"
#include "mpt/train/init_from.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::testing;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {


// Every parameter and buffer of `a` and `b`, bit for bit.
void expect_same_state(const nn::Module& a, const nn::Module& b) {
  EXPECT_EQ(bytes_of(a.state_dict()), bytes_of(b.state_dict()));
}

}  // namespace

TEST(HfConfig, TokenIdsAreNullUnlessTheVocabularyHasThem) {
  const json small = json::parse(nn::hf_gpt2_config_json(tiny_gpt_config(1, 65)));
  EXPECT_TRUE(small.at("bos_token_id").is_null());
  EXPECT_TRUE(small.at("eos_token_id").is_null());
  const json gpt2 = json::parse(nn::hf_gpt2_config_json(tiny_gpt_config(1, 50257)));
  EXPECT_EQ(gpt2.at("bos_token_id"), 50256);
  EXPECT_EQ(gpt2.at("eos_token_id"), 50256);
  // Parsing accepts both, and a config of the hub's with numbers.
  EXPECT_EQ(nn::parse_hf_gpt2_config(small.dump()).vocab_size, 65);
  EXPECT_EQ(nn::parse_hf_gpt2_config(gpt2.dump()).vocab_size, 50257);

  nn::LlamaConfig tiny = tiny_llama_config(1);
  tiny.vocab_size = 2;  // LlamaConfig's defaults: bos 1, eos 2
  const json llama_small = json::parse(nn::hf_llama_config_json(tiny));
  EXPECT_EQ(llama_small.at("bos_token_id"), 1);
  EXPECT_TRUE(llama_small.at("eos_token_id").is_null());
  const json llama = json::parse(nn::hf_llama_config_json(tiny_llama_config(1)));
  EXPECT_EQ(llama.at("bos_token_id"), 1);
  EXPECT_EQ(llama.at("eos_token_id"), 2);
}

TEST(InitFrom, HuggingFaceGpt2DirectoryLoadsBitExactly) {
  TempDir dir;
  const nn::GPT source(tiny_gpt_config(1));
  nn::save_hf_gpt2(dir.path(), source);
  nn::GPT target(tiny_gpt_config(2));
  ASSERT_NE(bytes_of(source.state_dict()), bytes_of(target.state_dict()));
  train::init_from(target, dir.path());
  expect_same_state(source, target);
}

TEST(InitFrom, HuggingFaceLlamaDirectoryLoadsBitExactly) {
  TempDir dir;
  const nn::Llama source(tiny_llama_config(1));
  io::save_safetensors(dir / "model.safetensors", source.export_state_dict(), {{"format", "pt"}});
  write_bytes(dir / "config.json", source.export_config_json());
  nn::Llama target(tiny_llama_config(2));
  ASSERT_NE(bytes_of(source.state_dict()), bytes_of(target.state_dict()));
  train::init_from(target, dir.path());
  expect_same_state(source, target);
}

TEST(InitFrom, CheckpointGivesTheWeightsOnly) {
  TempDir dir;
  nn::GPT source(tiny_gpt_config(1));
  optim::AdamW opt(source.parameters());
  train::TrainingState s{.model = &source, .optimizer = &opt, .step = 7, .precision = "bf16"};
  const fs::path step = train::save_checkpoint(dir.path(), s);
  for (const fs::path& from : {dir.path(), step}) {  // a save directory (its latest) or one checkpoint
    nn::GPT target(tiny_gpt_config(2));
    train::init_from(target, from);
    expect_same_state(source, target);
  }
  // A module saved by its state-dict names loads into a module of the same names.
  TempDir by_name;
  nn::Linear a(4, 3);
  Generator other(5);
  nn::Linear b(4, 3, true, {}, other);
  train::TrainingState sa{.model = &a};
  train::save_checkpoint(by_name.path(), sa);
  train::init_from(b, by_name.path());
  expect_same_state(a, b);
}

TEST(InitFrom, LlamaCheckpointLoads) {
  TempDir dir;
  nn::Llama source(tiny_llama_config(1));
  train::TrainingState s{.model = &source};
  train::save_checkpoint(dir.path(), s);
  nn::Llama target(tiny_llama_config(2));
  train::init_from(target, dir.path());
  expect_same_state(source, target);
}

TEST(InitFrom, AnotherShapeIsRefusedNamingTheTensorAndBothShapes) {
  TempDir dir;
  nn::save_hf_gpt2(dir.path(), nn::GPT(tiny_gpt_config(1)));
  nn::GPT bigger_vocab(tiny_gpt_config(2, 20));
  const auto before = bytes_of(bigger_vocab.state_dict());
  EXPECT_MPT_ERROR(train::init_from(bigger_vocab, dir.path()),
                        fmt::format("[init_from] transformer.wte.weight: the model has [20, 16], {} has [16, 16]",
                                    dir.path().string()));
  EXPECT_EQ(bytes_of(bigger_vocab.state_dict()), before) << "nothing is copied when a check fails";
  // Conv1D weights are compared in the file's layout, [in, out].
  nn::GPT wider(tiny_gpt_config(2, 16, 32));
  EXPECT_MPT_ERROR(train::init_from(wider, dir.path()),
                        fmt::format("[init_from] transformer.h.0.attn.c_attn.bias: the model has [96], {} has [48]",
                                    dir.path().string()));
  // And from a checkpoint.
  TempDir ckpt;
  nn::GPT small(tiny_gpt_config(1));
  train::TrainingState s{.model = &small};
  train::save_checkpoint(ckpt.path(), s);
  EXPECT_MPT_ERROR(train::init_from(bigger_vocab, ckpt.path()), "transformer.wte.weight: the model has [20, 16]");
}

TEST(InitFrom, AnotherModelTypeOrNoModelIsRefused) {
  TempDir dir;
  nn::save_hf_gpt2(dir.path(), nn::GPT(tiny_gpt_config(1)));
  nn::Llama llama(tiny_llama_config(1));
  EXPECT_MPT_ERROR(train::init_from(llama, dir.path()),
                        "holds a \"gpt2\" model, but the model is an nn::Llama (\"llama\")");
  nn::Linear linear(4, 3);
  EXPECT_MPT_ERROR(train::init_from(linear, dir.path()), "but the model is an nn::Linear (\"module\")");

  TempDir empty;
  nn::GPT gpt(tiny_gpt_config(1));
  EXPECT_MPT_ERROR(train::init_from(gpt, empty.path()),
                        "holds no model: expected a Hugging Face model directory (config.json and model.safetensors; "
                        "neither is there) or a checkpoint (state.json");
  write_bytes(empty / "config.json", "{}");
  EXPECT_MPT_ERROR(train::init_from(gpt, empty.path()), "no model.safetensors");
  EXPECT_MPT_ERROR(train::init_from(gpt, empty / "nope"), "is not a directory: expected a Hugging Face model");
  fs::copy_file(dir / "model.safetensors", empty / "model.safetensors");
  EXPECT_MPT_ERROR(train::init_from(gpt, empty.path()), "no \"model_type\" string");
}

namespace {

// A model the checkpoint code knows only through nn::Exportable: its published layout renames "weight" to "w" and
// stores it transposed.
class Toy : public nn::Module, public nn::Exportable {
 public:
  Toy(int64_t width, float fill) : Module("Toy") {
    w_ = &register_parameter("weight", Tensor::full({width, 2}, fill, DType::F32));
  }
  std::string model_type() const override { return "toy"; }
  std::string config_json() const override { return json{{"width", w_->size(0)}}.dump(); }
  std::optional<nn::ConfigDifference> config_difference(std::string_view saved) const override {
    const json theirs = json::parse(saved);
    if (theirs.value("width", int64_t{-1}) == w_->size(0)) return std::nullopt;
    return nn::ConfigDifference{"width", theirs.value("width", json()).dump(), std::to_string(w_->size(0))};
  }
  std::string export_config_json() const override { return R"({"model_type": "toy"})"; }
  StateDict export_state_dict() const override { return {{"w", w_->detach().t().contiguous()}}; }
  StateDict import_state_dict(const StateDict& tensors, const std::string& where) const override {
    MPT_CHECK(tensors.count("w") == 1 && tensors.at("w").shape() == Shape({2, w_->size(0)}), "[toy] {}: bad w", where);
    return {{"weight", tensors.at("w").t().contiguous()}};
  }

 private:
  Tensor* w_;
};

}  // namespace

TEST(CheckpointExportable, AnyModelThatDescribesItselfIsSavedInItsLayout) {
  TempDir dir;
  Toy a(3, 1.5f);
  a.parameters()[0].detach().copy_(Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2}));
  train::TrainingState sa{.model = &a};
  const fs::path step = train::save_checkpoint(dir.path(), sa);
  const json state = json::parse(read_bytes(step / "state.json"));
  EXPECT_EQ(state.at("model").at("type"), "toy");
  EXPECT_EQ(state.at("model").at("config"), json({{"width", 3}}));
  EXPECT_EQ(read_bytes(step / "config.json"), R"({"model_type": "toy"})");
  EXPECT_EQ(io::load_safetensors(step / "model.safetensors").at("w").shape(), Shape({2, 3}));
  EXPECT_EQ(train::read_checkpoint_info(dir.path()).model_type, "toy");

  Toy b(3, 0.0f);
  train::TrainingState sb{.model = &b};
  train::load_checkpoint(dir.path(), sb);
  expect_same_state(a, b);
  Toy c(3, 0.0f);
  train::init_from(c, dir.path());
  expect_same_state(a, c);

  Toy wide(4, 0.0f);
  train::TrainingState sw{.model = &wide};
  EXPECT_MPT_ERROR(train::load_checkpoint(dir.path(), sw),
                        "key \"model.config.width\": the checkpoint's Toy has 3, this run's 4");
  nn::GPT gpt(tiny_gpt_config(1));
  train::TrainingState sg{.model = &gpt};
  EXPECT_MPT_ERROR(train::load_checkpoint(dir.path(), sg),
                        "key \"model.type\": the checkpoint holds a \"toy\", this run's model is an nn::GPT "
                        "(\"gpt2\")");
}
