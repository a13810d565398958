// tests/support/grad_destinations.h: the check that an op's gradients made in their destinations are the usual ones.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "mpt/autograd/node.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace mpt::testing {

// Each parameter's gradient destination (autograd::set_grad_destination, as DataParallel gives them) becomes its slice
// of one flat buffer of `dtype`, filled with NaN: an op that read a fresh destination (beta = 1 on it) would give NaN
// gradients. Returns the buffer.
inline Tensor nan_grad_destinations(const std::vector<Tensor>& params, DType dtype) {
  int64_t total = 0;
  for (const Tensor& p : params) total += p.numel();
  const Tensor flat = Tensor::full({total}, std::nan(""), dtype);
  int64_t at = 0;
  for (const Tensor& p : params) {
    autograd::set_grad_destination(p, [flat, at, shape = p.shape(), numel = p.numel()] {
      return flat.slice(0, at, at + numel).view(shape);
    });
    at += p.numel();
  }
  return flat;
}

// Runs `passes(params)` (forwards and backwards: two micro-batches, so that the second adds into the first) on
// trainable clones of `init`, with gradients of `grad_dtype` (autograd::set_grad_dtype) when given, once with NaN-filled
// destinations and once without: the same gradient bits, and every gradient a view of the destinations' buffer but
// those of the parameters `made_elsewhere` (indices into init: a gradient no producer wrote there stays its own).
template <class Passes>
void expect_gradients_made_in_destinations(const std::vector<Tensor>& init, Passes passes,
                                           std::optional<DType> grad_dtype = std::nullopt,
                                           const std::vector<size_t>& made_elsewhere = {}) {
  auto run = [&](bool destinations, Tensor* flat) {
    std::vector<Tensor> p;
    for (const Tensor& t : init) {
      p.push_back(t.clone().requires_grad_(true));
      if (grad_dtype) autograd::set_grad_dtype(p.back(), *grad_dtype);
    }
    if (destinations) *flat = nan_grad_destinations(p, grad_dtype.value_or(init.front().dtype()));
    passes(p);
    return p;
  };
  Tensor flat;
  const std::vector<Tensor> got = run(true, &flat), want = run(false, nullptr);
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].grad().defined()) << "parameter " << i;
    const bool elsewhere = std::find(made_elsewhere.begin(), made_elsewhere.end(), i) != made_elsewhere.end();
    EXPECT_EQ(got[i].grad().shares_storage(flat), !elsewhere)
        << "parameter " << i << (elsewhere ? ": in its destination" : ": not in its destination");
    EXPECT_TRUE(same_bits(got[i].grad(), want[i].grad())) << "parameter " << i;
  }
}

}  // namespace mpt::testing
