// tests/gpu/test_nccl_gpu.cpp: the NCCL communicator on CUDA tensors against the exact values the MPI communicator's
// tests expect (tests/dist): under the CUDA emulation 4 ranks as threads, one emulated device each (the NCCL double);
// on a real machine one rank per GPU present. Plus the timeout that aborts the communicator.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "device_test.h"
#include "mpt/dist/communicator.h"
#include "mpt/mpt.h"
#include "test_util.h"

namespace mpt {
namespace {

using dist::ReduceOp;
using testing::to_cpu;

// Element i of rank r: small integers plus halves, exact in f32, bf16 and f16 and in their sums (as tests/dist).
float value(int r, int64_t i) { return static_cast<float>(r * 8 + (i % 8)) + 0.5f; }

Tensor rank_tensor(int r, int64_t n, DType dtype, Device d) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = value(r, i);
  return Tensor::from_vector(v, {n}).to(dtype).to(d);
}

int ranks_here() { return std::min(4, cuda_status().device_count); }

// Runs body(rank, communicator) on one thread per rank; each rank's gtest failures are recorded as they happen.
template <class Body>
void on_every_rank(int n, Body&& body) {
  const dist::NcclId id = dist::nccl_unique_id();
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const auto comm = dist::nccl_communicator(Device::cuda(r), id, r, n);
        body(r, *comm);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

TEST(GpuNccl, CollectivesGiveTheExactValuesOnEveryRank) {
  MPT_REQUIRE_GPU(8);
  const int n = ranks_here();
  on_every_rank(n, [n](int me, dist::Communicator& c) {
    const Device d = Device::cuda(me);
    EXPECT_EQ(c.backend(), "nccl");
    EXPECT_EQ(c.size(), n);
    for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        Tensor t = rank_tensor(me, 1000, dtype, d);
        c.all_reduce(t, op)->wait();
        const std::vector<float> got = to_cpu(t).to(DType::F32).to_vector<float>();
        for (int64_t i = 0; i < 1000; ++i) {
          double sum = 0, max = 0;
          for (int r = 0; r < n; ++r) sum += value(r, i), max = std::max<double>(max, value(r, i));
          const double want = op == ReduceOp::Sum ? sum : op == ReduceOp::Avg ? sum / n : max;
          const float rounded = Tensor::full({}, want, DType::F32).to(dtype).to(DType::F32).item<float>();
          ASSERT_EQ(got[static_cast<size_t>(i)], rounded) << dtype_name(dtype) << " " << to_string(op) << " " << i;
        }
      }
    }
    // On the wire: small integers whose sums are exact in every format.
    for (DType dtype : {DType::BF16, DType::F16, DType::F8E4M3}) {
      std::vector<float> v(64);
      for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>((me + static_cast<int>(i)) % 4 + 1);
      Tensor t = Tensor::from_vector(v, {64}).to(dtype).to(d);
      c.all_reduce_on_wire(t, ReduceOp::Sum)->wait();
      const std::vector<float> got = to_cpu(t).to(DType::F32).to_vector<float>();
      for (size_t i = 0; i < v.size(); ++i) {
        float want = 0;
        for (int r = 0; r < n; ++r) want += static_cast<float>((r + static_cast<int>(i)) % 4 + 1);
        ASSERT_EQ(got[i], want) << dtype_name(dtype) << " on the wire, element " << i;
      }
    }
    const int root = n - 1;
    Tensor b = rank_tensor(me, 37, DType::BF16, d);
    c.broadcast(b, root)->wait();
    EXPECT_TRUE(testing::same_bits(to_cpu(b), rank_tensor(root, 37, DType::BF16, Device::cpu())));
    Tensor mine = rank_tensor(me, 5, DType::F32, d), all = Tensor::zeros({5 * n}, DType::F32, d);
    c.all_gather(mine, all)->wait();
    const std::vector<float> gathered = to_cpu(all).to_vector<float>();
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < 5; ++i) ASSERT_EQ(gathered[static_cast<size_t>(r * 5 + i)], value(r, i));
    Tensor in = rank_tensor(me, 4 * n, DType::F32, d), out = Tensor::zeros({4}, DType::F32, d);
    c.reduce_scatter(in, out, ReduceOp::Sum)->wait();
    const std::vector<float> slice = to_cpu(out).to_vector<float>();
    for (int64_t i = 0; i < 4; ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += value(r, me * 4 + i);
      EXPECT_EQ(slice[static_cast<size_t>(i)], static_cast<float>(sum));
    }
    // Uneven: one rank's part empty when there are two or more.
    std::vector<int64_t> counts;
    for (int r = 0; r < n; ++r) counts.push_back(r == 1 ? 0 : 3 + r);
    int64_t total = 0, start = 0;
    for (int r = 0; r < n; ++r) total += counts[static_cast<size_t>(r)], start += r < me ? counts[static_cast<size_t>(r)] : 0;
    Tensor part = rank_tensor(me, counts[static_cast<size_t>(me)], DType::F32, d);
    Tensor whole = Tensor::zeros({total}, DType::F32, d);
    c.all_gather_v(part, whole, counts)->wait();
    const std::vector<float> w = to_cpu(whole).to_vector<float>();
    int64_t at = 0;
    for (int r = 0; r < n; ++r)
      for (int64_t i = 0; i < counts[static_cast<size_t>(r)]; ++i, ++at) ASSERT_EQ(w[static_cast<size_t>(at)], value(r, i));
    Tensor src = rank_tensor(me, total, DType::F32, d), dst = Tensor::zeros({counts[static_cast<size_t>(me)]}, DType::F32, d);
    c.reduce_scatter_v(src, dst, counts, ReduceOp::Avg)->wait();
    const std::vector<float> avg = to_cpu(dst).to_vector<float>();
    for (int64_t i = 0; i < counts[static_cast<size_t>(me)]; ++i) {
      double sum = 0;
      for (int r = 0; r < n; ++r) sum += value(r, start + i);
      EXPECT_EQ(avg[static_cast<size_t>(i)], static_cast<float>(sum / n)) << "reduce_scatter_v element " << i;
    }
    c.barrier();
    // A CPU tensor is refused, naming the device the communicator takes.
    Tensor cpu = Tensor::zeros({4});
    EXPECT_NE(testing::error_message([&] { c.all_reduce(cpu, ReduceOp::Sum); }).find("this NCCL communicator takes"),
              std::string::npos);
  });
}

// Rank 1 never joins the second all-reduce: rank 0's wait ends after its timeout, naming the collective, and the
// communicator is aborted (NCCL itself would wait forever).
TEST(GpuNccl, ACollectiveOneRankNeverJoinsTimesOutAndAborts) {
  MPT_REQUIRE_GPU(8);
  if (ranks_here() < 2) GTEST_SKIP() << "needs two GPUs (the CUDA emulation has four)";
  std::string message;
  std::atomic<bool> rank0_done{false};
  on_every_rank(2, [&](int me, dist::Communicator& c) {
    c.set_timeout(std::chrono::milliseconds(500));
    Tensor t = Tensor::ones({1024}, DType::F32, Device::cuda(me));
    c.all_reduce(t, ReduceOp::Sum)->wait();  // the job is set up
    if (me == 1) {  // skips the second collective; keeps its communicator until rank 0 gave up
      while (!rank0_done.load()) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    message = testing::error_message([&] { c.all_reduce(t, ReduceOp::Sum)->wait(); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 10.0);
    EXPECT_NE(testing::error_message([&] { c.all_reduce(t, ReduceOp::Sum); }).find("aborted"), std::string::npos);
    rank0_done = true;
  });
  EXPECT_NE(message.find("all_reduce #1 (f32[1024] cuda:0, sum) on rank 0 did not complete within 0.5 s"),
            std::string::npos) << message;
}

}  // namespace
}  // namespace mpt
