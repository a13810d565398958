// src/fp8/gemm.cpp: the TN GEMM on FP8 codes (fp8_linear, fp8_mlp), with the padding cuBLASLt's FP8 rules need.
#include "fp8/gemm.h"

#include <string>
#include <variant>

#include "ops/dispatch.h"
#include "fp8/quantize.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8::detail {
namespace {

Fp8Scaling scaling_of(const ops::Quantized& q) {
  switch (q.layout) {
    case ScaleLayout::Block1x128: return Fp8Scaling::block_1x128(q.scale_inv);
    case ScaleLayout::Block128x128: return Fp8Scaling::block_128x128(q.scale_inv);
    case ScaleLayout::PerTensor: break;
  }
  return Fp8Scaling::per_tensor(q.scale_inv);
}

// q with dimension `dim` of its codes padded with zeros to a multiple of `multiple` (a divisor of 128, so 1x128 and
// 128x128 block scales along that dim keep their count; padded rows of 1x128 scales get 1).
ops::Quantized pad_codes(const ops::Quantized& q, int dim, int64_t multiple) {
  const int64_t n = q.data.size(dim), padded = (n + multiple - 1) / multiple * multiple;
  if (padded == n) return q;
  Shape shape = q.data.shape();
  shape[static_cast<size_t>(dim)] = padded;
  Tensor data = Tensor::zeros(shape, q.data.dtype(), q.data.device());
  data.slice(dim, 0, n).copy_(q.data);
  Tensor scale = q.scale_inv;
  if (q.layout == ScaleLayout::Block1x128 && dim == 0) {
    scale = Tensor::ones({padded, q.scale_inv.size(1)}, DType::F32, q.data.device());
    scale.slice(0, 0, n).copy_(q.scale_inv);
  }
  return {data, scale, q.layout};
}

// t [m, n] with zero rows added up to `rows`.
Tensor pad_rows(const Tensor& t, int64_t rows) {
  Tensor out = Tensor::zeros({rows, t.size(1)}, t.dtype(), t.device());
  out.slice(0, 0, t.size(0)).copy_(t);
  return out;
}

}  // namespace

Tensor gemm_tn(const ops::Quantized& qa, const ops::Quantized& qb, DType out, const MatmulOptions& epilogue,
               const Tensor& add_into) {
  ops::Quantized pa = qa, pb = qb;
  if (qa.data.device().is_cuda()) {
    if (qa.layout != ScaleLayout::PerTensor) pa = pad_codes(pa, 0, 4);
    pa = pad_codes(pa, 1, 16);
    pb = pad_codes(pb, 1, 16);
  }
  const int64_t m = qa.data.size(0), mp = pa.data.size(0), n = qb.data.size(0);
  MatmulOptions o;
  o.trans_b = true;
  o.scale_a = scaling_of(pa);
  o.scale_b = scaling_of(pb);
  o.out_dtype = out;
  o.bias = epilogue.bias;
  o.gelu_aux = epilogue.gelu_aux;
  o.dgelu_aux = epilogue.dgelu_aux;
  o.aux_bias_grad = epilogue.aux_bias_grad;
  o.fp8_fast_accum = epilogue.fp8_fast_accum;
  if (mp != m) {  // padded rows of A: the aux gets them too (zero pre-activations; a zero product keeps dgelu at 0)
    if (o.gelu_aux.defined()) o.gelu_aux = Tensor::empty({mp, n}, out, qa.data.device());
    if (o.dgelu_aux.defined()) o.dgelu_aux = pad_rows(o.dgelu_aux, mp);
  }
  if (mp == m && !o.gelu_aux.defined() && !o.dgelu_aux.defined() &&
      ops::detail::adds_into(add_into, out, m, n, qa.data.device())) {
    matmul_out(pa.data, pb.data, add_into, ops::detail::offer_beta(add_into), o);
    return add_into;
  }
  const Tensor c = matmul(pa.data, pb.data, o);
  if (mp == m) return c;
  if (epilogue.gelu_aux.defined()) Tensor(epilogue.gelu_aux).copy_(o.gelu_aux.slice(0, 0, m));
  return c.slice(0, 0, m).contiguous();
}

bool fast_accum_fprop(const fp8::Fp8Recipe& recipe) { return !std::holds_alternative<fp8::BlockScaling>(recipe); }

void check_fp8_layer(const char* op, const Fp8LayerNames& nm, Device dev, int64_t in_features, const Tensor& weight,
                     const Tensor& bias, const fp8::Fp8Recipe& recipe, const fp8::Fp8LinearMetas& metas,
                     const std::shared_ptr<const Fp8Weight>& weight_fp8) {
  MPT_CHECK(weight.defined() && weight.dim() == 2 && is_wide_dtype(weight.dtype()),
            "[{}] {} must be a 2-d (M, K) f32, bf16 or f16 tensor, got {}", op, nm.weight,
            weight.defined() ? weight.meta_str() : std::string("undefined"));
  MPT_CHECK(weight.device() == dev, "[{}] {} {} is not on the input's device {}", op, nm.weight, weight.meta_str(),
            dev.str());
  MPT_CHECK(weight.size(1) == in_features, "[{}] the input has K = {} but {} {} has K = {}", op, in_features,
            nm.weight, weight.meta_str(), weight.size(1));
  MPT_CHECK(weight.numel() > 0, "[{}] empty operands: {} {}", op, nm.weight, weight.meta_str());
  if (bias.defined()) {
    MPT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && is_wide_dtype(bias.dtype()) && bias.device() == dev,
              "[{}] {} must be f32, bf16 or f16 of shape [{}] on {} ({} {}), got {}", op, nm.bias, weight.size(0),
              dev.str(), nm.weight, weight.meta_str(), bias.meta_str());
  }
  const std::string m = nm.metas;
  check_fp8_meta(op, metas.input, (m + ".input").c_str(), fp8::Fp8Role::Input, recipe, dev);
  check_fp8_meta(op, metas.weight, (m + ".weight").c_str(), fp8::Fp8Role::Weight, recipe, dev);
  check_fp8_meta(op, metas.grad_output, (m + ".grad_output").c_str(), fp8::Fp8Role::GradOutput, recipe, dev);
  if (const auto& w = weight_fp8) {
    MPT_CHECK(w->rowwise.data.defined() && w->rowwise.data.shape() == weight.shape(),
              "[{}] {} holds codes of shape {} but {} is {}", op, nm.weight_fp8,
              w->rowwise.data.defined() ? w->rowwise.data.meta_str() : std::string("undefined"), nm.weight,
              weight.meta_str());
    MPT_CHECK(w->recipe_index == recipe.index(), "[{}] {} was quantized under recipe {}, the config's is {}", op,
              nm.weight_fp8, w->recipe_index, recipe.index());
    MPT_CHECK(w->rowwise.data.device() == dev, "[{}] {} lives on {} but the operands on {}", op, nm.weight_fp8,
              w->rowwise.data.device().str(), dev.str());
  }
}

}  // namespace mpt::fp8::detail
