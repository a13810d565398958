// src/ops/layernorm.cpp: LayerNorm forward/backward and residual add + LayerNorm: checks, dispatch, CPU or CUDA kernel.
#include "mpt/ops/layernorm.h"

#include <cmath>

#include "kernels/cpu/layernorm.h"
#include "kernels/math/quantize.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/elementwise.h"
#include "ops/dispatch.h"
#if defined(MPT_WITH_CUDA)
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/quantize.h"
#endif

namespace mpt::ops {

namespace {

using detail::visit_float;

// The statistics' dtype: f32, or f64 for the f64 reference path.
DType stats_dtype(DType x) { return x == DType::F64 ? DType::F64 : DType::F32; }

// Calls f(T{}, P{}, Y{}, X{}) once, for the kernels' type quadruples: activations T (the statistics', and a fused
// residual sum's); parameters P, T or f32 beside f16/bf16; Y, the forward's output and the backward's dy, and X, a
// fused residual's x (the forward's) and a second dx (the backward's), each T or, beside f32 T, f16/bf16 (the norm
// written for a low-precision GEMM; a low-precision sublayer output entering an f32 residual stream). Y and X that
// are both low precision are one dtype. `y_role` and `x_role` name Y and X in errors.
template <class F>
void visit_types(DType t, DType param, DType y, DType x, const char* y_role, const char* x_role, const char* op,
                 F&& f) {
  visit_float(t, op, [&](auto tag) {
    using T = decltype(tag);
    constexpr bool kHalf = std::is_same_v<T, f16> || std::is_same_v<T, bf16>;
    constexpr bool kF32 = std::is_same_v<T, float>;
    MPT_CHECK(param == t || (kHalf && param == DType::F32), "[{}] weight must be {} or f32 (with f16/bf16 inputs), "
              "got {}", op, t, param);
    for (const auto& [d, role] : {std::pair{y, y_role}, std::pair{x, x_role}}) {
      MPT_CHECK(d == t || (kF32 && (d == DType::F16 || d == DType::BF16)),
                "[{}] {} must be {} (the activations' dtype) or, with f32 activations, f16 or bf16; got {}", op, role,
                t, d);
    }
    MPT_CHECK(y == t || x == t || y == x, "[{}] {} ({}) and {} ({}) must be one low-precision dtype", op, y_role, y,
              x_role, x);
    if constexpr (kF32) {
      auto with_half = [&](auto htag) {
        using H = decltype(htag);
        if (y != t && x != t) return f(T{}, T{}, H{}, H{});
        if (y != t) return f(T{}, T{}, H{}, T{});
        return f(T{}, T{}, T{}, H{});
      };
      if (y == DType::BF16 || x == DType::BF16) return with_half(bf16{});
      if (y == DType::F16 || x == DType::F16) return with_half(f16{});
    }
    if constexpr (kHalf) {
      if (param == DType::F32) return f(T{}, float{}, T{}, T{});
    }
    f(T{}, T{}, T{}, T{});
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

// An FP8 output's kernel types: f32 activations and parameters with x f32 or f16/bf16 beside them, or f16/bf16
// activations and x (a half residual stream) with f32 parameters; scale and amax checked.
template <class F>
void visit_fp8_types(DType t, DType param, DType x, const NormOutput& out, Device dev, const char* op, F&& f) {
  const bool half = t == DType::BF16 || t == DType::F16;
  MPT_CHECK(param == DType::F32 && (t == DType::F32 ? x == DType::F32 || x == DType::BF16 || x == DType::F16
                                                    : half && x == t),
            "[{}] an f8e4m3 output is made from f32 parameters and f32 activations (x f32, or f16/bf16 beside an f32 "
            "residual) or f16/bf16 ones (x the same): got activations {}, weight {}, x {}", op, t, param, x);
  const auto scalars = out.current ? std::pair{std::pair{&out.scale, "scale"}, std::pair{&out.scale_inv, "scale_inv"}}
                                   : std::pair{std::pair{&out.scale, "scale"}, std::pair{&out.amax, "amax"}};
  for (const auto& [v, name] : {scalars.first, scalars.second}) {
    MPT_CHECK(v->defined() && v->dtype() == DType::F32 && v->numel() == 1 && v->device() == dev &&
                  v->is_contiguous(),
              "[{}] an f8e4m3 output needs its {} as one contiguous f32 element on {} ({}), got {}", op, name, dev,
              out.current ? "NormOutput::fp8_current" : "NormOutput::fp8", v->defined() ? v->meta_str() : "undefined");
  }
  if (t == DType::BF16) return f(bf16{}, float{}, f8e4m3{}, bf16{});
  if (t == DType::F16) return f(f16{}, float{}, f8e4m3{}, f16{});
  if (x == DType::BF16) return f(float{}, float{}, f8e4m3{}, bf16{});
  if (x == DType::F16) return f(float{}, float{}, f8e4m3{}, f16{});
  f(float{}, float{}, f8e4m3{}, float{});
}

// An FP8 norm output under current scaling (NormOutput::fp8_current), for `p` (y, scale and amax unset): max |norm|
// in a first pass (which also writes a fused residual's sum and the statistics), then the scale and scale_inv from it
// on the device, then the codes in a second pass over x, or over the sum (as a plain norm of it: the same rounded
// values, statistics and bits).
template <class T, class P, class Y, class X, class Launch>
void current_scaled(kernels::math::LayerNormForwardParams<T, P, Y, X> p, const Tensor& y, const Tensor* sum,
                    const NormOutput& y_out, Launch&& launch) {
  const Device dev = y.device();
  const Tensor amax = Tensor::zeros({}, DType::F32, dev);
  p.y = nullptr;
  p.y_amax = amax.data<float>();
  launch(p);
  const kernels::math::ScaleFromAmax scaling{kernels::math::fp8_max<Y>(), 0, y_out.power_of_2, y_out.amax_epsilon};
  float* scale = Tensor(y_out.scale).data<float>();
  float* scale_inv = Tensor(y_out.scale_inv).data<float>();
  if (dev.is_cpu()) {
    *scale = scaling(*amax.data<float>());
    *scale_inv = kernels::math::reciprocal(*scale);
  } else {
    MPT_CUDA_KERNEL(kernels::cuda::scale_from_amax(amax.data<float>(), scale, scale_inv, scaling,
                                                   static_cast<cudaStream_t>(detail::stream_of(dev))));
  }
  kernels::math::LayerNormForwardParams<T, P, Y, T> q;
  if constexpr (std::is_same_v<X, T>) q.x = p.residual != nullptr ? sum->data<T>() : p.x;
  else q.x = sum->data<T>();  // x beside an f32 residual: the norm is the sum's
  q.weight = p.weight;
  q.bias = p.bias;
  q.y = Tensor(y).data<Y>();
  q.mean = p.mean;
  q.rstd = p.rstd;
  q.rows = p.rows;
  q.cols = p.cols;
  q.eps = p.eps;
  q.rms = p.rms;
  q.y_scale = scale;
  launch(q);
}

// Forward, with or without the fused residual add (residual defined); y stored as `y_out` says.
LayerNormResult forward(const Tensor& x_in, const Tensor* residual_in, Tensor* sum_out, const Tensor& weight_in,
                        const Tensor& bias_in, double eps, bool rms, const NormOutput& y_out, const char* op) {
  const Device dev = residual_in ? detail::check_same_device({&x_in, residual_in, &weight_in}, op)
                                 : detail::check_same_device({&x_in, &weight_in}, op);
  const auto [rows, cols] = check_input(x_in, weight_in, bias_in, op);
  MPT_CHECK(std::isfinite(eps) && eps >= 0, "[{}] eps must be finite and >= 0, got {}", op, eps);
  if (residual_in) detail::check_shape(*residual_in, x_in.shape(), "residual", op);
  const Tensor x = x_in.contiguous(), weight = weight_in.contiguous();
  const Tensor residual = residual_in ? residual_in->contiguous() : Tensor();
  const Tensor bias = bias_in.defined() ? bias_in.contiguous() : Tensor();
  const DType t = residual_in ? residual.dtype() : x.dtype();  // the sum's and the statistics' activation dtype
  const DType ydt = y_out.dtype.value_or(t);
  const bool fp8 = ydt == DType::F8E4M3;
  LayerNormResult out{Tensor::empty(x.shape(), ydt, dev),
                      {Tensor::empty({rows}, stats_dtype(t), dev), Tensor::empty({rows}, stats_dtype(t), dev)}};
  if (residual_in) *sum_out = Tensor::empty(x.shape(), t, dev);
  auto launch = [&](const auto& p) {
    using T = std::remove_const_t<std::remove_pointer_t<decltype(p.sum)>>;
    if (dev.is_cpu()) {
      kernels::cpu::layer_norm_forward(p);
    } else if constexpr (!std::is_same_v<T, double>) {
      MPT_CUDA_KERNEL(kernels::cuda::layer_norm_forward(p, static_cast<cudaStream_t>(detail::stream_of(dev))));
    }
  };
  auto run = [&](auto tag, auto ptag, auto ytag, auto xtag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using Y = decltype(ytag);
    using X = decltype(xtag);
    kernels::math::LayerNormForwardParams<T, P, Y, X> p;
    p.x = x.data<X>();
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
    if constexpr (kernels::math::kFp8Output<Y>) {
      if (y_out.current) return current_scaled(p, out.y, sum_out, y_out, launch);
      p.y_scale = y_out.scale.data<float>();
      p.y_amax = Tensor(y_out.amax).data<float>();
    }
    launch(p);
  };
  if (fp8) {
    visit_fp8_types(t, weight.dtype(), x.dtype(), y_out, dev, op, run);
  } else {
    MPT_CHECK(!is_fp8(ydt), "[{}] an FP8 output is f8e4m3 (NormOutput::fp8), got {}", op, ydt);
    visit_types(t, weight.dtype(), ydt, x.dtype(), "the output dtype", residual_in ? "x (beside the residual)" : "x",
                op, run);
  }
  out.saved.rms = rms;
  return out;
}

// The gradient to write: `given` (checked, accumulated into) or a new tensor, of `like`'s shape and device and of
// `dtype` (like's unless given).
Tensor grad_output(const Tensor& given, const Tensor& like, const char* what, const char* op,
                   std::optional<DType> dtype = std::nullopt) {
  const DType dt = dtype.value_or(like.dtype());
  if (!given.defined()) return Tensor::empty(like.shape(), dt, like.device());
  MPT_CHECK(given.device() == like.device() && given.dtype() == dt,
            "[{}] {} to accumulate into must be {} on {}, got {}", op, what, dt, like.device(), given.meta_str());
  detail::check_shape(given, like.shape(), what, op);
  MPT_CHECK(given.is_contiguous(), "[{}] {} to accumulate into must be contiguous, got strides {}", op, what,
            shape_str(given.strides()));
  return given;
}


// layer_norm_backward, and for a fused residual sum also: dx_add (the gradient reaching the sum directly, added to
// dx in the same pass) and a second copy of dx in dx_half_dtype (returned in dx_half; the gradient of a low-precision
// x beside an f32 residual). `write`: the parameters' gradients written there (overwritten, not added into) where
// they are the leaves' fresh destinations (autograd::is_fresh_offer: the engine's offers, ops::detail::fresh_or_empty).
struct NormGrads {
  LayerNormGrads g;
  Tensor dx_half;
};

// The dtype the norm's backward writes dweight and dbias in for `weight`: its gradient dtype (autograd::grad_dtype)
// where the kernels are built for it (the weight's own, or BF16 for FP32 weights), else the weight's (AccumulateGrad
// then converts).
DType param_grad_dtype(const Tensor& weight) {
  const DType want = autograd::grad_dtype(weight);
  return want == DType::BF16 && weight.dtype() == DType::F32 ? want : weight.dtype();
}

NormGrads backward(const Tensor& dy_in, const Tensor& x_in, const Tensor& weight_in, const LayerNormSaved& saved,
                   bool has_bias, LayerNormGrads into, const Tensor& dx_add_in, std::optional<DType> dx_half_dtype,
                   DType param_dtype, std::vector<Tensor>* write = nullptr, size_t write_at = 0) {
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
  MPT_CHECK(!(acc_dx && dx_add_in.defined()),
            "[{}] dx can be accumulated into (into.dx) or have a gradient added (dx_add), not both", op);
  MPT_CHECK(param_dtype == weight_in.dtype() || (param_dtype == DType::BF16 && weight_in.dtype() == DType::F32),
            "[{}] dweight and dbias are written in the weight's dtype, or bf16 for an f32 weight: got {} for {}", op,
            param_dtype, weight_in.meta_str());
  NormGrads out{{grad_output(into.dx, x_in, "dx", op), grad_output(into.dweight, weight_in, "dweight", op, param_dtype),
                 has_bias ? grad_output(into.dbias, weight_in, "dbias", op, param_dtype) : Tensor()},
                {}};
  if (write != nullptr) {  // the engine's offers for weight and bias (write_at, write_at + 1): fresh ones are written
    if (!acc_dw) out.g.dweight = detail::fresh_or_empty(*write, write_at, weight_in.shape(), param_dtype, dev);
    if (has_bias && !acc_db)
      out.g.dbias = detail::fresh_or_empty(*write, write_at + 1, weight_in.shape(), param_dtype, dev);
  }
  LayerNormGrads& g = out.g;
  const DType half = dx_half_dtype.value_or(x_in.dtype());
  if (dx_half_dtype) out.dx_half = Tensor::empty(x_in.shape(), half, dev);
  Tensor dx_add;
  if (dx_add_in.defined()) {
    MPT_CHECK(dx_add_in.device() == dev && dx_add_in.dtype() == x_in.dtype(), "[{}] the gradient to add to dx must be "
              "{} on {}, got {}", op, x_in.dtype(), dev, dx_add_in.meta_str());
    detail::check_shape(dx_add_in, x_in.shape(), "the gradient to add to dx", op);
    dx_add = dx_add_in.contiguous();
  }
  if (rows == 0) {  // sums over no rows
    if (!acc_dw) g.dweight.zero_();
    if (has_bias && !acc_db) g.dbias.zero_();
    return out;
  }
  const Tensor dy = dy_in.contiguous(), x = x_in.contiguous(), weight = weight_in.contiguous();
  const Tensor mean = saved.mean.contiguous(), rstd = saved.rstd.contiguous();
  visit_types(x.dtype(), weight.dtype(), dy.dtype(), half, "dy", "dx's second dtype", op,
              [&](auto tag, auto ptag, auto gtag, auto xtag) {
    using T = decltype(tag);
    using P = decltype(ptag);
    using G = decltype(gtag);
    using X = decltype(xtag);
    using F = kernels::math::opmath_t<T>;
    auto run = [&](auto dtag) {
    using D = decltype(dtag);
    kernels::math::LayerNormBackwardParams<T, P, G, X, D> p;
    p.dy = dy.data<G>();
    p.x = x.data<T>();
    p.weight = weight.data<P>();
    p.mean = mean.data<F>();
    p.rstd = rstd.data<F>();
    p.dx = g.dx.data<T>();
    p.dx_add = dx_add.defined() ? dx_add.data<T>() : nullptr;
    p.dx_half = out.dx_half.defined() ? out.dx_half.data<X>() : nullptr;
    p.dweight = g.dweight.data<D>();
    p.dbias = has_bias ? g.dbias.data<D>() : nullptr;
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
    };
    if (param_dtype == weight.dtype()) return run(P{});
    if constexpr (std::is_same_v<P, float>) return run(bf16{});  // checked above: bf16
  });
  return out;
}


LayerNormResult norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, bool rms,
                     const NormOutput& y_out, const char* op) {
  const detail::GradRecorder grad({&x, &weight, &bias});
  LayerNormResult r = forward(x, nullptr, nullptr, weight, bias, eps, rms, y_out, op);
  // The weight's and bias's gradients written in their leaves' destinations when the engine offers them fresh.
  grad.record(rms ? "RmsNormBackward" : "LayerNormBackward", {&r.y},
              autograd::PartialBackwardFn([x = x.detach(), w = weight.detach(), saved = r.saved,
                                           has_bias = bias.defined(), pg = param_grad_dtype(weight)](
                                              const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                LayerNormGrads d = backward(g[0], x, w, saved, has_bias, {}, Tensor(), std::nullopt, pg, &partial, 1).g;
                return std::vector<Tensor>{d.dx, d.dweight, d.dbias};
              }));
  return r;
}

ResidualLayerNormResult residual_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                      const Tensor& bias, double eps, bool rms, const NormOutput& y_out,
                                      const char* op) {
  const detail::GradRecorder grad({&x, &residual, &weight, &bias});
  ResidualLayerNormResult out;
  LayerNormResult r = forward(x, &residual, &out.sum, weight, bias, eps, rms, y_out, op);
  out.y = std::move(r.y);
  out.saved = std::move(r.saved);
  // Outputs: sum (output 0) and y (output 1). d(sum) reaches x and residual directly; dy goes through the norm.
  // x's gradient is dsum in x's dtype: a low-precision x beside an f32 residual gets it rounded, written by the same
  // pass (the cast a recorded x.to(f32) would have made in its backward).
  const std::optional<DType> x_half =
      x.dtype() != out.sum.dtype() ? std::optional<DType>(x.dtype()) : std::nullopt;
  grad.record(rms ? "ResidualRmsNormBackward" : "ResidualLayerNormBackward", {&out.sum, &out.y},
              autograd::PartialBackwardFn([sum = out.sum.detach(), w = weight.detach(), saved = out.saved,
                                           has_bias = bias.defined(), x_half, pg = param_grad_dtype(weight)](
                                              const std::vector<Tensor>& g, std::vector<Tensor>& partial) {
                Tensor dsum = g[0], dx;
                Tensor dweight, dbias;
                if (g[1].defined()) {  // dsum = g[0] + the norm's dx, in the norm's pass
                  NormGrads d = backward(g[1], sum, w, saved, has_bias, {}, g[0], x_half, pg, &partial, 2);
                  dsum = d.g.dx;
                  dx = d.dx_half;
                  dweight = d.g.dweight;
                  dbias = d.g.dbias;
                } else if (x_half) {
                  dx = dsum.to(*x_half);
                }
                return std::vector<Tensor>{x_half ? dx : dsum, dsum, dweight, dbias};
              }));
  return out;
}

}  // namespace

LayerNormResult layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                           const NormOutput& out) {
  return norm(x, weight, bias, eps, false, out, "layer_norm");
}

LayerNormResult rms_norm(const Tensor& x, const Tensor& weight, double eps, const NormOutput& out) {
  return norm(x, weight, Tensor(), eps, true, out, "rms_norm");
}

ResidualLayerNormResult residual_layer_norm(const Tensor& x, const Tensor& residual, const Tensor& weight,
                                            const Tensor& bias, double eps, const NormOutput& out) {
  return residual_norm(x, residual, weight, bias, eps, false, out, "residual_layer_norm");
}

ResidualLayerNormResult residual_rms_norm(const Tensor& x, const Tensor& residual, const Tensor& weight, double eps,
                                          const NormOutput& out) {
  return residual_norm(x, residual, weight, Tensor(), eps, true, out, "residual_rms_norm");
}

LayerNormGrads layer_norm_backward(const Tensor& dy, const Tensor& x, const Tensor& weight, const LayerNormSaved& saved,
                                   bool has_bias, LayerNormGrads into) {
  const DType pg = into.dweight.defined() ? into.dweight.dtype() : weight.dtype();
  return backward(dy, x, weight, saved, has_bias, std::move(into), Tensor(), std::nullopt, pg).g;
}

}  // namespace mpt::ops
