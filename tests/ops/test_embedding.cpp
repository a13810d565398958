// tests/ops/test_embedding.cpp: embedding lookup and its deterministic backward with repeated tokens.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>

#include "mpt/ops/elementwise.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/embedding.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/reduction.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

// Ids in [0, vocab) with many repeats, and tokens >= vocab - used_gap never drawn (untouched rows).
template <class I>
Tensor random_ids(const Shape& shape, int64_t vocab, int64_t used_gap, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<I> v(static_cast<size_t>(numel(shape)));
  for (I& id : v) id = static_cast<I>(rng() % static_cast<uint32_t>(vocab - used_gap));
  return Tensor::from_vector(v, shape);
}

}  // namespace

TEST(Embedding, ForwardCopiesTableRowsExactly) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (DType it : {DType::I32, DType::I64}) {
      const Tensor table = random_tensor({37, 19}, dt, 1);
      const Tensor ids = it == DType::I32 ? random_ids<int32_t>({3, 5}, 37, 0, 2) : random_ids<int64_t>({3, 5}, 37, 0, 2);
      const Tensor out = ops::embedding(ids, table);
      EXPECT_EQ(out.shape(), (Shape{3, 5, 19}));
      EXPECT_EQ(out.dtype(), dt);
      const auto tv = table.to_vector<double>(), ov = out.to_vector<double>();
      const auto iv = ids.to_vector<int64_t>();
      for (size_t p = 0; p < iv.size(); ++p)
        for (size_t c = 0; c < 19; ++c) ASSERT_EQ(ov[p * 19 + c], tv[static_cast<size_t>(iv[p]) * 19 + c]) << p << " " << c;
    }
  }
}

TEST(Embedding, BackwardSumsRepeatedTokensInPositionOrder) {
  mpt::testing::PoisonAllocations poison;
  const int64_t vocab = 50, channels = 67;
  const Tensor ids = random_ids<int32_t>({4, 513}, vocab, 5, 3);  // 2052 positions, ~45 distinct tokens
  const Tensor dout = random_tensor({4, 513, channels}, DType::F32, 4);
  const Tensor dtable = ops::embedding_backward(dout, ids, vocab);
  EXPECT_EQ(dtable.shape(), (Shape{vocab, channels}));
  // The documented order: per token, float sum over its positions in increasing order starting at 0.
  const auto iv = ids.to_vector<int64_t>();
  const auto dv = dout.to_vector<float>(), got = dtable.to_vector<float>();
  std::vector<float> order(static_cast<size_t>(vocab * channels), 0.0f);
  std::vector<double> ref(order.size(), 0.0), abs_sum(order.size(), 0.0);
  std::vector<int64_t> count(static_cast<size_t>(vocab), 0);
  for (size_t p = 0; p < iv.size(); ++p) {
    ++count[static_cast<size_t>(iv[p])];
    for (int64_t c = 0; c < channels; ++c) {
      const size_t o = static_cast<size_t>(iv[p] * channels + c);
      order[o] += dv[p * channels + static_cast<size_t>(c)];
      ref[o] += dv[p * channels + static_cast<size_t>(c)];
      abs_sum[o] += std::abs(dv[p * channels + static_cast<size_t>(c)]);
    }
  }
  for (size_t o = 0; o < got.size(); ++o) {
    ASSERT_EQ(got[o], order[o]) << "row " << o / channels << " column " << o % channels;
    // Sequential float sum of k terms: |err| <= (k - 1) u sum |terms| (u = 2^-24).
    const int64_t k = count[o / channels];
    ASSERT_LE(std::abs(got[o] - ref[o]), std::max<int64_t>(k - 1, 0) * std::ldexp(1.0, -24) * abs_sum[o]) << o;
  }
  for (int64_t v = vocab - 5; v < vocab; ++v) EXPECT_EQ(got[static_cast<size_t>(v * channels)], 0.0f) << "unused row " << v;
}

TEST(Embedding, BackwardIsBitIdenticalAcrossRunsAndThreadCounts) {
  const int64_t vocab = 64;
  const Tensor ids = random_ids<int64_t>({8, 1024}, vocab, 0, 5);  // frequent repeats, 8192 positions
  const Tensor dout = random_tensor({8, 1024, 48}, DType::BF16, 6);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = ops::embedding_backward(dout, ids, vocab).to_vector<float>();
  omp_set_num_threads(2);
  const auto two = ops::embedding_backward(dout, ids, vocab).to_vector<float>();
  const auto again = ops::embedding_backward(dout, ids, vocab).to_vector<float>();
  omp_set_num_threads(threads);
  EXPECT_EQ(one, two);
  EXPECT_EQ(two, again);
}

TEST(Embedding, BackwardMatchesFiniteDifferencesAndAccumulates) {
  const Tensor table = random_tensor({9, 5}, DType::F64, 7);
  const Tensor ids = Tensor::from_vector<int64_t>({3, 1, 3, 3, 0, 8, 1}, {7});
  const Tensor w = random_tensor({7, 5}, DType::F64, 8);
  const auto numeric = mpt::testing::numeric_gradients(
      [&](const std::vector<Tensor>& in) { return ops::embedding(ids, in[0]); }, {table}, w);
  const Tensor fresh = ops::embedding_backward(w, ids, 9);
  mpt::testing::expect_close(fresh, numeric[0], {1e-7, 1e-9}, "embedding backward vs FD");
  Tensor dtable = random_tensor({9, 5}, DType::F64, 9);
  const auto before = dtable.to_vector<double>();
  const Tensor out = ops::embedding_backward(w, ids, 9, dtable);
  EXPECT_TRUE(out.shares_storage(dtable));
  const auto got = dtable.to_vector<double>(), add = fresh.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + add[i]);
}

// A tied table (GPT-2's wte: the embedding and the LM head's weight): the head's backward runs first, and the
// embedding's backward adds into that waiting gradient (autograd::Node::apply_partial) instead of a zeroed
// [vocab, C] of its own and an add. F32: the bits of the two gradients added (x + y = y + x). BF16: one rounding of
// the head's gradient plus the FP32 sums, where the separate gradient and the add rounded twice.
TEST(Embedding, ATiedTablesGradientAddsIntoTheHeadsWaitingOne) {
  const int64_t vocab = 37, channels = 24, n = 64;
  const Tensor ids = random_ids<int64_t>({n}, vocab, 3, 11);
  const Tensor h = random_tensor({n, channels}, DType::F32, 12), a = random_tensor({n, channels}, DType::F32, 13);
  const Tensor b = random_tensor({n, vocab}, DType::F32, 14);
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w0 = random_tensor({vocab, channels}, DType::F32, 15).to(dt);
    // emb(w) . a + head(w) . b with the embedding recorded first, as a GPT's forward does.
    auto loss = [&](const Tensor& emb_table, const Tensor& head_table) {
      const Tensor e = ops::embedding(ids, emb_table);
      const Tensor logits = ops::linear(h.to(dt), head_table);
      return ops::add(ops::sum(ops::mul(e.to(DType::F32), a)), ops::sum(ops::mul(logits.to(DType::F32), b)));
    };
    Tensor tied = w0.clone().requires_grad_(true);
    loss(tied, tied).backward();
    Tensor emb_only = w0.clone().requires_grad_(true), head_only = w0.clone().requires_grad_(true);
    loss(emb_only, head_only).backward();
    const Tensor two_roundings = ops::add(head_only.grad(), emb_only.grad());
    if (dt == DType::F32) {
      EXPECT_TRUE(mpt::testing::same_bits(tied.grad(), two_roundings));
    } else {
      // The embedding's FP32 sums over its positions (dout in BF16 as the engine hands it), added to the head's.
      const Tensor dout = a.to(dt);
      const Tensor one_rounding =
          ops::embedding_backward(dout.to(DType::F32), ids, vocab, head_only.grad().to(DType::F32)).to(dt);
      EXPECT_TRUE(mpt::testing::same_bits(tied.grad(), one_rounding));
      EXPECT_FALSE(mpt::testing::same_bits(tied.grad(), two_roundings)) << "the case should tell the two apart";
    }
  }
}

// A BF16 (or F16) gradient of an FP32 table (autograd::set_grad_dtype: amp::Policy::grads): the FP32 dout's sums
// per row are added to the half gradient and rounded once, bit for bit the FP32 result rounded (the kernel's float
// sum is the FP32 path's); a new one (table_dtype) is the FP32 gradient rounded.
TEST(Embedding, AnFp32DoutAddsIntoAHalfTableGradientWithOneRounding) {
  const int64_t vocab = 41, channels = 40, n = 300;
  const Tensor ids = random_ids<int64_t>({3, n / 3}, vocab, 5, 21);
  const Tensor dout = random_tensor({3, n / 3, channels}, DType::F32, 22);
  for (DType half : {DType::BF16, DType::F16}) {
    SCOPED_TRACE(dtype_name(half));
    const Tensor d0 = random_tensor({vocab, channels}, DType::F32, 23).to(half);
    const Tensor got = ops::embedding_backward(dout, ids, vocab, d0.clone());
    ASSERT_EQ(got.dtype(), half);
    EXPECT_TRUE(mpt::testing::same_bits(got, ops::embedding_backward(dout, ids, vocab, d0.to(DType::F32)).to(half)));
    const Tensor fresh = ops::embedding_backward(dout, ids, vocab, Tensor{}, half);
    ASSERT_EQ(fresh.dtype(), half);
    EXPECT_TRUE(mpt::testing::same_bits(fresh, ops::embedding_backward(dout, ids, vocab).to(half)));
  }
  // A tied FP32 table whose gradient is BF16: the head's GEMM writes its BF16 gradient, the embedding adds its FP32
  // sums into it with one rounding.
  const Tensor h = random_tensor({n, channels}, DType::BF16, 24), b = random_tensor({n, vocab}, DType::F32, 25);
  const Tensor a = random_tensor({n, channels}, DType::F32, 26);
  const Tensor flat_ids = ids.reshape({-1});
  auto loss = [&](const Tensor& emb_table, const Tensor& head_table) {
    const Tensor e = ops::embedding(flat_ids, emb_table);
    const Tensor logits = ops::linear(h, head_table, Tensor{}, {.compute_weight = head_table.detach().to(DType::BF16)});
    return ops::add(ops::sum(ops::mul(e, a)), ops::sum(ops::mul(logits.to(DType::F32), b)));
  };
  const Tensor w0 = random_tensor({vocab, channels}, DType::F32, 27);
  Tensor tied = w0.clone().requires_grad_(true), head_only = w0.clone().requires_grad_(true);
  autograd::set_grad_dtype(tied, DType::BF16);
  autograd::set_grad_dtype(head_only, DType::BF16);
  loss(tied, tied).backward();
  loss(w0.clone().requires_grad_(true), head_only).backward();
  ASSERT_EQ(tied.grad().dtype(), DType::BF16);
  ASSERT_EQ(head_only.grad().dtype(), DType::BF16);
  EXPECT_TRUE(mpt::testing::same_bits(tied.grad(), ops::embedding_backward(a, flat_ids, vocab, head_only.grad().clone())));
  EXPECT_MPT_ERROR(ops::embedding_backward(dout.to(DType::BF16), ids, vocab, Tensor{}, DType::F32),
                   "[embedding_backward] a table gradient of f32 cannot take a dout of bf16: expected dout's dtype, or "
                   "bf16/f16 for an f32 dout");
  EXPECT_MPT_ERROR(ops::embedding_backward(dout, ids, vocab, Tensor::zeros({vocab, channels}), DType::BF16),
                   "[embedding_backward] table_dtype bf16 differs from the given dtable f32");
}

TEST(Embedding, RejectsOutOfRangeIdsAndBadArguments) {
  const Tensor table = Tensor::zeros({10, 4});
  EXPECT_MPT_ERROR(ops::embedding(Tensor::from_vector<int32_t>({1, 10, 2}, {3}), table),
                   "[embedding] token id 10 at position 1 of ids i32[3] cpu is out of range for a table f32[10, 4] cpu "
                   "of 10 rows");
  EXPECT_MPT_ERROR(ops::embedding(Tensor::from_vector<int64_t>({1, 2, -1}, {3}), table), "token id -1 at position 2");
  EXPECT_MPT_ERROR(ops::embedding(Tensor::zeros({3}), table), "[embedding] ids must be i32 or i64, got f32[3] cpu");
  EXPECT_MPT_ERROR(ops::embedding(Tensor::zeros({3}, DType::I32), Tensor::zeros({10})), "[embedding] the table must be 2-d");
  EXPECT_MPT_ERROR(ops::embedding(Tensor::zeros({3}, DType::I32), Tensor::zeros({10, 4}, DType::I32)),
                   "[embedding] expected a f32");
  const Tensor ids = Tensor::from_vector<int32_t>({1, 2, 3}, {3});
  EXPECT_MPT_ERROR(ops::embedding_backward(Tensor::zeros({3, 4}), Tensor::from_vector<int32_t>({1, 12, 3}, {3}), 10),
                   "[embedding_backward] token id 12 at position 1 of ids i32[3] cpu is out of range [0, 10)");
  EXPECT_MPT_ERROR(ops::embedding_backward(Tensor::zeros({4, 4}), ids, 10), "[embedding_backward] dout must have shape [3, 4]");
  EXPECT_MPT_ERROR(ops::embedding_backward(Tensor::zeros({3}), ids, 10), "[embedding_backward] dout must have shape ids.shape");
  EXPECT_MPT_ERROR(ops::embedding_backward(Tensor::zeros({3, 4}), ids, 10, Tensor::zeros({10, 5})),
                   "[embedding_backward] dtable must have shape [10, 4]");
  EXPECT_MPT_ERROR(ops::embedding_backward(Tensor::zeros({3, 4}), ids, -1), "[embedding_backward] vocab must be >= 0");
}
