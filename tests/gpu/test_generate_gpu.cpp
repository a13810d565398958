// tests/gpu/test_generate_gpu.cpp: GPT::forward_cached on cuda:0 (the cache written by strided device copies, one
// query against the cached keys) against forward() of the whole sequence on the same device, and against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "device_test.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/nn/gpt.h"

namespace mpt {
namespace {

TEST(GpuGenerate, CachedLogitsMatchTheFullForwardAndTheCpu) {
  MPT_REQUIRE_GPU(7);
  nn::GPTConfig c;
  c.vocab_size = 40, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = 3;
  const nn::GPT cpu_model(c);
  c.where.device = Device::cuda(0);
  const nn::GPT gpu_model(c);  // the same seed: the same weights
  autograd::NoGradGuard no_grad;
  std::vector<int64_t> v(2 * 16);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>((i * 7 + 3) % 40);
  const Tensor ids = Tensor::from_vector(v, {2, 16});
  const Tensor full = testing::to_cpu(gpu_model.forward(testing::to_gpu(ids)));
  nn::KvCache gpu_cache, cpu_cache;
  double worst_full = 0, worst_cpu = 0;
  for (int64_t p = 4; p < 16; ++p) {
    const Tensor in = p == 4 ? ids.slice(1, 0, 5) : ids.slice(1, p, p + 1);
    const Tensor g = testing::to_cpu(gpu_model.forward_cached(testing::to_gpu(in), gpu_cache));
    const Tensor w = cpu_model.forward_cached(in, cpu_cache);
    worst_full = std::max(worst_full, testing::normwise_error(g, full.select(1, p)));
    worst_cpu = std::max(worst_cpu, testing::normwise_error(g, w));
  }
  EXPECT_EQ(gpu_cache.length, 16);
  EXPECT_LE(worst_full, 1e-5);  // f32: the attention sums' order only
  EXPECT_LE(worst_cpu, 1e-5);
}

}  // namespace
}  // namespace mpt
