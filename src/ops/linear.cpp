// src/ops/linear.cpp: the Linear op: checks, the bias-fused forward GEMM and the backward's three gradients.
#include "mpt/ops/linear.h"

#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"
#include "ops/dispatch.h"

namespace mpt::ops {

namespace detail {

// Column sums of dy [N, M] in FP32 (f64 for f64): the bias gradient (with dW wanted too, linear takes it from dW's
// GEMM instead: MatmulOptions::bias_grad). One order on both backends, the FP8 recipes' fused cast + transpose +
// dbias's (column_sums), so a bias gradient has the same bits whichever pass makes it.
Tensor bias_grad(const Tensor& dy) {
  if (dy.dtype() == DType::F64) return sum(dy, 0);
  return column_sums(dy, DType::F32);
}

bool adds_into(const Tensor& into, DType dtype, int64_t rows, int64_t cols, Device device) {
  return into.defined() && into.dtype() == dtype && into.is_contiguous() && into.device() == device &&
         into.shape() == Shape{rows, cols};
}

float offer_beta(const Tensor& into) { return autograd::is_fresh_offer(into) ? 0.0f : 1.0f; }

Tensor fresh_or_empty(std::vector<Tensor>& partial, size_t input, const Shape& shape, DType dtype, Device device) {
  const Tensor& offer = autograd::offer(partial, input, dtype);
  if (autograd::is_fresh_offer(offer) && offer.dtype() == dtype && offer.shape() == shape &&
      offer.device() == device && offer.is_contiguous())
    return offer;
  return Tensor::empty(shape, dtype, device);
}

Tensor weight_grad(const Tensor& dy, const Tensor& x, DType w_dtype, const Tensor& into, const Tensor& bias_grad) {
  if (dy.dim() != 2 || x.dim() != 2 || !adds_into(into, w_dtype, dy.size(1), x.size(1), dy.device()))
    return matmul(dy, x, {.trans_a = true, .out_dtype = w_dtype, .bias_grad = bias_grad});
  matmul_out(dy, x, into, offer_beta(into), {.trans_a = true, .bias_grad = bias_grad});
  return into;
}

DType weight_grad_dtype(DType in, const Tensor& weight) {
  const DType want = autograd::grad_dtype(weight);
  if (is_fp8(in)) return want;
  if (in == DType::F16 || in == DType::BF16) return want == in || want == DType::F32 ? want : DType::F32;
  return in;
}

void check_compute_bias(const Tensor& compute_bias, const Tensor& bias, const char* op, const char* name) {
  if (!compute_bias.defined()) return;
  MPT_CHECK(bias.defined() && compute_bias.shape() == bias.shape() && is_floating(compute_bias.dtype()) &&
                !is_fp8(compute_bias.dtype()) && compute_bias.device() == bias.device(),
            "[{}] {} must be the bias's copy (its shape, on its device, in a float dtype): got {} for the bias {}", op,
            name, compute_bias.meta_str(), bias.defined() ? bias.meta_str() : "none");
}

}  // namespace detail

Tensor padded_rows(const Tensor& w, int64_t rows, DType dtype) {
  MPT_CHECK(w.defined() && w.dim() == 2 && rows > w.size(0),
            "[padded_rows] expected a 2-d weight with fewer than {} rows, got {}", rows,
            w.defined() ? w.meta_str() : "undefined");
  autograd::NoGradGuard no_grad;
  Tensor out = Tensor::empty({rows, w.size(1)}, dtype, w.device());
  out.slice(0, w.size(0), rows).zero_();
  out.slice(0, 0, w.size(0)).copy_(w.detach());
  return out;
}

namespace {

// The padded head's offered gradient `g` [rows, C] seen as [padded, C] over its own storage, for its padded GEMM to
// add into, when that storage is exactly padded rows (AccumulateGrad took over the first micro-batch's padded GEMM
// output, whose spare rows nobody reads) and nothing but the leaf's .grad and the engine's offer holds it (a bucket
// view's storage is the bucket's, holding other gradients after it); else undefined.
Tensor padded_view(const Tensor& g, int64_t padded) {
  if (!g.defined() || g.dim() != 2 || !g.is_contiguous() || g.offset() != 0 || g.storage() == nullptr) return {};
  const std::shared_ptr<Storage>& st = g.storage();
  if (st.use_count() > 2 || st->nbytes() != static_cast<size_t>(padded * g.size(1)) * g.element_size()) return {};
  return Tensor(st, {padded, g.size(1)}, {g.size(1), 1}, 0, g.dtype());
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, const LinearOptions& opt) {
  const char* op = "linear";
  MPT_CHECK(x.defined() && weight.defined() && x.dim() == 2 && weight.dim() == 2 && x.size(1) == weight.size(1),
            "[linear] expected x [N, K] and weight [M, K], got x {} and weight {}",
            x.defined() ? x.meta_str() : "undefined", weight.defined() ? weight.meta_str() : "undefined");
  const Tensor& w = opt.compute_weight.defined() ? opt.compute_weight : weight;
  const bool w_padded = opt.compute_weight.defined() && opt.out_padded > weight.size(0) && w.dim() == 2 &&
                        w.size(0) == opt.out_padded && w.size(1) == weight.size(1);
  MPT_CHECK((w.shape() == weight.shape() || w_padded) && w.dtype() == x.dtype() && is_floating(x.dtype()) &&
                !is_fp8(x.dtype()),
            "[linear] the GEMM needs x and the weight it reads in one of f32, f16, bf16, f64: got x {} and weight {}{}",
            x.meta_str(), w.meta_str(), opt.compute_weight.defined() ? " (compute_weight)" : "");
  MPT_CHECK(weight.dtype() == x.dtype() ||
                (weight.dtype() == DType::F32 && (x.dtype() == DType::F16 || x.dtype() == DType::BF16)),
            "[linear] the weight {} must have x's dtype ({}), or be an f32 master of an f16/bf16 compute_weight",
            weight.meta_str(), x.dtype());
  if (bias.defined())
    MPT_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "[linear] expected a bias [{}], got {}",
              weight.size(0), bias.meta_str());
  detail::check_same_device({&x, &weight, &w}, op);
  if (bias.defined()) detail::check_same_device({&x, &bias}, op);
  detail::check_compute_bias(opt.compute_bias, bias, op, "compute_bias");
  const int64_t rows = weight.size(0);
  MPT_CHECK(opt.out_padded == 0 || (opt.out_padded >= rows && !bias.defined()),
            "[linear] out_padded must be 0 or at least the weight's {} rows, without a bias: got {} (bias {})", rows,
            opt.out_padded, bias.defined() ? bias.meta_str() : "none");
  const bool pad = opt.out_padded > rows;

  const detail::GradRecorder grad({&x, &weight, &bias});
  // The weight the GEMMs read: zero rows appended when padding (already, for a padded compute copy).
  const Tensor wp = pad && !w_padded ? padded_rows(w, opt.out_padded, w.dtype()) : w;
  Tensor y = matmul(x, wp, {.trans_b = true, .bias = detail::epilogue_bias(opt.compute_bias, bias)});
  // Saved only for the gradients wanted: a frozen weight keeps no activation alive, a frozen input no weight copy.
  const bool need_x = x.requires_grad(), need_w = weight.requires_grad();
  // dW adds into the weight's gradient in its GEMM when the engine offers it (a later micro-batch: beta = 1).
  grad.record("LinearBackward", {&y},
              autograd::PartialBackwardFn([x = need_w ? x.detach() : Tensor{}, w = need_x ? wp.detach() : Tensor{},
                                           need_x, need_w, rows, pad, need_b = bias.defined() && bias.requires_grad(),
                                           x_dtype = x.dtype(), w_dtype = detail::weight_grad_dtype(x.dtype(), weight),
                                           b_dtype = bias.defined() ? autograd::grad_dtype(bias) : DType::F32](
                                              const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                const Tensor dy = (g[0].dtype() == x_dtype ? g[0] : g[0].to(x_dtype)).contiguous();
                std::vector<Tensor> d(3);
                if (need_x) d[0] = matmul(dy, w);
                // With both dW and db wanted, db comes out of dW's GEMM (cuBLASLt's BGRADA epilogue on CUDA).
                Tensor db;
                if (need_w && need_b && w_dtype != DType::F64)
                  db = detail::fresh_or_empty(partial, 2, {dy.size(1)}, w_dtype, dy.device());
                // A padded dW cannot go to a destination (its spare rows): not asked for (AccumulateGrad copies).
                if (need_w)
                  d[1] = detail::weight_grad(dy, x, w_dtype,
                                             pad ? padded_view(partial[1], dy.size(1)) : autograd::offer(partial, 1, w_dtype), db);
                if (need_w && pad) d[1] = d[1].slice(0, 0, rows);  // a prefix of rows: contiguous, no copy
                if (need_b && !db.defined()) db = detail::bias_grad(dy);
                if (need_b) d[2] = db.dtype() == b_dtype ? db : db.to(b_dtype);
                return d;
              }));
  return y;
}

}  // namespace mpt::ops
