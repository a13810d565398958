// tests/ops/test_reduction.cpp: sum/mean over any axis, sum_to_shape, global L2 norm and all_finite, against
// float64 references with derived error bounds and against the documented summation order bit for bit.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>

#include "mpt/ops/reduction.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

// The order documented in kernels/math/reduce_ops.h, written again from that description.
float reduce32_ref(const float* v, size_t m) {
  float lane[32] = {};
  for (size_t i = 0; i < m; ++i) lane[i % 32] += v[i];
  for (int s = 16; s > 0; s /= 2) {
    for (int j = 0; j < s; ++j) lane[j] += lane[j + s];
  }
  return lane[0];
}

float canonical_sum(const std::vector<float>& v) {
  if (v.size() <= 2048) return reduce32_ref(v.data(), v.size());
  std::vector<float> partials;
  for (size_t c = 0; c < v.size(); c += 2048) partials.push_back(reduce32_ref(v.data() + c, std::min<size_t>(2048, v.size() - c)));
  return reduce32_ref(partials.data(), partials.size());
}

// Elements of x (row-major values) along `dim` for output index (o, i) of the [outer, len, inner] view.
struct AxisView {
  int64_t outer = 1, len = 1, inner = 1;
  AxisView(const Shape& s, int64_t dim) {
    for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d) (d < dim ? outer : d == dim ? len : inner) *= s[d];
  }
};

// Relative half-ulp of each output dtype (the final rounding).
double half_ulp(DType dt) {
  switch (dt) {
    case DType::F16: return std::ldexp(1.0, -11);
    case DType::BF16: return std::ldexp(1.0, -8);
    case DType::F64: return std::ldexp(1.0, -53);
    default: return std::ldexp(1.0, -24);
  }
}

// The bound of reduce_ops.h for an axis of L elements accumulated with unit roundoff u (2^-24 in float).
double gamma(int64_t len, double u) {
  const int64_t chunks = len <= 2048 ? 1 : (len + 2047) / 2048;
  return static_cast<double>((std::min<int64_t>(len, 2048) + 31) / 32 + (chunks + 31) / 32 + 10) * u;
}

void check_reduce(const Tensor& x, int64_t dim, bool mean) {
  const DType dt = x.dtype();
  const Tensor got = mean ? ops::mean(x, dim) : ops::sum(x, dim);
  const AxisView v(x.shape(), dim);
  Shape expected_shape = x.shape();
  expected_shape.erase(expected_shape.begin() + dim);
  ASSERT_EQ(got.shape(), expected_shape);
  ASSERT_EQ(got.dtype(), dt);
  const auto xv = x.to_vector<double>(), gv = got.to_vector<double>();
  const double u = dt == DType::F64 ? std::ldexp(1.0, -53) : std::ldexp(1.0, -24);
  for (int64_t o = 0; o < v.outer; ++o) {
    for (int64_t i = 0; i < v.inner; ++i) {
      double ref = 0, abs_sum = 0;
      std::vector<float> column;
      for (int64_t l = 0; l < v.len; ++l) {
        const double e = xv[static_cast<size_t>((o * v.len + l) * v.inner + i)];
        ref += e;
        abs_sum += std::abs(e);
        column.push_back(static_cast<float>(e));
      }
      const double divisor = mean ? static_cast<double>(v.len) : 1.0;
      const double g = gv[static_cast<size_t>(o * v.inner + i)];
      // Accumulation error (+ one rounding of the division), then one rounding to dt.
      const double bound = (gamma(v.len, u) + u) * abs_sum / divisor * (1 + half_ulp(dt)) + half_ulp(dt) * std::abs(ref / divisor);
      ASSERT_LE(std::abs(g - ref / divisor), bound)
          << (mean ? "mean " : "sum ") << dtype_name(dt) << " " << shape_str(x.shape()) << " dim " << dim << " at ("
          << o << ", " << i << ")";
      if (dt == DType::F32 && !mean) {
        ASSERT_EQ(static_cast<float>(g), canonical_sum(column)) << "order differs: " << shape_str(x.shape()) << " dim "
                                                                << dim << " at (" << o << ", " << i << ")";
      }
    }
  }
}

struct AxisCase {
  Shape shape;
  int64_t dim;
};
// Odd sizes around the 32 lanes, the 64-column block and the 2048 chunk; long rows and columns (two passes).
const AxisCase kAxisCases[] = {{{3, 5, 7}, 0},   {{3, 5, 7}, 1},    {{3, 5, 7}, 2},   {{33, 129}, 1},
                               {{33, 129}, 0},   {{2, 3000, 3}, 1}, {{1, 70001}, 1},  {{70001}, 0},
                               {{4100, 65}, 0},  {{2, 2049, 1}, 1}, {{7, 2048}, 1}};

}  // namespace

TEST(Reduction, SumAndMeanMatchFloat64WithinTheDerivedBoundOnEveryAxis) {
  mpt::testing::PoisonAllocations poison;
  uint64_t seed = 1;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (const AxisCase& c : kAxisCases) {
      const Tensor x = random_tensor(c.shape, dt, seed++);
      check_reduce(x, c.dim, false);
      check_reduce(x, c.dim, true);
    }
  }
}

TEST(Reduction, KeepdimNegativeDimsAndWholeTensorSum) {
  const Tensor x = random_tensor({4, 6, 5}, DType::F32, 11);
  const Tensor k = ops::sum(x, -2, true);
  EXPECT_EQ(k.shape(), (Shape{4, 1, 5}));
  EXPECT_EQ(k.to_vector<float>(), ops::sum(x, 1).to_vector<float>());
  EXPECT_EQ(ops::mean(x, -1, true).shape(), (Shape{4, 6, 1}));
  const Tensor all = ops::sum(x);
  EXPECT_EQ(all.dim(), 0);
  EXPECT_EQ(all.item<float>(), canonical_sum(x.to_vector<float>()));
}

TEST(Reduction, EmptyAxisSumsToZeroAndMeansToNaN) {
  const Tensor x = Tensor::zeros({3, 0, 2});
  EXPECT_EQ(ops::sum(x, 1).to_vector<float>(), std::vector<float>(6, 0.0f));
  for (float m : ops::mean(x, 1).to_vector<float>()) EXPECT_TRUE(std::isnan(m));
  EXPECT_EQ(ops::sum(Tensor::zeros({0, 4}), 1).numel(), 0);
}

TEST(Reduction, ResultDoesNotDependOnTheThreadCount) {
  const Tensor rows = random_tensor({3, 70001}, DType::F32, 21), cols = random_tensor({9001, 67}, DType::BF16, 22);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto r1 = ops::sum(rows, 1).to_vector<float>();
  const auto c1 = ops::mean(cols, 0).to_vector<float>();
  const float n1 = ops::global_l2_norm({rows, cols}).item<float>();
  omp_set_num_threads(2);
  EXPECT_EQ(ops::sum(rows, 1).to_vector<float>(), r1);
  EXPECT_EQ(ops::mean(cols, 0).to_vector<float>(), c1);
  EXPECT_EQ(ops::global_l2_norm({rows, cols}).item<float>(), n1);
  omp_set_num_threads(threads);
}

TEST(Reduction, SumToShapeReducesBroadcastDimsAndAccumulates) {
  const Tensor x = random_tensor({4, 3, 5}, DType::F64, 31);
  const auto xv = x.to_vector<double>();
  for (const Shape& target : std::vector<Shape>{{3, 1}, {5}, {1, 1, 1}, {4, 3, 5}, {1, 3, 1}, {}, {4, 1, 5}}) {
    // Reference: every element of x added into the target cell it broadcasts from.
    Shape padded(3 - target.size(), 1);
    padded.insert(padded.end(), target.begin(), target.end());
    std::vector<double> ref(static_cast<size_t>(numel(target)), 0.0);
    for (int64_t a = 0; a < 4; ++a)
      for (int64_t b = 0; b < 3; ++b)
        for (int64_t c = 0; c < 5; ++c) {
          const int64_t ta = padded[0] == 1 ? 0 : a, tb = padded[1] == 1 ? 0 : b, tc = padded[2] == 1 ? 0 : c;
          ref[static_cast<size_t>((ta * padded[1] + tb) * padded[2] + tc)] += xv[static_cast<size_t>((a * 3 + b) * 5 + c)];
        }
    const Tensor got = ops::sum_to_shape(x, target);
    mpt::testing::expect_close(got, Tensor::from_vector(ref, target), {1e-14, 1e-14}, "sum_to_shape " + shape_str(target));
    Tensor acc = random_tensor(target, DType::F64, 32);
    const auto before = acc.to_vector<double>();
    const Tensor returned = ops::sum_to_shape(x, target, acc);
    EXPECT_TRUE(returned.shares_storage(acc));
    const auto after = acc.to_vector<double>(), fresh = got.to_vector<double>();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_DOUBLE_EQ(after[i], before[i] + fresh[i]) << shape_str(target);
  }
}

TEST(Reduction, SumToShapeInLowPrecisionStaysWithinTheBound) {
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor dy = random_tensor({513, 40}, dt, 40);
    const Tensor got = ops::sum_to_shape(dy, {40});
    const auto dv = dy.to_vector<double>(), gv = got.to_vector<double>();
    for (int64_t c = 0; c < 40; ++c) {
      double ref = 0, abs_sum = 0;
      for (int64_t r = 0; r < 513; ++r) {
        ref += dv[static_cast<size_t>(r * 40 + c)];
        abs_sum += std::abs(dv[static_cast<size_t>(r * 40 + c)]);
      }
      const double bound = gamma(513, std::ldexp(1.0, -24)) * abs_sum * (1 + half_ulp(dt)) + half_ulp(dt) * std::abs(ref);
      EXPECT_LE(std::abs(gv[static_cast<size_t>(c)] - ref), bound) << dtype_name(dt) << " column " << c;
    }
  }
}

TEST(Reduction, GlobalL2NormMatchesFloat64AndTheDocumentedOrder) {
  const std::vector<Tensor> tensors = {random_tensor({70001}, DType::F32, 51), random_tensor({3, 33}, DType::BF16, 52),
                                       random_tensor({129}, DType::F16, 53), Tensor::zeros({0}),
                                       random_tensor({1}, DType::F32, 54), random_tensor({40, 7}, DType::F32, 55).t()};
  double ref = 0;
  float total = 0;
  for (const Tensor& t : tensors) {
    std::vector<float> squares;
    for (double v : t.to_vector<double>()) {
      ref += v * v;
      squares.push_back(static_cast<float>(v) * static_cast<float>(v));
    }
    total += canonical_sum(squares);
  }
  const Tensor norm = ops::global_l2_norm(tensors);
  EXPECT_EQ(norm.dim(), 0);
  EXPECT_EQ(norm.dtype(), DType::F32);
  EXPECT_EQ(norm.item<float>(), std::sqrt(total));
  // All terms are positive: relative error <= (gamma(70001) + 1 (square) + 6 (partials) + 1 (sqrt)) u.
  const double u = std::ldexp(1.0, -24);
  EXPECT_LE(std::abs(norm.item<double>() - std::sqrt(ref)), (gamma(70001, u) + 8 * u) * std::sqrt(ref));
  const Tensor f64 = random_tensor({1000}, DType::F64, 56);
  double ref64 = 0;
  for (double v : f64.to_vector<double>()) ref64 += v * v;
  EXPECT_NEAR(ops::global_l2_norm({f64}).item<double>(), std::sqrt(ref64), 1e-13 * std::sqrt(ref64));
  EXPECT_EQ(ops::global_l2_norm({}).item<float>(), 0.0f);
}

TEST(Reduction, AllFiniteDetectsNaNAndInfAnywhere) {
  const double specials[] = {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity(),
                             -std::numeric_limits<double>::infinity()};
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    const Tensor clean = random_tensor({70001}, dt, 61);
    const Tensor small = random_tensor({5}, dt, 62);
    EXPECT_TRUE(ops::all_finite({clean, small})) << dtype_name(dt);
    for (double special : specials) {
      for (int64_t at : {int64_t{0}, int64_t{33333}, int64_t{70000}}) {
        std::vector<double> v = clean.to_vector<double>();
        v[static_cast<size_t>(at)] = special;
        const Tensor bad = Tensor::from_vector(v, {70001}).to(dt);
        EXPECT_FALSE(ops::all_finite({small, bad})) << dtype_name(dt) << " " << special << " at " << at;
        EXPECT_EQ(ops::all_finite_flag({bad}).item<int>(), 0);
      }
    }
  }
  // The largest finite values are finite; integer tensors are ignored; an empty list is finite.
  EXPECT_TRUE(ops::all_finite({Tensor::full({3}, 65504, DType::F16), Tensor::full({3}, 3.38e38, DType::BF16),
                               Tensor::full({2}, 3.4e38, DType::F32), Tensor::full({2}, -1, DType::I32)}));
  EXPECT_FALSE(ops::all_finite({Tensor::full({3}, 65520, DType::F16)}));  // rounds to Inf in f16
  EXPECT_EQ(ops::all_finite_flag({Tensor::ones({4})}).item<int>(), 1);
  EXPECT_EQ(ops::all_finite_flag({Tensor::ones({4})}).dtype(), DType::U8);
  EXPECT_TRUE(ops::all_finite({}));
}

TEST(Reduction, RejectsBadArguments) {
  EXPECT_MPT_ERROR(ops::sum(Tensor::zeros({}), 0), "[sum] cannot reduce the 0-d tensor");
  EXPECT_MPT_ERROR(ops::sum(Tensor::zeros({2, 3}), 2), "[sum]");
  EXPECT_MPT_ERROR(ops::mean(Tensor::zeros({3}, DType::I32), 0), "[mean] expected a f32, f64, f16 or bf16 tensor, got i32");
  EXPECT_MPT_ERROR(ops::sum(Tensor(), 0), "[sum] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::sum_to_shape(Tensor::zeros({3, 4}), {2}), "[sum_to_shape]");
  EXPECT_MPT_ERROR(ops::sum_to_shape(Tensor::zeros({3, 4}), {1, 3, 4}), "does not broadcast to f32[3, 4] cpu");
  EXPECT_MPT_ERROR(ops::sum_to_shape(Tensor::zeros({3, 4}), {4}, Tensor::zeros({3})), "[sum_to_shape] out must have shape [4]");
  EXPECT_MPT_ERROR(ops::global_l2_norm({Tensor::zeros({2}), Tensor::zeros({2}, DType::F64)}),
                   "[global_l2_norm] f64 tensors cannot be mixed with others: tensor 1 is f64[2] cpu");
  EXPECT_MPT_ERROR(ops::global_l2_norm({Tensor::zeros({2}), Tensor()}), "[global_l2_norm] tensor 1 of the list is undefined");
  EXPECT_MPT_ERROR(ops::global_l2_norm({Tensor::zeros({2}, DType::I64)}), "[global_l2_norm] expected a f32");
  EXPECT_MPT_ERROR(ops::all_finite({Tensor::zeros({2}, DType::F8E4M3)}), "[all_finite] expected a f32");
}
