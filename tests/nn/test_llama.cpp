// tests/nn/test_llama.cpp: nn::Llama against transformers.LlamaForCausalLM goldens (logits, KV-cache generation, names),
// padding, activation checkpointing, bf16 training and configuration errors.
#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <vector>

#include "mpt/data/batching.h"
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

// The configurations of tools/make_llama_goldens.py.
nn::LlamaConfig golden_config(int n, DType dtype) {
  nn::LlamaConfig c;
  c.vocab_size = n == 0 ? 64 : 48;
  c.block_size = 64;
  c.n_layer = n == 0 ? 2 : 1;
  c.n_head = 4;
  c.n_kv_head = n == 0 ? 2 : 1;
  c.n_embd = 32;
  c.intermediate_size = n == 0 ? 64 : 48;
  c.rope_theta = 500.0;
  c.norm_eps = 1e-5;
  c.tie_embeddings = n == 1;
  c.where.dtype = dtype;
  return c;
}

// The case's tensors, "caseN." stripped.
mpt::StateDict golden(int n) {
  const std::string prefix = "case" + std::to_string(n) + ".";
  mpt::StateDict out;
  for (auto& [name, t] : io::load_safetensors(MPT_GOLDENS_DIR "/llama_tiny.safetensors"))
    if (name.starts_with(prefix)) out[name.substr(prefix.size())] = t;
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.contiguous().to_vector<double>(), y = b.contiguous().to_vector<double>();
  EXPECT_EQ(x.size(), y.size());
  double d = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) d = std::max(d, std::fabs(x[i] - y[i]));
  return d;
}

std::unique_ptr<nn::Llama> loaded(int n, DType dtype, mpt::StateDict& g) {
  auto model = std::make_unique<nn::Llama>(golden_config(n, dtype));
  mpt::StateDict weights;
  for (const auto& [name, t] : g)
    if (name != "ids" && !name.starts_with("logits")) weights[name] = t;
  model->load_state_dict(weights, /*strict=*/true);
  return model;
}

TEST(LlamaGolden, NamesAreHuggingFaces) {
  for (int n : {0, 1}) {
    mpt::StateDict g = golden(n);
    std::set<std::string> theirs, ours;
    for (const auto& [name, t] : g)
      if (name != "ids" && !name.starts_with("logits")) theirs.insert(name);
    for (const auto& p : nn::Llama(golden_config(n, DType::F32)).named_parameters()) ours.insert(p.name);
    EXPECT_EQ(ours, theirs) << "case " << n;
  }
}

TEST(LlamaGolden, LogitsMatchTransformersInF32AndF64) {
  for (int n : {0, 1}) {
    mpt::StateDict g = golden(n);
    const Tensor& want = g.at("logits");
    for (DType dt : {DType::F64, DType::F32}) {
      const auto model = loaded(n, dt, g);
      autograd::NoGradGuard no_grad;
      const Tensor logits = model->forward(g.at("ids"));
      ASSERT_EQ(logits.shape(), want.shape());
      // transformers rotates with float32 angles even in float64 (tools/make_llama_goldens.py): FP32 tolerance.
      EXPECT_LE(max_abs_diff(logits, want), dt == DType::F64 ? 2e-6 : 1e-5) << "case " << n << " " << dtype_name(dt);
    }
  }
}

TEST(LlamaGolden, KvCacheGenerationMatchesTransformers) {
  for (int n : {0, 1}) {
    mpt::StateDict g = golden(n);
    const auto model = loaded(n, DType::F32, g);
    const Tensor ids = g.at("ids");
    nn::KvCache cache;
    Tensor last = model->forward_cached(ids.slice(1, 0, 14).contiguous(), cache);
    for (int64_t t = 14; t < 20; ++t) last = model->forward_cached(ids.slice(1, t, t + 1).contiguous(), cache);
    EXPECT_EQ(cache.length, 20);
    ASSERT_EQ(cache.k[0].size(1), n == 0 ? 2 : 1) << "the cache holds the kv heads only";
    EXPECT_LE(max_abs_diff(last, g.at("logits_tail")), 1e-5) << "case " << n;
  }
}

TEST(Llama, PaddedBatchAndCheckpointingGiveTheSameResults) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 40;
  c.block_size = 80;
  nn::Llama model(c);
  const std::vector<std::vector<int32_t>> s = {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, {5, 4, 3}};
  const data::PaddedBatch b = data::pad_batch(s, {.pad_id = 7});
  {
    autograd::NoGradGuard no_grad;
    const Tensor logits = model.forward(b.ids, b.lengths);
    const Tensor alone = model.forward(Tensor::from_vector(std::vector<int64_t>{5, 4, 3}, {1, 3}));
    EXPECT_LE(max_abs_diff(logits.slice(0, 1, 2).slice(1, 0, 3), alone), 1e-5);
  }
  // Activation checkpointing recomputes the blocks: the same gradients, bit for bit on the CPU.
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 7, 3, 3, 8}, {2, 4});
  model.loss(ids, ids).backward();
  std::vector<Tensor> plain;
  for (const Tensor& p : model.parameters()) plain.push_back(p.grad().clone());
  model.zero_grad();
  model.set_activation_checkpointing(true);
  model.loss(ids, ids).backward();
  const auto params = model.parameters();
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(params[i].grad().to_vector<float>(), plain[i].to_vector<float>()) << model.named_parameters()[i].name;
  // Under BF16 Autocast too, backward outside its scope: the recomputation runs under the forward's policy again.
  auto bf16_grads = [&](bool checkpointed) {
    model.zero_grad();
    model.set_activation_checkpointing(checkpointed);
    Tensor loss;
    {
      amp::Autocast autocast(amp::Policy::bf16());
      loss = model.loss(ids, ids);
    }
    loss.backward();
    std::vector<std::vector<float>> g;
    for (const Tensor& p : model.parameters()) g.push_back(p.grad().to_vector<float>());
    return g;
  };
  const auto bf16_plain = bf16_grads(false), bf16_recomputed = bf16_grads(true);
  for (size_t i = 0; i < params.size(); ++i)
    EXPECT_EQ(bf16_recomputed[i], bf16_plain[i]) << "bf16 " << model.named_parameters()[i].name;
}

TEST(Llama, LearnsToCountInBf16) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 32;
  nn::Llama model(c);
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  std::vector<int64_t> x(8 * 32), y(8 * 32);
  for (int64_t i = 0; i < 8 * 32; ++i) x[i] = (i / 32 * 5 + i % 32) % 32, y[i] = (x[i] + 1) % 32;
  const Tensor xs = Tensor::from_vector(x, {8, 32}), ys = Tensor::from_vector(y, {8, 32});
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(amp::Policy::bf16());
      loss = model.loss(xs, ys);
    }
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item<double>();
  }
  EXPECT_NEAR(first, std::log(32.0), 0.3);
  EXPECT_LT(last, 0.2) << "from " << first;
}

TEST(Llama, DescribesItselfAndRejectsBadConfigs) {
  nn::LlamaConfig c = nn::llama_preset("llama-100m");
  c.vocab_size = 32000;
  EXPECT_EQ(c.ffn_size(), 2048);  // 8/3 * 768 = 2048 exactly
  nn::LlamaConfig tiny = nn::llama_preset("llama-tiny");
  tiny.vocab_size = 65;
  const nn::Llama model(tiny);
  EXPECT_EQ(model.describe(), "Llama 2 layers, 4 heads (2 kv), 64 wide, SwiGLU 192, context 64");
  EXPECT_EQ(model.block_path(1), "model.layers.1");
  tiny.n_kv_head = 3;
  EXPECT_TRUE(testing::contains(testing::error_message([&] { nn::Llama bad(tiny); }), "n_kv_head must divide"));
  EXPECT_TRUE(testing::contains(testing::error_message([] { nn::llama_preset("llama-7b"); }), "unknown preset"));
}

}  // namespace
}  // namespace mpt

namespace mpt {
namespace {

// hf_llama_config_json's text parses back to the same shapes; unsupported settings are named.
TEST(HfLlamaConfig, RoundTripsAndRefusesWhatLlamaCannotBe) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 77, c.block_size = 48, c.intermediate_size = 160, c.rope_theta = 5e5, c.norm_eps = 1e-5;
  const nn::LlamaConfig p = nn::parse_hf_llama_config(nn::hf_llama_config_json(c));
  EXPECT_EQ(p.vocab_size, 77);
  EXPECT_EQ(p.block_size, 48);
  EXPECT_EQ(p.n_layer, c.n_layer);
  EXPECT_EQ(p.n_head, c.n_head);
  EXPECT_EQ(p.n_kv_head, c.n_kv_head);
  EXPECT_EQ(p.n_embd, c.n_embd);
  EXPECT_EQ(p.ffn_size(), 160);
  EXPECT_EQ(p.rope_theta, 5e5);
  EXPECT_EQ(p.norm_eps, 1e-5);
  EXPECT_EQ(p.tie_embeddings, c.tie_embeddings);
  const std::string base = nn::hf_llama_config_json(c);
  const auto edited = [&](const char* from, const char* to) {
    std::string s = base;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, std::string(from).size(), to);
  };
  EXPECT_MPT_ERROR(nn::parse_hf_llama_config(edited("\"silu\"", "\"gelu\""), "cfg.json"),
                   "[hf_llama] cfg.json: key \"hidden_act\" is \"gelu\", but nn::Llama has SiLU");
  EXPECT_MPT_ERROR(nn::parse_hf_llama_config(edited("\"vocab_size\"", "\"vocab\""), "cfg.json"),
                   "[hf_llama] cfg.json: missing key \"vocab_size\"");
  EXPECT_MPT_ERROR(nn::parse_hf_llama_config(edited("\"num_hidden_layers\": 2", "\"num_hidden_layers\": -2"), "cfg.json"),
                   "key \"num_hidden_layers\": expected a positive integer, got -2");
  EXPECT_MPT_ERROR(nn::parse_hf_llama_config(edited("\"head_dim\": 16", "\"head_dim\": 32"), "cfg.json"),
                   "key \"head_dim\" is 32");
  EXPECT_MPT_ERROR(nn::parse_hf_llama_config("[1]", "cfg.json"), "expected a JSON object");
}

}  // namespace
}  // namespace mpt

namespace mpt {
namespace {

// Under BF16 Autocast the MLP's gate and up run as one GEMM over their packed BF16 copies (each master's cached copy is
// a view of its rows): the same output as the two projections and swiglu run apart, within BF16's rounding, and the
// gradient of a norm's BF16 output of the FP32 stream in FP32 (the one input-gradient GEMM's, unrounded).
TEST(Llama, GateAndUpRunAsOneGemmUnderBf16Autocast) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 32;
  nn::Llama model(c);
  const nn::LlamaMLP& mlp = model.block(0).mlp();
  // x: the norm's BF16 cast of the FP32 stream (a recorded cast of an FP32 leaf here).
  const Tensor leaf = testing::random_tensor({2, 5, c.n_embd}, DType::BF16, 3).to(DType::F32).requires_grad_();
  const Tensor x = leaf.to(DType::BF16);
  const Tensor dy = testing::random_tensor({2, 5, c.n_embd}, DType::BF16, 4);
  amp::invalidate_compute_copies();
  Tensor y;
  {
    amp::Autocast autocast(amp::Policy::bf16());
    y = mlp.forward(x, /*f32_grad=*/true);
  }
  y.backward(dy);
  ASSERT_EQ(leaf.grad().dtype(), DType::F32);
  {
    autograd::NoGradGuard no_grad;
    const Tensor g = amp::compute_copy(mlp.gate_proj().weight(), DType::BF16);
    const Tensor u = amp::compute_copy(mlp.up_proj().weight(), DType::BF16);
    EXPECT_TRUE(g.shares_storage(u));
    EXPECT_EQ(static_cast<const char*>(u.data_ptr()) - static_cast<const char*>(g.data_ptr()),
              static_cast<std::ptrdiff_t>(g.numel() * 2));
  }
  // Apart: each projection on its own BF16 copy, swiglu, down_proj; x's gradient the sum of two BF16 ones.
  const Tensor xa = x.detach().requires_grad_();
  const auto proj = [&](const nn::Linear& l, const Tensor& in) {
    const Tensor w = l.weight().detach().to(DType::BF16);
    return ops::linear(in.reshape({-1, in.size(-1)}), w).reshape({2, 5, w.size(0)});
  };
  const Tensor ya = proj(mlp.down_proj(), ops::swiglu(proj(mlp.gate_proj(), xa), proj(mlp.up_proj(), xa)));
  ya.backward(dy);
  // Both round the same FP32 products to BF16 at most a few times (relative 2^-8 each) on values of this scale.
  const auto scale = [](const Tensor& t) {
    double m = 0;
    for (double v : t.to_vector<double>()) m = std::max(m, std::fabs(v));
    return m;
  };
  EXPECT_LE(max_abs_diff(y, ya), 4 * std::ldexp(scale(ya), -8));
  EXPECT_LE(max_abs_diff(leaf.grad(), xa.grad()), 4 * std::ldexp(scale(xa.grad()), -8));
  amp::invalidate_compute_copies();
}

// A Llama's q, k and v likewise run as one GEMM under BF16 Autocast (their copies are rows of one packed weight), and
// its loss and gradients stay within BF16's reach of the FP32 model's.
TEST(Llama, QkvRunAsOneGemmUnderBf16Autocast) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 32;
  nn::Llama model(c);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 5, 9, 2, 7, 3, 3, 8, 11, 30, 2, 0}, {2, 6});
  model.loss(ids, ids).backward();
  std::vector<Tensor> f32_grads;
  for (const Tensor& p : model.parameters()) f32_grads.push_back(p.grad().clone());
  model.zero_grad();
  amp::invalidate_compute_copies();
  {
    amp::Autocast autocast(amp::Policy::bf16());
    model.loss(ids, ids).backward();
  }
  {
    autograd::NoGradGuard no_grad;
    const nn::LlamaAttention& a = model.block(1).self_attn();
    const Tensor q = amp::compute_copy(a.q_proj().weight(), DType::BF16);
    EXPECT_TRUE(q.shares_storage(amp::compute_copy(a.k_proj().weight(), DType::BF16)));
    EXPECT_TRUE(q.shares_storage(amp::compute_copy(a.v_proj().weight(), DType::BF16)));
  }
  const auto params = model.named_parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    double scale = 0;
    for (double v : f32_grads[i].to_vector<double>()) scale = std::max(scale, std::fabs(v));
    // BF16 operands and activations: a few relative 2^-8 roundings compounded through the blocks.
    EXPECT_LE(max_abs_diff(params[i].tensor.grad(), f32_grads[i]), 0.1 * scale) << params[i].name;
  }
  amp::invalidate_compute_copies();
}

}  // namespace
}  // namespace mpt
