// mpt/autograd/gradcheck.h: a function's autograd gradients against float64 central finite differences.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::autograd {

using DifferentiableFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Central finite differences in float64 of sum(weights * fn(inputs)) with respect to every element of every input:
// one tensor per input, of its shape (f64). Every input must be an f64 CPU tensor and weights must have fn's output
// shape; fn must be deterministic. Each step is eps * max(1, |x|); fn runs 2 * (total input elements) times.
std::vector<Tensor> numeric_gradients(const DifferentiableFn& fn, const std::vector<Tensor>& inputs,
                                      const Tensor& weights, double eps = 1e-6);

struct GradcheckOptions {
  double eps = 1e-6;   // finite-difference step (relative to max(1, |x|))
  double atol = 1e-5;  // an element passes when |analytic - numeric| <= atol + rtol * |numeric|
  double rtol = 1e-3;
  int projections = 2;  // random output weightings checked (each: one backward, 2 x elements forwards)
  uint64_t seed = 0;    // of the weightings (normal(0, 1) draws)
};

// Like torch.autograd.gradcheck in its fast mode: for `projections` random weightings w of fn's output, the gradient
// autograd computes for sum(w * fn(inputs)) (backward on fresh leaf copies of the inputs that require grad) is
// compared with numeric_gradients. Inputs must be f64 CPU tensors (the ops' float64 path: finite differences in a
// lower precision say nothing). Returns true when every element of every input is within tolerance; otherwise throws
// mpt::Error naming the input index and shape, the first failing element's flat index, both gradients and the
// tolerance ("[gradcheck] input 1 f64[3, 4], element 7: autograd 0.5 but finite differences 0.25 ..."). An input
// whose gradient autograd leaves undefined counts as zero (an input fn does not use must then have zero finite
// differences too).
bool gradcheck(const DifferentiableFn& fn, const std::vector<Tensor>& inputs, const GradcheckOptions& options = {});

}  // namespace mpt::autograd
