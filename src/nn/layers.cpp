// src/nn/layers.cpp: Linear, LayerNorm, Embedding and Dropout on the recorded ops.
#include "mpt/nn/layers.h"

#include "autocast_gemm.h"

#include <cmath>

#include "mpt/core/profile.h"
#include "mpt/ops/dropout.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/embedding.h"
#include "mpt/ops/layernorm.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/quantized_linear.h"
#include "mpt/amp/policy.h"
#include "mpt/autograd/grad_mode.h"

namespace mpt::nn {

namespace {
// x [..., last_dim] in the parameters' dtype on their device; with `half_beside_f32` (a norm's input) also F16/BF16
// beside FP32 parameters: a half residual stream under a policy's `residual` (the kernels compute in FP32).
void check_input(const char* layer, const Tensor& x, const Tensor& weight, int64_t last_dim,
                 bool half_beside_f32 = false) {
  MPT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == last_dim,
            "[{}] expected an input [..., {}], got {}", layer, last_dim, x.defined() ? x.meta_str() : "undefined");
  const bool half = half_beside_f32 && weight.dtype() == DType::F32 &&
                    (x.dtype() == DType::BF16 || x.dtype() == DType::F16);
  MPT_CHECK((x.dtype() == weight.dtype() || half) && x.device() == weight.device(),
            "[{}] input {} does not match the parameters ({}): convert one of them (module.to(...))", layer,
            x.meta_str(), weight.meta_str());
}

void check_norm_input(const char* layer, const Tensor& x, const Tensor& weight) {
  check_input(layer, x, weight, weight.numel(), true);
}
}  // namespace

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Placement where, Generator& gen)
    : Module("Linear"), in_(in_features), out_(out_features) {
  MPT_CHECK(in_features > 0 && out_features > 0, "[Linear] sizes must be positive, got in={} out={}", in_features,
            out_features);
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = &register_parameter("weight", Tensor::uniform({out_, in_}, -bound, bound, where.dtype, where.device, gen));
  if (bias) bias_ = &register_parameter("bias", Tensor::uniform({out_}, -bound, bound, where.dtype, where.device, gen),
                                        /*weight_decay=*/false);
}

Tensor Linear::forward(const Tensor& x) const {
  MPT_CHECK(x.defined() && x.dim() >= 1 && x.size(-1) == in_, "[Linear] expected an input [..., {}], got {}", in_,
            x.defined() ? x.meta_str() : "undefined");
  const profile::Range range(path().empty() ? type_name() : path());  // "h.3.attn.c_attn"
  Shape out_shape = x.shape();
  out_shape.back() = out_;
  if (quantized_ != nullptr) {
    MPT_CHECK(!(autograd::is_grad_enabled() && x.requires_grad()),
              "[Linear] '{}' holds quantized weights for inference (nn::quantize_for_inference): it has no backward; "
              "run it under NoGradGuard, or train the full-precision model (QAT)", path());
    return ops::quantized_linear(x.reshape({-1, in_}), quantized_->weight, bias(), quantized_->input).reshape(out_shape);
  }
  return detail::autocast_linear(x.reshape({-1, in_}), weight(), bias(), path(), "Linear", 0, weight_scale())
      .reshape(out_shape);
}

ops::NormOutput Linear::input_format(DType x) const {
  return quantized_ != nullptr ? ops::NormOutput(x) : detail::autocast_input_format(x, weight(), path());
}

ops::NormOutput shared_input_format(std::initializer_list<const Linear*> readers, DType x) {
  const amp::Policy* policy = amp::current_policy();
  for (const Linear* l : readers) {
    if (policy != nullptr &&
        policy->at(l->path(), l->weight().size(1), l->weight().size(0), l->weight().device()) == amp::Precision::FP8) {
      // One E4M3 copy for all when they can share the first's input meta; else each quantizes x itself (FP8
      // readers are asked nothing one by one: their input formats would register metas that no layer uses).
      std::vector<detail::InputReader> in;
      for (const Linear* r : readers) {
        if (r->quantized() != nullptr) return x;
        in.push_back({&r->weight(), r->path()});
      }
      return detail::autocast_shared_fp8_input(x, in).value_or(ops::NormOutput(x));
    }
  }
  std::optional<DType> common;
  for (const Linear* l : readers) {
    const ops::NormOutput f = l->input_format(x);
    const DType dt = f.dtype.value_or(x);
    if (f.scale.defined() || (dt != DType::BF16 && dt != DType::F16) || (common && *common != dt)) return x;
    common = dt;
  }
  return common ? ops::NormOutput(*common) : ops::NormOutput(x);
}

void Linear::learn_weight_scale(const ops::QuantSpec& spec) {
  ops::QuantSpec s = spec;
  s.f16_scale = false;  // trained in f32; rounded where a file stores FP16
  if (weight_scale_spec_) {
    MPT_CHECK(*weight_scale_spec_ == s, "[Linear] '{}' already learns a {} weight scale, not {}", path(),
              weight_scale_spec_->str(), s.str());
    return;
  }
  MPT_CHECK(s.format != ops::QuantFormat::FP8 && s.granularity != ops::QuantGranularity::PerToken,
            "[Linear] '{}': learned scales (LSQ) are for INT8 / INT4 weights per tensor, channel or group, got {}",
            path(), s.str());
  Tensor init;
  {
    autograd::NoGradGuard no_grad;
    init = ops::log(ops::quantize_groups(weight(), s).scales.contiguous());
  }
  weight_log_scale_ = &register_parameter("weight_log_scale", std::move(init), /*weight_decay=*/false);
  weight_scale_spec_ = s;
}

Tensor Linear::weight_scale() const {
  return weight_log_scale_ != nullptr ? ops::exp(*weight_log_scale_) : Tensor{};
}

LayerNorm::LayerNorm(int64_t dim, double eps, bool bias, Placement where) : Module("LayerNorm"), eps_(eps) {
  MPT_CHECK(dim > 0 && eps >= 0, "[LayerNorm] expected dim > 0 and eps >= 0, got dim={} eps={}", dim, eps);
  weight_ = &register_parameter("weight", Tensor::ones({dim}, where.dtype, where.device), false);
  if (bias) bias_ = &register_parameter("bias", Tensor::zeros({dim}, where.dtype, where.device), false);
}

Tensor LayerNorm::forward(const Tensor& x, const ops::NormOutput& out) const {
  const profile::Range range(path().empty() ? type_name() : path());
  check_norm_input("LayerNorm", x, weight());
  return ops::layer_norm(x, weight(), bias(), eps_, out).y;
}

std::pair<Tensor, Tensor> LayerNorm::forward_residual(const Tensor& x, const Tensor& residual,
                                                      const ops::NormOutput& out) const {
  const profile::Range range(path().empty() ? type_name() : path());
  check_norm_input("LayerNorm", residual, weight());  // x: residual's dtype, or f16/bf16 beside f32
  ops::ResidualLayerNormResult r = ops::residual_layer_norm(x, residual, weight(), bias(), eps_, out);
  return {std::move(r.sum), std::move(r.y)};
}

RMSNorm::RMSNorm(int64_t dim, double eps, Placement where) : Module("RMSNorm"), eps_(eps) {
  MPT_CHECK(dim > 0 && eps >= 0, "[RMSNorm] expected dim > 0 and eps >= 0, got dim={} eps={}", dim, eps);
  weight_ = &register_parameter("weight", Tensor::ones({dim}, where.dtype, where.device), false);
}

Tensor RMSNorm::forward(const Tensor& x, const ops::NormOutput& out) const {
  const profile::Range range(path().empty() ? type_name() : path());
  check_norm_input("RMSNorm", x, weight());
  return ops::rms_norm(x, weight(), eps_, out).y;
}

std::pair<Tensor, Tensor> RMSNorm::forward_residual(const Tensor& x, const Tensor& residual,
                                                    const ops::NormOutput& out) const {
  const profile::Range range(path().empty() ? type_name() : path());
  check_norm_input("RMSNorm", residual, weight());  // x: residual's dtype, or f16/bf16 beside f32
  ops::ResidualLayerNormResult r = ops::residual_rms_norm(x, residual, weight(), eps_, out);
  return {std::move(r.sum), std::move(r.y)};
}

Embedding::Embedding(int64_t num, int64_t dim, Placement where, Generator& gen) : Module("Embedding") {
  MPT_CHECK(num > 0 && dim > 0, "[Embedding] sizes must be positive, got num={} dim={}", num, dim);
  weight_ = &register_parameter("weight", Tensor::normal({num, dim}, 0, 1, where.dtype, where.device, gen), false);
}

Tensor Embedding::forward(const Tensor& ids) const {
  const profile::Range range(path().empty() ? type_name() : path());  // "wte", "wpe"
  return ops::embedding(ids, weight());
}

Dropout::Dropout(double p, Generator* gen) : Module("Dropout"), p_(p), gen_(gen) {
  MPT_CHECK(p >= 0 && p <= 1, "[Dropout] p must be in [0, 1], got {}", p);
}

Tensor Dropout::forward(const Tensor& x) const {
  if (!is_training() || p_ == 0) return x;
  return ops::dropout(x, static_cast<float>(p_), gen_ != nullptr ? *gen_ : default_generator());
}

}  // namespace mpt::nn
