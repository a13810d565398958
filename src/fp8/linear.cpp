// src/fp8/linear.cpp: the FP8 linear op: FP8 fprop, dgrad and wgrad (ops/fp8_gemm) over operands quantized by
// ops/fp8_quantize.
#include "mpt/fp8/linear.h"

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
#include "fp8/gemm.h"
#include "fp8/quantize.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8 {
namespace {

constexpr const char* kOp = "fp8_linear";
using fp8::Fp8Role;
using detail::gemm_tn;

void check_args(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8LinearConfig& c, DType out) {
  const Device dev = ops::detail::check_same_device({&x, &weight}, kOp);
  detail::check_fp8_input(kOp, x, c.recipe, c.metas.input);
  detail::check_fp8_layer(kOp, {}, dev, x.size(-1), weight, bias, c.recipe, c.metas, c.weight_fp8);
  ops::detail::check_compute_bias(c.compute_bias, bias, kOp, "compute_bias");
  MPT_CHECK(detail::is_wide_dtype(out), "[{}] out_dtype must be f32, bf16 or f16, got {}", kOp, out);
}

// What the backward keeps: FP8 codes only (see fp8_linear.h for the byte counts).
struct Saved {
  ops::Quantized xt;  // x^T codes, (K, N): wgrad's B
  ops::Quantized wt;  // W^T codes, (K, M): dgrad's B (a cached weight copy's, shared with the cache)
  fp8::Fp8Recipe recipe;
  std::shared_ptr<fp8::Fp8TensorMeta> grad_meta;
  Shape x_shape;
  int64_t m = 0;
  DType x_dtype = DType::F32, w_dtype = DType::F32, b_dtype = DType::F32;
  bool need_dx = false, need_dw = false, need_db = false;
};

// Gradients of y = x W^T + b for dy (..., M): {dx, dW, db}; dW added into partial[1] when the engine offers the
// weight's gradient (a later micro-batch: detail::gemm_tn's add_into), the others new tensors.
std::vector<Tensor> fp8_linear_backward(const Tensor& dy_in, const Saved& s, std::vector<Tensor>& partial) {
  if (!dy_in.defined()) return {Tensor(), Tensor(), Tensor()};
  const Tensor dy = dy_in.reshape({-1, s.m});  // (N, M)
  detail::Fp8Pair q;
  // db: the column sums of dy, fused into its cast + transpose under the per-tensor recipes.
  Tensor db = s.need_db ? ops::detail::fresh_or_empty(partial, 2, {s.m}, s.b_dtype, dy.device()) : Tensor{};
  if (s.need_dx || s.need_dw) {
    q = detail::quantize_for_gemm(dy, s.recipe, Fp8Role::GradOutput, s.grad_meta, s.need_dx, s.need_dw, db);
  } else if (s.need_db) {
    db.copy_(ops::detail::bias_grad(dy));
  }
  Tensor dx, dw;
  if (s.need_dx) dx = gemm_tn(q.rowwise, s.wt, s.x_dtype).reshape(s.x_shape);  // (N, M) x (K, M)^T
  if (s.need_dw) dw = gemm_tn(q.columnwise, s.xt, s.w_dtype, {}, autograd::offer(partial, 1, s.w_dtype));  // (M, N) x (K, N)^T
  return {dx, dw, db};
}

}  // namespace

Tensor fp8_linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const Fp8LinearConfig& config) {
  const ops::detail::GradRecorder grad({&x, &weight, &bias});
  const DType out = config.out_dtype.value_or(detail::input_grad_dtype(x.dtype()));
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
  Tensor y = gemm_tn(xq.rowwise, wq.rowwise, out, {.bias = ops::detail::epilogue_bias(config.compute_bias, bias),
                                                   .fp8_fast_accum = detail::fast_accum_fprop(config.recipe)});
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
    s.x_dtype = detail::input_grad_dtype(kOp, x.dtype(), config.codes_grad_dtype);
    s.w_dtype = autograd::grad_dtype(weight);
    s.b_dtype = bias.defined() ? autograd::grad_dtype(bias) : DType::F32;
    grad.record("Fp8LinearBackward", {&y},
                autograd::PartialBackwardFn(
                    [s = std::move(s)](const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                      return fp8_linear_backward(g[0], s, partial);
                    }));
  }
  return y;
}

}  // namespace mpt::fp8
