// src/nn/gpt.cpp: CausalSelfAttention, MLP, Block and GPT (GPT-2 initialisation, tied LM head) and the token loss.
#include "mpt/nn/gpt.h"

#include "autocast_gemm.h"
#include "recompute.h"
#include "residual_stream.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/loss_seed.h"
#include "mpt/core/profile.h"
#include "mpt/ops/activation.h"
#include "mpt/ops/attention.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/softmax.h"

namespace mpt::nn {

CausalSelfAttention::CausalSelfAttention(const GPTConfig& c, Generator& gen)
    : Module("CausalSelfAttention"), n_head_(c.n_head) {
  MPT_CHECK(c.n_head > 0 && c.n_embd % c.n_head == 0, "[CausalSelfAttention] n_embd {} is not a multiple of n_head {}",
            c.n_embd, c.n_head);
  c_attn_ = register_module("c_attn", std::make_shared<Linear>(c.n_embd, 3 * c.n_embd, c.bias, c.where, gen));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(c.n_embd, c.n_embd, c.bias, c.where, gen));
  drop_ = register_module("resid_dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor CausalSelfAttention::forward(const Tensor& x, const Tensor& lengths) const {
  MPT_CHECK(x.defined() && x.dim() == 3, "[CausalSelfAttention] expected x [B, T, C], got {}",
            x.defined() ? x.meta_str() : "undefined");
  const profile::Range range(path().empty() ? type_name() : path());  // "h.3.attn"
  ops::AttentionOptions options;
  options.lengths = lengths;
  // q, k, v read from c_attn's [B, T, 3C] output and the heads written side by side, [B, T, C], as c_proj reads them.
  const Tensor y = ops::causal_attention_qkv(c_attn_->forward(x), n_head_, options).out;
  return drop_->forward(c_proj_->forward(y));
}

Tensor CausalSelfAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos,
                                           int64_t capacity) const {
  const int64_t B = x.size(0), t = x.size(1), C = x.size(2);
  MPT_CHECK(pos == 0 || t == 1, "[CausalSelfAttention] a cached forward takes a prompt at position 0 or one token, "
            "got {} tokens at position {}", t, pos);
  MPT_CHECK(pos + t <= capacity, "[CausalSelfAttention] positions [{}, {}) exceed the cache's {}", pos, pos + t,
            capacity);
  const ops::QkvHeads h = ops::split_qkv_heads(c_attn_->forward(x), n_head_);  // [B, H, t, D]
  const Shape shape{B, h.k.size(1), capacity, h.k.size(3)};
  const bool fits = k_cache.defined() && v_cache.defined() && k_cache.shape() == shape &&
                    k_cache.dtype() == h.k.dtype() && k_cache.device() == x.device() && v_cache.shape() == shape &&
                    v_cache.dtype() == h.k.dtype();
  if (!fits) {  // made at the prompt, in the dtype the keys come out in (BF16 under BF16 autocast)
    MPT_CHECK(pos == 0, "[CausalSelfAttention] the cache holds another batch size, dtype or device: start again at 0");
    k_cache = Tensor::empty(shape, h.k.dtype(), x.device());
    v_cache = Tensor::empty(shape, h.k.dtype(), x.device());
  }
  const int64_t H = shape[1], D = shape[3];
  k_cache.slice(2, pos, pos + t).copy_(h.k);
  v_cache.slice(2, pos, pos + t).copy_(h.v);
  Tensor y;
  if (pos == 0) {
    y = ops::causal_attention(h.q, h.k, h.v).out;  // [B, H, t, D]
  } else {  // one query against every position so far: no mask needed
    const int64_t L = pos + 1;
    const Tensor k = k_cache.slice(2, 0, L).reshape({B * H, L, D});  // views: no copy of the cache
    const Tensor v = v_cache.slice(2, 0, L).reshape({B * H, L, D});
    const auto scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
    const Tensor s = ops::matmul(h.q.reshape({B * H, 1, D}), k, {.trans_b = true, .alpha = scale});
    y = ops::matmul(ops::softmax(s), v).reshape({B, H, 1, D});
  }
  return c_proj_->forward(y.transpose(1, 2).reshape({B, t, C}));
}

MLP::MLP(const GPTConfig& c, Generator& gen) : Module("MLP") {
  c_fc_ = register_module("c_fc", std::make_shared<Linear>(c.n_embd, 4 * c.n_embd, c.bias, c.where, gen));
  c_proj_ = register_module("c_proj", std::make_shared<Linear>(4 * c.n_embd, c.n_embd, c.bias, c.where, gen));
  drop_ = register_module("dropout", std::make_shared<Dropout>(c.dropout));
}

Tensor MLP::forward(const Tensor& x) const {
  const profile::Range range(path().empty() ? type_name() : path());
  // One fused op (the GELU in the GEMMs' epilogues, FP8 included) where both layers share a GEMM precision.
  const Linear &fc = *c_fc_, &proj = *c_proj_;
  if (x.defined() && x.dim() >= 1 && x.size(-1) == fc.in_features() && fc.quantized() == nullptr &&
      proj.quantized() == nullptr) {
    const Tensor y = detail::autocast_mlp(x.reshape({-1, fc.in_features()}), fc.weight(), fc.bias(), fc.path(),
                                          proj.weight(), proj.bias(), proj.path());
    if (y.defined()) {
      Shape shape = x.shape();
      shape.back() = proj.out_features();
      return drop_->forward(y.reshape(shape));
    }
  }
  return drop_->forward(proj.forward(ops::gelu(fc.forward(x))));
}

Block::Block(const GPTConfig& c, Generator& gen) : Module("Block") {
  ln_1_ = register_module("ln_1", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias, c.where));
  attn_ = register_module("attn", std::make_shared<CausalSelfAttention>(c, gen));
  ln_2_ = register_module("ln_2", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias, c.where));
  mlp_ = register_module("mlp", std::make_shared<MLP>(c, gen));
}

// Each norm writes its output as the one GEMM that reads it takes it (BF16 under BF16 Autocast, E4M3 codes under FP8
// delayed scaling): the cast or quantization that GEMM would make is folded into the norm's store, bit for bit, and
// its backward reads the gradient as it comes (BF16; f32 from an FP8 layer).
// The attention's BF16 output enters ln_2's residual sum as it is (widened in the norm, its gradient rounded there),
// and so does the previous block's MLP output enter ln_1's.
std::pair<Tensor, Tensor> Block::forward_pending(const Tensor& x, const Tensor& pending, const Tensor& lengths) const {
  const profile::Range range(path().empty() ? type_name() : path());  // "h.3"
  const auto [stream, normed_1] = detail::add_and_norm(*ln_1_, x, pending, attn_->c_attn().input_format(x.dtype()));
  const Tensor a = attn_->forward(normed_1, lengths);
  // The MLP's input format asked after the attention ran: FP8 layers register their metas in the layers' order.
  auto [h, normed_2] = detail::add_and_norm(*ln_2_, stream, a, mlp_->c_fc().input_format(x.dtype()));
  return {std::move(h), mlp_->forward(normed_2)};
}

Tensor Block::forward(const Tensor& x, const Tensor& lengths) const {
  auto [h, m] = forward_pending(x, Tensor(), lengths);
  return ops::add(h, detail::like(m, h));
}

Tensor Block::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t pos, int64_t capacity) const {
  const Tensor normed_1 = ln_1_->forward(x, attn_->c_attn().input_format(x.dtype()));
  const Tensor a = attn_->forward_cached(normed_1, k_cache, v_cache, pos, capacity);
  auto [h, normed] = ln_2_->forward_residual(detail::into_residual_norm(a, x), x, mlp_->c_fc().input_format(x.dtype()));
  return ops::add(h, detail::like(mlp_->forward(normed), h));
}

namespace {
void init_gpt2(GPT& model, Generator& gen) {
  autograd::NoGradGuard no_grad;
  const double residual_std = 0.02 / std::sqrt(2.0 * static_cast<double>(model.config().n_layer));
  for (const NamedParameter& p : model.named_parameters()) {
    Tensor t = p.tensor.detach();
    const std::string& n = p.name;
    const bool is_bias = n.ends_with(".bias"), is_ln = n.find("ln_") != std::string::npos;
    if (is_ln) {
      t.fill_(is_bias ? 0.0 : 1.0);
    } else if (is_bias) {
      t.zero_();
    } else {
      t.normal_(0, n.ends_with("c_proj.weight") ? residual_std : 0.02, gen);
    }
  }
}
}  // namespace

GPT::GPT(const GPTConfig& c) : LanguageModel("GPT"), config_(c) {
  MPT_CHECK(c.vocab_size > 0 && c.block_size > 0 && c.n_layer >= 0 && c.n_embd > 0,
            "[GPT] invalid config: vocab_size={} block_size={} n_layer={} n_embd={}", c.vocab_size, c.block_size,
            c.n_layer, c.n_embd);
  Generator gen(c.seed);
  wte_ = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd, c.where, gen));
  wpe_ = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd, c.where, gen));
  drop_ = register_module("drop", std::make_shared<Dropout>(c.dropout));
  h_ = register_module("h", std::make_shared<ModuleList<Block>>());
  for (int64_t i = 0; i < c.n_layer; ++i) h_->push_back(std::make_shared<Block>(c, gen));
  ln_f_ = register_module("ln_f", std::make_shared<LayerNorm>(c.n_embd, 1e-5, c.bias, c.where));
  init_gpt2(*this, gen);
}

Tensor GPT::forward(const Tensor& ids, const Tensor& lengths) const {
  const profile::Range range("forward");  // the phase; module ranges nest inside, the loss follows it
  return head(head_norm(trunk(ids, lengths)), 0);
}

Tensor GPT::loss_logits(const Tensor& ids, const Tensor& lengths) const {
  const profile::Range range("forward");
  return head(head_norm(trunk(ids, lengths)), padded_head_width(ids.device()));
}

std::string GPT::head_path() const { return path().empty() ? std::string("lm_head") : path() + ".lm_head"; }

Tensor GPT::final_norm(const std::pair<Tensor, Tensor>& stream, const ops::NormOutput& out) const {
  return detail::add_and_norm(*ln_f_, stream.first, stream.second, out).second;
}

Tensor GPT::head_norm(const std::pair<Tensor, Tensor>& stream) const {
  return final_norm(stream, detail::autocast_input_format(stream.first.dtype(), wte_->weight(), head_path()));
}

Tensor GPT::head(const Tensor& x, int64_t out_padded) const {
  const int64_t B = x.size(0), T = x.size(1), C = config_.n_embd;
  // The LM head, tied to wte; a policy addresses it as "lm_head".
  const std::string head = head_path();
  const profile::Range head_range(head);
  const Tensor logits = detail::autocast_linear(x.reshape({B * T, C}), wte_->weight(), Tensor{}, head, "GPT",
                                                out_padded > config_.vocab_size ? out_padded : 0);
  return logits.reshape({B, T, logits.size(1)});
}

Tensor GPT::features(const Tensor& ids, const Tensor& lengths) const { return final_norm(trunk(ids, lengths)); }

std::pair<Tensor, Tensor> GPT::trunk(const Tensor& ids, const Tensor& lengths) const {
  MPT_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
            "[GPT] expected token ids [B, T] of i64 or i32, got {}", ids.defined() ? ids.meta_str() : "undefined");
  const int64_t T = ids.size(1);
  MPT_CHECK(T <= config_.block_size, "[GPT] sequence length {} exceeds block_size {}", T, config_.block_size);
  auto cached = std::find_if(positions_.begin(), positions_.end(), [&](const Tensor& p) {
    return p.device() == ids.device() && p.dtype() == ids.dtype();
  });
  if (cached == positions_.end()) {
    cached = positions_.insert(positions_.end(), Tensor::arange(config_.block_size, ids.dtype(), ids.device()));
  }
  const Tensor pos = cached->slice(0, 0, T);
  // Checked once and on the device once for every layer's attention (forward and backward).
  const Tensor keys = ops::prepare_key_lengths(lengths, ids.size(0), T, ids.device(), "GPT");
  Tensor x = drop_->forward(detail::into_stream(ops::add(wte_->forward(ids), wpe_->forward(pos)), "GPT")), pending;
  for (const auto& block : *h_) {
    if (checkpoint_blocks_) {  // one saved input per block: its MLP output added inside (the same bits)
      const Block* b = block.get();
      x = detail::checkpoint_under_policy([b, keys](const Tensor& in) { return b->forward(in, keys); }, x);
    } else {
      std::tie(x, pending) = block->forward_pending(x, pending, keys);
    }
  }
  return {x, pending};
}

Tensor GPT::forward_cached(const Tensor& ids, KvCache& cache) const {
  MPT_CHECK(ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::I64 || ids.dtype() == DType::I32),
            "[GPT] expected token ids [B, t] of i64 or i32, got {}", ids.defined() ? ids.meta_str() : "undefined");
  const int64_t B = ids.size(0), t = ids.size(1), C = config_.n_embd, pos = cache.length;
  MPT_CHECK(t >= 1 && pos + t <= config_.block_size, "[GPT] {} tokens after {} cached positions exceed block_size {}: "
            "clear the cache and give the last tokens as a prompt", t, pos, config_.block_size);
  autograd::NoGradGuard no_grad;
  const size_t n = h_->size();
  if (cache.k.size() != n) {  // each block makes its tensors at the prompt (CausalSelfAttention::forward_cached)
    MPT_CHECK(pos == 0, "[GPT] the cache holds {} blocks' keys, this model has {}: clear it first", cache.k.size(), n);
    cache.k.assign(n, Tensor());
    cache.v.assign(n, Tensor());
  }
  const Tensor p = Tensor::arange(static_cast<double>(pos), static_cast<double>(pos + t), 1, ids.dtype(), ids.device());
  Tensor x = detail::into_stream(ops::add(wte_->forward(ids), wpe_->forward(p)), "GPT");
  for (size_t i = 0; i < n; ++i) x = (*h_)[i].forward_cached(x, cache.k[i], cache.v[i], pos, config_.block_size);
  cache.length = pos + t;
  x = head_norm({x.slice(1, t - 1, t).reshape({B, C}), Tensor()});
  return detail::autocast_linear(x, wte_->weight(), Tensor{}, head_path(), "GPT");
}

void GPT::freeze(int64_t blocks) {
  MPT_CHECK(blocks >= 0 && blocks <= config_.n_layer, "[GPT] cannot freeze {} of {} blocks", blocks, config_.n_layer);
  wte_->requires_grad_(false);  // also the LM head, which is tied to it
  wpe_->requires_grad_(false);
  for (int64_t i = 0; i < blocks; ++i) block(static_cast<size_t>(i)).requires_grad_(false);
}

double GPT::flops_per_token(int64_t seq) const {
  const GPTConfig& c = config_;
  const double embeddings = static_cast<double>((c.vocab_size + c.block_size) * c.n_embd);
  const double dense =
      static_cast<double>(num_parameters()) - embeddings + static_cast<double>(c.vocab_size * c.n_embd);
  return 6.0 * dense + 12.0 * static_cast<double>(c.n_layer * c.n_embd * seq);
}

std::string GPT::describe() const {
  return fmt::format("GPT-2 {} layers, {} heads, {} wide, context {}", config_.n_layer, config_.n_head,
                     config_.n_embd, config_.block_size);
}

void LanguageModel::set_padded_head(int64_t multiple) {
  MPT_CHECK(multiple >= -1, "[{}] set_padded_head: expected -1 (automatic), 0 (never) or a multiple, got {}",
            type_name(), multiple);
  padded_head_ = multiple;
}

int64_t LanguageModel::padded_head_width(int64_t vocab, int64_t multiple, bool cuda) {
  if (multiple < 0) multiple = cuda && vocab % 8 != 0 ? 64 : 0;
  return multiple > 1 ? (vocab + multiple - 1) / multiple * multiple : vocab;
}

Tensor LanguageModel::loss(const Tensor& ids, const Tensor& targets, ops::LossReduction reduction,
                           const Tensor& lengths) const {
  Tensor logits = loss_logits(ids, lengths);
  const profile::Range range("loss");
  MPT_CHECK(reduction != ops::LossReduction::None, "[cross_entropy] expected Mean or Sum reduction (a scalar loss)");
  // Under a Trainer (autograd::LossSeed) the upstream gradient is known now: the logits' gradient is written in this
  // pass over them, over them (they are handed over), and the backward has nothing left to do.
  const Tensor seed = logits.requires_grad() && autograd::is_grad_enabled()
                          ? autograd::LossSeed::request(logits.device(),
                                                        logits.dtype() == DType::F64 ? DType::F64 : DType::F32)
                          : Tensor{};
  return ops::softmax_cross_entropy(std::move(logits), targets,
                                    {.reduction = reduction, .classes = vocab_size(), .gradient = seed})
      .loss;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& targets, ops::LossReduction reduction) {
  MPT_CHECK(reduction != ops::LossReduction::None, "[cross_entropy] expected Mean or Sum reduction (a scalar loss)");
  return ops::softmax_cross_entropy(logits, targets, {.reduction = reduction}).loss;
}

}  // namespace mpt::nn
