// tests/ops/test_elementwise.cpp: add, mul, scale, add_ (broadcast b) against float64 math and finite differences.
#include <gtest/gtest.h>

#include <cmath>

#include "mpt/ops/elementwise.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;
using mpt::testing::tolerance;

namespace {

const DType kDtypes[] = {DType::F32, DType::F16, DType::BF16, DType::F64};

// Independent float64 reference: b expanded to a's shape by index arithmetic (NumPy rules, right-aligned).
Tensor binary_ref(const Tensor& a, const Tensor& b, double (*f)(double, double)) {
  const std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>();
  const Shape& as = a.shape();
  Shape bs(as.size() - b.shape().size(), 1);
  bs.insert(bs.end(), b.shape().begin(), b.shape().end());
  std::vector<double> out(av.size());
  for (size_t i = 0; i < av.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i), bi = 0, bstride = 1;
    for (size_t d = as.size(); d-- > 0;) {
      const int64_t coord = rem % as[d];
      rem /= as[d];
      bi += (bs[d] == 1 ? 0 : coord) * bstride;
      bstride *= bs[d];
    }
    out[i] = f(av[i], bv[static_cast<size_t>(bi)]);
  }
  return Tensor::from_vector(out, as);
}

double plus(double x, double y) { return x + y; }
double times(double x, double y) { return x * y; }

struct Case {
  Shape a, b;
};
// Same shapes (odd sizes, one above the OpenMP threshold and the 16 Ki chunk), suffix broadcasts, and
// broadcasts that need b expanded (a size-1 dim in the middle or at the end).
const Case kCases[] = {{{1}, {1}},          {{7}, {7}},             {{1000}, {1000}},       {{70001}, {70001}},
                       {{5, 37}, {37}},     {{3, 4, 129}, {1, 129}}, {{300, 257}, {257}},   {{6, 5}, {}},
                       {{2, 3, 5}, {3, 1}}, {{4, 9}, {4, 1}},       {{2, 3, 4}, {2, 1, 4}}, {{9, 7}, {1}}};

}  // namespace

TEST(Elementwise, AddAndMulMatchFloat64ReferenceInEveryDtypeAndBroadcast) {
  mpt::testing::PoisonAllocations poison;  // an unwritten output element reads as NaN and fails
  uint64_t seed = 1;
  for (DType dt : kDtypes) {
    for (const Case& c : kCases) {
      const Tensor a = random_tensor(c.a, dt, seed++, 2.0), b = random_tensor(c.b, dt, seed++, 2.0);
      const std::string what = fmt::format("{} a {} b {}", dtype_name(dt), shape_str(c.a), shape_str(c.b));
      // One rounding of the float (double for f64) result to dt: within the dtype tolerance.
      const Tensor sum = ops::add(a, b), prod = ops::mul(a, b);
      EXPECT_EQ(sum.dtype(), dt);
      EXPECT_EQ(sum.shape(), c.a);
      mpt::testing::expect_close(sum, binary_ref(a, b, plus), tolerance(dt), "add " + what);
      mpt::testing::expect_close(prod, binary_ref(a, b, times), tolerance(dt), "mul " + what);
    }
  }
}

TEST(Elementwise, Float32ResultsAreCorrectlyRounded) {
  // A float sum or product of two floats is the exact value rounded once: compare bit for bit.
  const Tensor a = random_tensor({4099}, DType::F32, 5), b = random_tensor({4099}, DType::F32, 6);
  const auto av = a.to_vector<float>(), bv = b.to_vector<float>();
  const auto s = ops::add(a, b).to_vector<float>(), p = ops::mul(a, b).to_vector<float>();
  for (size_t i = 0; i < av.size(); ++i) {
    // double holds the exact product of two floats, and the exact sum here (exponents within 29 bits).
    ASSERT_EQ(s[i], static_cast<float>(static_cast<double>(av[i]) + bv[i])) << i;
    ASSERT_EQ(p[i], static_cast<float>(static_cast<double>(av[i]) * bv[i])) << i;
  }
}

TEST(Elementwise, WorksOnNonContiguousInputs) {
  const Tensor a = random_tensor({6, 5}, DType::F32, 3).t(), b = random_tensor({5, 6}, DType::F32, 4);
  mpt::testing::expect_close(ops::add(a, b), binary_ref(a, b, plus), tolerance(DType::F32), "transposed a");
  const Tensor bias = random_tensor({12}, DType::F32, 9).slice(0, 0, 12, 2);  // stride 2
  mpt::testing::expect_close(ops::mul(b, bias), binary_ref(b, bias, times), tolerance(DType::F32), "strided bias");
}

TEST(Elementwise, ScaleAndInPlaceAddMatchFloat64) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : kDtypes) {
    const Tensor x = random_tensor({3, 1001}, dt, 31), y = random_tensor({3, 1001}, dt, 32);
    const auto xv = x.to_vector<double>(), yv = y.to_vector<double>();
    std::vector<double> scaled(xv.size()), updated(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      scaled[i] = -0.37 * xv[i];
      updated[i] = xv[i] + 0.25 * yv[i];
    }
    mpt::testing::expect_close(ops::scale(x, -0.37), Tensor::from_vector(scaled, x.shape()), tolerance(dt),
                               fmt::format("scale {}", dtype_name(dt)));
    Tensor target = x.clone();
    const Tensor returned = ops::add_(target, y, 0.25);
    EXPECT_TRUE(returned.shares_storage(target));
    mpt::testing::expect_close(target, Tensor::from_vector(updated, x.shape()), tolerance(dt),
                               fmt::format("add_ {}", dtype_name(dt)));
  }
}

TEST(Elementwise, InPlaceAddBroadcastsAndAllowsItself) {
  Tensor x = random_tensor({4, 33}, DType::F32, 41);
  const Tensor bias = random_tensor({33}, DType::F32, 42);
  const Tensor expected = binary_ref(x, bias, plus);
  ops::add_(x, bias);
  mpt::testing::expect_close(x, expected, tolerance(DType::F32), "x += bias");
  const auto before = x.to_vector<float>();
  ops::add_(x, x);  // x += x: exact doubling
  const auto after = x.to_vector<float>();
  for (size_t i = 0; i < before.size(); ++i) ASSERT_EQ(after[i], 2 * before[i]) << i;
}

TEST(Elementwise, BackwardMatchesFiniteDifferencesInFloat64) {
  const Case cases[] = {{{3, 5}, {5}}, {{3, 5}, {3, 5}}, {{2, 3, 4}, {3, 1}}, {{2, 3}, {}}};
  uint64_t seed = 50;
  for (const Case& c : cases) {
    const Tensor a = random_tensor(c.a, DType::F64, seed++), b = random_tensor(c.b, DType::F64, seed++);
    const Tensor w = random_tensor(c.a, DType::F64, seed++);
    const std::string what = fmt::format("a {} b {}", shape_str(c.a), shape_str(c.b));
    const auto num_add = mpt::testing::numeric_gradients(
        [](const std::vector<Tensor>& in) { return ops::add(in[0], in[1]); }, {a, b}, w);
    const auto add_grads = ops::add_backward(w, b.shape());
    mpt::testing::expect_close(add_grads.da, num_add[0], {1e-7, 1e-9}, "add da " + what);
    mpt::testing::expect_close(add_grads.db, num_add[1], {1e-7, 1e-9}, "add db " + what);
    const auto num_mul = mpt::testing::numeric_gradients(
        [](const std::vector<Tensor>& in) { return ops::mul(in[0], in[1]); }, {a, b}, w);
    const auto mul_grads = ops::mul_backward(w, a, b);
    mpt::testing::expect_close(mul_grads.da, num_mul[0], {1e-7, 1e-9}, "mul da " + what);
    mpt::testing::expect_close(mul_grads.db, num_mul[1], {1e-7, 1e-9}, "mul db " + what);
  }
  const Tensor x = random_tensor({17}, DType::F64, 70), w = random_tensor({17}, DType::F64, 71);
  const auto num = mpt::testing::numeric_gradients(
      [](const std::vector<Tensor>& in) { return ops::scale(in[0], 1.7); }, {x}, w);
  mpt::testing::expect_close(ops::scale_backward(w, 1.7), num[0], {1e-7, 1e-9}, "scale dx");
}

TEST(Elementwise, BackwardAccumulatesIntoGivenGradients) {
  const Tensor a = random_tensor({6, 11}, DType::F64, 81), b = random_tensor({11}, DType::F64, 82);
  const Tensor dy = random_tensor({6, 11}, DType::F64, 83);
  Tensor da = random_tensor({6, 11}, DType::F64, 84), db = random_tensor({11}, DType::F64, 85);
  const auto da0 = da.to_vector<double>(), db0 = db.to_vector<double>();
  const auto fresh = ops::mul_backward(dy, a, b);
  const auto out = ops::mul_backward(dy, a, b, da, db);
  EXPECT_TRUE(out.da.shares_storage(da));
  EXPECT_TRUE(out.db.shares_storage(db));
  const auto fa = fresh.da.to_vector<double>(), fb = fresh.db.to_vector<double>();
  const auto ga = da.to_vector<double>(), gb = db.to_vector<double>();
  for (size_t i = 0; i < ga.size(); ++i) EXPECT_DOUBLE_EQ(ga[i], da0[i] + fa[i]);
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(gb[i], db0[i] + fb[i], 1e-14);

  Tensor da2 = random_tensor({6, 11}, DType::F64, 86), db2 = random_tensor({11}, DType::F64, 87);
  const auto da2_0 = da2.to_vector<double>(), db2_0 = db2.to_vector<double>();
  ops::add_backward(dy, {11}, da2, db2);
  const auto fresh_add = ops::add_backward(dy, {11});
  const auto dyv = dy.to_vector<double>(), fdb = fresh_add.db.to_vector<double>();
  const auto g2a = da2.to_vector<double>(), g2b = db2.to_vector<double>();
  for (size_t i = 0; i < g2a.size(); ++i) EXPECT_DOUBLE_EQ(g2a[i], da2_0[i] + dyv[i]);
  for (size_t i = 0; i < g2b.size(); ++i) EXPECT_NEAR(g2b[i], db2_0[i] + fdb[i], 1e-14);

  Tensor dx = random_tensor({6, 11}, DType::F64, 88);
  const auto dx0 = dx.to_vector<double>();
  ops::scale_backward(dy, -2.0, dx);
  const auto gx = dx.to_vector<double>();
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_DOUBLE_EQ(gx[i], dx0[i] - 2.0 * dyv[i]);
}

TEST(Elementwise, RejectsBadArguments) {
  EXPECT_MPT_ERROR(ops::add(Tensor::zeros({3}), Tensor::zeros({3}, DType::BF16)),
                   "[add] dtype mismatch: argument 1 is bf16[3] cpu, argument 0 is f32[3] cpu");
  EXPECT_MPT_ERROR(ops::mul(Tensor::zeros({3}, DType::I32), Tensor::zeros({3}, DType::I32)),
                   "[mul] expected a f32, f64, f16 or bf16 tensor, got i32");
  EXPECT_MPT_ERROR(ops::add(Tensor::zeros({3, 4}), Tensor::zeros({3})), "[add]");
  // Both operands broadcast (NumPy): a may be the smaller one; shapes that do not broadcast are named.
  EXPECT_EQ(ops::add(Tensor::ones({4}), Tensor::ones({3, 4})).shape(), (Shape{3, 4}));
  EXPECT_EQ(ops::mul(Tensor::ones({1, 4}), Tensor::ones({3, 1})).shape(), (Shape{3, 4}));
  EXPECT_MPT_ERROR(ops::add(Tensor::zeros({2, 4}), Tensor::zeros({3, 4})),
                   "[add] shapes [2, 4] and [3, 4] cannot be broadcast together");
  EXPECT_MPT_ERROR(ops::add(Tensor(), Tensor::zeros({3})), "[add] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::scale(Tensor(), 2.0), "[scale] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::add_(Tensor::zeros({2, 3}).t(), Tensor::zeros({3, 2})), "[add_] the tensor updated in place "
                   "must be contiguous");
  const Tensor x = Tensor::zeros({8});
  EXPECT_MPT_ERROR(ops::add_(x.slice(0, 0, 4), x.slice(0, 4, 8)), "[add_] b f32[4] cpu shares storage with a");
  EXPECT_MPT_ERROR(ops::add_backward(Tensor::zeros({3, 4}), {4}, Tensor::zeros({4})), "[add_backward] da must have "
                   "shape [3, 4]");
  EXPECT_MPT_ERROR(ops::mul_backward(Tensor::zeros({3}), Tensor::zeros({4}), Tensor::zeros({4})),
                   "[mul_backward] dy must have shape [4]");
  EXPECT_MPT_ERROR(ops::scale_backward(Tensor::zeros({2, 2}), 1.0, Tensor::zeros({2, 2}).t()), "must be contiguous");
}
