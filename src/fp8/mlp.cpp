// src/fp8/mlp.cpp: the FP8 MLP op: fp8_linear's quantization and GEMMs for both layers, GELU in their epilogues.
#include "mpt/fp8/mlp.h"

#include <string>
#include <utility>

#include "ops/dispatch.h"
#include "fp8/gemm.h"
#include "fp8/quantize.h"

// The FP8 ops are built from the ops layer below (cast, matmul, reductions, dispatch).
using namespace mpt::ops;  // NOLINT(google-build-using-namespace)

namespace mpt::fp8 {
namespace {

constexpr const char* kOp = "fp8_mlp";
using fp8::Fp8Role;
using detail::gemm_tn;

// One layer's weight codes: the cached copy when given (with W^T's codes when `transpose`), else quantized here
// (recording W's amax into the weight meta, as fp8_linear does).
detail::Fp8Pair weight_codes(const Tensor& w, const std::shared_ptr<const Fp8Weight>& cached, const fp8::Fp8Recipe& r,
                             const fp8::Fp8LinearMetas& metas, bool transpose, const char* name) {
  if (!cached) return detail::quantize_for_gemm(w, r, Fp8Role::Weight, metas.weight, true, transpose);
  MPT_CHECK(!transpose || cached->has_transpose(),
            "[{}] the backward needs {}^T's codes but {}_fp8 was made without them (quantize_fp8_weight transpose)",
            kOp, name, name);
  detail::Fp8Pair p;
  p.rowwise = cached->rowwise;
  if (transpose) p.columnwise = cached->columnwise;
  return p;
}

struct Saved {
  ops::Quantized xt, w1t, ht, w2t;  // x^T, W1^T, h^T, W2^T codes: the backward GEMMs' B operands
  Tensor pre;                  // x W1^T + b1 in h's dtype, the GELU's input (kept when dpre is needed)
  fp8::Fp8Recipe recipe;
  std::shared_ptr<fp8::Fp8TensorMeta> grad_meta1, grad_meta2;
  int64_t c_out = 0;
  DType h_dtype = DType::F32, x_dtype = DType::F32, w1_dtype = DType::F32, w2_dtype = DType::F32, b1_dtype = DType::F32,
        b2_dtype = DType::F32;
  bool need_dx = false, need_dw1 = false, need_db1 = false, need_dw2 = false, need_db2 = false;
  bool need_dpre() const { return need_dx || need_dw1 || need_db1; }
};

// Gradients for dy [N, C']: {dx, dW1, db1, dW2, db2}, in the order fp8_linear's two backward nodes would run; dW1 and
// dW2 added into partial[1] and partial[3] when the engine offers the weights' gradients (gemm_tn's add_into).
std::vector<Tensor> fp8_mlp_backward(const Tensor& dy_in, const Saved& s, std::vector<Tensor>& partial) {
  std::vector<Tensor> d(5);
  if (!dy_in.defined()) return d;
  const Tensor dy = dy_in.reshape({-1, s.c_out});
  const DType hdt = s.h_dtype;
  if (s.need_dw2 || s.need_dpre()) {
    // b2's gradient: dy's column sums, fused into its cast + transpose under the per-tensor recipes.
    if (s.need_db2) d[4] = ops::detail::fresh_or_empty(partial, 4, {s.c_out}, s.b2_dtype, dy.device());
    const detail::Fp8Pair q = detail::quantize_for_gemm(dy, s.recipe, Fp8Role::GradOutput, s.grad_meta2,
                                                        s.need_dpre(), s.need_dw2, d[4]);
    Tensor dpre, db1;
    const auto* block = std::get_if<BlockScaling>(&s.recipe);
    // Block scaling: cuBLASLt has no DGELU epilogue with block scales, so dh = dy W2 comes out plain and dpre is made
    // by the pass that quantizes it both ways (db1 from there too), never written.
    const bool dgelu_in_quantize =
        block != nullptr && s.need_dx && s.need_dw1 && !(s.grad_meta1 && s.grad_meta1->collect_telemetry);
    if (s.need_dpre()) db1 = s.need_db1 ? ops::detail::fresh_or_empty(partial, 2, {s.pre.size(1)}, hdt, dy.device()) : Tensor{};
    if (s.need_dpre() && !dgelu_in_quantize) {  // dpre = (dy W2) * gelu'(pre), db1 = its column sums: one FP8 GEMM
      dpre = gemm_tn(q.rowwise, s.w2t, hdt, {.dgelu_aux = s.pre, .aux_bias_grad = db1});  // with the DGELU epilogue
    }
    if (s.need_dw2) d[3] = gemm_tn(q.columnwise, s.ht, s.w2_dtype, {}, autograd::offer(partial, 3, s.w2_dtype));
    if (dgelu_in_quantize) {
      const detail::Fp8Pair p = detail::quantize_dgelu_for_gemm(gemm_tn(q.rowwise, s.w2t, hdt), s.pre, *block, db1);
      d[0] = gemm_tn(p.rowwise, s.w1t, s.x_dtype);
      d[1] = gemm_tn(p.columnwise, s.xt, s.w1_dtype, {}, autograd::offer(partial, 1, s.w1_dtype));
    }
    if (s.need_db1) d[2] = db1.to(s.b1_dtype);
    if (!dgelu_in_quantize && (s.need_dx || s.need_dw1)) {
      const detail::Fp8Pair p =
          detail::quantize_for_gemm(dpre, s.recipe, Fp8Role::GradOutput, s.grad_meta1, s.need_dx, s.need_dw1);
      if (s.need_dx) d[0] = gemm_tn(p.rowwise, s.w1t, s.x_dtype);
      if (s.need_dw1) d[1] = gemm_tn(p.columnwise, s.xt, s.w1_dtype, {}, autograd::offer(partial, 1, s.w1_dtype));
    }
  } else if (s.need_db2) {
    d[4] = ops::detail::bias_grad(dy).to(s.b2_dtype);
  }
  return d;
}

}  // namespace

Tensor fp8_mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
               const Fp8MlpConfig& c) {
  const ops::detail::GradRecorder grad({&x, &w1, &b1, &w2, &b2});
  detail::check_fp8_input(kOp, x, c.recipe, c.metas1.input);
  MPT_CHECK(x.dim() == 2, "[{}] expected a non-empty x [N, C], got {}", kOp, x.meta_str());
  const Device dev = x.device();
  const DType out = c.out_dtype.value_or(detail::input_grad_dtype(x.dtype()));
  MPT_CHECK(detail::is_wide_dtype(out), "[{}] out_dtype must be f32, bf16 or f16, got {}", kOp, out);
  detail::check_fp8_layer(kOp, {"w1", "b1", "metas1", "weight1_fp8"}, dev, x.size(1), w1, b1, c.recipe, c.metas1,
                          c.weight1_fp8);
  detail::check_fp8_layer(kOp, {"w2", "b2", "metas2", "weight2_fp8"}, dev, w1.size(0), w2, b2, c.recipe, c.metas2,
                          c.weight2_fp8);
  ops::detail::check_compute_bias(c.compute_b1, b1, kOp, "compute_b1");
  ops::detail::check_compute_bias(c.compute_b2, b2, kOp, "compute_b2");
  Saved s;
  s.need_dx = grad && x.requires_grad();
  s.need_dw1 = grad && w1.requires_grad();
  s.need_db1 = grad && b1.defined() && b1.requires_grad();
  s.need_dw2 = grad && w2.requires_grad();
  s.need_db2 = grad && b2.defined() && b2.requires_grad();
  const int64_t n = x.size(0), hidden = w1.size(0);

  // Layer 1: x and W1 quantized, the pre-activation x W1^T + b1 from one FP8 GEMM. h's codes and their transpose come
  // from the pre-activation, the quantizing passes applying the GELU as they read it (TransformerEngine's gelu +
  // cast; current scaling finds max |gelu(pre)| in a pass over pre first; block scaling's rowwise and columnwise 1x128
  // passes each read pre), and h itself is never written. Under telemetry (which measures h) the GEMM's GELU epilogue
  // writes h beside the pre-activation and h is quantized from it. The same bits on the CPU, where the epilogue
  // rounds the pre-activation before its GELU (ops::matmul) as the quantizer's prologue does.
  const detail::Fp8Pair xq =
      detail::quantize_for_gemm(x, c.recipe, Fp8Role::Input, c.metas1.input, true, s.need_dw1);
  const detail::Fp8Pair w1q = weight_codes(w1, c.weight1_fp8, c.recipe, c.metas1, s.need_dx, "weight1");
  const bool fast = detail::fast_accum_fprop(c.recipe);
  const Tensor bias1 = ops::detail::epilogue_bias(c.compute_b1, b1);
  const bool gelu_cast = !(c.metas2.input && c.metas2.input->collect_telemetry);
  Tensor pre, h;
  if (gelu_cast) {
    pre = gemm_tn(xq.rowwise, w1q.rowwise, out, {.bias = bias1, .fp8_fast_accum = fast});
  } else {
    pre = Tensor::empty({n, hidden}, out, dev);
    h = gemm_tn(xq.rowwise, w1q.rowwise, out, {.bias = bias1, .gelu_aux = pre, .fp8_fast_accum = fast});
  }
  // Layer 2: h quantized (its transpose for dW2), y = h W2^T + b2.
  const detail::Fp8Pair hq =
      gelu_cast ? detail::quantize_for_gemm(pre, c.recipe, Fp8Role::Input, c.metas2.input, true, s.need_dw2, {}, true)
                : detail::quantize_for_gemm(h, c.recipe, Fp8Role::Input, c.metas2.input, true, s.need_dw2);
  const detail::Fp8Pair w2q = weight_codes(w2, c.weight2_fp8, c.recipe, c.metas2, s.need_dpre(), "weight2");
  Tensor y = gemm_tn(hq.rowwise, w2q.rowwise, out, {.bias = ops::detail::epilogue_bias(c.compute_b2, b2),
                                                   .fp8_fast_accum = fast});

  if (grad) {
    s.xt = xq.columnwise, s.w1t = w1q.columnwise, s.ht = hq.columnwise, s.w2t = w2q.columnwise;
    if (s.need_dpre()) s.pre = std::move(pre);
    s.h_dtype = out;
    s.recipe = c.recipe;
    s.grad_meta1 = c.metas1.grad_output, s.grad_meta2 = c.metas2.grad_output;
    s.c_out = w2.size(0);
    s.x_dtype = detail::input_grad_dtype(kOp, x.dtype(), c.codes_grad_dtype);
    s.w1_dtype = autograd::grad_dtype(w1), s.w2_dtype = autograd::grad_dtype(w2);
    s.b1_dtype = b1.defined() ? autograd::grad_dtype(b1) : DType::F32;
    s.b2_dtype = b2.defined() ? autograd::grad_dtype(b2) : DType::F32;
    grad.record("Fp8MlpBackward", {&y},
                autograd::PartialBackwardFn(
                    [s = std::move(s)](const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                      return fp8_mlp_backward(g[0], s, partial);
                    }));
  }
  return y;
}

}  // namespace mpt::fp8
