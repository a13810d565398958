// src/ops/mlp.cpp: the MLP op: two GEMMs with the GELU (and its derivative, and b1's gradient) in their epilogues.
#include "mpt/ops/mlp.h"

#include "mpt/autograd/node.h"
#include "mpt/ops/matmul.h"
#include "ops/dispatch.h"

namespace mpt::ops {
namespace {

constexpr const char* kOp = "mlp";

void check_layer(const Tensor& x, const Tensor& w, const Tensor& c, const Tensor& b, int64_t in, const char* wn,
                 const char* bn) {
  MPT_CHECK(w.defined() && w.dim() == 2 && w.size(1) == in, "[{}] {} must be [out, {}], got {}", kOp, wn, in,
            w.defined() ? w.meta_str() : std::string("undefined"));
  MPT_CHECK(c.shape() == w.shape() && c.dtype() == x.dtype() && is_floating(x.dtype()) && !is_fp8(x.dtype()),
            "[{}] the GEMMs need x and the copy of {} they read in one of f32, f16, bf16, f64: got x {} and {}", kOp,
            wn, x.meta_str(), c.meta_str());
  MPT_CHECK(w.dtype() == x.dtype() || (w.dtype() == DType::F32 && (x.dtype() == DType::F16 || x.dtype() == DType::BF16)),
            "[{}] {} {} must have x's dtype ({}), or be an f32 master of an f16/bf16 compute copy", kOp, wn,
            w.meta_str(), x.dtype());
  if (b.defined()) {
    MPT_CHECK(b.dim() == 1 && b.size(0) == w.size(0) && is_floating(b.dtype()) && !is_fp8(b.dtype()),
              "[{}] {} must be a float [{}], got {}", kOp, bn, w.size(0), b.meta_str());
  }
  detail::check_same_device({&x, &w, &c}, kOp);
  if (b.defined()) detail::check_same_device({&x, &b}, kOp);
}

struct Saved {
  Tensor x, pre, h, w1c, w2c;
  DType w1_dtype, w2_dtype, b1_dtype, b2_dtype;
  bool need_x, need_w1, need_b1, need_w2, need_b2;
};

// Gradients of y = gelu(x W1^T + b1) W2^T + b2 for dy [N, C']: {dx, dW1, db1, dW2, db2}; dW1 and dW2 added into
// partial[1] and partial[3] when the engine offers the weights' gradients (detail::weight_grad).
std::vector<Tensor> mlp_backward(const Tensor& dy_in, const Saved& s, std::vector<Tensor>& partial) {
  std::vector<Tensor> d(5);
  if (!dy_in.defined()) return d;
  const Tensor dy = (dy_in.dtype() == s.x.dtype() ? dy_in : dy_in.to(s.x.dtype())).contiguous();
  const DType dt = dy.dtype();
  if (s.need_w2) {  // dW2 = dy^T h, db2 = dy's column sums from the same GEMM
    Tensor db2 = s.need_b2 ? detail::fresh_or_empty(partial, 4, {dy.size(1)}, s.w2_dtype, dy.device()) : Tensor{};
    d[3] = detail::weight_grad(dy, s.h, s.w2_dtype, autograd::offer(partial, 3, s.w2_dtype), db2);
    if (s.need_b2) d[4] = db2;
  } else if (s.need_b2) {
    d[4] = detail::bias_grad(dy);
  }
  if (d[4].defined() && d[4].dtype() != s.b2_dtype) d[4] = d[4].to(s.b2_dtype);
  if (s.need_x || s.need_w1 || s.need_b1) {  // dpre = (dy W2) * gelu'(pre), db1 = its column sums, one GEMM
    Tensor dpre = Tensor::empty(s.pre.shape(), dt, dy.device());
    Tensor db1 = s.need_b1 ? detail::fresh_or_empty(partial, 2, {s.pre.size(1)}, dt, dy.device()) : Tensor{};
    matmul_out(dy, s.w2c, dpre, 0.0f, {.dgelu_aux = s.pre, .aux_bias_grad = db1});
    if (s.need_b1) d[2] = db1.dtype() == s.b1_dtype ? db1 : db1.to(s.b1_dtype);
    if (s.need_w1) d[1] = detail::weight_grad(dpre, s.x, s.w1_dtype, autograd::offer(partial, 1, s.w1_dtype));
    if (s.need_x) d[0] = matmul(dpre, s.w1c);
  }
  return d;
}

}  // namespace

Tensor mlp(const Tensor& x, const Tensor& w1, const Tensor& b1, const Tensor& w2, const Tensor& b2,
           const MlpOptions& o) {
  MPT_CHECK(x.defined() && x.dim() == 2, "[{}] expected x [N, C], got {}", kOp,
            x.defined() ? x.meta_str() : std::string("undefined"));
  const Tensor& w1c = o.compute_w1.defined() ? o.compute_w1 : w1;
  const Tensor& w2c = o.compute_w2.defined() ? o.compute_w2 : w2;
  check_layer(x, w1, w1c, b1, x.size(1), "w1", "b1");
  check_layer(x, w2, w2c, b2, w1.size(0), "w2", "b2");
  detail::check_compute_bias(o.compute_b1, b1, kOp, "compute_b1");
  detail::check_compute_bias(o.compute_b2, b2, kOp, "compute_b2");
  const detail::GradRecorder grad({&x, &w1, &b1, &w2, &b2});
  const int64_t n = x.size(0), hidden = w1.size(0);
  Tensor pre = Tensor::empty({n, hidden}, x.dtype(), x.device());
  Tensor h = Tensor::empty({n, hidden}, x.dtype(), x.device());
  // Grad is off from here (GradRecorder): the epilogue options are not differentiable, this op records its node.
  matmul_out(x.detach(), w1c.detach(), h, 0.0f,
             {.trans_b = true, .bias = detail::epilogue_bias(o.compute_b1, b1), .gelu_aux = pre});
  Tensor y = matmul(h, w2c.detach(), {.trans_b = true, .bias = detail::epilogue_bias(o.compute_b2, b2)});
  Saved s{x.detach(), pre, h, w1c.detach(), w2c.detach(), detail::weight_grad_dtype(x.dtype(), w1),
          detail::weight_grad_dtype(x.dtype(), w2), b1.defined() ? autograd::grad_dtype(b1) : DType::F32,
          b2.defined() ? autograd::grad_dtype(b2) : DType::F32,
          x.requires_grad(), w1.requires_grad(), b1.defined() && b1.requires_grad(), w2.requires_grad(),
          b2.defined() && b2.requires_grad()};
  grad.record("MlpBackward", {&y},
              autograd::PartialBackwardFn(
                  [s = std::move(s)](const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                    return mlp_backward(g[0], s, partial);
                  }));
  return y;
}

}  // namespace mpt::ops
