// tests/support/op_test.h: what every op test uses: the per-dtype tolerance table, fresh random inputs,
// comparison against a float64 reference, and float64 finite-difference gradients.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "mpt/core/memory.h"
#include "mpt/core/tensor.h"

namespace mpt::testing {

// Tolerances for comparing an op's output with a float64 reference: |got - ref| <= atol + rtol * |ref|.
// The values are PyTorch's assert_close defaults (torch.testing._comparison), extended to FP8 with the
// format's relative step (2^-3 for E4M3, 2^-2 for E5M2).
struct Tolerance {
  double rtol;
  double atol;
};
Tolerance tolerance(DType dtype);

// A tensor of fresh, non-zero random values (normal(0, scale), then |v| >= 1e-3 * scale), deterministic in seed.
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale = 1.0);

// True when got and want hold the same bytes, wherever they live (copied to the CPU, made contiguous; dtype and
// shape must agree; NaN payloads and signed zeros count). Two undefined tensors are the same; one is not.
bool same_bits(const Tensor& got, const Tensor& want);

// The largest |got - ref| / (atol + rtol * |ref|) over all elements (<= 1 passes). NaN anywhere in `got`
// (for example an unwritten element of a poisoned output) makes it infinite.
double tolerance_ratio(const Tensor& got, const Tensor& ref, Tolerance tol);
double max_abs_error(const Tensor& got, const Tensor& ref);
// max |got[i] - want[i]| / max |want[i]|: an error relative to the result's scale (for sums whose terms cancel).
double max_rel_error(const std::vector<float>& got, const std::vector<double>& want);

// Expects got == ref within tol (ref is usually f64), and reports the worst element.
void expect_close(const Tensor& got, const Tensor& ref, Tolerance tol, const std::string& what);

// Central finite differences in float64 of the scalar sum(weights * fn(inputs)) with respect to each input
// (every input must be f64 on the CPU). fn must be deterministic.
std::vector<Tensor> numeric_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                      const std::vector<Tensor>& inputs, const Tensor& weights, double eps = 1e-6);

// Turns allocation poisoning on for one scope, so outputs an op does not write read as NaN.
class PoisonAllocations {
 public:
  PoisonAllocations();
  ~PoisonAllocations();
  PoisonAllocations(const PoisonAllocations&) = delete;
  PoisonAllocations& operator=(const PoisonAllocations&) = delete;

 private:
  bool previous_;
};

}  // namespace mpt::testing
