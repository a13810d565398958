// tests/ops/test_matmul.cpp: matmul in f32/f16/bf16/f64 against a float64 reference with a derived FP32-accumulation
// bound, layouts, batches, beta, errors, the primitive cache, and the backward against finite differences.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/gemm.h"
#include "matmul_reference.h"
#include "mpt/ops/matmul.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::expect_gemm_close;
using mpt::testing::gemm_reference;
using mpt::testing::HostOperand;
using mpt::testing::random_tensor;

namespace {

// Stored shape of an operand whose op() is rows x cols.
Shape stored(int64_t batch, int64_t rows, int64_t cols, bool trans) {
  Shape s = trans ? Shape{cols, rows} : Shape{rows, cols};
  if (batch > 0) s.insert(s.begin(), batch);
  return s;
}

double unit_roundoff(DType in) { return in == DType::F64 ? 0x1p-53 : 0x1p-24; }

Tensor abs_of(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = std::abs(x);
  return Tensor::from_vector(v, t.shape());
}

}  // namespace

TEST(Matmul, EveryDtypeAndTransposeMatchesFloat64) {
  mpt::testing::PoisonAllocations poison;  // an unwritten output element reads as NaN and fails
  const int64_t m = 37, n = 53, k = 300;   // not multiples of 8, 32 or 128
  uint64_t seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (DType out : {dt, DType::F32}) {
      if (out == DType::F32 && (dt == DType::F32 || dt == DType::F64)) continue;
      for (bool ta : {false, true})
        for (bool tb : {false, true}) {
          const Tensor a = random_tensor(stored(0, m, k, ta), dt, seed++), b = random_tensor(stored(0, k, n, tb), dt, seed++);
          const ops::MatmulOptions opt{.trans_a = ta, .trans_b = tb, .alpha = 0.75f, .out_dtype = out};
          const Tensor c = ops::matmul(a, b, opt);
          EXPECT_EQ(c.dtype(), out);
          const auto ref = gemm_reference(HostOperand(a, ta, true), HostOperand(b, tb, false), 0.75, {m, n});
          expect_gemm_close(c, ref, out, fmt::format("{}->{} ta={} tb={}", dt, out, ta, tb), unit_roundoff(dt));
        }
    }
}

TEST(Matmul, DefaultOutputDtypeIsTheInputs) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    EXPECT_EQ(ops::matmul(random_tensor({3, 4}, dt, 1), random_tensor({4, 5}, dt, 2)).dtype(), dt);
}

TEST(Matmul, BatchedAndBroadcast) {
  mpt::testing::PoisonAllocations poison;
  const int64_t m = 19, n = 23, k = 131;
  uint64_t seed = 100;
  // (batch of a, batch of b): 0 means a 2-d operand.
  for (auto [ba, bb] : std::vector<std::pair<int64_t, int64_t>>{{3, 3}, {3, 0}, {0, 3}, {1, 3}, {3, 1}})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (DType dt : {DType::F32, DType::BF16}) {
          const Tensor a = random_tensor(stored(ba, m, k, ta), dt, seed++), b = random_tensor(stored(bb, k, n, tb), dt, seed++);
          const Tensor c = ops::matmul(a, b, {.trans_a = ta, .trans_b = tb});
          const int64_t batch = std::max(ba, bb);
          ASSERT_EQ(c.shape(), (Shape{batch, m, n}));
          const auto ref = gemm_reference(HostOperand(a, ta, true), HostOperand(b, tb, false), 1.0, c.shape());
          expect_gemm_close(c, ref, dt, fmt::format("{} batch {}x{} ta={} tb={}", dt, ba, bb, ta, tb));
        }
}

TEST(Matmul, OutAccumulatesWithBetaIntoAStridedOutput) {
  const int64_t m = 29, n = 41, k = 257;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor a = random_tensor({m, k}, dt, 7), b = random_tensor({n, k}, dt, 8);
    const Tensor big = random_tensor({m, n + 9}, dt, 9);
    const Tensor big0 = big.clone();
    const Tensor c = big.slice(1, 3, 3 + n);  // ldc = n + 9
    const Tensor c0 = c.clone();
    ops::matmul_out(a, b, c, 0.5f, {.trans_b = true, .alpha = -1.25f});
    const auto ref = gemm_reference(HostOperand(a, false, true), HostOperand(b, true, false), -1.25, {m, n}, c0, 0.5);
    expect_gemm_close(c, ref, dt, fmt::format("{} beta 0.5", dt), 0x1p-24, c0, 0.5);
    // Columns outside the view are untouched.
    EXPECT_EQ(big.slice(1, 0, 3).to_vector<double>(), big0.slice(1, 0, 3).to_vector<double>());
    EXPECT_EQ(big.slice(1, 3 + n, n + 9).to_vector<double>(), big0.slice(1, 3 + n, n + 9).to_vector<double>());
  }
}

TEST(Matmul, BetaZeroNeverReadsTheOutput) {
  const Tensor a = random_tensor({5, 7}, DType::BF16, 1), b = random_tensor({7, 6}, DType::BF16, 2);
  const Tensor c = Tensor::full({5, 6}, std::nan(""), DType::BF16);
  ops::matmul_out(a, b, c);
  for (double x : c.to_vector<double>()) EXPECT_FALSE(std::isnan(x));
}

TEST(Matmul, NonContiguousOutputGoesThroughACopy) {
  const Tensor a = random_tensor({6, 9}, DType::F32, 1), b = random_tensor({9, 4}, DType::F32, 2);
  const Tensor ct = Tensor::zeros({4, 6}, DType::F32);
  ops::matmul_out(a, b, ct.t(), 0.0f);  // the output view has column stride 6
  const auto ref = gemm_reference(HostOperand(a, false, true), HostOperand(b, false, false), 1.0, {6, 4});
  expect_gemm_close(ct.t(), ref, DType::F32, "transposed output");
}

TEST(Matmul, StridedAndTransposedViewsAreReadInPlaceOrCopied) {
  const Tensor base = random_tensor({40, 70}, DType::F32, 3);
  const Tensor b = random_tensor({33, 17}, DType::F32, 4);
  struct Case {
    Tensor a;
    const char* what;
  };
  for (const Case& cs : {Case{base.slice(1, 5, 38), "row slice (lda 70)"}, Case{base.t().slice(0, 0, 33).t(), "transposed view"},
                         Case{base.slice(1, 0, 66, 2), "column step 2 (copied)"}}) {
    ASSERT_EQ(cs.a.size(1), 33) << cs.what;
    const Tensor c = ops::matmul(cs.a, b);
    expect_gemm_close(c, gemm_reference(HostOperand(cs.a, false, true), HostOperand(b, false, false), 1.0, c.shape()),
                      DType::F32, cs.what);
  }
  // op(a) of a transposed view with trans_a is the original matrix again.
  const Tensor a = random_tensor({12, 33}, DType::BF16, 5), b16 = b.to(DType::BF16);
  const Tensor c = ops::matmul(a.t(), b16, {.trans_a = true});
  expect_gemm_close(c, gemm_reference(HostOperand(a, false, true), HostOperand(b16, false, false), 1.0, {12, 17}),
                    DType::BF16, "trans_a of a transposed view");
}

TEST(Matmul, TinyAndEmptySizes) {
  for (auto [m, n, k] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {1, 9, 3}, {7, 1, 5}, {2, 3, 0}, {0, 3, 4}}) {
    const Tensor a = random_tensor({m, k}, DType::F32, 1), b = random_tensor({k, n}, DType::F32, 2);
    const Tensor c = ops::matmul(a, b);
    ASSERT_EQ(c.shape(), (Shape{m, n}));
    expect_gemm_close(c, gemm_reference(HostOperand(a, false, true), HostOperand(b, false, false), 1.0, {m, n}),
                      DType::F32, fmt::format("{}x{}x{}", m, n, k));
  }
  // k == 0 with beta: C = beta * C.
  const Tensor c = Tensor::full({2, 3}, 4.0, DType::F32);
  ops::matmul_out(Tensor::empty({2, 0}), Tensor::empty({0, 3}), c, 0.5f);
  for (double x : c.to_vector<double>()) EXPECT_EQ(x, 2.0);
}

TEST(Matmul, TheBoundCatchesLostPrecision) {
  // Negative controls: the f32 check fails when the inputs were silently rounded to bf16, and the bf16 check
  // fails for a dot product accumulated in bf16 instead of f32.
  const int64_t m = 8, n = 8, k = 2048;
  {  // a short dot product: the worst-case bound is tight enough to see input rounding
    const Tensor a = random_tensor({m, 16}, DType::F32, 11), b = random_tensor({16, n}, DType::F32, 12);
    const auto ref = gemm_reference(HostOperand(a, false, true), HostOperand(b, false, false), 1.0, {m, n});
    const Tensor lossy = ops::matmul(a.to(DType::BF16), b.to(DType::BF16), {.out_dtype = DType::F32});
    EXPECT_NONFATAL_FAILURE(expect_gemm_close(lossy, ref, DType::F32, "bf16-rounded inputs"), "bf16-rounded inputs");
    EXPECT_LE(expect_gemm_close(ops::matmul(a, b), ref, DType::F32, "the real f32 GEMM"), 1.0);
  }
  const Tensor a = random_tensor({m, k}, DType::F32, 11), b = random_tensor({k, n}, DType::F32, 12);
  const Tensor a16 = a.to(DType::BF16), b16 = b.to(DType::BF16);
  const auto ref16 = gemm_reference(HostOperand(a16, false, true), HostOperand(b16, false, false), 1.0, {m, n});
  const std::vector<double> av = a16.to_vector<double>(), bv = b16.to_vector<double>();
  std::vector<double> bad(static_cast<size_t>(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      bf16 s(0.0f);
      for (int64_t p = 0; p < k; ++p) s = bf16(static_cast<float>(s) + static_cast<float>(av[i * k + p] * bv[p * n + j]));
      bad[static_cast<size_t>(i * n + j)] = static_cast<float>(s);
    }
  EXPECT_NONFATAL_FAILURE(
      expect_gemm_close(Tensor::from_vector(bad, {m, n}).to(DType::BF16), ref16, DType::BF16, "bf16 accumulation"),
      "bf16 accumulation");
  EXPECT_LE(expect_gemm_close(ops::matmul(a16, b16), ref16, DType::BF16, "the real bf16 GEMM"), 1.0);
}

TEST(Matmul, ErrorsNameTheOpShapesAndDtypes) {
  const Tensor a = random_tensor({4, 5}, DType::F32, 1), b = random_tensor({6, 7}, DType::F32, 2);
  EXPECT_MPT_ERROR(ops::matmul(a, b), "[matmul] inner dimensions differ: op(a) is 4x5");
  EXPECT_MPT_ERROR(ops::matmul(random_tensor({2, 4, 5}, DType::F32, 1), random_tensor({3, 5, 2}, DType::F32, 1)),
                   "batch sizes differ");
  EXPECT_MPT_ERROR(ops::matmul(a, random_tensor({5, 2}, DType::BF16, 3)), "unsupported dtype pair a f32[4, 5]");
  EXPECT_MPT_ERROR(ops::matmul(a, random_tensor({5, 2}, DType::F32, 3), {.out_dtype = DType::BF16}),
                   "cannot produce a bf16 output");
  EXPECT_MPT_ERROR(ops::matmul(random_tensor({2, 2, 4, 5}, DType::F32, 1), random_tensor({3, 5, 2}, DType::F32, 1)),
                   "[matmul] shapes [2, 2] and [3] cannot be broadcast together");
  EXPECT_MPT_ERROR(ops::matmul(random_tensor({4}, DType::F32, 1), random_tensor({2, 2, 4, 5}, DType::F32, 1)),
                   "at least 2 dimensions");
  EXPECT_MPT_ERROR(ops::matmul(Tensor::ones({4, 5}, DType::I32), Tensor::ones({5, 2}, DType::I32)),
                   "expected a f32, f64, f16 or bf16 tensor, got i32");
  EXPECT_MPT_ERROR(ops::matmul(a, a, {.trans_b = true, .scale_a = ops::Fp8Scaling::per_tensor(Tensor::ones({1}))}),
                   "apply to FP8 operands and outputs only");
  const Tensor c = Tensor::empty({4, 3});
  EXPECT_MPT_ERROR(ops::matmul_out(a, random_tensor({5, 2}, DType::F32, 3), c), "c must have shape [4, 2]");
  EXPECT_MPT_ERROR(ops::matmul_backward(Tensor::ones({4, 3}), a, random_tensor({5, 2}, DType::F32, 3)),
                   "[matmul_backward] dc must have shape [4, 2]");
}

TEST(Matmul, PrimitivesAreCachedAndEvictedLeastRecentlyUsedFirst) {
  namespace kc = kernels::cpu;
  const Tensor a = random_tensor({45, 67}, DType::F32, 1), b = random_tensor({67, 89}, DType::F32, 2);
  ops::matmul(a, b);
  const kc::GemmCacheStats s0 = kc::gemm_cache_stats();
  ops::matmul(a, b);
  const kc::GemmCacheStats s1 = kc::gemm_cache_stats();
  EXPECT_EQ(s1.hits, s0.hits + 1);
  EXPECT_EQ(s1.misses, s0.misses);
  kc::set_gemm_cache_capacity(2);
  for (int64_t k : {3, 4, 5}) ops::matmul(random_tensor({2, k}, DType::F32, 1), random_tensor({k, 2}, DType::F32, 2));
  EXPECT_EQ(kc::gemm_cache_stats().size, 2);
  const int64_t misses = kc::gemm_cache_stats().misses;
  ops::matmul(random_tensor({2, 5}, DType::F32, 1), random_tensor({5, 2}, DType::F32, 2));  // still cached
  EXPECT_EQ(kc::gemm_cache_stats().misses, misses);
  ops::matmul(random_tensor({2, 3}, DType::F32, 1), random_tensor({3, 2}, DType::F32, 2));  // evicted
  EXPECT_EQ(kc::gemm_cache_stats().misses, misses + 1);
  kc::set_gemm_cache_capacity(256);
}

TEST(MatmulBackward, MatchesFiniteDifferencesInFloat64) {
  const int64_t m = 4, n = 5, k = 3;
  uint64_t seed = 500;
  for (auto [ba, bb] : std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {2, 2}, {2, 0}, {0, 2}, {1, 2}})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(stored(ba, m, k, ta), DType::F64, seed++);
        const Tensor b = random_tensor(stored(bb, k, n, tb), DType::F64, seed++);
        const ops::MatmulOptions opt{.trans_a = ta, .trans_b = tb, .alpha = 1.5f};
        const Tensor w = random_tensor(ops::matmul(a, b, opt).shape(), DType::F64, seed++);
        const auto numeric = mpt::testing::numeric_gradients(
            [&](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1], opt); }, {a, b}, w);
        const ops::MatmulGrads g = ops::matmul_backward(w, a, b, opt);
        const std::string what = fmt::format("batch {}x{} ta={} tb={}", ba, bb, ta, tb);
        mpt::testing::expect_close(g.da, numeric[0], {1e-6, 1e-8}, "da " + what);
        mpt::testing::expect_close(g.db, numeric[1], {1e-6, 1e-8}, "db " + what);
      }
}

TEST(MatmulBackward, LowPrecisionMatchesFloat64AndAccumulates) {
  const int64_t m = 33, n = 47, k = 21, batch = 3;
  uint64_t seed = 900;
  for (DType dt : {DType::F32, DType::F16, DType::BF16})
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = random_tensor(stored(batch, m, k, ta), dt, seed++), b = random_tensor(stored(0, k, n, tb), dt, seed++);
        const Tensor dc = random_tensor({batch, m, n}, dt, seed++);
        const ops::MatmulOptions opt{.trans_a = ta, .trans_b = tb, .alpha = 0.5f};
        const Tensor a64 = a.to(DType::F64), b64 = b.to(DType::F64), dc64 = dc.to(DType::F64);
        const ops::MatmulGrads ref = ops::matmul_backward(dc64, a64, b64, opt);
        const ops::MatmulGrads bound = ops::matmul_backward(abs_of(dc64), abs_of(a64), abs_of(b64), opt);
        const std::string what = fmt::format("{} ta={} tb={}", dt, ta, tb);
        ops::MatmulGrads g;
        {
          mpt::testing::PoisonAllocations poison;
          g = ops::matmul_backward(dc, a, b, opt);
        }
        // da sums over n products; db over batch * m (b is broadcast over the batch).
        expect_gemm_close(g.da, {ref.da, bound.da, n}, dt, "da " + what);
        expect_gemm_close(g.db, {ref.db, bound.db, batch * m}, dt, "db " + what);
        // Accumulating into an f32 gradient: db_acc = db0 + dB.
        const Tensor db0 = random_tensor(b.shape(), DType::F32, seed++);
        const Tensor db_acc = db0.clone();
        ops::matmul_grad_b(dc, a, b, opt, db_acc);
        std::vector<double> want = ref.db.to_vector<double>();
        const std::vector<double> base = db0.to_vector<double>();
        for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
        expect_gemm_close(db_acc, {Tensor::from_vector(want, b.shape()), bound.db, batch * m}, DType::F32,
                          "db += " + what, 0x1p-24, db0, 1.0);
      }
}
