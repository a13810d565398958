// mpt/nn/layers.h: the basic layers: Linear, LayerNorm, RMSNorm, Embedding, Dropout, and ModuleList (a numbered
// container).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>

#include "mpt/core/generator.h"
#include "mpt/nn/module.h"
#include "mpt/ops/fake_quant.h"
#include "mpt/ops/layernorm.h"

namespace mpt::nn {

// Where a layer's parameters live and in which dtype.
struct Placement {
  DType dtype = DType::F32;
  Device device = Device::cpu();
};

// y = x W^T + b over the last dimension of x ([..., in] -> [..., out]); W is [out, in] (torch.nn.Linear's layout),
// initialised like torch: W and b uniform in +-1/sqrt(in) (drawn from `gen`). W takes weight decay, b does not.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Placement where = {},
         Generator& gen = default_generator());
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // How a producer may store this layer's input (a norm before it: LayerNorm::forward's `out`) for an x of dtype
  // `x` under the current Autocast policy: in the f16/bf16 the GEMM reads (the cast it would make), or as the E4M3
  // codes of FP8 delayed scaling with this layer's input scale and amax slot (the quantization it would make), bit
  // for bit either way; `x` itself otherwise (no policy, other FP8 recipes, telemetry, QAT, quantized weights).
  ops::NormOutput input_format(DType x) const;
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return bias_ != nullptr ? *bias_ : none_; }  // undefined without bias
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  // Quantized inference (nn::quantize_for_inference): the weight as codes and scales (ops::quantize_groups of it),
  // and the input quantization it was trained with. Set, forward runs ops::quantized_linear on them: inference only
  // (an input that requires grad under grad mode is refused), whatever the current policy. Null: the weight.
  struct Quantized {
    ops::GroupQuantized weight;
    std::optional<ops::QuantSpec> input;
  };
  void set_quantized(std::shared_ptr<const Quantized> q) { quantized_ = std::move(q); }
  const Quantized* quantized() const { return quantized_.get(); }

  // LSQ (nn::learn_quantization_scales): a trainable scale for the weight's QAT grid `spec` (integer formats; its
  // FP16 rounding is dropped while training), held as its logarithm in the parameter "weight_log_scale" (f32, spec's
  // scales shape, no weight decay) and started at the log of the current weight's absmax scale. Why the logarithm:
  // AdamW moves a parameter by about lr per step whatever its gradient's size, which for scales near 1e-2 would be a
  // relative change of several percent per step; in log space a step changes the scale by about lr, relatively. QAT
  // then fake-quantizes the weight with exp(log scale) (ops::fake_quantize_learned, the gradient through the exp),
  // and PTQ, quantized inference and the exporters take their codes on that grid. Calling it again with the same
  // spec does nothing; another spec is refused.
  void learn_weight_scale(const ops::QuantSpec& spec);
  const Tensor& weight_log_scale() const { return weight_log_scale_ != nullptr ? *weight_log_scale_ : none_; }
  Tensor weight_scale() const;  // exp(weight_log_scale()), recorded by autograd; undefined without a learned scale
  const std::optional<ops::QuantSpec>& weight_scale_spec() const { return weight_scale_spec_; }

 private:
  int64_t in_, out_;
  std::shared_ptr<const Quantized> quantized_;
  Tensor* weight_log_scale_ = nullptr;
  std::optional<ops::QuantSpec> weight_scale_spec_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  Tensor none_;
};

// The input format several Linears reading one tensor share (a norm's output feeding q, k and v): their common
// BF16 / FP16 cast (Linear::input_format); under FP8 delayed or current scaling E4M3 codes with the first reader's
// input scale, the others' input metas made the first's (they quantized the same tensor: the same bits); under block
// scaling BF16, which each reader quantizes; else `x`.
ops::NormOutput shared_input_format(std::initializer_list<const Linear*> readers, DType x);

// LayerNorm over the last dimension (size `dim`): weight ones, bias zeros, no weight decay.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t dim, double eps = 1e-5, bool bias = true, Placement where = {});
  // out: how y is stored (ops::NormOutput): x's dtype by default, or the format of the one GEMM that reads it
  // (Linear::input_format), the cast or FP8 quantization folded into the norm.
  Tensor forward(const Tensor& x, const ops::NormOutput& out = {}) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // (x + residual, layer_norm(x + residual)) in one pass (ops::residual_layer_norm): the residual stream and the
  // normalised input of the next sublayer (stored as `out` says).
  std::pair<Tensor, Tensor> forward_residual(const Tensor& x, const Tensor& residual,
                                             const ops::NormOutput& out = {}) const;
  const Tensor& weight() const { return *weight_; }
  const Tensor& bias() const { return bias_ != nullptr ? *bias_ : none_; }
  double eps() const { return eps_; }

 private:
  double eps_;
  Tensor* weight_;
  Tensor* bias_ = nullptr;
  Tensor none_;
};

// RMSNorm over the last dimension (Llama's): weight ones, no bias, no weight decay (ops::rms_norm).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(int64_t dim, double eps = 1e-6, Placement where = {});
  Tensor forward(const Tensor& x, const ops::NormOutput& out = {}) const;  // out: as LayerNorm's
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // (x + residual, rms_norm(x + residual)) in one pass (ops::residual_rms_norm).
  std::pair<Tensor, Tensor> forward_residual(const Tensor& x, const Tensor& residual,
                                             const ops::NormOutput& out = {}) const;
  const Tensor& weight() const { return *weight_; }
  double eps() const { return eps_; }

 private:
  double eps_;
  Tensor* weight_;
};

// A lookup table [num, dim] indexed by i32/i64 ids: ids [...] -> [..., dim]. Initialised N(0, 1) like torch; no
// weight decay.
class Embedding : public Module {
 public:
  Embedding(int64_t num, int64_t dim, Placement where = {}, Generator& gen = default_generator());
  Tensor forward(const Tensor& ids) const;
  Tensor operator()(const Tensor& ids) const { return forward(ids); }
  const Tensor& weight() const { return *weight_; }

 private:
  Tensor* weight_;
};

// Inverted dropout in training mode (identity in eval mode or with p = 0), drawing its Philox counters from
// default_generator() (which activation checkpointing replays) unless another generator is given.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  double p() const { return p_; }

 private:
  double p_;
  Generator* gen_;
};

// Children named "0", "1", ... in order (torch.nn.ModuleList).
template <class M>
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  M& push_back(std::shared_ptr<M> m) {
    items_.push_back(register_module(std::to_string(items_.size()), std::move(m)));
    return *items_.back();
  }
  size_t size() const { return items_.size(); }
  M& operator[](size_t i) const { return *items_.at(i); }
  auto begin() const { return items_.begin(); }
  auto end() const { return items_.end(); }

 private:
  std::vector<std::shared_ptr<M>> items_;
};

}  // namespace mpt::nn
