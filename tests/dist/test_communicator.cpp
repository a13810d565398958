// tests/dist/test_communicator.cpp: collectives against exact expected values, run under mpirun -np 2 and 4 (and alone).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "mpt/dist/communicator.h"
#include "test_util.h"

using namespace mpt;
using namespace mpt::dist;

namespace {

int expected_size() {
  const char* s = std::getenv("OMPI_COMM_WORLD_SIZE");
  return s != nullptr ? std::atoi(s) : 1;
}

// Element i of rank r: small integers plus halves, exact in f32, bf16 and f16 and in their sums.
float value(int r, int64_t i) { return static_cast<float>(r * 8 + (i % 8)) + 0.5f; }

Tensor rank_tensor(int r, int64_t n, DType dtype) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
  return Tensor::from_vector(v, {n}).to(dtype);
}

}  // namespace

TEST(Communicator, WorldIsTheMpirunJob) {
  const auto w = world();
  EXPECT_EQ(w->size(), expected_size());
  EXPECT_EQ(w->backend(), expected_size() > 1 ? "mpi" : "single");
  EXPECT_GE(w->rank(), 0);
  EXPECT_LT(w->rank(), w->size());
}

TEST(Communicator, AllReduceSumAvgMaxInEveryDtype) {
  const auto w = world();
  const int n = w->size();
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      Tensor t = rank_tensor(w->rank(), 1000, dtype);
      w->all_reduce(t, op)->wait();
      const std::vector<float> got = t.to(DType::F32).to_vector<float>();
      for (int64_t i = 0; i < 1000; ++i) {
        double sum = 0, max = 0;
        for (int r = 0; r < n; ++r) sum += value(r, i), max = std::max<double>(max, value(r, i));
        const double want = op == ReduceOp::Sum ? sum : op == ReduceOp::Avg ? sum / n : max;
        // Rounded once to the dtype (f32 reduction of exact values, then one conversion).
        const float want_rounded = Tensor::full({}, want, DType::F32).to(dtype).to(DType::F32).item<float>();
        ASSERT_EQ(got[static_cast<size_t>(i)], want_rounded) << dtype_name(dtype) << " " << to_string(op) << " element " << i;
      }
    }
  }
}

TEST(Communicator, BroadcastAllGatherReduceScatter) {
  const auto w = world();
  const int n = w->size(), me = w->rank();
  const int root = n - 1;
  Tensor b = rank_tensor(me, 37, DType::BF16);
  w->broadcast(b, root)->wait();
  EXPECT_TRUE(mpt::testing::same_bits(b.to_vector<bf16>(), rank_tensor(root, 37, DType::BF16).to_vector<bf16>()));

  Tensor mine = rank_tensor(me, 5, DType::F32), all = Tensor::zeros({5 * n});
  w->all_gather(mine, all)->wait();
  const std::vector<float> gathered = all.to_vector<float>();
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < 5; ++i) ASSERT_EQ(gathered[static_cast<size_t>(r * 5 + i)], value(r, i));

  Tensor in = rank_tensor(me, 4 * n, DType::F32), out = Tensor::zeros({4});
  w->reduce_scatter(in, out, ReduceOp::Sum)->wait();
  const std::vector<float> slice = out.to_vector<float>();
  for (int64_t i = 0; i < 4; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += value(r, me * 4 + i);
    EXPECT_EQ(slice[static_cast<size_t>(i)], static_cast<float>(sum));
  }
  w->barrier();
}

TEST(Communicator, CollectivesInFlightTogetherCompleteInAnyOrder) {
  const auto w = world();
  Tensor a = rank_tensor(w->rank(), 1 << 16, DType::F32), b = rank_tensor(w->rank(), 1 << 10, DType::F32);
  auto wa = w->all_reduce(a, ReduceOp::Max);
  auto wb = w->all_reduce(b, ReduceOp::Max);
  wb->wait();
  wa->wait();
  EXPECT_EQ(a.to_vector<float>()[3], value(w->size() - 1, 3));
  EXPECT_EQ(b.to_vector<float>()[5], value(w->size() - 1, 5));
}

TEST(Communicator, BadArgumentsAreRefusedNamingOpAndTensor) {
  const auto w = world();
  Tensor ints = Tensor::zeros({4}, DType::I64);
  EXPECT_NE(mpt::testing::error_message([&] { w->all_reduce(ints, ReduceOp::Sum); })
                .find("[dist.all_reduce] the tensor is i64: expected f32, f16 or bf16"),
            std::string::npos);
  Tensor strided = Tensor::zeros({4, 4}).t();
  EXPECT_NE(mpt::testing::error_message([&] { w->all_reduce(strided, ReduceOp::Sum); }).find("is not contiguous"),
            std::string::npos);
  Tensor in = Tensor::zeros({3}), out = Tensor::zeros({3 * w->size() + 1});
  EXPECT_NE(mpt::testing::error_message([&] { w->all_gather(in, out); }).find("[dist.all_gather] expected"),
            std::string::npos);
}

TEST(Communicator, UnevenAllGatherAndReduceScatter) {
  const auto w = world();
  const int n = w->size(), me = w->rank();
  std::vector<int64_t> counts;
  for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : 3 + r);  // uneven, one rank empty when there are 2+
  int64_t total = 0;
  for (int64_t c : counts) total += c;
  Tensor mine = rank_tensor(me, counts[static_cast<size_t>(me)], DType::F32), all = Tensor::zeros({total});
  w->all_gather_v(mine, all, counts)->wait();
  const std::vector<float> got = all.to_vector<float>();
  int64_t at = 0;
  for (int r = 0; r < n; ++r)
    for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++at) ASSERT_EQ(got[static_cast<size_t>(at)], value(r, i));

  Tensor in = rank_tensor(me, total, DType::F32), out = Tensor::zeros({counts[static_cast<size_t>(me)]});
  w->reduce_scatter_v(in, out, counts, ReduceOp::Avg)->wait();
  int64_t start = 0;
  for (int r = 0; r < me; ++r) start += counts[static_cast<size_t>(r)];
  const std::vector<float> slice = out.to_vector<float>();
  for (int64_t i = 0; i < counts[static_cast<size_t>(me)]; ++i) {
    double sum = 0;
    for (int r = 0; r < n; ++r) sum += value(r, start + i);
    EXPECT_EQ(slice[static_cast<size_t>(i)], static_cast<float>(sum / n));
  }
  std::vector<int64_t> wrong(counts.begin(), counts.end());
  wrong[0] += 1;
  EXPECT_NE(mpt::testing::error_message([&] { w->all_gather_v(mine, all, wrong); }).find("[dist.all_gather_v]"),
            std::string::npos);
}

// On the wire in the tensor's own dtype: small integers whose sums stay exact in every format (<= 16 in E4M3) give
// the exact sum and max; a sum that needs rounding rounds per hop, checked against a rank-order fold.
TEST(Communicator, AllReduceOnTheWireInLowPrecision) {
  const auto w = world();
  const int n = w->size(), me = w->rank();
  for (DType dtype : {DType::BF16, DType::F16, DType::F8E4M3, DType::F8E5M2}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
      std::vector<float> v(64);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((me + static_cast<int>(i)) % 4 + 1);
      Tensor t = Tensor::from_vector(v, {64}).to(dtype);
      w->all_reduce_on_wire(t, op)->wait();
      ASSERT_EQ(t.dtype(), dtype);
      const std::vector<float> got = t.to(DType::F32).to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) {
          const auto x = static_cast<float>((r + static_cast<int>(i)) % 4 + 1);
          want = op == ReduceOp::Sum ? want + x : std::max(want, x);
        }
        ASSERT_EQ(got[i], want) << dtype_name(dtype) << " " << to_string(op) << " element " << i;
      }
    }
  }
  // 1 + 2^-8 on every rank: BF16 (8 significant bits) cannot hold it, each rank sends 1 (round to even), sum n.
  Tensor t = Tensor::full({4}, 1.0 + 0x1p-8, DType::F32).to(DType::BF16);
  w->all_reduce_on_wire(t, ReduceOp::Sum)->wait();
  EXPECT_EQ(t.to(DType::F32).to_vector<float>()[0], static_cast<float>(n));
  Tensor f32 = Tensor::full({4}, 1.0 + 0x1p-8, DType::F32);
  w->all_reduce_on_wire(f32, ReduceOp::Sum)->wait();
  EXPECT_EQ(f32.to_vector<float>()[0], static_cast<float>(n * (1.0 + 0x1p-8))) << "f32 travels as f32";
}
