// tests/optim/test_optim_cuda.cpp: AdamW and SGD on a GPU give the CPU's bits (skipped without a usable GPU).
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "mpt/optim/adamw.h"
#include "mpt/optim/sgd.h"
#include "optim_test_util.h"

using namespace mpt;
using namespace mpt::optim_test;

namespace {

// Runs 3 steps of `make` on a CPU copy and a CUDA copy of the same parameters (a bf16 gradient, a skipped
// parameter and a found_inf step included) and requires identical parameters and state dicts.
template <class Make>
void expect_cuda_matches_cpu(Make make) {
  if (!cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  const Device gpu = Device::cuda();
  std::vector<Tensor> cpu_params, gpu_params;
  for (uint64_t i = 0; i < 3; ++i) {
    const std::vector<double> v = values(700 + 50 * i, i);
    cpu_params.push_back(leaf(v, {static_cast<int64_t>(v.size())}));
    Tensor g = Tensor::empty(cpu_params.back().shape(), DType::F32, gpu);
    g.copy_(cpu_params.back());
    g.requires_grad_();
    gpu_params.push_back(g);
  }
  auto cpu_opt = make(cpu_params);
  auto gpu_opt = make(gpu_params);
  for (int s = 0; s < 4; ++s) {
    for (size_t i = 0; i < cpu_params.size(); ++i) {
      const bool skip = (i == 2 && s == 1);
      const DType dt = i == 1 ? DType::BF16 : DType::F32;
      const Tensor g = skip ? Tensor{} : Tensor::from_vector(values(static_cast<size_t>(cpu_params[i].numel()), 50 + 7 * s + i),
                                                             cpu_params[i].shape()).to(dt);
      cpu_params[i].set_grad(g);
      gpu_params[i].set_grad(skip ? Tensor{} : Tensor::empty(g.shape(), dt, gpu).copy_(g));
    }
    const float inf = s == 2 ? 1.0f : 0.0f;
    cpu_opt->step({.grad_scale_inv = Tensor::full({1}, 0.5), .found_inf = Tensor::full({1}, inf)});
    gpu_opt->step({.grad_scale_inv = Tensor::full({1}, 0.5, DType::F32, gpu),
                   .found_inf = Tensor::full({1}, inf, DType::F32, gpu)});
  }
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    EXPECT_TRUE(same_bits(cpu_params[i], gpu_params[i].to(Device::cpu()))) << "parameter " << i;
  }
  const mpt::StateDict a = cpu_opt->state_dict(), b = gpu_opt->state_dict();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, t] : a) EXPECT_TRUE(same_bits(t, b.at(key).to(Device::cpu()))) << key;
}

TEST(OptimCuda, AdamWMatchesCpuBits) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    SCOPED_TRACE(static_cast<int>(storage));
    expect_cuda_matches_cpu([storage](const std::vector<Tensor>& p) {
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{.lr = 1e-2, .moments = storage});
    });
  }
}

TEST(OptimCuda, AdamWWritesTheComputeCopyAsTheCastOfTheNewParameter) {
  if (!cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << cuda_status().reason;
  expect_adamw_writes_compute_copies(Device::cuda());
}

TEST(OptimCuda, SgdMatchesCpuBits) {
  expect_cuda_matches_cpu([](const std::vector<Tensor>& p) {
    return std::make_unique<optim::SGD>(p, optim::SgdOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01,
                                                             .nesterov = true});
  });
}

}  // namespace
