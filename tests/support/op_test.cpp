// tests/support/op_test.cpp: tolerance table, random inputs, reference comparison and finite differences.
#include "op_test.h"

#include "mpt/autograd/gradcheck.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace mpt::testing {

bool same_bits(const Tensor& got, const Tensor& want) {
  if (got.defined() != want.defined()) return false;
  if (!got.defined()) return true;
  if (got.dtype() != want.dtype() || got.shape() != want.shape()) return false;
  const Tensor g = got.to(Device::cpu()).contiguous(), w = want.to(Device::cpu()).contiguous();
  return g.nbytes() == 0 || std::memcmp(g.data_ptr(), w.data_ptr(), g.nbytes()) == 0;
}

Tolerance tolerance(DType dtype) {
  switch (dtype) {
    case DType::F64: return {1e-7, 1e-7};
    case DType::F32: return {1.3e-6, 1e-5};
    case DType::F16: return {1e-3, 1e-5};
    case DType::BF16: return {1.6e-2, 1e-5};
    case DType::F8E4M3: return {0.125, 1e-3};
    case DType::F8E5M2: return {0.25, 1e-3};
    default: return {0, 0};
  }
}

Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, double scale) {
  Generator gen(seed);
  std::vector<double> v = Tensor::normal(shape, 0, 1, DType::F64, Device::cpu(), gen).to_vector<double>();
  for (double& x : v) {
    if (std::abs(x) < 1e-3) x = std::copysign(1e-3, x == 0 ? 1.0 : x);
    x *= scale;
  }
  return Tensor::from_vector(v, shape).to(dtype);
}

double tolerance_ratio(const Tensor& got, const Tensor& ref, Tolerance tol) {
  EXPECT_EQ(got.shape(), ref.shape());
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size() && i < r.size(); ++i) {
    if (std::isnan(g[i]) != std::isnan(r[i])) return std::numeric_limits<double>::infinity();
    if (std::isnan(r[i]) || g[i] == r[i]) continue;
    worst = std::max(worst, std::abs(g[i] - r[i]) / (tol.atol + tol.rtol * std::abs(r[i])));
  }
  return worst;
}

double max_rel_error(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < want.size() && i < got.size(); ++i) {
    err = std::max(err, std::fabs(got[i] - want[i]));
    scale = std::max(scale, std::fabs(want[i]));
  }
  return got.size() == want.size() ? err / scale : std::numeric_limits<double>::infinity();
}

double max_abs_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size() && i < r.size(); ++i) {
    if (std::isnan(g[i]) != std::isnan(r[i])) return std::numeric_limits<double>::infinity();
    if (!std::isnan(r[i])) worst = std::max(worst, std::abs(g[i] - r[i]));
  }
  return worst;
}

void expect_close(const Tensor& got, const Tensor& ref, Tolerance tol, const std::string& what) {
  ASSERT_EQ(got.shape(), ref.shape()) << what;
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  size_t worst_i = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool nan_mismatch = std::isnan(g[i]) != std::isnan(r[i]);
    const double ratio = nan_mismatch ? std::numeric_limits<double>::infinity()
                         : std::isnan(r[i]) || g[i] == r[i] ? 0
                                                            : std::abs(g[i] - r[i]) / (tol.atol + tol.rtol * std::abs(r[i]));
    if (ratio > worst || (ratio == worst && nan_mismatch)) {
      worst = ratio;
      worst_i = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": worst element " << worst_i << " got " << g[worst_i] << " expected "
                        << r[worst_i] << " (rtol " << tol.rtol << ", atol " << tol.atol << ")";
}

std::vector<Tensor> numeric_gradients(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                      const std::vector<Tensor>& inputs, const Tensor& weights, double eps) {
  return autograd::numeric_gradients(fn, inputs, weights, eps);
}

PoisonAllocations::PoisonAllocations() : previous_(allocation_poison()) { set_allocation_poison(true); }
PoisonAllocations::~PoisonAllocations() { set_allocation_poison(previous_); }

}  // namespace mpt::testing
