// src/autograd/gradcheck.cpp: finite-difference gradients and the gradcheck comparison against autograd.
#include "mpt/autograd/gradcheck.h"

#include <algorithm>
#include <cmath>

#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"
#include "mpt/core/generator.h"

namespace mpt::autograd {

namespace {

void check_inputs(const std::vector<Tensor>& inputs, const char* op) {
  MPT_CHECK(!inputs.empty(), "[{}] needs at least one input", op);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& t = inputs[k];
    MPT_CHECK(t.defined() && t.dtype() == DType::F64 && t.device().is_cpu(),
              "[{}] input {} must be an f64 CPU tensor (finite differences in lower precision are noise), got {}", op,
              k, t.defined() ? t.meta_str() : "undefined");
  }
}

// sum(w * y) in float64.
double weighted_sum(const Tensor& y, const std::vector<double>& w, const char* op) {
  const std::vector<double> v = y.to(DType::F64).contiguous().to_vector<double>();
  MPT_CHECK(v.size() == w.size(), "[{}] the function's output has {} elements, the weights {}: it must return a "
            "tensor of one shape for all inputs", op, v.size(), w.size());
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += w[i] * v[i];
  return s;
}

}  // namespace

std::vector<Tensor> numeric_gradients(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                                      const Tensor& weights, double eps) {
  const char* op = "numeric_gradients";
  check_inputs(inputs, op);
  MPT_CHECK(std::isfinite(eps) && eps > 0, "[{}] eps must be finite and > 0, got {}", op, eps);
  const std::vector<double> w = weights.to(DType::F64).contiguous().to_vector<double>();
  NoGradGuard no_grad;
  std::vector<Tensor> xs;
  for (const Tensor& t : inputs) xs.push_back(t.detach().contiguous().clone());
  std::vector<Tensor> grads;
  for (size_t k = 0; k < xs.size(); ++k) {
    double* p = xs[k].data<double>();
    std::vector<double> g(static_cast<size_t>(xs[k].numel()));
    for (int64_t i = 0; i < xs[k].numel(); ++i) {
      const double x0 = p[i], h = eps * std::max(1.0, std::abs(x0));
      p[i] = x0 + h;
      const double plus = weighted_sum(fn(xs), w, op);
      p[i] = x0 - h;
      const double minus = weighted_sum(fn(xs), w, op);
      p[i] = x0;
      g[static_cast<size_t>(i)] = (plus - minus) / (2 * h);
    }
    grads.push_back(Tensor::from_vector(g, inputs[k].shape()));
  }
  return grads;
}

bool gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& o) {
  const char* op = "gradcheck";
  check_inputs(inputs, op);
  MPT_CHECK(o.projections >= 1 && o.atol >= 0 && o.rtol >= 0, "[{}] needs projections >= 1 and tolerances >= 0, got "
            "{}, atol {}, rtol {}", op, o.projections, o.atol, o.rtol);
  Generator gen(o.seed);
  for (int pass = 0; pass < o.projections; ++pass) {
    std::vector<Tensor> leaves;
    for (const Tensor& t : inputs) {
      Tensor leaf = t.detach().contiguous().clone();
      leaf.requires_grad_();
      leaves.push_back(leaf);
    }
    Tensor y;
    {
      EnableGradGuard grad;
      y = fn(leaves);
    }
    MPT_CHECK(y.defined() && is_floating(y.dtype()), "[{}] the function must return a floating tensor, got {}", op,
              y.defined() ? y.meta_str() : "undefined");
    const Tensor w = Tensor::normal(y.shape(), 0, 1, DType::F64, Device::cpu(), gen);
    if (y.requires_grad()) backward({y}, {w.to(y.dtype())});
    const std::vector<Tensor> numeric = numeric_gradients(fn, inputs, w, o.eps);
    for (size_t k = 0; k < inputs.size(); ++k) {
      const Tensor g = leaves[k].grad();
      const std::vector<double> a = g.defined() ? g.to(DType::F64).contiguous().to_vector<double>()
                                                : std::vector<double>(static_cast<size_t>(inputs[k].numel()), 0.0);
      const std::vector<double> n = numeric[k].to_vector<double>();
      for (size_t i = 0; i < n.size(); ++i) {
        const double tol = o.atol + o.rtol * std::abs(n[i]);
        MPT_CHECK(std::abs(a[i] - n[i]) <= tol,
                  "[{}] input {} {}, element {}: autograd {} but finite differences {} (difference {:.3g} over the "
                  "tolerance {:.3g} = atol {} + rtol {} x |numeric|; weighting {} of {}, eps {}){}",
                  op, k, inputs[k].meta_str(), i, a[i], n[i], std::abs(a[i] - n[i]), tol, o.atol, o.rtol, pass + 1,
                  o.projections, o.eps, g.defined() ? "" : " (autograd gave this input no gradient)");
      }
    }
  }
  return true;
}

}  // namespace mpt::autograd
