// tests/ops/test_loss.cpp: MSE, L1, smooth-L1, Huber, BCE with logits and label-smoothed cross-entropy against
// float64 formulas and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

double reduce(const std::vector<double>& v, ops::LossReduction r) {
  double s = 0;
  for (double e : v) s += e;
  return r == ops::LossReduction::Mean ? s / static_cast<double>(v.size()) : s;
}

std::vector<double> elementwise(const Tensor& a, const Tensor& b, double (*f)(double, double, double), double p) {
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  std::vector<double> out(va.size());
  for (size_t i = 0; i < va.size(); ++i) out[i] = f(va[i], vb[i], p);
  return out;
}

double mse(double x, double y, double) { return (x - y) * (x - y); }
double l1(double x, double y, double) { return std::fabs(x - y); }
double smooth_l1(double x, double y, double beta) {
  const double d = std::fabs(x - y);
  return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
}
double huber(double x, double y, double delta) {
  const double d = std::fabs(x - y);
  return d < delta ? 0.5 * d * d : delta * (d - 0.5 * delta);
}
double bce(double x, double y, double) {
  const double s = 1 / (1 + std::exp(-x));
  return -(y * std::log(s) + (1 - y) * std::log1p(-s));
}

}  // namespace

TEST(Losses, MatchFloat64FormulasInEveryDtype) {
  using R = ops::LossReduction;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const Tensor x = random_tensor({4, 7}, dt, 1, 2.0), y = random_tensor({4, 7}, dt, 2, 2.0);
    const Tensor p = Tensor::uniform({4, 7}, 0, 1, DType::F64).to(dt);
    for (R r : {R::Mean, R::Sum}) {
      const double tol = 1e-6 * (r == R::Sum ? 28 : 1);
      EXPECT_NEAR(ops::mse_loss(x, y, r).item<double>(), reduce(elementwise(x, y, mse, 0), r), tol * 10);
      EXPECT_NEAR(ops::l1_loss(x, y, r).item<double>(), reduce(elementwise(x, y, l1, 0), r), tol * 10);
      EXPECT_NEAR(ops::smooth_l1_loss(x, y, 0.7, r).item<double>(), reduce(elementwise(x, y, smooth_l1, 0.7), r),
                  tol * 10);
      EXPECT_NEAR(ops::huber_loss(x, y, 0.7, r).item<double>(), reduce(elementwise(x, y, huber, 0.7), r), tol * 10);
      EXPECT_NEAR(ops::binary_cross_entropy_with_logits(x, p, r).item<double>(), reduce(elementwise(x, p, bce, 0), r),
                  tol * 10);
    }
    const Tensor none = ops::mse_loss(x, y, R::None);
    EXPECT_EQ(none.shape(), x.shape());
    EXPECT_EQ(none.dtype(), dt == DType::F64 ? DType::F64 : DType::F32) << "losses compute and return f32";
  }
}

TEST(Losses, BceWithLogitsIsStableAndWeighsPositives) {
  // Large logits: no inf or NaN, the exact limits.
  const Tensor x = Tensor::from_vector<float>({100.f, -100.f, 30.f}, {3}), y = Tensor::from_vector<float>({0, 1, 1},
                                                                                                          {3});
  const auto l = ops::binary_cross_entropy_with_logits(x, y, ops::LossReduction::None).to_vector<double>();
  EXPECT_NEAR(l[0], 100, 1e-4);
  EXPECT_NEAR(l[1], 100, 1e-4);
  EXPECT_NEAR(l[2], std::log1p(std::exp(-30.0)), 1e-18);
  // pos_weight [C]: loss = -(w y log s + (1 - y) log(1 - s)).
  const Tensor z = random_tensor({5, 3}, DType::F64, 3), t = Tensor::uniform({5, 3}, 0, 1, DType::F64);
  const Tensor w = Tensor::from_vector<double>({0.5, 2, 3}, {3});
  const auto got = ops::binary_cross_entropy_with_logits(z, t, ops::LossReduction::None, w).to_vector<double>();
  const auto vz = z.to_vector<double>(), vt = t.to_vector<double>();
  for (size_t i = 0; i < got.size(); ++i) {
    const double s = 1 / (1 + std::exp(-vz[i])), pw = (std::vector<double>{0.5, 2, 3})[i % 3];
    EXPECT_NEAR(got[i], -(pw * vt[i] * std::log(s) + (1 - vt[i]) * std::log1p(-s)), 1e-12) << i;
  }
}

TEST(Losses, GradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({3, 5}, DType::F64, 4, 2.0), y = random_tensor({3, 5}, DType::F64, 5, 2.0);
  const Tensor p = Tensor::uniform({3, 5}, 0, 1, DType::F64);
  const auto check = [&](const char* name, const autograd::DifferentiableFn& fn, const Tensor& target) {
    EXPECT_TRUE(autograd::gradcheck(fn, {x, target})) << name;
  };
  check("mse", [](const std::vector<Tensor>& in) { return ops::mse_loss(in[0], in[1]); }, y);
  check("l1", [](const std::vector<Tensor>& in) { return ops::l1_loss(in[0], in[1], ops::LossReduction::Sum); }, y);
  check("smooth_l1", [](const std::vector<Tensor>& in) { return ops::smooth_l1_loss(in[0], in[1], 0.5); }, y);
  check("huber", [](const std::vector<Tensor>& in) { return ops::huber_loss(in[0], in[1], 0.5); }, y);
  check("bce", [](const std::vector<Tensor>& in) { return ops::binary_cross_entropy_with_logits(in[0], in[1]); }, p);
  // bf16 predictions get a bf16 gradient.
  const Tensor xb = x.to(DType::BF16).requires_grad_();
  ops::mse_loss(xb, y.to(DType::BF16)).backward();
  EXPECT_EQ(xb.grad().dtype(), DType::BF16);
}

TEST(CrossEntropy, LabelSmoothingMatchesTheFormula) {
  const int64_t rows = 6, vocab = 9;
  for (DType dt : {DType::F64, DType::F32, DType::BF16}) {
    const Tensor logits = random_tensor({2, 3, vocab}, dt, 6, 3.0);
    const Tensor targets = Tensor::from_vector<int64_t>({1, -100, 8, 0, 4, -100}, {2, 3});
    for (double eps : {0.0, 0.1, 1.0}) {
      for (auto r : {ops::LossReduction::Mean, ops::LossReduction::Sum}) {
        const Tensor loss = ops::cross_entropy(logits, targets, {.reduction = r, .label_smoothing = eps});
        const auto v = logits.to_vector<double>();
        const auto t = targets.to_vector<int64_t>();
        double total = 0;
        int count = 0;
        for (int64_t i = 0; i < rows; ++i) {
          if (t[i] == -100) continue;
          double m = -INFINITY, mean = 0, s = 0;
          for (int64_t j = 0; j < vocab; ++j) m = std::max(m, v[i * vocab + j]);
          for (int64_t j = 0; j < vocab; ++j) s += std::exp(v[i * vocab + j] - m), mean += v[i * vocab + j] / vocab;
          const double lse = m + std::log(s);
          total += (1 - eps) * (lse - v[i * vocab + t[i]]) + eps * (lse - mean);
          ++count;
        }
        const double want = r == ops::LossReduction::Mean ? total / count : total;
        EXPECT_NEAR(loss.item<double>(), want, 1e-5 * std::fabs(want)) << dtype_name(dt) << " eps " << eps;
      }
    }
  }
  const Tensor targets = Tensor::from_vector<int64_t>({1, -100, 8, 0}, {4});
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) { return ops::cross_entropy(in[0], targets, {.label_smoothing = 0.2}); },
      {random_tensor({4, vocab}, DType::F64, 7)}));
  EXPECT_TRUE(autograd::gradcheck(
      [&](const std::vector<Tensor>& in) {
        return ops::cross_entropy(in[0], targets, {.reduction = ops::LossReduction::None, .label_smoothing = 0.3});
      },
      {random_tensor({4, vocab}, DType::F64, 8)}));
}

TEST(Losses, RejectBadInputs) {
  const std::string m =
      mpt::testing::error_message([] { ops::mse_loss(Tensor::zeros({3, 2}), Tensor::zeros({2, 3})); });
  EXPECT_TRUE(mpt::testing::contains(m, "[mse_loss]") && mpt::testing::contains(m, "[3, 2]") &&
              mpt::testing::contains(m, "[2, 3]"))
      << m;
  EXPECT_TRUE(mpt::testing::contains(
      mpt::testing::error_message([] { ops::smooth_l1_loss(Tensor::zeros({2}), Tensor::zeros({2}), -1.0); }),
      "beta"));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([] {
                                       ops::cross_entropy(Tensor::zeros({2, 3}), Tensor::zeros({2}, DType::I64),
                                                          {.label_smoothing = 1.5});
                                     }),
                                     "label_smoothing"));
}

// `classes` passes through to ops::softmax_cross_entropy: padded logits [rows, Vp] give the loss of their first V
// columns (the bits of the unpadded [rows, V] copy), and autograd's gradient is 0 in the padding.
TEST(CrossEntropy, PaddedClassesPassThrough) {
  const int64_t rows = 6, v = 9, vp = 16;
  const Tensor dense = random_tensor({rows, v}, DType::F32, 20, 3.0);
  const Tensor targets = Tensor::from_vector<int64_t>({1, -100, 8, 0, 4, -100}, {rows});
  std::vector<float> values(rows * vp, INFINITY);  // padding: +inf, never read
  const auto d = dense.to_vector<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < v; ++j) values[r * vp + j] = d[r * v + j];
  for (auto red : {ops::LossReduction::Mean, ops::LossReduction::Sum, ops::LossReduction::None}) {
    Tensor padded = Tensor::from_vector(values, {rows, vp});
    padded.requires_grad_();
    const Tensor loss = ops::cross_entropy(padded, targets, {.reduction = red, .classes = v});
    const Tensor want = ops::cross_entropy(dense, targets, {.reduction = red});
    EXPECT_EQ(loss.to_vector<double>(), want.to_vector<double>()) << "reduction " << static_cast<int>(red);
    (red == ops::LossReduction::None ? ops::sum(loss) : loss).backward();
    const auto g = padded.grad().to_vector<double>();
    ASSERT_EQ(g.size(), static_cast<size_t>(rows * vp));
    for (int64_t r = 0; r < rows; ++r) {
      double row_sum = 0;
      for (int64_t j = 0; j < v; ++j) row_sum += g[r * vp + j];
      EXPECT_NEAR(row_sum, 0.0, 1e-6) << "softmax - onehot sums to 0 over the classes, row " << r;
      for (int64_t j = v; j < vp; ++j) EXPECT_EQ(g[r * vp + j], 0.0) << "padding row " << r << " column " << j;
    }
  }
  EXPECT_MPT_ERROR(ops::cross_entropy(random_tensor({rows, vp}, DType::F32, 21), targets,
                                      {.label_smoothing = 0.1, .classes = v}),
                   "[cross_entropy] label_smoothing (0.1) with padded logits (classes = 9 of f32[6, 16] cpu) is not "
                   "supported");
  EXPECT_MPT_ERROR(ops::cross_entropy(random_tensor({rows, vp}, DType::F32, 21), targets, {.classes = vp + 1}),
                   "[softmax_cross_entropy] options.classes must be 0");
}
