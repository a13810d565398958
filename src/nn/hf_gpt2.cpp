// src/nn/hf_gpt2.cpp: GPT <-> Hugging Face GPT-2 names, Conv1D transposes, config.json, and the directory I/O.
#include "mpt/nn/hf_gpt2.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>

#include "io/json_object.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"
#include "mpt/io/safetensors.h"

namespace mpt::nn {
namespace {

using json = nlohmann::json;
constexpr std::string_view kPrefix = "transformer.";
constexpr int64_t kEndOfText = 50256;  // GPT-2's <|endoftext|> token id

// GPT-2's Conv1D layers store W as [in, out]; nn::Linear keeps [out, in].
bool is_conv1d_weight(std::string_view name) {
  for (std::string_view s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (name.ends_with(s)) return true;
  return false;
}

// Every tensor GPT-2 has, by our name, with its shape in our layout: the model's parameters plus, for a model
// without biases, the biases GPT-2 has anyway.
std::map<std::string, Shape> gpt2_names(const nn::GPT& model) {
  std::map<std::string, Shape> out;
  for (const nn::NamedParameter& p : model.named_parameters()) out.emplace(p.name, p.tensor.shape());
  if (!model.config().bias) {
    const int64_t C = model.config().n_embd;
    out.emplace("ln_f.bias", Shape{C});
    for (int64_t i = 0; i < model.config().n_layer; ++i) {
      const std::string h = fmt::format("h.{}.", i);
      for (const char* ln : {"ln_1.bias", "ln_2.bias", "attn.c_proj.bias", "mlp.c_proj.bias"})
        out.emplace(h + ln, Shape{C});
      out.emplace(h + "attn.c_attn.bias", Shape{3 * C});
      out.emplace(h + "mlp.c_fc.bias", Shape{4 * C});
    }
  }
  return out;
}

Shape file_shape(const std::string& name, const Shape& ours) {
  return is_conv1d_weight(name) ? Shape{ours[1], ours[0]} : ours;
}

bool all_zero(const Tensor& t) {
  for (float v : t.to(Device::cpu(), DType::F32).contiguous().to_vector<float>())
    if (v != 0.0f) return false;
  return true;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const Tensor x = a.to(Device::cpu()).contiguous(), y = b.to(Device::cpu()).contiguous();
  return std::memcmp(x.data_ptr(), y.data_ptr(), x.nbytes()) == 0;
}

std::string read_text_file(const std::filesystem::path& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  MPT_CHECK(in, "[hf_gpt2] cannot open {} '{}'", what, path.string());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

nn::StateDict hf_gpt2_state_dict(const nn::GPT& model) {
  autograd::NoGradGuard no_grad;
  const nn::StateDict params = model.state_dict();
  nn::StateDict out;
  for (const auto& [name, shape] : gpt2_names(model)) {
    const auto it = params.find(name);
    Tensor t = it != params.end() ? it->second.to(Device::cpu(), DType::F32) : Tensor::zeros(shape);
    if (is_conv1d_weight(name)) t = t.t();
    out.emplace(std::string(kPrefix) + name, t.contiguous());
  }
  return out;
}

nn::StateDict from_hf_gpt2_state_dict(const nn::GPT& model, const nn::StateDict& tensors, const std::string& where) {
  const std::map<std::string, Shape> expected = gpt2_names(model);
  std::map<std::string, Tensor> found;  // by our name
  const Tensor* lm_head = nullptr;
  for (const auto& [file_name, t] : tensors) {
    std::string name = file_name.starts_with(kPrefix) ? file_name.substr(kPrefix.size()) : file_name;
    if (name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias")) continue;  // causal-mask buffers
    if (file_name == "lm_head.weight") {
      lm_head = &t;
      continue;
    }
    const auto it = expected.find(name);
    MPT_CHECK(it != expected.end(), "[hf_gpt2] {}: unexpected tensor \"{}\": a GPT-2 with {} layers has no such "
              "weight", where, file_name, model.config().n_layer);
    const Shape want = file_shape(name, it->second);
    MPT_CHECK(t.shape() == want, "[hf_gpt2] {}: tensor \"{}\" has shape {}, expected {} for vocab {}, context {}, "
              "width {}", where, file_name, shape_str(t.shape()), shape_str(want), model.config().vocab_size,
              model.config().block_size, model.config().n_embd);
    MPT_CHECK(found.emplace(name, t).second, "[hf_gpt2] {}: tensor \"{}\" appears twice (with and without the "
              "\"transformer.\" prefix)", where, name);
  }
  for (const auto& [name, shape] : expected)
    MPT_CHECK(found.count(name) == 1, "[hf_gpt2] {}: missing tensor \"{}{}\" (expected shape {})", where, kPrefix,
              name, shape_str(file_shape(name, shape)));
  if (lm_head != nullptr)
    MPT_CHECK(bitwise_equal(lm_head->to(DType::F32), found.at("wte.weight").to(DType::F32)),
              "[hf_gpt2] {}: \"lm_head.weight\" differs from \"transformer.wte.weight\": nn::GPT ties the LM head "
              "to the token embedding (GPT-2's tie_word_embeddings)", where);
  nn::StateDict ours;
  std::set<std::string> params;
  for (const nn::NamedParameter& p : model.named_parameters()) params.insert(p.name);
  for (auto& [name, t] : found) {
    if (params.count(name) == 0) {  // a bias of GPT-2 that this model does not have
      MPT_CHECK(all_zero(t), "[hf_gpt2] {}: tensor \"{}{}\" is not zero, but this GPT has no biases (config.bias "
                "false)", where, kPrefix, name);
      continue;
    }
    ours.emplace(name, is_conv1d_weight(name) ? t.t().contiguous() : t);
  }
  return ours;
}

void load_hf_gpt2_state_dict(nn::GPT& model, const nn::StateDict& tensors, const std::string& where) {
  autograd::NoGradGuard no_grad;
  model.load_state_dict(from_hf_gpt2_state_dict(model, tensors, where), /*strict=*/true);
}

std::string hf_gpt2_config_json(const nn::GPTConfig& c) {
  // GPT-2's <|endoftext|>, and transformers' default when the keys are absent: null for a vocabulary without it.
  const json end_of_text = c.vocab_size > kEndOfText ? json(kEndOfText) : json(nullptr);
  const json j = {
      {"architectures", {"GPT2LMHeadModel"}},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab_size},
      {"n_positions", c.block_size},
      {"n_ctx", c.block_size},
      {"n_embd", c.n_embd},
      {"n_layer", c.n_layer},
      {"n_head", c.n_head},
      {"n_inner", nullptr},
      {"activation_function", "gelu_new"},
      {"resid_pdrop", c.dropout},
      {"embd_pdrop", c.dropout},
      {"attn_pdrop", 0.0},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"scale_attn_weights", true},
      {"scale_attn_by_inverse_layer_idx", false},
      {"reorder_and_upcast_attn", false},
      {"tie_word_embeddings", true},
      {"use_cache", true},
      {"torch_dtype", "float32"},
      {"bos_token_id", end_of_text},
      {"eos_token_id", end_of_text},
  };
  return j.dump(2) + "\n";
}

nn::GPTConfig parse_hf_gpt2_config(std::string_view text, const std::string& where) {
  const json j = io::detail::parse_json_object(text, "hf_gpt2", where);
  auto integer = [&](const char* key, std::optional<int64_t> fallback = std::nullopt) {
    return io::detail::positive_integer(j, key, "hf_gpt2", where, fallback);
  };
  auto require = [&](const char* key, const json& want, const char* why) {
    const auto it = j.find(key);
    if (it == j.end() || it->is_null()) return;
    const bool same = want.is_number() && it->is_number() ? std::abs(it->get<double>() - want.get<double>()) < 1e-12
                                                          : *it == want;
    MPT_CHECK(same, "[hf_gpt2] {}: key \"{}\" is {}, but nn::GPT supports only {} ({})", where, key, it->dump(),
              want.dump(), why);
  };
  if (const auto it = j.find("model_type"); it != j.end())
    MPT_CHECK(*it == "gpt2", "[hf_gpt2] {}: key \"model_type\" is {}, expected \"gpt2\"", where, it->dump());
  const auto act = j.find("activation_function");
  MPT_CHECK(act == j.end() || *act == "gelu_new" || *act == "gelu_pytorch_tanh", "[hf_gpt2] {}: key "
            "\"activation_function\" is {}, but nn::GPT uses the tanh GELU (\"gelu_new\")", where,
            act == j.end() ? "" : act->dump());
  require("layer_norm_epsilon", 1e-5, "its LayerNorm epsilon");
  require("scale_attn_weights", true, "attention scaled by 1/sqrt(head size)");
  require("scale_attn_by_inverse_layer_idx", false, "no per-layer attention scaling");
  require("tie_word_embeddings", true, "an LM head tied to wte");
  nn::GPTConfig c;
  c.vocab_size = integer("vocab_size");
  c.block_size = integer("n_positions");
  c.n_layer = integer("n_layer");
  c.n_head = integer("n_head");
  c.n_embd = integer("n_embd");
  require("n_inner", 4 * c.n_embd, "an MLP 4 x n_embd wide");
  if (const auto it = j.find("resid_pdrop"); it != j.end() && it->is_number()) c.dropout = it->get<double>();
  MPT_CHECK(c.n_embd % c.n_head == 0, "[hf_gpt2] {}: n_embd {} is not a multiple of n_head {}", where, c.n_embd,
            c.n_head);
  return c;
}

void save_hf_gpt2(const std::filesystem::path& dir, const nn::GPT& model) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MPT_CHECK(!ec, "[hf_gpt2] cannot create the directory '{}': {}", dir.string(), ec.message());
  io::save_safetensors(dir / "model.safetensors", hf_gpt2_state_dict(model), {{"format", "pt"}});
  const std::filesystem::path config = dir / "config.json";
  const std::filesystem::path tmp = dir / "config.json.tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << hf_gpt2_config_json(model.config());
    out.flush();
    MPT_CHECK(out, "[hf_gpt2] cannot write '{}'", tmp.string());
  }
  std::filesystem::rename(tmp, config, ec);
  MPT_CHECK(!ec, "[hf_gpt2] cannot rename '{}' to '{}': {}", tmp.string(), config.string(), ec.message());
}

std::unique_ptr<nn::GPT> load_hf_gpt2(const std::filesystem::path& dir, nn::Placement where) {
  const std::filesystem::path config_path = dir / "config.json";
  nn::GPTConfig config = parse_hf_gpt2_config(read_text_file(config_path, "the config"), config_path.string());
  config.where = where;
  auto model = std::make_unique<nn::GPT>(config);
  const std::filesystem::path weights = dir / "model.safetensors";
  load_hf_gpt2_state_dict(*model, io::load_safetensors(weights), weights.string());
  return model;
}

// ---- GPT as an Exportable ----

std::string GPT::config_json() const {
  const GPTConfig& c = config_;
  const json j = {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
                  {"n_head", c.n_head},         {"n_embd", c.n_embd},         {"dropout", c.dropout},
                  {"bias", c.bias},             {"init_seed", c.seed}};
  return j.dump();
}

std::optional<ConfigDifference> GPT::config_difference(std::string_view saved) const {
  const json theirs = json::parse(saved, nullptr, /*allow_exceptions=*/false);
  const json ours = json::parse(config_json());
  for (const char* k : {"vocab_size", "block_size", "n_layer", "n_head", "n_embd", "bias"}) {
    const bool has = theirs.is_object() && theirs.contains(k);
    if (!has || theirs.at(k) != ours.at(k))
      return ConfigDifference{k, has ? theirs.at(k).dump() : "none", ours.at(k).dump()};
  }
  return std::nullopt;
}

std::string GPT::export_config_json() const { return hf_gpt2_config_json(config_); }
StateDict GPT::export_state_dict() const { return hf_gpt2_state_dict(*this); }
StateDict GPT::import_state_dict(const StateDict& tensors, const std::string& where) const {
  return from_hf_gpt2_state_dict(*this, tensors, where);
}

}  // namespace mpt::nn
