// tests/dist/test_data_parallel.cpp: DataParallel over the ranks equals one process on the whole batch (run alone
// and under mpirun -np 2 and 4).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "mpt/dist/data_parallel.h"
#include "mpt/mpt.h"

using namespace mpt;

namespace {

nn::GPTConfig tiny(uint64_t seed) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = seed;
  return c;
}

// The global batch: 2 sequences per rank, the same on every rank.
std::pair<Tensor, Tensor> global_batch(int ranks) {
  std::mt19937 rng(5);
  const int64_t B = 2 * ranks, T = 16;
  std::vector<int64_t> ids(static_cast<size_t>(B * (T + 1)));
  for (auto& v : ids) v = static_cast<int64_t>(rng() % 32);
  const Tensor all = Tensor::from_vector(ids, {B, T + 1});
  return {all.slice(1, 0, T).contiguous(), all.slice(1, 1, T + 1).contiguous()};
}

double normwise(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = a.to_vector<float>(), y = b.to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return err / std::max(scale, 1e-30);
}

}  // namespace

TEST(DataParallel, ShardedGradientsAveragedEqualTheWholeBatchsGradients) {
  const auto comm = dist::world();
  const int n = comm->size(), me = comm->rank();
  nn::GPT model(tiny(100 + static_cast<uint64_t>(me)));  // different weights until the broadcast
  dist::DataParallel dp(model, comm, {.bucket_bytes = 16 << 10});  // several buckets
  ASSERT_GT(dp.num_buckets(), 2);
  nn::GPT reference(tiny(100));  // rank 0's initial weights
  for (const auto& [k, t] : reference.state_dict()) {
    const Tensor mine = model.state_dict().at(k);
    ASSERT_EQ(normwise(mine, t), 0.0) << k << ": the broadcast should give rank 0's weights";
  }

  const auto [x, y] = global_batch(n);
  model.loss(x.slice(0, 2 * me, 2 * me + 2), y.slice(0, 2 * me, 2 * me + 2)).backward();
  const int64_t overlapped = dp.buckets_started_in_backward();
  dp.finish();
  reference.loss(x, y).backward();

  double worst = 0;
  const auto ours = model.named_parameters();
  const auto theirs = reference.named_parameters();
  ASSERT_EQ(ours.size(), theirs.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    ASSERT_TRUE(ours[i].tensor.grad().defined()) << ours[i].name;
    const double e = normwise(ours[i].tensor.grad(), theirs[i].tensor.grad());
    worst = std::max(worst, e);
    EXPECT_LT(e, 1e-5) << ours[i].name;
  }
  std::printf("rank %d of %d: worst normwise gradient difference %.3g; %lld of %lld buckets started in backward\n", me,
              n, worst, static_cast<long long>(overlapped), static_cast<long long>(dp.num_buckets()));
  EXPECT_EQ(overlapped, dp.num_buckets()) << "every bucket completes during backward";
}
