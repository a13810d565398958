// src/nn/recompute.cpp: activation checkpointing of a block under the Autocast policy of its forward.
#include "recompute.h"

#include <optional>
#include <utility>

#include "mpt/amp/policy.h"
#include "mpt/autograd/checkpoint.h"

namespace mpt::nn::detail {

Tensor checkpoint_under_policy(std::function<Tensor(const Tensor&)> fn, const Tensor& x) {
  const amp::Policy* current = amp::current_policy();
  if (current == nullptr) return autograd::checkpoint(fn, x);
  return autograd::checkpoint(
      [fn = std::move(fn), policy = *current](const Tensor& in) {
        const amp::Autocast autocast(policy);
        return fn(in);
      },
      x);
}

}  // namespace mpt::nn::detail
