// src/ops/packed_linear.cpp: several bias-free projections of one input as one GEMM, forward beside backward.
#include <algorithm>

#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/matmul.h"
#include "ops/dispatch.h"

namespace mpt::ops {

namespace {

constexpr const char* kOp = "packed_linear";
constexpr size_t kMaxWeights = 8;

bool is_half(DType d) { return d == DType::F16 || d == DType::BF16; }

// The weights converted to `dtype` into the rows of one tensor (not recorded).
Tensor pack(const std::vector<Tensor>& weights, int64_t rows, DType dtype) {
  autograd::NoGradGuard no_grad;
  Tensor packed = Tensor::empty({rows, weights[0].size(1)}, dtype, weights[0].device());
  int64_t at = 0;
  for (const Tensor& w : weights) {
    packed.slice(0, at, at + w.size(0)).copy_(w.detach());
    at += w.size(0);
  }
  return packed;
}

}  // namespace

Tensor packed_linear(const Tensor& x, const std::vector<Tensor>& weights, const PackedLinearOptions& opt) {
  MPT_CHECK(x.defined() && x.dim() == 2 && is_floating(x.dtype()) && !is_fp8(x.dtype()),
            "[{}] expected x [N, K] of f32, f16, bf16 or f64, got {}", kOp, x.defined() ? x.meta_str() : "undefined");
  MPT_CHECK(!weights.empty() && weights.size() <= kMaxWeights, "[{}] expected 1 to {} weights, got {}", kOp,
            kMaxWeights, weights.size());
  const DType w_dtype = weights[0].defined() ? weights[0].dtype() : DType::F32;
  int64_t rows = 0;
  std::vector<const Tensor*> inputs{&x};
  for (const Tensor& w : weights) {
    MPT_CHECK(w.defined() && w.dim() == 2 && w.size(1) == x.size(1) && w.dtype() == w_dtype,
              "[{}] every weight must be [M_i, {}] (x {}) of one dtype ({}), got {}", kOp, x.size(1), x.meta_str(),
              w_dtype, w.defined() ? w.meta_str() : "undefined");
    rows += w.size(0);
    inputs.push_back(&w);
  }
  MPT_CHECK(w_dtype == x.dtype() || (w_dtype == DType::F32 && is_half(x.dtype())),
            "[{}] the weights ({}) must have x's dtype ({}), or be f32 masters of an f16/bf16 x", kOp, w_dtype,
            x.dtype());
  for (const Tensor& w : weights)
    MPT_CHECK(w.device() == x.device(), "[{}] x is on {}, a weight {} on {}", kOp, x.device(), w.meta_str(),
              w.device());
  const Tensor wp = opt.compute_weight.defined() ? opt.compute_weight : pack(weights, rows, x.dtype());
  MPT_CHECK(wp.shape() == Shape({rows, x.size(1)}) && wp.dtype() == x.dtype() && wp.device() == x.device(),
            "[{}] compute_weight must be the weights' rows packed, [{}, {}] {} on {}: got {}", kOp, rows, x.size(1),
            x.dtype(), x.device(), wp.meta_str());
  const DType gx = opt.grad_x_dtype.value_or(x.dtype());
  MPT_CHECK(gx == x.dtype() || (gx == DType::F32 && is_half(x.dtype())),
            "[{}] grad_x_dtype must be x's dtype ({}) or f32 for an f16/bf16 x, got {}", kOp, x.dtype(), gx);

  const detail::GradRecorder grad(inputs);
  Tensor y = matmul(x, wp, {.trans_b = true});
  std::vector<int64_t> widths;
  std::vector<bool> need_w;
  for (const Tensor& w : weights) {
    widths.push_back(w.size(0));
    need_w.push_back(w.requires_grad());
  }
  const bool need_x = x.requires_grad();
  const bool any_w = std::find(need_w.begin(), need_w.end(), true) != need_w.end();
  // Saved only for the gradients wanted (a frozen projection keeps no activation alive), as ops::linear.
  grad.record("PackedLinearBackward", {&y},
              autograd::PartialBackwardFn([x = any_w ? x.detach() : Tensor{}, w = need_x ? wp.detach() : Tensor{},
                                           need_x, need_w, widths, gx, x_dtype = x.dtype(),
                                           wg_dtype = detail::weight_grad_dtype(x.dtype(), weights[0])](
                                              const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                std::vector<Tensor> d(widths.size() + 1);
                if (!g[0].defined()) return d;
                const Tensor dy = (g[0].dtype() == x_dtype ? g[0] : g[0].to(x_dtype)).contiguous();
                if (need_x) d[0] = matmul(dy, w, {.out_dtype = gx});
                int64_t at = 0;
                for (size_t i = 0; i < widths.size(); ++i) {
                  // dy's columns of this weight, read in place (row stride sum M_i).
                  if (need_w[i])
                    d[i + 1] = detail::weight_grad(dy.slice(1, at, at + widths[i]), x, wg_dtype, autograd::offer(partial, i + 1, wg_dtype));
                  at += widths[i];
                }
                return d;
              }));
  return y;
}

}  // namespace mpt::ops
