// src/nn/autocast_gemm.cpp: the policy-driven GEMM of Linear layers and the LM head.
#include "autocast_gemm.h"

#include "mpt/fp8/scaling.h"
#include "mpt/amp/master_weights.h"
#include "mpt/amp/policy.h"
#include "mpt/amp/qat.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/fp8/linear.h"
#include "mpt/fp8/mlp.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/mlp.h"
#include "mpt/ops/fake_quant.h"

namespace mpt::nn::detail {

namespace {

// The QAT scheme the current policy gives the module at `path` (null: none).
const amp::QatScheme* qat_scheme(const amp::Policy* policy, std::string_view path) {
  return policy != nullptr && policy->qat != nullptr ? policy->qat->at(path) : nullptr;
}

// y = fake_quantize(x) W_q^T + b with W_q = fake_quantize(W), in the policy's precision for `path` (FP32, BF16, FP16):
// the straight-through gradients reach x and the FP32 master. The quantized weight is made each forward (no cached
// copy). A low-precision GEMM reads W_q rounded to its dtype as the compute weight of the FP32 master (dW lands in the
// master, as the straight-through estimator's identity gives it) with the bias added in FP32, as without QAT.
Tensor qat_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const amp::QatScheme& scheme,
                  amp::Precision p, std::string_view path, const char* layer, int64_t out_padded,
                  const Tensor& weight_scale) {
  MPT_CHECK(p != amp::Precision::FP8,
            "[{}] '{}': QAT ({}) fake-quantizes weights for an FP32, BF16 or FP16 GEMM, but the policy asks for FP8 "
            "here: train FP8 without --qat, or QAT with another precision", layer, path, scheme.name);
  const DType dt = p == amp::Precision::FP32 ? weight.dtype() : amp::output_dtype(p);
  Tensor xq = scheme.input ? ops::fake_quantize(x, *scheme.input) : x;
  if (xq.dtype() != dt) xq = xq.to(dt);
  if (weight_scale.defined() && scheme.weight) {  // LSQ: the gradient reaches the scale too (a recorded cast to dt)
    ops::QuantSpec spec = *scheme.weight;
    spec.f16_scale = false;
    Tensor wq = ops::fake_quantize_learned(weight, weight_scale, spec);
    if (wq.dtype() != dt) wq = wq.to(dt);
    return ops::linear(xq, wq, bias, {.out_padded = out_padded});  // the FP32 bias added in FP32, its gradient FP32
  }
  if (weight.dtype() == DType::F32 && dt != DType::F32) {
    Tensor copy;
    {
      autograd::NoGradGuard no_grad;
      copy = (scheme.weight ? ops::fake_quantize(weight, *scheme.weight) : weight).to(dt);
    }
    return ops::linear(xq, weight, bias, {.compute_weight = std::move(copy), .out_padded = out_padded});
  }
  Tensor wq = scheme.weight ? ops::fake_quantize(weight, *scheme.weight) : weight;
  if (wq.dtype() != dt) wq = wq.to(dt);
  return ops::linear(xq, wq, bias, {.out_padded = out_padded});
}

// The FP32 master bias as a CUDA GEMM's epilogue adds it (cuBLASLt: in the output's dtype, BF16 for an FP8 GEMM into
// F32): the cached copy (amp::compute_copy: made once, rewritten by AdamW) instead of a cast on every call. The same
// bits as that cast. Undefined elsewhere: the CPU's GEMMs add the FP32 bias in FP32, and an F32 output reads it as is.
Tensor epilogue_bias(const Tensor& bias, DType out, bool fp8_gemm) {
  if (!bias.defined() || !bias.device().is_cuda() || bias.dtype() != DType::F32) return {};
  const DType dt = fp8_gemm && out == DType::F32 ? DType::BF16 : out;
  if (dt != DType::BF16 && dt != DType::F16) return {};
  autograd::NoGradGuard no_grad;
  return amp::compute_copy(bias, dt);
}

// The gradient of a norm's E4M3 codes (autocast_input_format): in the residual stream's dtype, whose norm reads it.
std::optional<DType> codes_grad_dtype(const amp::Policy* policy) {
  return policy != nullptr && policy->residual && *policy->residual != DType::F32 ? policy->residual : std::nullopt;
}

}  // namespace

Tensor autocast_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::string_view path,
                       const char* layer, int64_t out_padded, const Tensor& weight_scale) {
  const amp::Policy* policy = amp::current_policy();
  Tensor xc = x, w = weight;
  if (policy == nullptr) {
    MPT_CHECK(x.dtype() == weight.dtype() && x.device() == weight.device(),
              "[{}] input {} does not match the parameters ({}): convert one of them (module.to(...)) or run under "
              "amp::Autocast", layer, x.meta_str(), weight.meta_str());
  } else {
    const amp::Precision p = policy->at(path, weight.size(1), weight.size(0), weight.device());
    MPT_CHECK(x.dtype() != DType::F8E4M3 || (p == amp::Precision::FP8 && qat_scheme(policy, path) == nullptr),
              "[{}] '{}': the input {} is FP8 codes (a norm's output made for an FP8 GEMM: autocast_input_format), but "
              "the policy runs this layer in {}", layer, path, x.meta_str(), amp::to_string(p));
    if (const amp::QatScheme* q = qat_scheme(policy, path)) {
      return qat_linear(x, weight, bias, *q, p, path, layer, out_padded, weight_scale);
    }
    if (p == amp::Precision::FP8) {
      MPT_CHECK(policy->fp8_state != nullptr, "[{}] '{}': the policy asks for FP8 but holds no Fp8ScalingState", layer,
                path);
      // The FP32 master weight and bias go in directly: fp8_linear quantizes the input (E4M3) and the gradient (per
      // the recipe) and adds the bias in FP32; dW lands in the master's FP32 gradient. The weight's E4M3 codes come
      // from the cast cache: made once per optimizer step, reused by every micro-batch.
      const fp8::Fp8Recipe& recipe = policy->fp8_state->recipe();
      fp8::Fp8LinearMetas metas = policy->fp8_state->register_linear(std::string(path));
      const bool need_wt = autograd::is_grad_enabled() && x.requires_grad();  // dgrad reads W^T's codes
      auto w8 = amp::fp8_weight_copy(weight, recipe, metas.weight, need_wt);
      const DType out = amp::output_dtype(p);
      return fp8::fp8_linear(x, weight, bias,
                             {.recipe = recipe, .metas = std::move(metas), .out_dtype = out,
                              .weight_fp8 = std::move(w8), .compute_bias = epilogue_bias(bias, out, true),
                              .codes_grad_dtype = codes_grad_dtype(policy)});
    }
    const DType dt = p == amp::Precision::FP32 ? weight.dtype() : amp::output_dtype(p);
    if (xc.dtype() != dt) xc = xc.to(dt);
    if (weight.dtype() == DType::F32 && dt != DType::F32) {
      // The GEMMs read the cached low-precision copy (at the padded width, when padding: padded once per step,
      // not per call); the gradient lands in the master (ops::linear writes dW in FP32 from the BF16/FP16 GEMM),
      // and the bias is added in the GEMM's FP32 epilogue (on CUDA its cached copy in dt, what cuBLASLt reads).
      Tensor copy;
      {
        autograd::NoGradGuard no_grad;
        copy = amp::compute_copy(weight, dt, out_padded > weight.size(0) ? out_padded : 0);
      }
      return ops::linear(xc, weight, bias, {.compute_weight = std::move(copy),
                                            .compute_bias = epilogue_bias(bias, dt, false), .out_padded = out_padded});
    }
    w = amp::compute_copy(weight, dt);  // a master in another dtype: a recorded cast
  }
  return ops::linear(xc, w, bias, {.out_padded = out_padded});
}

ops::NormOutput autocast_input_format(DType x, const Tensor& weight, std::string_view path) {
  const amp::Policy* policy = amp::current_policy();
  // The norm's activations: the FP32 stream, or a half one the policy keeps (Policy::residual; its codes' gradient
  // comes back in that dtype: codes_grad_dtype).
  const bool stream = x == DType::F32 || (policy != nullptr && policy->residual == x);
  if (policy == nullptr || !stream || qat_scheme(policy, path) != nullptr) return x;
  const amp::Precision p = policy->at(path, weight.size(1), weight.size(0), weight.device());
  if (p == amp::Precision::FP8) {
    if (policy->fp8_state == nullptr) return x;
    // Block scaling quantizes the norm's output along rows and along columns (1x128 each way): a BF16 output, as the
    // BF16 layers read (TransformerEngine's LayerNormLinear under Float8BlockScaling quantizes a BF16 ln_out).
    if (std::holds_alternative<fp8::BlockScaling>(policy->fp8_state->recipe()))
      return x == DType::F32 ? DType::BF16 : x;
    const fp8::Fp8LinearMetas metas = policy->fp8_state->register_linear(std::string(path));
    const auto& in = metas.input;
    if (in == nullptr || in->collect_telemetry || in->dtype != DType::F8E4M3 || in->scale.device() != weight.device())
      return x;
    if (const auto* c = std::get_if<fp8::CurrentScaling>(&policy->fp8_state->recipe())) {
      // The norm writes the codes' scale and scale_inv: into new tensors that the meta then holds (current scaling
      // keeps no state between steps), so codes saved for backward by an earlier forward keep theirs.
      in->scale = Tensor::empty({}, DType::F32, weight.device());
      in->scale_inv = Tensor::empty({}, DType::F32, weight.device());
      return ops::NormOutput::fp8_current(in->scale, in->scale_inv, c->power_2_scale, c->amax_epsilon);
    }
    return ops::NormOutput::fp8(in->scale, in->amax_history.slice(0, 0, 1));
  }
  const DType dt = p == amp::Precision::FP32 ? weight.dtype() : amp::output_dtype(p);  // as autocast_linear casts
  return dt == DType::BF16 || dt == DType::F16 ? dt : x;
}

std::optional<ops::NormOutput> autocast_shared_fp8_input(DType x, const std::vector<InputReader>& readers) {
  const amp::Policy* policy = amp::current_policy();
  if (policy == nullptr || policy->fp8_state == nullptr || readers.size() < 2) return std::nullopt;
  for (const InputReader& r : readers) {
    if (policy->at(r.path, r.weight->size(1), r.weight->size(0), r.weight->device()) != amp::Precision::FP8 || qat_scheme(policy, r.path) != nullptr ||
        r.weight->device() != policy->fp8_state->device())
      return std::nullopt;
  }
  ops::NormOutput first = autocast_input_format(x, *readers[0].weight, readers[0].path);
  if (first.dtype != DType::F8E4M3) return first;  // a plain dtype (block scaling's BF16): each reader quantizes it
  const std::string input = std::string(readers[0].path) + ".input";
  for (size_t i = 1; i < readers.size(); ++i)
    policy->fp8_state->share_tensor(std::string(readers[i].path) + ".input", input, fp8::Fp8Role::Input);
  return first;
}

Tensor autocast_packed_linear(const Tensor& x, const std::vector<InputReader>& readers, bool f32_grad) {
  if (readers.empty() || !x.defined() || x.dim() != 2 || is_fp8(x.dtype())) return {};
  std::vector<Tensor> weights;
  for (const InputReader& r : readers) {
    const Tensor& w = *r.weight;
    if (w.dim() != 2 || w.size(1) != x.size(1) || w.dtype() != readers[0].weight->dtype() || w.device() != x.device())
      return {};
    weights.push_back(w);
  }
  const DType w_dtype = weights[0].dtype();
  const amp::Policy* policy = amp::current_policy();
  DType dt = w_dtype;
  if (policy != nullptr) {
    const auto at = [&](const InputReader& r) {
      return policy->at(r.path, r.weight->size(1), r.weight->size(0), r.weight->device());
    };
    const amp::Precision p = at(readers[0]);
    for (const InputReader& r : readers)
      if (at(r) != p || qat_scheme(policy, r.path) != nullptr) return {};
    if (p == amp::Precision::FP8) return {};
    dt = p == amp::Precision::FP32 ? w_dtype : amp::output_dtype(p);
  } else if (x.dtype() != w_dtype) {
    return {};
  }
  const Tensor xc = x.dtype() == dt ? x : x.to(dt);
  const bool half = dt == DType::BF16 || dt == DType::F16;
  const ops::PackedLinearOptions opt{.grad_x_dtype = f32_grad && half ? std::optional(DType::F32) : std::nullopt};
  if (w_dtype == DType::F32 && half) {
    Tensor packed;
    {
      autograd::NoGradGuard no_grad;
      packed = amp::packed_compute_copy(weights, dt);
    }
    return ops::packed_linear(xc, weights, {.compute_weight = std::move(packed), .grad_x_dtype = opt.grad_x_dtype});
  }
  if (w_dtype != dt) return {};  // masters in another dtype: each layer casts its own
  return ops::packed_linear(xc, weights, opt);
}

Tensor autocast_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, std::string_view path1, const Tensor& w2,
                    const Tensor& b2, std::string_view path2) {
  const amp::Policy* policy = amp::current_policy();
  if (policy == nullptr) {
    if (x.dtype() != w1.dtype() || w1.dtype() != w2.dtype() || x.device() != w1.device()) return {};
    return ops::mlp(x, w1, b1, w2, b2);
  }
  const amp::Precision p = policy->at(path1, w1.size(1), w1.size(0), w1.device());
  if (policy->at(path2, w2.size(1), w2.size(0), w2.device()) != p) return {};
  if (qat_scheme(policy, path1) != nullptr || qat_scheme(policy, path2) != nullptr) return {};  // layer by layer
  if (p == amp::Precision::FP8) {
    // Both layers in FP8: as autocast_linear runs each (the masters go in, the cached E4M3 copies are read, each
    // layer's metas registered under its path), with the GELU in the first GEMM's epilogue and its derivative in the
    // second's dgrad.
    MPT_CHECK(policy->fp8_state != nullptr, "[MLP] '{}': the policy asks for FP8 but holds no Fp8ScalingState", path1);
    const fp8::Fp8Recipe& recipe = policy->fp8_state->recipe();
    fp8::Fp8LinearMetas m1 = policy->fp8_state->register_linear(std::string(path1));
    fp8::Fp8LinearMetas m2 = policy->fp8_state->register_linear(std::string(path2));
    const bool grad = autograd::is_grad_enabled();
    const bool need_w1t = grad && x.requires_grad();  // the backward's GEMMs read W^T's codes
    const bool need_w2t = grad && (x.requires_grad() || w1.requires_grad() || (b1.defined() && b1.requires_grad()));
    auto c1 = amp::fp8_weight_copy(w1, recipe, m1.weight, need_w1t);
    auto c2 = amp::fp8_weight_copy(w2, recipe, m2.weight, need_w2t);
    const DType out = amp::output_dtype(p);
    return fp8::fp8_mlp(x, w1, b1, w2, b2,
                        {.recipe = recipe, .metas1 = std::move(m1), .metas2 = std::move(m2), .out_dtype = out,
                         .weight1_fp8 = std::move(c1), .weight2_fp8 = std::move(c2),
                         .compute_b1 = epilogue_bias(b1, out, true), .compute_b2 = epilogue_bias(b2, out, true),
                         .codes_grad_dtype = codes_grad_dtype(policy)});
  }
  if (w1.dtype() != w2.dtype()) return {};
  if (p == amp::Precision::FP32) return x.dtype() == w1.dtype() ? ops::mlp(x, w1, b1, w2, b2) : Tensor{};
  const DType dt = amp::output_dtype(p);
  if (w1.dtype() != DType::F32) return {};
  const Tensor xc = x.dtype() == dt ? x : x.to(dt);
  Tensor c1, c2;
  {
    autograd::NoGradGuard no_grad;
    c1 = amp::compute_copy(w1, dt);
    c2 = amp::compute_copy(w2, dt);
  }
  return ops::mlp(xc, w1, b1, w2, b2,
                  {.compute_w1 = std::move(c1), .compute_w2 = std::move(c2),
                   .compute_b1 = epilogue_bias(b1, dt, false), .compute_b2 = epilogue_bias(b2, dt, false)});
}

}  // namespace mpt::nn::detail
