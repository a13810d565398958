// src/ops/layernorm.cpp: LayerNorm forward/backward and residual add + LayerNorm: checks, dispatch, CPU or CUDA kernel.
#include "mpt/ops/layernorm.h"

#include <cmath>

#include "kernels/cpu/layernorm.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/layernorm.h"
#endif

namespace mpt::ops {

namespace {

using detail::visit_float;

// The statistics' dtype: f32, or f64 for the f64 reference path.
DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// Calls f(T{}, P{}, Y{}) once, for the kernels' type triples: activations T; parameters P, T or f32 beside f16/bf16;
// Y, the forward's output and the backward's dy, T or f16/bf16 beside f32 T (the norm written in the dtype of the
// GEMM that reads it). `y_role` names Y in errors.
template <class F>
void visit_types(DType x, DType param, DType y, const char* y_role, const char* op, F&& f) {
  visit_float(x, op, [&](auto tag) {
    using T = decltype(tag);
    constexpr bool kHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;
    constexpr bool kF32 = std::is_same_v<T, float>;
    MPT_CHECK(param == x || (kHalf && param == DType::F32), "[{}] weight must be {} or f32 (with f16/bf16 inputs), "
              "got {}", op, x, param);
    MPT_CHECK(y == x || (kF32 && (y == DType::F16 || y == DType::BF16)),
              "[{}] {} must be the input's dtype ({}) or, beside an f32 input, f16 or bf16; got {}", op, y_role, x, y);
    if constexpr (kF32) {
      if (y == DType::BF16) return f(T{}, T{}, bf16{});
      if (y == DType::F16) return f(T{}, T{}, f16{});
    }
    if constexpr (kHalf) {
      if (param == DType::F32) return f(T{}, float{}, T{});
    }
    f(T{}, T{}, T{});
  });
}

struct RowShape {
  int64_t rows;
  int64_t cols;
};

RowShape check_input(const Tensor& x, const Tensor& weight, const Tensor& bias, const char* op) {
  detail::check_f64_on_cpu(x, op);
  MPT_CHECK(x.dim() >= 1, "[{}] expected an input with at least one dimension, got {}", op, x.meta_str());
  const int64_t cols = x.size(-1);
  MPT_CHECK(cols >= 1, "[{}] the normalised dimension is empty: {}", op, x.meta_str());
  detail::check_shape(weight, {cols}, "weight", op);
  if (bias.defined()) {
    MPT_CHECK(bias.device() == x.device(), "[{}] bias is {}, x is {}", op, bias.meta_str(), x.meta_str());
    detail::check_shape(bias, {cols}, "bias", op);
    detail::check_same_dtype({&weight, &bias}, op);
  }
  const int64_t rows = x.numel() / cols;
  MPT_CHECK(x.device().is_cpu() || rows <= 2147483647, "[{}] at most 2^31 - 1 rows on CUDA, got {}", op, rows);
  return {rows, cols};
}

// Forward, with or without the fused residual add (residual defined); y in y_dtype (x's when unset).
LayerNormResult forward(const Tensor& x_in, const Tensor* residual_in, Tensor* sum_out, const Tensor& weight_in,
                        const Tensor& bias_in, double eps, bool rms, std::optional<DType> y_dtype, const char* op) {
  const Device dev = residual_in ? detail::check_same_device({&x_in, residual_in, &weight_in}, op)
                                 : detail::check_same_device({&x_in, &weight_in}, op);
  const auto [rows, cols] = check_input(x_in, weight_in, bias_in, op);
  MPT_CHECK(std::isfinite(eps) && eps >= 0, "[{}] eps must be finite and >= 0, got {}", op, eps);
  if (residual_in) {
    detail::check_same_dtype({&x_in, residual_in}, op);
    detail::check_shape(*residual_in, x_in.shape(), "residual", op);
  }
  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const Tensor residual = residual_in ? residual_in->contiguous() : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const DType ydt = y_dtype.value_or(x.dtype());
  LayerNormResult out{
      Tensor::empty(x.shape(), ydt, dev),
      {Tensor::empty({rows}, stats_dtype(x.dtype()), dev), Tensor::empty({rows}, stats_dtype(x.dtype()), dev)}};
  if (residual_in) *sum_out = Tensor::empty(x.shape(), x.dtype(), dev);
  visit_types(x.dtype(), weight.dtype(), ydt, "the output dtype", op, [&](auto tag, auto ptag, auto ytag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using Y = decltype(ytag);
    kernels::math::LayerNormForwardParams<T, P, Y> p;
    p.x = x.data<T>();
    if (residual_in) {
      p.residual = residual.data<T>();
      p.sum = sum_out->data<T>();
    }
    p.weight = weight.data<P>();
    p.bias = bias.defined() ? bias.data<P>() : nullptr;
    p.y = out.y.data<Y>();
    p.mean = out.saved.mean.data<kernels::math::opmath_t<T>>();
    p.rstd = out.saved.rstd.data<kernels::math::opmath_t<T>>();
    p.rows = rows;
    p.cols = cols;
    p.eps = eps;
    p.rms = rms;
    if (dev.is_cpu()) {
      kernels::cpu::layer_norm_forward(p);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::layer_norm_forward(p, static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  });
  out.saved.rms = rms;
  return out;
}

// The gradient to write: `given` (checked, accumulated into) or a new tensor.
Tensor grad_output(const Tensor& given, const Tensor& like, const char* what, const char* op) {
  if (!given.defined()) return Tensor::empty(like.shape(), like.dtype(), like.device());
  MPT_CHECK(given.device() == like.device() && given.dtype() == like.dtype(),
            "[{}] {} to accumulate into must be {} on {}, got {}", op, what, like.dtype(), like.device(),
            given.meta_str());
  detail::check_shape(given, like.shape(), what, op);
  MPT_CHECK(given.is_contiguous(), "[{}] {} to accumulate into must be contiguous, got strides {}", op, what,
            shape_str(given.strides()));
  return given;
}

}  // namespace

namespace {

LayerNormResult norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms,
                     std::optional<DType> y_dtype, const char* op) {
  const detail::GradRecorder grad({&x, &weight, &bias});
  LayerNormResult r = forward(x, nullptr, nullptr, weight, bias, eps, rms, y_dtype, op);
  grad.record(rms ? "RmsNormBackward" : "LayerNormBackward", {&r.y},
              [x = x.detach(), w = weight.detach(), saved = r.saved, has_bias = bias.defined()](
                  const std::vector<Tensor>& g) {
                LayerNormGrads d = layer_norm_backward(g[0], x, w, saved, has_bias);
                return std::vector<Tensor>{d.dx, d.dweight, d.dbias};
              });
  return r;
}

ResidualLayerNormResult residual_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                      const Tensor& bias, double eps, bool rms, std::optional<DType> y_dtype,
                                      const char* op) {
  const detail::GradRecorder grad({&x, &residual, &weight, &bias});
  ResidualLayerNormResult out;
  LayerNormResult r = forward(x, &residual, &out.sum, weight, bias, eps, rms, y_dtype, op);
  out.y = std::move(r.y);
  out.saved = std::move(r.saved);
  // Outputs: sum (output 0) and y (output 1). d(sum) reaches x and residual directly; dy goes through the norm.
  grad.record(rms ? "ResidualRmsNormBackward" : "ResidualLayerNormBackward", {&out.sum, &out.y},
              [sum = out.sum.detach(), w = weight.detach(), saved = out.saved, has_bias = bias.defined()](
                  const std::vector<Tensor>& g) {
                Tensor dsum = g[0];
                Tensor dweight, dbias;
                if (g[1].defined()) {
                  LayerNormGrads d = layer_norm_backward(g[1], sum, w, saved, has_bias);
                  dsum = dsum.defined() ? add(dsum, d.dx) : d.dx;
                  dweight = d.dweight;
                  dbias = d.dbias;
                }
                return std::vector<Tensor>{dsum, dsum, dweight, dbias};
              });
  return out;
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                           std::optional<DType> y_dtype) {
  return norm(x, weight, bias, eps, false, y_dtype, "layer_norm");
}

LayerNormResult rms_norm(const Tensor& x, const Tensor& weight, double eps, std::optional<DType> y_dtype) {
  return norm(x, weight, Tensor(), eps, true, y_dtype, "rms_norm");
}

ResidualLayerNormResult residual_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                            const Tensor& bias, double eps, std::optional<DType> y_dtype) {
  return residual_norm(x, residual, weight, bias, eps, false, y_dtype, "residual_layer_norm");
}

ResidualLayerNormResult residual_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                                          std::optional<DType> y_dtype) {
  return residual_norm(x, residual, weight, Tensor(), eps, true, y_dtype, "residual_rms_norm");
}

LayerNormGrads layer_norm_backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& weight_in,
                                   const LayerNormSaved& saved, bool has_bias, LayerNormGrads into) {
  const char* op = "layer_norm_backward";
  const Device dev = detail::check_same_device({&dy_in, &x_in, &weight_in, &saved.mean, &saved.rstd}, op);
  const auto [rows, cols] = check_input(x_in, weight_in, Tensor(), op);
  detail::check_shape(dy_in, x_in.shape(), "dy", op);
  for (const Tensor* s : {&saved.mean, &saved.rstd}) {
    MPT_CHECK(s->dtype() == stats_dtype(x_in.dtype()), "[{}] saved statistics must be {}, got {}", op,
              stats_dtype(x_in.dtype()), s->meta_str());
    detail::check_shape(*s, {rows}, "saved statistics", op);
  }
  MPT_CHECK(has_bias || !into.dbias.defined(), "[{}] dbias was given but has_bias is false", op);
  const bool acc_dx = into.dx.defined(), acc_dw = into.dweight.defined(), acc_db = into.dbias.defined();
  LayerNormGrads g{grad_output(into.dx, x_in, "dx", op), grad_output(into.dweight, weight_in, "dweight", op),
                   has_bias ? grad_output(into.dbias, weight_in, "dbias", op) : Tensor()};
  if (rows == 0) {  // sums over no rows
    if (!acc_dw) g.dweight.zero_();
    if (has_bias && !acc_db) g.dbias.zero_();
    return g;
  }
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), weight = weight_in.contiguous();
  const Tensor mean = saved.mean.contiguous(), rstd = saved.rstd.contiguous();
  visit_types(x.dtype(), weight.dtype(), dy.dtype(), "dy", op, [&](auto tag, auto ptag, auto gtag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using G = decltype(gtag);
    using F = kernels::math::opmath_t<T>;
    kernels::math::LayerNormBackwardParams<T, P, G> p;
    p.dy = dy.data<G>();
    p.x = x.data<T>();
    p.weight = weight.data<P>();
    p.mean = mean.data<F>();
    p.rstd = rstd.data<F>();
    p.dx = g.dx.data<T>();
    p.dweight = g.dweight.data<P>();
    p.dbias = has_bias ? g.dbias.data<P>() : nullptr;
    p.rows = rows;
    p.cols = cols;
    p.accumulate_dx = acc_dx;
    p.accumulate_dweight = acc_dw;
    p.accumulate_dbias = acc_db;
    p.rms = saved.rms;
    if (dev.is_cpu()) {
      kernels::cpu::layer_norm_backward(p);
    } else if constexpr (!std::is_same_v<T, double>) {
#if defined(MPT_WITH_CUDA)
      Tensor scratch = Tensor::empty({kernels::cuda::layer_norm_backward_scratch_floats(rows, cols)}, DType::F32, dev);
      MPT_CUDA_KERNEL(kernels::cuda::layer_norm_backward(p, scratch.data<float>(),
                                                         static_cast<cudaStream_t>(detail::stream_of(dev))));
#else
      MPT_THROW("[cuda] {}", cuda_backend::kNotBuilt);
#endif
    }
  });
  return g;
}

}  // namespace mpt::ops
