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
#include "mpt/ops/optim.h"
#include "op_test.h"

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

using mpt::testing::same_bits;

// ops::AdamWSlot::compute_copy on `dev`: after a step the copy's first n elements have the bits of the new parameter
// cast to the copy's dtype, the rest of a longer copy is untouched, the parameter and moments are those of the same
// step without a copy, and a step skipped by found_inf leaves the copy as it was. Every moment storage, BF16 and F16.
inline void expect_adamw_writes_compute_copies(Device dev) {
  const int64_t n = 600;  // more than two 8-bit blocks, a partial last one
  for (const ops::MomentStorage storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16,
                                           ops::MomentStorage::Int8}) {
    for (const DType dt : {DType::BF16, DType::F16}) {
      for (const int64_t extra : {int64_t{0}, int64_t{5}}) {
        SCOPED_TRACE(::testing::Message() << "moments " << static_cast<int>(storage) << " copy " << dtype_name(dt)
                                          << " extra " << extra);
        const Tensor p0 = Tensor::from_vector(values(n, 11), {n}).to(dev, DType::F32);
        const Tensor g = Tensor::from_vector(values(n, 12), {n}).to(dev, DType::F32);
        const Tensor with = p0.clone(), without = p0.clone();
        const ops::AdamWState s_with = ops::adamw_state(with, storage), s_without = ops::adamw_state(without, storage);
        const Tensor copy = Tensor::full({n + extra}, 7.0, dt, dev);  // 7: the untouched sentinel
        const ops::AdamWParams hp{.lr = 1e-2, .weight_decay = 0.1};
        const std::vector<ops::AdamWSlot> slots{{with, g, s_with, Tensor{}, copy}};
        ops::adamw_step(slots, hp, {.found_inf = Tensor::full({1}, 1.0, DType::F32, dev)});
        EXPECT_TRUE(same_bits(copy.to(Device::cpu()), Tensor::full({n + extra}, 7.0, dt))) << "skipped step";
        ops::adamw_step(slots, hp);
        ops::adamw_step(std::vector<ops::AdamWSlot>{{without, g, s_without}}, hp);
        EXPECT_TRUE(same_bits(with.to(Device::cpu()), without.to(Device::cpu()))) << "parameter";
        EXPECT_TRUE(same_bits(s_with.exp_avg.to(Device::cpu()), s_without.exp_avg.to(Device::cpu()))) << "exp_avg";
        EXPECT_TRUE(same_bits(copy.slice(0, 0, n).to(Device::cpu()), with.to(dt).to(Device::cpu()))) << "copy";
        EXPECT_TRUE(same_bits(copy.slice(0, n, n + extra).to(Device::cpu()), Tensor::full({extra}, 7.0, dt)))
            << "the copy's tail";
      }
    }
  }
}

}  // namespace mpt::optim_test
