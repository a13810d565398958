// tests/optim/optim_test_util.h: deterministic values, leaf parameters and comparisons shared by the optimizer tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::optim_test {

// n values in [-scale, scale] from a small LCG, rounded to f32 (so f32 tensors hold them exactly) and kept
// away from zero.
inline std::vector<double> values(size_t n, uint64_t seed, double scale = 1.0) {
  std::vector<double> out(n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& x : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    double u = static_cast<double>(s >> 11) * 0x1p-53 * 2 - 1;  // [-1, 1)
    if (std::abs(u) < 0.05) u = std::copysign(0.05, u);
    x = static_cast<double>(static_cast<float>(u * scale));
  }
  return out;
}

// A leaf parameter that requires grad, holding `v` (converted to dtype).
inline Tensor leaf(const std::vector<double>& v, const Shape& shape, DType dtype = DType::F32) {
  Tensor t = Tensor::from_vector(v, shape).to(dtype);
  t.requires_grad_();
  return t;
}

inline void set_grad(const Tensor& p, const std::vector<double>& g, DType dtype) {
  p.set_grad(Tensor::from_vector(g, p.shape()).to(dtype));
}

// What a gradient of `dtype` holds for the values g (rounded as the tensor stores them).
inline std::vector<double> stored(const std::vector<double>& g, DType dtype) {
  return Tensor::from_vector(g, {static_cast<int64_t>(g.size())}).to(dtype).to_vector<double>();
}

// |got - ref| <= rel * max(|ref|, floor) element by element.
inline void expect_close(const Tensor& got, const std::vector<double>& ref, double rel, double floor,
                         const std::string& what) {
  const std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), ref.size()) << what;
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double err = std::abs(g[i] - ref[i]) / std::max(std::abs(ref[i]), floor);
    if (!(err <= worst)) {
      worst = err;
      at = i;
    }
  }
  EXPECT_LE(worst, rel) << what << ": element " << at << " got " << g[at] << " expected " << ref[at];
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape()) return false;
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  return std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0;
}

}  // namespace mpt::optim_test
