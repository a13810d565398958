// tests/ops/test_softmax.cpp: softmax and fused softmax + cross-entropy against float64 math and finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "mpt/ops/operators.h"
#include "mpt/ops/softmax.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;
using mpt::testing::tolerance;
using mpt::testing::Tolerance;

namespace {

constexpr double kU = 0x1p-24;  // float's unit roundoff

// ---- independent float64 references, written from the formulas

std::vector<double> softmax_ref(const std::vector<double>& x, int64_t cols) {
  std::vector<double> y(x.size());
  for (size_t r = 0; r < x.size() / cols; ++r) {
    double m = -INFINITY, s = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, x[r * cols + c]);
    for (int64_t c = 0; c < cols; ++c) s += std::exp(x[r * cols + c] - m);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = std::exp(x[r * cols + c] - m) / s;
  }
  return y;
}

double logsumexp_ref(const double* x, int64_t n) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < n; ++c) m = std::max(m, x[c]);
  for (int64_t c = 0; c < n; ++c) s += std::exp(x[c] - m);
  return m + std::log(s);
}

struct CeCase {
  Tensor logits;   // [rows, vocab]
  Tensor targets;  // [rows], some rows ignore_index
  std::vector<double> x;
  std::vector<int64_t> t;
  int64_t rows, vocab, ignore;
};

CeCase make_case(int64_t rows, int64_t vocab, DType dt, DType index, uint64_t seed, int64_t ignore = -100,
                 double scale = 3.0) {
  CeCase c{random_tensor({rows, vocab}, dt, seed, scale), Tensor(), {}, {}, rows, vocab, ignore};
  std::mt19937_64 rng(seed);
  for (int64_t r = 0; r < rows; ++r) {
    const bool skip = rows > 2 && r % 3 == 1;  // every third row (from row 1) is ignored
    c.t.push_back(skip ? ignore : static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab)));
  }
  c.targets = Tensor::from_vector(c.t, {rows}).to(index);
  c.x = c.logits.to_vector<double>();
  return c;
}

std::vector<double> row_losses_ref(const CeCase& c) {
  std::vector<double> l(c.rows, 0.0);
  for (int64_t r = 0; r < c.rows; ++r)
    if (c.t[r] != c.ignore) l[r] = logsumexp_ref(&c.x[r * c.vocab], c.vocab) - c.x[r * c.vocab + c.t[r]];
  return l;
}

int64_t valid_rows(const CeCase& c) {
  int64_t n = 0;
  for (int64_t t : c.t) n += t != c.ignore;
  return n;
}

Tensor loss_ref(const CeCase& c, ops::LossReduction red) {
  const auto l = row_losses_ref(c);
  if (red == ops::LossReduction::None) return Tensor::from_vector(l, {c.rows});
  double s = 0;
  for (double v : l) s += v;
  if (red == ops::LossReduction::Mean) s /= static_cast<double>(valid_rows(c));
  return Tensor::from_vector(std::vector<double>{s}, {});
}

// (softmax - onehot) * g_r, g_r = dloss (per row for None, / valid rows for Mean), 0 for ignored rows.
Tensor grad_ref(const CeCase& c, ops::LossReduction red, const std::vector<double>& dloss) {
  std::vector<double> g(c.x.size(), 0.0);
  for (int64_t r = 0; r < c.rows; ++r) {
    if (c.t[r] == c.ignore) continue;
    double scale = red == ops::LossReduction::None ? dloss[r] : dloss[0];
    if (red == ops::LossReduction::Mean) scale /= static_cast<double>(valid_rows(c));
    const double lse = logsumexp_ref(&c.x[r * c.vocab], c.vocab);
    for (int64_t j = 0; j < c.vocab; ++j)
      g[r * c.vocab + j] = (std::exp(c.x[r * c.vocab + j] - lse) - (j == c.t[r] ? 1.0 : 0.0)) * scale;
  }
  return Tensor::from_vector(g, {c.rows, c.vocab});
}

// The loss in float: the exps (relative error <= u, plus u |x - max| <= ~20u from rounding x - max) are
// summed in double, log and the two subtractions round once each: |error| <= (24 + 2|lse| + |loss|) u.
// With every loss and lse below ~15 here, 64u bounds it; f64 logits are computed in double.
Tolerance loss_tolerance(DType dt) { return dt == DType::F64 ? Tolerance{1e-12, 1e-12} : Tolerance{64 * kU, 64 * kU}; }

// dlogits: exp(x - lse) carries lse's error (<= ~40u absolute) as a relative error, then rounds to dt.
Tolerance grad_tolerance(DType dt) {
  const Tolerance t = tolerance(dt);
  return dt == DType::F64 ? Tolerance{1e-12, 1e-14} : Tolerance{t.rtol + 64 * kU, t.atol};
}

using mpt::testing::same_bits;

const ops::LossReduction kReductions[] = {ops::LossReduction::None, ops::LossReduction::Mean, ops::LossReduction::Sum};

}  // namespace

TEST(Softmax, ForwardMatchesFloat64ReferenceInEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t cols : {1, 7, 65, 1000, 4099}) {
      const Tensor x = random_tensor({2, 3, cols}, dt, 100 + cols, 3.0);
      const Tensor y = ops::softmax(x);
      EXPECT_EQ(y.dtype(), dt);
      // Float: the row sum of `cols` exps rounds with relative error <= (cols + 8) u, then one rounding to dt.
      const Tolerance t =
          dt == DType::F64 ? tolerance(dt) : Tolerance{tolerance(dt).rtol + (cols + 8) * kU, tolerance(dt).atol};
      mpt::testing::expect_close(y, Tensor::from_vector(softmax_ref(x.to_vector<double>(), cols), x.shape()), t,
                                 fmt::format("softmax {} C={}", dtype_name(dt), cols));
    }
  }
}

TEST(Softmax, BackwardMatchesFiniteDifferencesInFloat64) {
  const Tensor x = random_tensor({3, 17}, DType::F64, 7, 2.0), w = random_tensor({3, 17}, DType::F64, 8);
  const auto numeric =
      mpt::testing::numeric_gradients([](const std::vector<Tensor>& in) { return ops::softmax(in[0]); }, {x}, w);
  mpt::testing::expect_close(ops::softmax_backward(w, ops::softmax(x)), numeric[0], {1e-6, 1e-9},
                             "softmax backward vs finite differences");
}

TEST(Softmax, BackwardInLowPrecisionMatchesFloat64) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t cols : {5, 129, 1000}) {
      const Tensor y = ops::softmax(random_tensor({4, cols}, dt, 11 + cols, 2.0));
      const Tensor dy = random_tensor({4, cols}, dt, 12 + cols);
      const Tensor ref = ops::softmax_backward(dy.to(DType::F64), y.to(DType::F64));
      // sum(dy * y) in float: <= cols u max|dy| (|dy| < 5, sum y = 1), multiplied by y <= 1.
      const Tolerance t{tolerance(dt).rtol, tolerance(dt).atol + 5.0 * cols * kU};
      mpt::testing::expect_close(ops::softmax_backward(dy, y), ref, t,
                                 fmt::format("softmax backward {} C={}", dtype_name(dt), cols));
    }
  }
}

TEST(Softmax, BackwardAccumulatesIntoAGivenGradient) {
  const Tensor y = ops::softmax(random_tensor({3, 20}, DType::F64, 21)), dy = random_tensor({3, 20}, DType::F64, 22);
  Tensor dx = random_tensor({3, 20}, DType::F64, 23);
  const auto before = dx.to_vector<double>(), add = ops::softmax_backward(dy, y).to_vector<double>();
  EXPECT_TRUE(ops::softmax_backward(dy, y, dx).shares_storage(dx));
  const auto got = dx.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + add[i]);
}

TEST(Softmax, RejectsBadArguments) {
  EXPECT_MPT_ERROR(ops::softmax(Tensor::zeros({3}, DType::I64)), "[softmax] expected a f32, f64, f16 or bf16 tensor");
  EXPECT_MPT_ERROR(ops::softmax(Tensor::zeros({})), "[softmax] expected at least one dimension");
  EXPECT_MPT_ERROR(ops::softmax_backward(Tensor::zeros({2, 3}), Tensor::zeros({2, 4})), "[softmax_backward] dy must");
  EXPECT_MPT_ERROR(ops::softmax_backward(Tensor::zeros({3}, DType::BF16), Tensor::zeros({3})), "dtype mismatch");
  EXPECT_MPT_ERROR(ops::softmax_backward(Tensor::zeros({2, 2}), Tensor::zeros({2, 2}), Tensor::zeros({2, 2}).t()),
                   "must be contiguous");
}

TEST(SoftmaxCrossEntropy, ForwardMatchesFloat64ReferenceForEveryReduction) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t vocab : {1, 65, 1000, 4099}) {
      for (DType index : {DType::I64, DType::I32}) {
        const CeCase c = make_case(7, vocab, dt, index, 30 + vocab);
        for (ops::LossReduction red : kReductions) {
          const auto r = ops::softmax_cross_entropy(c.logits, c.targets, {.reduction = red});
          const std::string what =
              fmt::format("{} V={} {} reduction {}", dtype_name(dt), vocab, dtype_name(index), static_cast<int>(red));
          const DType acc = dt == DType::F64 ? DType::F64 : DType::F32;
          EXPECT_EQ(r.loss.dtype(), acc) << what;
          EXPECT_EQ(r.loss.shape(), red == ops::LossReduction::None ? Shape({7}) : Shape({})) << what;
          mpt::testing::expect_close(r.loss, loss_ref(c, red), loss_tolerance(dt), what);
          EXPECT_EQ(r.saved.valid_count.item<double>(), static_cast<double>(valid_rows(c))) << what;
          std::vector<double> lse;
          for (int64_t row = 0; row < c.rows; ++row) lse.push_back(logsumexp_ref(&c.x[row * vocab], vocab));
          mpt::testing::expect_close(r.saved.lse, Tensor::from_vector(lse, {c.rows}), loss_tolerance(dt),
                                     what + " lse");
          if (red == ops::LossReduction::None) {
            EXPECT_EQ(r.loss.to_vector<double>()[1], 0.0) << "ignored row";
          }
        }
      }
    }
  }
}

TEST(SoftmaxCrossEntropy, Gpt2VocabularyForwardAndBackward) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::BF16}) {
    const CeCase c = make_case(3, 50257, dt, DType::I64, 5, -100, 4.0);
    const auto r = ops::softmax_cross_entropy(c.logits, c.targets);
    mpt::testing::expect_close(r.loss, loss_ref(c, ops::LossReduction::Mean), loss_tolerance(dt), "V=50257 loss");
    const Tensor dloss = Tensor::full({}, 0.75);
    const Tensor g = ops::softmax_cross_entropy_backward(dloss, c.logits, c.targets, r.saved);
    mpt::testing::expect_close(g, grad_ref(c, ops::LossReduction::Mean, {0.75}), grad_tolerance(dt), "V=50257 dlogits");
  }
}

TEST(SoftmaxCrossEntropy, BackwardMatchesFiniteDifferencesInFloat64) {
  for (ops::LossReduction red : kReductions) {
    const CeCase c = make_case(5, 13, DType::F64, DType::I64, 40);
    const Tensor w =
        red == ops::LossReduction::None ? random_tensor({5}, DType::F64, 41) : Tensor::full({}, 1.7, DType::F64);
    const ops::CrossEntropyOptions o{.reduction = red};
    const auto numeric = mpt::testing::numeric_gradients(
        [&](const std::vector<Tensor>& in) { return ops::softmax_cross_entropy(in[0], c.targets, o).loss; }, {c.logits},
        w);
    const auto saved = ops::softmax_cross_entropy(c.logits, c.targets, o).saved;
    const Tensor g = ops::softmax_cross_entropy_backward(w, c.logits, c.targets, saved, o);
    // Central differences: the objective (~40) rounds at ~1e-14, divided by 2h (h up to ~1e-5): ~1e-9.
    mpt::testing::expect_close(g, numeric[0], {1e-6, 1e-8}, fmt::format("reduction {}", static_cast<int>(red)));
    for (int64_t j = 0; j < 13; ++j) EXPECT_EQ(g.to_vector<double>()[13 + j], 0.0) << "ignored row 1";
  }
}

TEST(SoftmaxCrossEntropy, BackwardInLowPrecisionMatchesFloat64) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t vocab : {65, 1000, 4099}) {
      for (ops::LossReduction red : kReductions) {
        const CeCase c = make_case(6, vocab, dt, DType::I32, 50 + vocab);
        const ops::CrossEntropyOptions o{.reduction = red};
        const auto saved = ops::softmax_cross_entropy(c.logits, c.targets, o).saved;
        const Tensor dloss =
            red == ops::LossReduction::None ? random_tensor({6}, DType::F32, 51) : Tensor::full({}, 2.5);
        const Tensor g = ops::softmax_cross_entropy_backward(dloss, c.logits, c.targets, saved, o);
        EXPECT_EQ(g.dtype(), dt);
        mpt::testing::expect_close(g, grad_ref(c, red, dloss.to_vector<double>()), grad_tolerance(dt),
                                   fmt::format("{} V={} reduction {}", dtype_name(dt), vocab, static_cast<int>(red)));
      }
    }
  }
}

// Fused vs unfused in the same precision, both against float64: the unfused computation materialises the
// probabilities in the logits' dtype (softmax), then takes -log(p[target]) and p - onehot from them.
TEST(SoftmaxCrossEntropy, ErrorAtMostTwiceTheUnfusedLowPrecisionError) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t vocab : {1000, 4099}) {
      const CeCase c = make_case(4, vocab, dt, DType::I64, 60 + vocab);
      const std::vector<double> p = ops::softmax(c.logits).to_vector<double>();
      std::vector<double> loss_unfused(c.rows, 0.0), grad_unfused(p.size(), 0.0);
      const double scale = 1.0 / static_cast<double>(valid_rows(c));
      for (int64_t r = 0; r < c.rows; ++r) {
        if (c.t[r] == c.ignore) continue;
        loss_unfused[r] = -std::log(p[r * vocab + c.t[r]]);
        for (int64_t j = 0; j < vocab; ++j) grad_unfused[r * vocab + j] = (p[r * vocab + j] - (j == c.t[r])) * scale;
      }
      const Tensor gu = Tensor::from_vector(grad_unfused, {c.rows, vocab}).to(dt);
      const auto fused = ops::softmax_cross_entropy(c.logits, c.targets, {.reduction = ops::LossReduction::None});
      const Tensor ref_loss = loss_ref(c, ops::LossReduction::None);
      const std::string what = fmt::format("{} V={}", dtype_name(dt), vocab);
      EXPECT_LE(mpt::testing::max_abs_error(fused.loss, ref_loss),
                2 * mpt::testing::max_abs_error(Tensor::from_vector(loss_unfused, {c.rows}), ref_loss))
          << "loss " << what;
      const auto saved = ops::softmax_cross_entropy(c.logits, c.targets).saved;
      const Tensor gf = ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0), c.logits, c.targets, saved);
      const Tensor ref_grad = grad_ref(c, ops::LossReduction::Mean, {1.0});
      EXPECT_LE(mpt::testing::max_abs_error(gf, ref_grad), 2 * mpt::testing::max_abs_error(gu, ref_grad))
          << "dlogits " << what;
    }
  }
}

TEST(SoftmaxCrossEntropy, BackwardAccumulatesOrOverwritesTheLogitsInPlace) {
  const Tensor dloss = Tensor::full({}, 1.0);
  {
    const CeCase c = make_case(5, 33, DType::F64, DType::I64, 70);
    const auto saved = ops::softmax_cross_entropy(c.logits, c.targets).saved;
    const Tensor fresh = ops::softmax_cross_entropy_backward(dloss.to(DType::F64), c.logits, c.targets, saved);
    Tensor into = random_tensor({5, 33}, DType::F64, 71);
    const auto before = into.to_vector<double>(), add = fresh.to_vector<double>();
    EXPECT_TRUE(ops::softmax_cross_entropy_backward(dloss.to(DType::F64), c.logits, c.targets, saved, {}, into)
                    .shares_storage(into));
    const auto got = into.to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) EXPECT_DOUBLE_EQ(got[i], before[i] + add[i]);
  }
  const CeCase c = make_case(5, 33, DType::BF16, DType::I64, 70);
  const auto saved = ops::softmax_cross_entropy(c.logits, c.targets).saved;
  const Tensor fresh = ops::softmax_cross_entropy_backward(dloss, c.logits, c.targets, saved);
  Tensor logits = c.logits.clone();
  const Tensor out = ops::softmax_cross_entropy_backward_in_place(dloss, logits, c.targets, saved);
  EXPECT_TRUE(out.shares_storage(logits));
  EXPECT_TRUE(same_bits(out, fresh)) << "in place gives the out-of-place bits";
}

TEST(SoftmaxCrossEntropy, IgnoreIndexIsConfigurableAndAllIgnoredMeanIsNaN) {
  const CeCase c = make_case(6, 10, DType::F32, DType::I64, 80, /*ignore=*/3);
  const auto r = ops::softmax_cross_entropy(c.logits, c.targets, {.ignore_index = 3});
  mpt::testing::expect_close(r.loss, loss_ref(c, ops::LossReduction::Mean), loss_tolerance(DType::F32), "ignore 3");
  const Tensor all = Tensor::full({4}, -100, DType::I64);
  const auto none = ops::softmax_cross_entropy(random_tensor({4, 10}, DType::F32, 81), all);
  EXPECT_TRUE(std::isnan(none.loss.item<double>())) << "0 / 0 like PyTorch";
  const auto sum =
      ops::softmax_cross_entropy(random_tensor({4, 10}, DType::F32, 81), all, {.reduction = ops::LossReduction::Sum});
  EXPECT_EQ(sum.loss.item<double>(), 0.0);
}

TEST(SoftmaxCrossEntropy, RejectsBadArguments) {
  const Tensor x = random_tensor({3, 5}, DType::F32, 1);
  const Tensor t = Tensor::from_vector<int64_t>({0, 4, -100}, {3});
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, Tensor::from_vector<int64_t>({0, 5, 1}, {3})),
                   "[softmax_cross_entropy] target 5 at row 1 is out of range [0, 5) and is not ignore_index -100");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, Tensor::from_vector<int32_t>({0, 1, -1}, {3})),
                   "target -1 at row 2 is out of range");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, t, {.ignore_index = -1}), "target -100 at row 2 is out of range");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, t.to(DType::F32)), "targets must be i64 or i32, got f32[3]");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, Tensor::zeros({4}, DType::I64)), "targets must have shape [3]");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x.to(DType::I32), t), "expected a f32, f64, f16 or bf16 tensor");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(Tensor::zeros({3, 0}), t), "the class dimension is empty");
  const auto saved = ops::softmax_cross_entropy(x, t).saved;
  const Tensor one = Tensor::full({}, 1.0);
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0, DType::BF16), x, t, saved),
                   "dloss must be f32");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(Tensor::ones({2}), x, t, saved),
                   "dloss of a reduced loss must have one element");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(one, x, t, saved, {.reduction = ops::LossReduction::None}),
                   "dloss must have shape [3]");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(one, x, t, {Tensor::zeros({2}), saved.valid_count}),
                   "saved.lse must have shape [3]");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(one, x, Tensor::from_vector<int64_t>({0, 9, 1}, {3}), saved),
                   "[softmax_cross_entropy_backward] target 9 at row 1 is out of range");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(one, x, t, saved, {}, Tensor::zeros({3, 5}, DType::BF16)),
                   "dtype mismatch");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(one, x, t, saved, {}, Tensor::zeros({5, 3}).t()),
                   "dlogits to accumulate into must be contiguous");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward_in_place(one, Tensor::zeros({5, 3}).t(), t, saved),
                   "in-place backward needs contiguous logits");
}

// ---- padded vocabularies (options.classes): logits [rows, Vp] of which only the first V columns are classes

namespace {

// The case's [rows, V] logits widened to [rows, vp]: the first V columns are the case's, the rest padding that must
// not matter: +inf in the first padding column, 1e30 (inf in f16) in the last, the others random, huge, -inf or NaN.
Tensor pad_logits(const CeCase& c, int64_t vp, uint64_t seed) {
  std::vector<double> v(static_cast<size_t>(c.rows * vp));
  std::mt19937_64 rng(seed);
  const double specials[] = {1e30, -1e30, INFINITY, -INFINITY, NAN};
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < vp; ++j) {
      double& e = v[static_cast<size_t>(r * vp + j)];
      if (j < c.vocab) {
        e = c.x[r * c.vocab + j];
      } else if (j == c.vocab) {
        e = INFINITY;
      } else if (j == vp - 1) {
        e = 1e30;
      } else {
        e = rng() % 2 == 0 ? specials[rng() % 5] : static_cast<double>(rng() % 2001) / 10.0 - 100.0;
      }
    }
  }
  return Tensor::from_vector(v, {c.rows, vp}).to(c.logits.dtype());
}

struct Padding {
  int64_t classes, width;
};
constexpr Padding kPaddings[] = {{65, 128}, {7, 8}};

Tensor class_columns(const Tensor& g, int64_t v) { return g.slice(-1, 0, v).contiguous(); }
Tensor padding_columns(const Tensor& g, int64_t v) { return g.slice(-1, v, g.size(-1)).contiguous(); }

// Every padding column of the gradient is +0.
void expect_zero_padding(const Tensor& g, int64_t v, const std::string& what) {
  const auto p = padding_columns(g, v).to_vector<double>();
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_TRUE(p[i] == 0.0 && !std::signbit(p[i])) << what << ": padding element " << i << " is " << p[i];
  }
}

}  // namespace

TEST(SoftmaxCrossEntropy, PaddedClassesMatchFloat64Reference) {
  mpt::testing::PoisonAllocations poison;  // a padding column the backward forgot to write would read NaN
  for (DType dt : {DType::F32, DType::BF16, DType::F64}) {
    for (const auto [v, vp] : kPaddings) {
      for (DType index : {DType::I64, DType::I32}) {
        const CeCase c = make_case(7, v, dt, index, 300 + v);  // rows 1 and 4 ignored
        const Tensor padded = pad_logits(c, vp, 301 + v);
        ASSERT_EQ(padded.shape(), Shape({7, vp}));
        for (ops::LossReduction red : kReductions) {
          const ops::CrossEntropyOptions o{.reduction = red, .classes = v};
          const std::string what = fmt::format("{} V={} Vp={} {} reduction {}", dtype_name(dt), v, vp,
                                               dtype_name(index), static_cast<int>(red));
          const auto r = ops::softmax_cross_entropy(padded, c.targets, o);
          EXPECT_EQ(r.loss.shape(), red == ops::LossReduction::None ? Shape({7}) : Shape({})) << what;
          mpt::testing::expect_close(r.loss, loss_ref(c, red), loss_tolerance(dt), what + " loss");
          std::vector<double> lse;
          for (int64_t row = 0; row < c.rows; ++row) lse.push_back(logsumexp_ref(&c.x[row * v], v));
          mpt::testing::expect_close(r.saved.lse, Tensor::from_vector(lse, {c.rows}), loss_tolerance(dt),
                                     what + " lse");
          EXPECT_EQ(r.saved.valid_count.item<double>(), static_cast<double>(valid_rows(c))) << what;

          const Tensor dloss = red == ops::LossReduction::None ? random_tensor({7}, r.loss.dtype(), 302)
                                                                : Tensor::full({}, 2.5, r.loss.dtype());
          const Tensor g = ops::softmax_cross_entropy_backward(dloss, padded, c.targets, r.saved, o);
          EXPECT_EQ(g.shape(), padded.shape()) << what;
          EXPECT_EQ(g.dtype(), dt) << what;
          mpt::testing::expect_close(class_columns(g, v), grad_ref(c, red, dloss.to_vector<double>()),
                                     grad_tolerance(dt), what + " dlogits");
          expect_zero_padding(g, v, what + " dlogits");

          Tensor over = padded.clone();
          const Tensor in_place = ops::softmax_cross_entropy_backward_in_place(dloss, over, c.targets, r.saved, o);
          EXPECT_TRUE(in_place.shares_storage(over)) << what;
          EXPECT_EQ(in_place.shape(), padded.shape()) << what;
          EXPECT_TRUE(same_bits(in_place, g)) << what << ": in place gives the out-of-place bits, padding included";
        }
      }
    }
  }
}

// Accumulating adds to the class columns only: the padding columns of the given gradient keep their bits.
TEST(SoftmaxCrossEntropy, PaddedBackwardAccumulatesOnlyIntoTheClasses) {
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    const int64_t v = 65, vp = 128;
    const CeCase c = make_case(6, v, dt, DType::I64, 310);
    const Tensor padded = pad_logits(c, vp, 311);
    const ops::CrossEntropyOptions o{.classes = v};
    const auto saved = ops::softmax_cross_entropy(padded, c.targets, o).saved;
    const Tensor dloss = Tensor::full({}, 1.5, saved.lse.dtype());
    const Tensor fresh = ops::softmax_cross_entropy_backward(dloss, padded, c.targets, saved, o);
    Tensor into = pad_logits(make_case(6, v, dt, DType::I64, 312), vp, 313);  // padding: inf, NaN, huge, random
    const Tensor before = into.clone();
    EXPECT_TRUE(ops::softmax_cross_entropy_backward(dloss, padded, c.targets, saved, o, into).shares_storage(into));
    const std::string what = fmt::format("{} accumulate", dtype_name(dt));
    EXPECT_TRUE(same_bits(padding_columns(into, v), padding_columns(before, v))) << what << ": padding untouched";
    const auto got = class_columns(into, v).to_vector<double>(), old = class_columns(before, v).to_vector<double>(),
               add = class_columns(fresh, v).to_vector<double>();
    for (size_t i = 0; i < got.size(); ++i) {
      if (dt == DType::F64) {
        EXPECT_EQ(got[i], old[i] + add[i]) << what << " element " << i;
      } else if (dt == DType::F32) {
        // old + (the float gradient): one float addition of the two, as the kernel does.
        EXPECT_EQ(got[i], static_cast<double>(static_cast<float>(old[i]) + static_cast<float>(add[i])))
            << what << " element " << i;
      } else {
        EXPECT_NEAR(got[i], old[i] + add[i], 2 * 0x1p-8 * (std::fabs(old[i]) + std::fabs(add[i])) + 1e-30)
            << what << " element " << i;
      }
    }
  }
}

// The same kernels over the same values in the same order: padding changes nothing but where the rows start.
TEST(SoftmaxCrossEntropy, PaddedF32IsBitIdenticalToTheUnpaddedCopy) {
  for (const auto [v, vp] : {Padding{65, 128}, Padding{7, 8}, Padding{1000, 1024}, Padding{50257, 50304}}) {
    const CeCase c = make_case(9, v, DType::F32, DType::I64, 320 + v);
    const Tensor padded = pad_logits(c, vp, 321 + v);
    for (ops::LossReduction red : kReductions) {
      const std::string what = fmt::format("V={} Vp={} reduction {}", v, vp, static_cast<int>(red));
      const auto dense = ops::softmax_cross_entropy(c.logits, c.targets, {.reduction = red});
      const ops::CrossEntropyOptions o{.reduction = red, .classes = v};
      const auto pad = ops::softmax_cross_entropy(padded, c.targets, o);
      EXPECT_TRUE(same_bits(pad.loss, dense.loss)) << what << " loss";
      EXPECT_TRUE(same_bits(pad.saved.lse, dense.saved.lse)) << what << " lse";
      EXPECT_TRUE(same_bits(pad.saved.valid_count, dense.saved.valid_count)) << what << " count";
      const Tensor dloss =
          red == ops::LossReduction::None ? random_tensor({9}, DType::F32, 322) : Tensor::full({}, 0.75);
      const Tensor g_dense = ops::softmax_cross_entropy_backward(dloss, c.logits, c.targets, dense.saved,
                                                                 {.reduction = red});
      const Tensor g_pad = ops::softmax_cross_entropy_backward(dloss, padded, c.targets, pad.saved, o);
      EXPECT_TRUE(same_bits(class_columns(g_pad, v), g_dense)) << what << " dlogits";
      expect_zero_padding(g_pad, v, what);
      Tensor over = padded.clone();
      ops::softmax_cross_entropy_backward_in_place(dloss, over, c.targets, pad.saved, o);
      EXPECT_TRUE(same_bits(class_columns(over, v), g_dense)) << what << " dlogits in place";
      expect_zero_padding(over, v, what + " in place");
    }
  }
}

// Through autograd: the recorded node passes `classes` to its backward; the leaf's gradient has the padded shape.
TEST(SoftmaxCrossEntropy, PaddedAutogradGradientHasZeroPadding) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t v = 65, vp = 128;
    const CeCase c = make_case(5, v, dt, DType::I64, 330);
    const ops::CrossEntropyOptions o{.classes = v};
    Tensor leaf = pad_logits(c, vp, 331);
    leaf.requires_grad_();
    const auto r = ops::softmax_cross_entropy(leaf, c.targets, o);
    r.loss.backward();
    ASSERT_TRUE(leaf.grad().defined());
    const Tensor want = ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0, r.loss.dtype()), leaf.detach(),
                                                            c.targets, r.saved, o);
    EXPECT_EQ(leaf.grad().shape(), Shape({5, vp}));
    EXPECT_TRUE(same_bits(leaf.grad().contiguous(), want)) << dtype_name(dt);
    expect_zero_padding(leaf.grad(), v, fmt::format("{} autograd", dtype_name(dt)));
    // The sole owner of the logits gets the gradient written over them, padding zeroed too.
    Tensor owned = pad_logits(c, vp, 332);
    owned.requires_grad_();
    const auto r2 = ops::softmax_cross_entropy(owned * 1.0, c.targets, o);  // logits held by the graph alone
    r2.loss.backward();
    EXPECT_TRUE(same_bits(owned.grad().contiguous(), want)) << dtype_name(dt) << " through the in-place node";
  }
}

TEST(SoftmaxCrossEntropy, ClassesOptionIsValidatedAndZeroMeansAll) {
  const Tensor x = random_tensor({3, 8}, DType::F32, 340);
  const Tensor t = Tensor::from_vector<int64_t>({0, 6, -100}, {3});
  // 0 (the default) and the full width are every column.
  const auto all = ops::softmax_cross_entropy(x, t);
  for (int64_t classes : {0, 8}) {
    const ops::CrossEntropyOptions o{.classes = classes};
    const auto r = ops::softmax_cross_entropy(x, t, o);
    EXPECT_TRUE(same_bits(r.loss, all.loss)) << "classes " << classes;
    EXPECT_TRUE(same_bits(ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0), x, t, r.saved, o),
                          ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0), x, t, all.saved)))
        << "classes " << classes;
  }
  // A target among the padding columns is out of range, and the message names the class count.
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, t, {.classes = 6}),
                   "[softmax_cross_entropy] target 6 at row 1 is out of range [0, 6) (6 classes; the other 2 of the "
                   "last dimension's 8 entries are padding) and is not ignore_index -100");
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(x, Tensor::from_vector<int32_t>({7, 0, 0}, {3}), {.classes = 7}),
                   "target 7 at row 0 is out of range [0, 7) (7 classes");
  const auto saved = ops::softmax_cross_entropy(x, t, {.classes = 7}).saved;
  EXPECT_MPT_ERROR(
      ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0), x, t, saved, {.classes = 5}),
      "[softmax_cross_entropy_backward] target 6 at row 1 is out of range [0, 5) (5 classes");
  {
    Tensor over = x.clone();
    EXPECT_MPT_ERROR(
        ops::softmax_cross_entropy_backward_in_place(Tensor::full({}, 1.0), over, t, saved, {.classes = 6}),
        "[softmax_cross_entropy_backward_in_place] target 6 at row 1 is out of range [0, 6) (6 classes");
  }
  // More classes than columns, or a negative count: an error naming the op, the logits and the value.
  for (int64_t classes : {9, -1}) {
    const std::string m = mpt::testing::error_message([&] { ops::softmax_cross_entropy(x, t, {.classes = classes}); });
    EXPECT_TRUE(mpt::testing::contains(m, "[softmax_cross_entropy] options.classes") &&
                mpt::testing::contains(m, "f32[3, 8]") && mpt::testing::contains(m, fmt::format("got {}", classes)))
        << m;
    EXPECT_MPT_ERROR(ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0), x, t, saved, {.classes = classes}),
                     "[softmax_cross_entropy_backward] options.classes must be 0");
  }
}
