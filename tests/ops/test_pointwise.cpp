// tests/ops/test_pointwise.cpp: the general unary and binary ops, comparisons, where and the Tensor operators against
// float64 formulas, special values and float64 finite differences (autograd::gradcheck).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;
using mpt::testing::tolerance;

namespace {

const double kInf = std::numeric_limits<double>::infinity();
const double kNaN = std::numeric_limits<double>::quiet_NaN();

// Independent float64 references, written from the formulas.
struct UnaryCase {
  const char* name;
  std::function<Tensor(const Tensor&)> op;
  std::function<double(double)> ref;
  double lo, hi;  // input range the case is drawn from (inside the function's domain, away from kinks)
};

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }

std::vector<UnaryCase> unary_cases() {
  return {
      {"neg", [](const Tensor& x) { return ops::neg(x); }, [](double x) { return -x; }, -3, 3},
      {"abs", [](const Tensor& x) { return ops::abs(x); }, [](double x) { return std::fabs(x); }, -3, 3},
      {"relu", [](const Tensor& x) { return ops::relu(x); }, [](double x) { return x > 0 ? x : 0; }, -3, 3},
      {"silu", [](const Tensor& x) { return ops::silu(x); }, [](double x) { return x * sigmoid_ref(x); }, -8, 8},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }, [](double x) { return std::tanh(x); }, -4, 4},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }, sigmoid_ref, -12, 12},
      {"exp", [](const Tensor& x) { return ops::exp(x); }, [](double x) { return std::exp(x); }, -8, 8},
      {"log", [](const Tensor& x) { return ops::log(x); }, [](double x) { return std::log(x); }, 1e-3, 50},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(x); }, [](double x) { return std::sqrt(x); }, 1e-3, 50},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(x); }, [](double x) { return 1 / std::sqrt(x); }, 1e-2, 50},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); },
       [](double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::fabs(x))); }, -30, 30},
      {"pow 3", [](const Tensor& x) { return ops::pow(x, 3); }, [](double x) { return x * x * x; }, -3, 3},
      {"pow 2", [](const Tensor& x) { return ops::pow(x, 2); }, [](double x) { return x * x; }, -3, 3},
      {"pow -0.5", [](const Tensor& x) { return ops::pow(x, -0.5); }, [](double x) { return std::pow(x, -0.5); },
       0.1, 9},
      {"pow 1.7", [](const Tensor& x) { return ops::pow(x, 1.7); }, [](double x) { return std::pow(x, 1.7); }, 0.1, 9},
      {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.5, 1.25); },
       [](double x) { return std::min(std::max(x, -0.5), 1.25); }, -3, 3},
      {"clamp lo", [](const Tensor& x) { return ops::clamp(x, 0.25, std::nullopt); },
       [](double x) { return std::max(x, 0.25); }, -3, 3},
  };
}

// n values uniform in [lo, hi] in dtype dt, then nudged off the kinks (|x| and |x - bound| >= 1e-2) so that finite
// differences see a smooth function.
Tensor inputs(const Shape& shape, double lo, double hi, DType dt, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> v = Tensor::uniform(shape, lo, hi, DType::F64, Device::cpu(), gen).to_vector<double>();
  for (double& e : v) {
    for (double kink : {0.0, -0.5, 1.25, 0.25}) {
      if (std::fabs(e - kink) < 1e-2) e = kink + 2e-2;
    }
  }
  return Tensor::from_vector(v, shape).to(dt);
}

Tensor apply_ref(const Tensor& x, const std::function<double(double)>& f) {
  std::vector<double> v = x.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, x.shape());
}

Tensor apply_ref2(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), "test");
  const std::vector<double> va = a.expand(shape).to_vector<double>(), vb = b.expand(shape).to_vector<double>();
  std::vector<double> out(va.size());
  for (size_t i = 0; i < va.size(); ++i) out[i] = f(va[i], vb[i]);
  return Tensor::from_vector(out, shape);
}

bool gradcheck_unary(const UnaryCase& c, const Tensor& x) {
  return autograd::gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0]); }, {x});
}

}  // namespace

TEST(Unary, ForwardMatchesFloat64ReferenceInEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
      for (int64_t n : {1, 37, 5000}) {
        const Tensor x = inputs({n}, c.lo, c.hi, dt, 11 + n);
        const Tensor y = c.op(x);
        ASSERT_EQ(y.dtype(), dt) << c.name;
        ASSERT_EQ(y.shape(), x.shape()) << c.name;
        // Float math (f32 paths): within f32 tolerance of the exact value before the one rounding to dt.
        mpt::testing::expect_close(y, apply_ref(x, c.ref), tolerance(dt == DType::F64 ? DType::F32 : dt),
                                   fmt::format("{} {} n={}", c.name, dtype_name(dt), n));
      }
    }
  }
}

TEST(Unary, Float32PathsStayWithinAFewUlpOfFloat64) {
  // Tighter than the tolerance table: our own exp, log, tanh and sigmoid in float.
  for (const UnaryCase& c : unary_cases()) {
    const Tensor x = inputs({4096}, c.lo, c.hi, DType::F32, 5);
    const auto got = c.op(x).to_vector<double>();
    const auto want = apply_ref(x, c.ref).to_vector<double>();
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double ulp = std::ldexp(1.0, std::ilogb(std::max(std::fabs(want[i]), 1e-30)) - 23);
      worst = std::max(worst, std::fabs(got[i] - want[i]) / ulp);
    }
    EXPECT_LE(worst, 8.0) << c.name << ": worst error " << worst << " ulp";
  }
}

TEST(Unary, BackwardMatchesFiniteDifferences) {
  for (const UnaryCase& c : unary_cases()) {
    const Tensor x = inputs({3, 17}, c.lo, c.hi, DType::F64, 3);
    EXPECT_TRUE(gradcheck_unary(c, x)) << c.name;
  }
}

TEST(Unary, LowPrecisionGradientsMatchFloat64) {
  // dx = dy * f'(x) computed in float and rounded once: within the dtype's tolerance of the f64 backward on the same
  // (rounded) inputs.
  for (const UnaryCase& c : unary_cases()) {
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const Tensor x = inputs({300}, c.lo, c.hi, dt, 9).requires_grad_();
      const Tensor dy = random_tensor({300}, dt, 10);
      c.op(x).backward(dy);
      const Tensor x64 = x.detach().to(DType::F64).requires_grad_();
      c.op(x64).backward(dy.to(DType::F64));
      mpt::testing::expect_close(x.grad(), x64.grad(), tolerance(dt == DType::F32 ? DType::F32 : dt),
                                 fmt::format("{} gradient {}", c.name, dtype_name(dt)));
    }
  }
}

TEST(Unary, SpecialValues) {
  const Tensor x = Tensor::from_vector<double>({kNaN, -0.0, 0.0, kInf, -kInf, -1.0, 1e-40}, {7}).to(DType::F32);
  const auto relu = ops::relu(x).to_vector<double>();
  EXPECT_TRUE(std::isnan(relu[0]));
  const auto abs = ops::abs(x).to_vector<float>();
  EXPECT_FALSE(std::signbit(abs[1])) << "|-0| is +0";
  const auto log = ops::log(x).to_vector<double>();
  EXPECT_TRUE(std::isnan(log[0]));
  EXPECT_EQ(log[1], -kInf);
  EXPECT_EQ(log[2], -kInf);
  EXPECT_EQ(log[3], kInf);
  EXPECT_TRUE(std::isnan(log[5]));
  EXPECT_NEAR(log[6], std::log(static_cast<double>(1e-40f)), 1e-5) << "subnormal input";
  const auto sig = ops::sigmoid(Tensor::from_vector<float>({-100.f, 100.f, -20.f}, {3})).to_vector<double>();
  EXPECT_EQ(sig[0], 0.0);
  EXPECT_EQ(sig[1], 1.0);
  EXPECT_NEAR(sig[2], sigmoid_ref(-20), 1e-6 * sigmoid_ref(-20)) << "small tail stays relative-accurate";
  const auto sp = ops::softplus(Tensor::from_vector<float>({-100.f, 100.f, -20.f}, {3})).to_vector<double>();
  EXPECT_NEAR(sp[2], std::log1p(std::exp(-20.0)), 1e-6 * std::exp(-20.0));
  EXPECT_EQ(sp[1], 100.0);
  const auto clamp = ops::clamp(x, -1.0, 1.0).to_vector<double>();
  EXPECT_TRUE(std::isnan(clamp[0]));
  EXPECT_EQ(clamp[3], 1.0);
  EXPECT_EQ(clamp[4], -1.0);
  // exp overflows to inf, underflows to 0.
  const auto e = ops::exp(Tensor::from_vector<float>({100.f, -100.f}, {2})).to_vector<double>();
  EXPECT_EQ(e[0], kInf);
  EXPECT_EQ(e[1], 0.0);
}

TEST(Unary, GradientRulesAtKinks) {
  // PyTorch's conventions: relu'(0) = 0, |x|'(0) = 0, clamp passes the gradient at its bounds, pow(x, 0)' = 0.
  const Tensor x = Tensor::from_vector<double>({0.0, 1.0, -1.0, 2.0}, {4}).requires_grad_();
  ops::relu(x).backward(Tensor::ones({4}, DType::F64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, 0, 1}));
  x.set_grad({});
  ops::abs(x).backward(Tensor::ones({4}, DType::F64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 1, -1, 1}));
  x.set_grad({});
  ops::clamp(x, -1.0, 1.0).backward(Tensor::ones({4}, DType::F64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 1, 0}));
  x.set_grad({});
  ops::pow(x, 0.0).backward(Tensor::ones({4}, DType::F64));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 0}));
}

TEST(Unary, RejectsBadArguments) {
  const Tensor x = Tensor::ones({3});
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([&] { ops::clamp(x, 2.0, 1.0); }), "[clamp]"));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([&] { ops::pow(x, kNaN); }), "[pow]"));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([&] { ops::exp(Tensor::ones({2}, DType::I64)); }),
                                     "[exp] expected a f32, f64, f16 or bf16 tensor"));
}

// ---- binary

struct BinaryCase {
  const char* name;
  std::function<Tensor(const Tensor&, const Tensor&)> op;
  std::function<double(double, double)> ref;
  double lo, hi;
};

std::vector<BinaryCase> binary_cases() {
  return {
      {"sub", [](const Tensor& a, const Tensor& b) { return ops::sub(a, b); }, [](double a, double b) { return a - b; },
       -3, 3},
      {"div", [](const Tensor& a, const Tensor& b) { return ops::div(a, b); }, [](double a, double b) { return a / b; },
       0.5, 3},
      {"maximum", [](const Tensor& a, const Tensor& b) { return ops::maximum(a, b); },
       [](double a, double b) { return std::max(a, b); }, -3, 3},
      {"minimum", [](const Tensor& a, const Tensor& b) { return ops::minimum(a, b); },
       [](double a, double b) { return std::min(a, b); }, -3, 3},
      {"pow", [](const Tensor& a, const Tensor& b) { return ops::pow(a, b); },
       [](double a, double b) { return std::pow(a, b); }, 0.5, 2.5},
      {"swiglu", [](const Tensor& a, const Tensor& b) { return ops::swiglu(a, b); },
       [](double a, double b) { return a / (1 + std::exp(-a)) * b; }, -3, 3},
      {"add", [](const Tensor& a, const Tensor& b) { return ops::add(a, b); }, [](double a, double b) { return a + b; },
       -3, 3},
      {"mul", [](const Tensor& a, const Tensor& b) { return ops::mul(a, b); }, [](double a, double b) { return a * b; },
       -3, 3},
  };
}

// Shape pairs: same, b a suffix, b in the middle, a broadcast (the result is larger than a), both broadcast.
const std::vector<std::pair<Shape, Shape>> kShapes = {
    {{4, 5}, {4, 5}}, {{3, 4, 5}, {5}}, {{3, 4, 5}, {3, 1, 5}}, {{5}, {3, 4, 5}}, {{3, 1, 5}, {4, 1}}, {{}, {2, 3}}};

TEST(Binary, ForwardWithBroadcastingMatchesFloat64) {
  mpt::testing::PoisonAllocations poison;
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : kShapes) {
      for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
        const Tensor a = inputs(sa, c.lo, c.hi, dt, 1), b = inputs(sb, c.lo, c.hi, dt, 2);
        const Tensor y = c.op(a, b);
        ASSERT_EQ(y.shape(), broadcast_shapes(sa, sb, "test")) << c.name;
        mpt::testing::expect_close(y, apply_ref2(a, b, c.ref), tolerance(dt == DType::F64 ? DType::F32 : dt),
                                   fmt::format("{} {} {} {}", c.name, shape_str(sa), shape_str(sb), dtype_name(dt)));
      }
    }
  }
}

TEST(Binary, BackwardWithBroadcastingMatchesFiniteDifferences) {
  for (const BinaryCase& c : binary_cases()) {
    for (const auto& [sa, sb] : kShapes) {
      const Tensor a = inputs(sa, c.lo, c.hi, DType::F64, 3), b = inputs(sb, c.lo, c.hi, DType::F64, 4);
      EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return c.op(in[0], in[1]); }, {a, b}))
          << c.name << " " << shape_str(sa) << " " << shape_str(sb);
    }
  }
}

TEST(Binary, LowPrecisionGradientsMatchFloat64) {
  for (const BinaryCase& c : binary_cases()) {
    for (DType dt : {DType::BF16, DType::F16, DType::F32}) {
      const Tensor a = inputs({6, 50}, c.lo, c.hi, dt, 5).requires_grad_();
      const Tensor b = inputs({50}, c.lo, c.hi, dt, 6).requires_grad_();
      const Tensor dy = random_tensor({6, 50}, dt, 7);
      c.op(a, b).backward(dy);
      const Tensor a64 = a.detach().to(DType::F64).requires_grad_(), b64 = b.detach().to(DType::F64).requires_grad_();
      c.op(a64, b64).backward(dy.to(DType::F64));
      mpt::testing::expect_close(a.grad(), a64.grad(), tolerance(dt), fmt::format("{} da {}", c.name, dtype_name(dt)));
      // db sums 6 terms (|dy df/db| < 30), each rounded to dt before the sum: terms may cancel, so the bound is
      // absolute, one rounding of the largest possible term.
      const mpt::testing::Tolerance t = tolerance(dt);
      mpt::testing::expect_close(b.grad(), b64.grad(), {t.rtol * 4, t.rtol * 30},
                                 fmt::format("{} db {}", c.name, dtype_name(dt)));
    }
  }
}

TEST(Binary, TiesAndSpecialValues) {
  // maximum / minimum split a tie's gradient evenly (PyTorch) and propagate NaN.
  const Tensor a = Tensor::from_vector<double>({1, 2, 3}, {3}).requires_grad_();
  const Tensor b = Tensor::from_vector<double>({1, 1, 4}, {3}).requires_grad_();
  ops::maximum(a, b).backward(Tensor::ones({3}, DType::F64));
  EXPECT_EQ(a.grad().to_vector<double>(), (std::vector<double>{0.5, 1, 0}));
  EXPECT_EQ(b.grad().to_vector<double>(), (std::vector<double>{0.5, 0, 1}));
  const Tensor n = Tensor::from_vector<float>({NAN, 1.f}, {2}), m = Tensor::from_vector<float>({0.f, NAN}, {2});
  for (double v : ops::maximum(n, m).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  for (double v : ops::minimum(n, m).to_vector<double>()) EXPECT_TRUE(std::isnan(v));
  // pow: integer exponents of negative bases, 0^0 = 1, and no NaN gradient for b at a == 0.
  const auto p = ops::pow(Tensor::from_vector<float>({-2.f, 0.f, 4.f}, {3}), Tensor::from_vector<float>({3.f, 0.f,
                                                                                                        0.5f}, {3}));
  EXPECT_EQ(p.to_vector<double>(), (std::vector<double>{-8, 1, 2}));
  const Tensor base = Tensor::from_vector<double>({0, 2}, {2});
  Tensor e = Tensor::from_vector<double>({2, 3}, {2});
  e.requires_grad_();
  ops::pow(base, e).backward(Tensor::ones({2}, DType::F64));
  EXPECT_EQ(e.grad().to_vector<double>()[0], 0.0);
  EXPECT_NEAR(e.grad().to_vector<double>()[1], 8 * std::log(2.0), 1e-12);
}

TEST(Binary, ErrorsNameTheOpAndBothShapes) {
  const std::string shapes = mpt::testing::error_message([] { ops::sub(Tensor::ones({3, 4}), Tensor::ones({5})); });
  EXPECT_TRUE(mpt::testing::contains(shapes, "[sub]")) << shapes;
  EXPECT_TRUE(mpt::testing::contains(shapes, "[3, 4]") && mpt::testing::contains(shapes, "[5]")) << shapes;
  const std::string dtypes =
      mpt::testing::error_message([] { ops::div(Tensor::ones({3}), Tensor::ones({3}, DType::BF16)); });
  EXPECT_TRUE(mpt::testing::contains(dtypes, "[div] dtype mismatch")) << dtypes;
  EXPECT_TRUE(mpt::testing::contains(dtypes, "f32[3]") && mpt::testing::contains(dtypes, "bf16[3]")) << dtypes;
}

// ---- comparisons, where, masked_fill

TEST(Compare, MasksAreExactWithBroadcastingAndScalars) {
  const Tensor a = Tensor::from_vector<float>({1, 2, 3, NAN, 5, 6}, {2, 3});
  const Tensor b = Tensor::from_vector<float>({2, 2, 2}, {3});
  const auto expect = [](const Tensor& m, std::vector<int> want) {
    ASSERT_EQ(m.dtype(), DType::U8);
    ASSERT_EQ(m.to_vector<int>(), want);
  };
  expect(ops::eq(a, b), {0, 1, 0, 0, 0, 0});
  expect(ops::ne(a, b), {1, 0, 1, 1, 1, 1});
  expect(ops::lt(a, b), {1, 0, 0, 0, 0, 0});
  expect(ops::le(a, b), {1, 1, 0, 0, 0, 0});
  expect(ops::gt(a, b), {0, 0, 1, 0, 1, 1});
  expect(ops::ge(a, b), {0, 1, 1, 0, 1, 1});
  expect(ops::gt(b, a), {1, 0, 0, 0, 0, 0});  // a broadcast left operand
  expect(ops::ge(a, 3.0), {0, 0, 1, 0, 1, 1});
  for (DType dt : {DType::BF16, DType::F16, DType::F64}) {
    EXPECT_EQ(ops::lt(a.to(dt), b.to(dt)).to_vector<int>(), (std::vector<int>{1, 0, 0, 0, 0, 0})) << dtype_name(dt);
  }
}

TEST(Where, SelectsAndRoutesGradients) {
  const Tensor cond = Tensor::from_vector<uint8_t>({1, 0, 0, 1, 1, 0}, {2, 3});
  const Tensor a = inputs({2, 3}, -2, 2, DType::F64, 1), b = inputs({3}, -2, 2, DType::F64, 2);
  const auto y = ops::where(cond, a, b).to_vector<double>();
  const auto va = a.to_vector<double>(), vb = b.to_vector<double>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(y[i], (i == 0 || i == 3 || i == 4) ? va[i] : vb[i % 3]) << i;
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return ops::where(cond, in[0], in[1]); },
                                  {a, b}));
  // masked_fill: the filled positions get no gradient.
  const Tensor x = inputs({2, 3}, -2, 2, DType::F32, 3).requires_grad_();
  const Tensor mask = Tensor::from_vector<uint8_t>({0, 1, 0}, {3});
  const Tensor f = ops::masked_fill(x, mask, -1e4);
  const auto vf = f.to_vector<double>(), vx = x.to_vector<double>();
  for (int i = 0; i < 6; ++i) EXPECT_EQ(vf[i], i % 3 == 1 ? -1e4 : vx[i]) << i;
  f.backward(Tensor::ones({2, 3}));
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 0, 1, 1, 0, 1}));
  EXPECT_TRUE(mpt::testing::contains(
      mpt::testing::error_message([&] { ops::where(Tensor::ones({2, 3}), a, b); }), "the condition must be a u8"));
}

// ---- operators

TEST(Operators, ComposeLikePyTorch) {
  const Tensor pred = inputs({4, 3}, -2, 2, DType::F64, 1), y = inputs({4, 3}, -2, 2, DType::F64, 2);
  const Tensor loss = ops::mean((pred - y) * (pred - y));
  const auto vp = pred.to_vector<double>(), vy = y.to_vector<double>();
  double want = 0;
  for (size_t i = 0; i < vp.size(); ++i) want += (vp[i] - vy[i]) * (vp[i] - vy[i]) / 12;
  EXPECT_NEAR(loss.item<double>(), want, 1e-15);
  // Scalars on either side, unary minus, division.
  const Tensor x = Tensor::from_vector<double>({1, 2, 4}, {3});
  EXPECT_EQ((x + 1.0).to_vector<double>(), (std::vector<double>{2, 3, 5}));
  EXPECT_EQ((1.0 - x).to_vector<double>(), (std::vector<double>{0, -1, -3}));
  EXPECT_EQ((2.0 * x).to_vector<double>(), (std::vector<double>{2, 4, 8}));
  EXPECT_EQ((x / 2.0).to_vector<double>(), (std::vector<double>{0.5, 1, 2}));
  EXPECT_EQ((4.0 / x).to_vector<double>(), (std::vector<double>{4, 2, 1}));
  EXPECT_EQ((-x).to_vector<double>(), (std::vector<double>{-1, -2, -4}));
  EXPECT_EQ((x - 1.0).to_vector<double>(), (std::vector<double>{0, 1, 3}));
  EXPECT_EQ((x * x / x + x).to_vector<double>(), (std::vector<double>{2, 4, 8}));
  // Autograd through an operator expression.
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return -(in[0] * 3.0 - in[1]) / (in[1] + 4.0) + 1.0 / (in[0] + 5.0); },
      {inputs({2, 3}, -1, 1, DType::F64, 4), inputs({3}, -1, 1, DType::F64, 5)}));
  // A bf16 tensor plus a scalar stays bf16.
  EXPECT_EQ((Tensor::ones({2}, DType::BF16) + 0.5).dtype(), DType::BF16);
}
