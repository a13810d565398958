// src/ops/fp8_linear.cpp: the FP8 linear op: FP8 fprop, dgrad and wgrad over operands quantized by ops/fp8_quantize.
#include "mpt/ops/fp8_linear.h"

#include <cmath>
#include <string>
#include <tuple>
#include <utility>
#include <variant>

#include "mpt/ops/cast.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"
#include "ops/dispatch.h"
#include "ops/fp8_quantize.h"

namespace mpt::ops {
namespace {

constexpr const char* kOp = "fp8_linear";
using amp::Fp8Role;

// Codes and their scaling, as a GEMM operand reads them.
struct Fp8Operand {
  Tensor data;
  Fp8Scaling scaling{};
};

Fp8Operand operand(const Quantized& q) {
  switch (q.layout) {
    case ScaleLayout::Block1x128: return {q.data, Fp8Scaling::block_1x128(q.scale_inv)};
    case ScaleLayout::Block128x128: return {q.data, Fp8Scaling::block_128x128(q.scale_inv)};
    case ScaleLayout::PerTensor: break;
  }
  return {q.data, Fp8Scaling::per_tensor(q.scale_inv)};
}

// q with dimension `dim` of its codes padded with zeros to a multiple of `multiple` (a divisor of 128, so 1x128 and
// 128x128 block scales along that dim keep their count; padded rows of 1x128 scales get 1).
Quantized pad_codes(const Quantized& q, int dim, int64_t multiple) {
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

// C = A B^T with both operands stored K-major (the TN layout), FP32 accumulation, rounded once to `out`.
// On CUDA, cuBLASLt's FP8 rules (vendor-semantics R2.2, R4.3) constrain dimensions that follow the batch: K must be a
// multiple of 16 (wgrad's K is the token count) and, under block scaling, A's rows (fprop's and dgrad's tokens) a
// multiple of 4. Those are padded with zero codes, which add exactly nothing, and the padded rows of C are dropped.
// (Found by the emulated cuBLASLt: an odd token count worked on the CPU and failed on CUDA.)
Tensor gemm_tn(const Quantized& qa, const Quantized& qb, DType out, const Tensor& bias = {}) {
  Quantized pa = qa, pb = qb;
  if (qa.data.device().is_cuda()) {
    if (qa.layout != ScaleLayout::PerTensor) pa = pad_codes(pa, 0, 4);
    pa = pad_codes(pa, 1, 16);
    pb = pad_codes(pb, 1, 16);
  }
  const Fp8Operand a = operand(pa), b = operand(pb);
  MatmulOptions o;
  o.trans_b = true;
  o.scale_a = a.scaling;
  o.scale_b = b.scaling;
  o.out_dtype = out;
  o.bias = bias;
  const Tensor c = matmul(a.data, b.data, o);
  return c.size(0) == qa.data.size(0) ? c : c.slice(0, 0, qa.data.size(0)).contiguous();
}

void check_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8LinearConfig& c, DType out) {
  const Device dev = detail::check_same_device({&x, &weight}, kOp);
  MPT_CHECK(x.dim() >= 1 && detail::is_wide_dtype(x.dtype()),
            "[{}] x must be f32, bf16 or f16 with at least one dim, got {}", kOp,
            x.meta_str());
  MPT_CHECK(weight.dim() == 2 && detail::is_wide_dtype(weight.dtype()),
            "[{}] weight must be a 2-d (M, K) f32, bf16 or f16 tensor, "
            "got {}", kOp, weight.meta_str());
  MPT_CHECK(weight.size(1) == x.size(-1), "[{}] x {} has K = {} but weight {} has K = {}", kOp, x.meta_str(),
            x.size(-1), weight.meta_str(), weight.size(1));
  MPT_CHECK(x.numel() > 0 && weight.numel() > 0, "[{}] empty operands: x {}, weight {}", kOp, x.meta_str(),
            weight.meta_str());
  if (bias.defined()) {
    detail::check_same_device({&x, &bias}, kOp);
    MPT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0) && detail::is_wide_dtype(bias.dtype()),
              "[{}] bias must be f32, bf16 or f16 of shape [{}] (weight {}), got {}", kOp, weight.size(0),
              weight.meta_str(), bias.meta_str());
  }
  MPT_CHECK(detail::is_wide_dtype(out), "[{}] out_dtype must be f32, bf16 or f16, got {}", kOp, out);
  detail::check_fp8_meta(kOp, c.metas.input, "input", Fp8Role::Input, c.recipe, dev);
  detail::check_fp8_meta(kOp, c.metas.weight, "weight", Fp8Role::Weight, c.recipe, dev);
  detail::check_fp8_meta(kOp, c.metas.grad_output, "grad_output", Fp8Role::GradOutput, c.recipe, dev);
  if (const auto& w = c.weight_fp8) {
    MPT_CHECK(w->rowwise.data.defined() && w->rowwise.data.shape() == weight.shape(),
              "[{}] weight_fp8 holds codes of shape {} but weight is {}", kOp,
              w->rowwise.data.defined() ? w->rowwise.data.meta_str() : std::string("undefined"), weight.meta_str());
    MPT_CHECK(w->recipe_index == c.recipe.index(), "[{}] weight_fp8 was quantized under recipe {}, the config's is {}",
              kOp, w->recipe_index, c.recipe.index());
    MPT_CHECK(w->rowwise.data.device() == dev, "[{}] weight_fp8 lives on {} but the operands on {}", kOp,
              w->rowwise.data.device().str(), dev.str());
  }
}

// What the backward keeps: FP8 codes only (see fp8_linear.h for the byte counts).
struct Saved {
  Quantized xt;  // x^T codes, (K, N): wgrad's B
  Quantized wt;  // W^T codes, (K, M): dgrad's B (a cached weight copy's, shared with the cache)
  amp::Fp8Recipe recipe;
  std::shared_ptr<amp::Fp8TensorMeta> grad_meta;
  Shape x_shape;
  int64_t m = 0;
  DType x_dtype = DType::F32, w_dtype = DType::F32, b_dtype = DType::F32;
  bool need_dx = false, need_dw = false, need_db = false;
};

// Gradients of y = x W^T + b for dy (..., M): {dx, dW, db}, new tensors (the engine accumulates them into leaves).
std::vector<Tensor> fp8_linear_backward(const Tensor& dy_in, const Saved& s) {
  if (!dy_in.defined()) return {Tensor(), Tensor(), Tensor()};
  const Tensor dy = dy_in.reshape({-1, s.m});  // (N, M)
  detail::Fp8Pair q;
  if (s.need_dx || s.need_dw) {
    q = detail::quantize_for_gemm(dy, s.recipe, Fp8Role::GradOutput, s.grad_meta, s.need_dx, s.need_dw);
  }
  Tensor dx, dw, db;
  if (s.need_dx) dx = gemm_tn(q.rowwise, s.wt, s.x_dtype).reshape(s.x_shape);  // (N, M) x (K, M)^T
  if (s.need_dw) dw = gemm_tn(q.columnwise, s.xt, s.w_dtype);                  // (M, N) x (K, N)^T
  if (s.need_db) db = detail::bias_grad(dy).to(s.b_dtype);
  return {dx, dw, db};
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8LinearConfig& config) {
  const detail::GradRecorder grad({&x, &weight, &bias});
  const DType out = config.out_dtype.value_or(x.dtype());
  check_args(x, weight, bias, config, out);
  const int64_t k = x.size(-1), m = weight.size(0);
  const Tensor x2d = x.reshape({-1, k});  // (N, K)

  Saved s;
  s.need_dx = grad && x.requires_grad();
  s.need_dw = grad && weight.requires_grad();
  s.need_db = grad && bias.defined() && bias.requires_grad();
  const detail::Fp8Pair xq =
      detail::quantize_for_gemm(x2d, config.recipe, Fp8Role::Input, config.metas.input, true, s.need_dw);
  detail::Fp8Pair wq;
  if (config.weight_fp8) {
    MPT_CHECK(!s.need_dx || config.weight_fp8->has_transpose(),
              "[{}] x requires grad but weight_fp8 was made without W^T's codes (quantize_fp8_weight transpose)", kOp);
    wq.rowwise = config.weight_fp8->rowwise;
    if (s.need_dx) wq.columnwise = config.weight_fp8->columnwise;
  } else {
    wq = detail::quantize_for_gemm(weight, config.recipe, Fp8Role::Weight, config.metas.weight, true, s.need_dx);
  }

  // (N, K) x (M, K)^T, the bias added in FP32 in the GEMM's epilogue before the one rounding to `out`.
  Tensor y = gemm_tn(xq.rowwise, wq.rowwise, out, bias.defined() ? bias.detach() : Tensor{});
  Shape y_shape = x.shape();
  y_shape.back() = m;
  y = y.reshape(y_shape);

  if (grad) {
    s.xt = xq.columnwise;
    s.wt = wq.columnwise;
    s.recipe = config.recipe;
    s.grad_meta = config.metas.grad_output;
    s.x_shape = x.shape();
    s.m = m;
    s.x_dtype = x.dtype(), s.w_dtype = weight.dtype(), s.b_dtype = bias.defined() ? bias.dtype() : DType::F32;
    grad.record("Fp8LinearBackward", {&y},
                [s = std::move(s)](const std::vector<Tensor>& g) { return fp8_linear_backward(g[0], s); });
  }
  return y;
}

}  // namespace mpt::ops
