// src/nn/llama.cpp: LlamaAttention (GQA, rotary), LlamaMLP (SwiGLU), LlamaBlock and Llama with Hugging Face's names.
#include "mpt/nn/llama.h"

#include "autocast_gemm.h"
#include "recompute.h"
#include "residual_stream.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mpt/autograd/grad_mode.h"
#include "mpt/core/profile.h"
#include "mpt/ops/attention.h"
#include "mpt/ops/fan_out.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/softmax.h"

namespace mpt::nn {

int64_t LlamaConfig::ffn_size() const {
  if (intermediate_size > 0) return intermediate_size;
  const int64_t m = std::max<int64_t>(ffn_multiple_of, 1);
  const int64_t hidden = (8 * n_embd + 2) / 3;  // ceil(8/3 n_embd)
  return (hidden + m - 1) / m * m;
}

LlamaConfig llama_preset(const std::string& name) {
  LlamaConfig c;
  if (name == "llama-tiny") {
    c.block_size = 64, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 64, c.ffn_multiple_of = 32;
  } else if (name == "llama-100m") {
    c.block_size = 1024, c.n_layer = 12, c.n_head = 12, c.n_kv_head = 4, c.n_embd = 768, c.ffn_multiple_of = 256;
  } else {
    MPT_THROW("[Llama] unknown preset '{}': expected llama-tiny or llama-100m", name);
  }
  return c;
}

namespace {

// The bias-free projections `layers` of x [..., C] as one GEMM (detail::autocast_packed_linear): [..., sum of their
// widths], each layer's output in its columns. Undefined when a layer holds quantized weights, a learned weight scale
// or a bias, or the policy runs them apart (FP8, QAT, mixed precisions): the caller runs them one by one.
Tensor packed_projection(const Tensor& x, std::initializer_list<const Linear*> layers, bool f32_grad) {
  std::vector<detail::InputReader> readers;
  for (const Linear* l : layers) {
    if (l->quantized() != nullptr || l->weight_log_scale().defined() || l->bias().defined()) return {};
    readers.push_back({&l->weight(), l->path()});
  }
  const Tensor y = detail::autocast_packed_linear(x.reshape({-1, x.size(-1)}), readers, f32_grad);
  if (!y.defined()) return y;
  Shape shape = x.shape();
  shape.back() = y.size(1);
  return y.reshape(shape);
}

}  // namespace

LlamaAttention::LlamaAttention(const LlamaConfig& c, Generator& gen)
    : Module("LlamaAttention"), n_head_(c.n_head), n_kv_head_(c.n_kv_head), head_dim_(c.head_dim()) {
  q_ = register_module("q_proj", std::make_shared<Linear>(c.n_embd, c.n_head * head_dim_, false, c.where, gen));
  k_ = register_module("k_proj", std::make_shared<Linear>(c.n_embd, c.n_kv_head * head_dim_, false, c.where, gen));
  v_ = register_module("v_proj", std::make_shared<Linear>(c.n_embd, c.n_kv_head * head_dim_, false, c.where, gen));
  o_ = register_module("o_proj", std::make_shared<Linear>(c.n_head * head_dim_, c.n_embd, false, c.where, gen));
}

ops::NormOutput LlamaAttention::input_format(DType x) const {
  return shared_input_format({q_.get(), k_.get(), v_.get()}, x);
}

Tensor LlamaAttention::forward(const Tensor& x, const ops::RopeTable& rope, const Tensor& lengths,
                               bool f32_grad) const {
  MPT_CHECK(x.defined() && x.dim() == 3, "[LlamaAttention] expected x [B, T, C], got {}",
            x.defined() ? x.meta_str() : "undefined");
  const profile::Range range(path().empty() ? type_name() : path());
  const int64_t B = x.size(0), T = x.size(1), D = head_dim_;
  // (B, T, heads, D): rotated in that layout, then viewed (B, heads, T, D): attention reads q and the H_kv heads of k
  // and v in place and writes y (B, T, H, D), which o_proj reads as a view (no head copies; ops/attention.h).
  ops::AttentionOptions options;
  options.lengths = lengths;
  const int64_t H = n_head_, Hkv = n_kv_head_, W = (H + 2 * Hkv) * D;
  if (const Tensor qkv = packed_projection(x, {q_.get(), k_.get(), v_.get()}, f32_grad); qkv.defined()) {
    // q, k and v as one GEMM, rotated (v copied) in one pass into one tensor that attention reads in place; d(qkv)
    // comes back as one tensor through one inverse pass (ops::rope_qkv), so one input-gradient GEMM.
    const ops::QkvRotated r = ops::rope_qkv(qkv.view({B, T, H + 2 * Hkv, D}), rope, H, Hkv);
    return o_->forward(ops::causal_attention_qkv(r.packed.view({B, T, W}), H, Hkv, options).out);
  }
  const std::vector<Tensor> in = f32_grad ? ops::fan_out(x, 3) : std::vector<Tensor>{x, x, x};
  const Tensor q = ops::rope(q_->forward(in[0]).view({B, T, H, D}), rope).transpose(1, 2);
  const Tensor k = ops::rope(k_->forward(in[1]).view({B, T, Hkv, D}), rope).transpose(1, 2);
  const Tensor v = v_->forward(in[2]).view({B, T, Hkv, D}).transpose(1, 2);
  const Tensor y = ops::causal_attention(q, k, v, options).out;  // (B, H, T, D) viewing (B, T, H, D)
  return o_->forward(y.transpose(1, 2).reshape({B, T, H * D}));
}

Tensor LlamaAttention::forward_cached(const Tensor& x, const ops::RopeTable& rope, Tensor& k_cache, Tensor& v_cache,
                                      int64_t pos, int64_t capacity) const {
  const int64_t B = x.size(0), t = x.size(1), D = head_dim_, Hkv = n_kv_head_, G = n_head_ / n_kv_head_;
  MPT_CHECK(pos == 0 || t == 1, "[LlamaAttention] a cached forward takes a prompt at position 0 or one token, got {} "
            "tokens at position {}", t, pos);
  MPT_CHECK(pos + t <= capacity, "[LlamaAttention] positions [{}, {}) exceed the cache's {}", pos, pos + t, capacity);
  const Tensor q = ops::rope(q_->forward(x).view({B, t, n_head_, D}), rope, pos).transpose(1, 2);  // (B, H, t, D)
  const Tensor k = ops::rope(k_->forward(x).view({B, t, Hkv, D}), rope, pos).transpose(1, 2);
  const Tensor v = v_->forward(x).view({B, t, Hkv, D}).transpose(1, 2);
  const Shape shape{B, Hkv, capacity, D};
  const bool fits = k_cache.defined() && v_cache.defined() && k_cache.shape() == shape &&
                    k_cache.dtype() == k.dtype() && k_cache.device() == x.device() && v_cache.shape() == shape &&
                    v_cache.dtype() == k.dtype();
  if (!fits) {  // made at the prompt, in the dtype the keys come out in
    MPT_CHECK(pos == 0, "[LlamaAttention] the cache holds another batch size, dtype or device: start again at 0");
    k_cache = Tensor::empty(shape, k.dtype(), x.device());
    v_cache = Tensor::empty(shape, k.dtype(), x.device());
  }
  k_cache.slice(2, pos, pos + t).copy_(k);
  v_cache.slice(2, pos, pos + t).copy_(v);
  Tensor y;
  if (pos == 0) {
    y = ops::causal_attention(q, k, v).out;  // (B, H, t, D)
  } else {  // one query per head against every cached position: each kv head's group of queries as G rows
    const int64_t L = pos + 1;
    const Tensor kc = k_cache.slice(2, 0, L).reshape({B * Hkv, L, D});
    const Tensor vc = v_cache.slice(2, 0, L).reshape({B * Hkv, L, D});
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const Tensor s = ops::matmul(q.reshape({B * Hkv, G, D}), kc, {.trans_b = true, .alpha = scale});
    y = ops::matmul(ops::softmax(s), vc).reshape({B, n_head_, 1, D});
  }
  return o_->forward(y.transpose(1, 2).reshape({B, t, n_head_ * D}));
}

LlamaMLP::LlamaMLP(const LlamaConfig& c, Generator& gen) : Module("LlamaMLP") {
  const int64_t f = c.ffn_size();
  gate_ = register_module("gate_proj", std::make_shared<Linear>(c.n_embd, f, false, c.where, gen));
  up_ = register_module("up_proj", std::make_shared<Linear>(c.n_embd, f, false, c.where, gen));
  down_ = register_module("down_proj", std::make_shared<Linear>(f, c.n_embd, false, c.where, gen));
}

ops::NormOutput LlamaMLP::input_format(DType x) const { return shared_input_format({gate_.get(), up_.get()}, x); }

Tensor LlamaMLP::forward(const Tensor& x, bool f32_grad) const {
  const profile::Range range(path().empty() ? type_name() : path());
  // gate and up as one GEMM whose output's rows hold gate then up, gated in one pass: one input-gradient GEMM and
  // one tensor of their gradients instead of two and a sum.
  if (const Tensor gu = packed_projection(x, {gate_.get(), up_.get()}, f32_grad); gu.defined())
    return down_->forward(ops::swiglu_packed(gu));
  const std::vector<Tensor> in = f32_grad ? ops::fan_out(x, 2) : std::vector<Tensor>{x, x};
  return down_->forward(ops::swiglu(gate_->forward(in[0]), up_->forward(in[1])));
}

namespace {

// A norm's f16/bf16 output of an f32 stream, or FP8 codes of one: its readers' gradients reach it summed in f32 in
// one pass (ops::fan_out). The codes of a half stream (amp::Policy::residual) get gradients in the stream's dtype,
// which the engine sums.
bool widened_gradient(const Tensor& normed, const Tensor& stream) {
  const DType d = normed.dtype();
  if (d == DType::F8E4M3) return stream.dtype() == DType::F32;
  return (d == DType::BF16 || d == DType::F16) && d != stream.dtype();
}

}  // namespace

LlamaBlock::LlamaBlock(const LlamaConfig& c, Generator& gen) : Module("LlamaBlock") {
  input_norm_ = register_module("input_layernorm", std::make_shared<RMSNorm>(c.n_embd, c.norm_eps, c.where));
  attn_ = register_module("self_attn", std::make_shared<LlamaAttention>(c, gen));
  post_norm_ = register_module("post_attention_layernorm", std::make_shared<RMSNorm>(c.n_embd, c.norm_eps, c.where));
  mlp_ = register_module("mlp", std::make_shared<LlamaMLP>(c, gen));
}

std::pair<Tensor, Tensor> LlamaBlock::forward_pending(const Tensor& x, const Tensor& pending,
                                                      const ops::RopeTable& rope, const Tensor& lengths) const {
  const profile::Range range(path().empty() ? type_name() : path());
  // Each norm writes the cast its readers share (q, k, v; gate, up): under BF16 Autocast one BF16 output instead of
  // three and two casts of an FP32 one; their gradients reach the norm summed in FP32, in one pass (ops::fan_out)
  // instead of a cast each and FP32 additions: the same bits.
  // Under FP8 delayed scaling the norm writes the E4M3 codes its readers share (shared_input_format); their f32
  // gradients are summed in one pass (ops::fan_out), with the bits of the engine's additions when each quantized
  // the f32 norm output itself.
  const auto [stream, normed_1] = detail::add_and_norm(*input_norm_, x, pending, attn_->input_format(x.dtype()));
  const Tensor a = attn_->forward(normed_1, rope, lengths, widened_gradient(normed_1, stream));
  auto [h, normed] = detail::add_and_norm(*post_norm_, stream, a, mlp_->input_format(x.dtype()));
  return {std::move(h), mlp_->forward(normed, widened_gradient(normed, h))};
}

Tensor LlamaBlock::forward(const Tensor& x, const ops::RopeTable& rope, const Tensor& lengths) const {
  auto [h, m] = forward_pending(x, Tensor(), rope, lengths);
  return ops::add(h, detail::like(m, h));
}

Tensor LlamaBlock::forward_cached(const Tensor& x, const ops::RopeTable& rope, Tensor& k_cache, Tensor& v_cache,
                                  int64_t pos, int64_t capacity) const {
  const Tensor normed_1 = input_norm_->forward(x, attn_->input_format(x.dtype()));
  const Tensor a = attn_->forward_cached(normed_1, rope, k_cache, v_cache, pos, capacity);
  auto [h, normed] = post_norm_->forward_residual(detail::into_residual_norm(a, x), x, mlp_->input_format(x.dtype()));
  return ops::add(h, detail::like(mlp_->forward(normed), h));
}

namespace {

// The "model." container of Hugging Face's layout (LlamaModel): embed_tokens, layers, norm.
class LlamaBody : public Module {
 public:
  LlamaBody() : Module("LlamaModel") {}
  using Module::register_module;
};

void init_llama(Llama& model, Generator& gen) {
  autograd::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(model.config().n_layer));
  for (const NamedParameter& p : model.named_parameters()) {
    Tensor t = p.tensor.detach();
    const std::string& n = p.name;
    if (n.ends_with("norm.weight")) {
      t.fill_(1.0);
    } else {
      const bool residual = n.ends_with("o_proj.weight") || n.ends_with("down_proj.weight");
      t.normal_(0, residual ? residual_std : 0.02, gen);
    }
  }
}

}  // namespace

Llama::Llama(const LlamaConfig& c) : LanguageModel("Llama"), config_(c) {
  MPT_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_embd > 0 && c.n_head > 0 &&
                c.n_embd % c.n_head == 0 && c.head_dim() % 2 == 0 && c.n_kv_head > 0 && c.n_head % c.n_kv_head == 0,
            "[Llama] invalid config: vocab_size={} block_size={} n_layer={} n_embd={} n_head={} n_kv_head={} (n_embd "
            "must split into n_head heads of an even size, n_kv_head must divide n_head)",
            c.vocab_size, c.block_size, c.n_layer, c.n_embd, c.n_head, c.n_kv_head);
  MPT_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 1 && c.norm_eps >= 0 && c.ffn_size() > 0,
            "[Llama] invalid config: rope_theta={} norm_eps={} intermediate size {}", c.rope_theta, c.norm_eps,
            c.ffn_size());
  Generator gen(c.seed);
  auto body = register_module("model", std::make_shared<LlamaBody>());
  embed_ = body->register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.n_embd, c.where, gen));
  layers_ = body->register_module("layers", std::make_shared<ModuleList<LlamaBlock>>());
  for (int64_t i = 0; i < c.n_layer; ++i) layers_->push_back(std::make_shared<LlamaBlock>(c, gen));
  norm_ = body->register_module("norm", std::make_shared<RMSNorm>(c.n_embd, c.norm_eps, c.where));
  model_ = body;
  if (!c.tie_embeddings)
    lm_head_ = register_module("lm_head", std::make_shared<Linear>(c.n_embd, c.vocab_size, false, c.where, gen));
  init_llama(*this, gen);
}

const ops::RopeTable& Llama::rope_for(const Tensor& like) const {
  const DType dtype = like.dtype() == DType::F64 ? DType::F64 : DType::F32;
  auto it = std::find_if(rope_tables_.begin(), rope_tables_.end(), [&](const ops::RopeTable& t) {
    return t.cos.device() == like.device() && t.cos.dtype() == dtype;
  });
  if (it == rope_tables_.end()) {
    it = rope_tables_.insert(rope_tables_.end(), ops::rope_table(config_.block_size, config_.head_dim(),
                                                                 config_.rope_theta, like.device(), dtype));
  }
  return *it;
}

std::string Llama::head_path() const { return path().empty() ? std::string("lm_head") : path() + ".lm_head"; }

Tensor Llama::final_norm(const std::pair<Tensor, Tensor>& stream, const ops::NormOutput& out) const {
  return detail::add_and_norm(*norm_, stream.first, stream.second, out).second;
}

Tensor Llama::head_norm(const std::pair<Tensor, Tensor>& stream) const {
  const DType x = stream.first.dtype();
  return final_norm(stream, lm_head_ ? lm_head_->input_format(x)
                                     : detail::autocast_input_format(x, embed_->weight(), head_path()));
}

Tensor Llama::head(const Tensor& x, int64_t out_padded) const {
  const bool padded = out_padded > config_.vocab_size;
  if (lm_head_ && (!padded || lm_head_->quantized() != nullptr)) return lm_head_->forward(x);
  const std::string name = lm_head_ ? lm_head_->path() : head_path();
  const profile::Range range(name);
  // The untied head as Linear::forward runs it (its path, its learned weight scale), at the padded width.
  if (lm_head_)
    return detail::autocast_linear(x, lm_head_->weight(), Tensor{}, name, "Linear", out_padded,
                                   lm_head_->weight_scale());
  return detail::autocast_linear(x, embed_->weight(), Tensor{}, name, "Llama", padded ? out_padded : 0);
}

Tensor Llama::features(const Tensor& ids, const Tensor& lengths) const { return final_norm(trunk(ids, lengths)); }

std::pair<Tensor, Tensor> Llama::trunk(const Tensor& ids, const Tensor& lengths) const {
  MPT_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
            "[Llama] expected token ids [B, T] of i64 or i32, got {}", ids.defined() ? ids.meta_str() : "undefined");
  MPT_CHECK(ids.size(1) <= config_.block_size, "[Llama] sequence length {} exceeds block_size {}", ids.size(1),
            config_.block_size);
  // Checked once and on the device once for every layer's attention (forward and backward).
  const Tensor keys = ops::prepare_key_lengths(lengths, ids.size(0), ids.size(1), ids.device(), "Llama");
  Tensor x = detail::into_stream(embed_->forward(ids), "Llama"), pending;
  const ops::RopeTable& rope = rope_for(x);
  for (const auto& block : *layers_) {
    if (checkpoint_blocks_) {  // one saved input per block: its MLP output added inside (the same bits)
      const LlamaBlock* b = block.get();
      x = detail::checkpoint_under_policy([b, rope, keys](const Tensor& in) { return b->forward(in, rope, keys); },
                                          x);
    } else {
      std::tie(x, pending) = block->forward_pending(x, pending, rope, keys);
    }
  }
  return {x, pending};
}

Tensor Llama::forward(const Tensor& ids, const Tensor& lengths) const {
  const profile::Range range("forward");
  const Tensor x = head_norm(trunk(ids, lengths));
  const int64_t B = ids.size(0), T = ids.size(1), C = config_.n_embd;
  return head(x.reshape({B * T, C})).reshape({B, T, config_.vocab_size});
}

Tensor Llama::loss_logits(const Tensor& ids, const Tensor& lengths) const {
  const profile::Range range("forward");
  const Tensor x = head_norm(trunk(ids, lengths));
  const int64_t B = ids.size(0), T = ids.size(1), C = config_.n_embd;
  const Tensor logits = head(x.reshape({B * T, C}), padded_head_width(ids.device()));
  return logits.reshape({B, T, logits.size(1)});
}

Tensor Llama::forward_cached(const Tensor& ids, KvCache& cache) const {
  MPT_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
            "[Llama] expected token ids [B, t] of i64 or i32, got {}", ids.defined() ? ids.meta_str() : "undefined");
  const int64_t B = ids.size(0), t = ids.size(1), C = config_.n_embd, pos = cache.length;
  MPT_CHECK(t >= 1 && pos + t <= config_.block_size, "[Llama] {} tokens after {} cached positions exceed block_size "
            "{}: clear the cache and give the last tokens as a prompt", t, pos, config_.block_size);
  autograd::NoGradGuard no_grad;
  const size_t n = layers_->size();
  if (cache.k.size() != n) {
    MPT_CHECK(pos == 0, "[Llama] the cache holds {} blocks' keys, this model has {}: clear it first", cache.k.size(),
              n);
    cache.k.assign(n, Tensor());
    cache.v.assign(n, Tensor());
  }
  Tensor x = detail::into_stream(embed_->forward(ids), "Llama");
  const ops::RopeTable& rope = rope_for(x);
  for (size_t i = 0; i < n; ++i)
    x = (*layers_)[i].forward_cached(x, rope, cache.k[i], cache.v[i], pos, config_.block_size);
  cache.length = pos + t;
  return head(head_norm({x.slice(1, t - 1, t).reshape({B, C}), Tensor()}));
}

void Llama::freeze(int64_t blocks) {
  MPT_CHECK(blocks >= 0 && blocks <= config_.n_layer, "[Llama] cannot freeze {} of {} blocks", blocks,
            config_.n_layer);
  embed_->requires_grad_(false);  // and a tied lm_head
  for (int64_t i = 0; i < blocks; ++i) block(static_cast<size_t>(i)).requires_grad_(false);
}

double Llama::flops_per_token(int64_t seq) const {
  const LlamaConfig& c = config_;
  const double table = static_cast<double>(c.vocab_size * c.n_embd);
  // Every parameter but the embedding lookups, plus the LM head's GEMM when it is the (tied) embedding.
  const double dense = static_cast<double>(num_parameters()) - table + (c.tie_embeddings ? table : 0.0);
  return 6.0 * dense + 12.0 * static_cast<double>(c.n_layer * c.n_embd * seq);
}

std::string Llama::describe() const {
  return fmt::format("Llama {} layers, {} heads ({} kv), {} wide, SwiGLU {}, context {}", config_.n_layer,
                     config_.n_head, config_.n_kv_head, config_.n_embd, config_.ffn_size(), config_.block_size);
}

}  // namespace mpt::nn
