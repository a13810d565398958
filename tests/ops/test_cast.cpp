// tests/ops/test_cast.cpp: FP8 amax, quantize (given / current scale), cast + transpose, block quantize and dequantize against an independent reference.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/math/quantize.h"
#include "mpt/ops/activation.h"
#include "mpt/ops/cast.h"
#include "numerics_reference.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;

namespace {

constexpr DType kWide[] = {DType::F32, DType::F16, DType::BF16};
constexpr DType kFp8[] = {DType::F8E4M3, DType::F8E5M2};

test::RefFormat ref_format(DType t) {
  switch (t) {
    case DType::F16: return test::RefFormat::F16;
    case DType::BF16: return test::RefFormat::BF16;
    case DType::F8E4M3: return test::RefFormat::E4M3;
    default: return test::RefFormat::E5M2;
  }
}
float fp8_max(DType t) { return t == DType::F8E4M3 ? 448.0f : 57344.0f; }

// Raw codes of a contiguous CPU tensor of 1-byte elements.
std::vector<uint8_t> codes(const Tensor& t) {
  std::vector<uint8_t> out(static_cast<size_t>(t.numel()));
  if (!out.empty()) std::memcpy(out.data(), t.contiguous().data_ptr(), out.size());
  return out;
}

// The reference quantizer: the product rounded once in float (the order the kernels define), then encoded by the
// long double reference of tests/support (no shared code with kernels/math).
uint8_t ref_quantize(float x, float scale, DType fp8, bool saturate) {
  const float product = x * scale;
  return static_cast<uint8_t>(test::ref_encode(ref_format(fp8), product, saturate));
}

double ref_amax(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) {
    if (std::isnan(x)) return std::numeric_limits<double>::quiet_NaN();
    m = std::max(m, std::fabs(static_cast<double>(x)));
  }
  return m;
}

// Inputs spanning the FP8 range once scaled: normals times 2^-12 .. 2^12 (saturating, subnormal and underflowing
// products included; finite in f16).
Tensor spread_tensor(const Shape& shape, DType dt, uint64_t seed) {
  Tensor x = mpt::testing::random_tensor(shape, DType::F32, seed);
  std::vector<float> v = x.to_vector<float>();
  for (size_t i = 0; i < v.size(); ++i) v[i] *= std::ldexp(1.0f, static_cast<int>(i % 25) - 12);
  return Tensor::from_vector(v, shape).to(dt);
}

Tensor scalar(float v) { return Tensor::full({}, v, DType::F32); }

void expect_codes(const std::vector<uint8_t>& got, const std::vector<float>& x, float scale, DType fp8, bool saturate,
                  const std::string& what) {
  ASSERT_EQ(got.size(), x.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const uint8_t want = ref_quantize(x[i], scale, fp8, saturate);
    if (got[i] != want && ++bad <= 5) {
      ADD_FAILURE() << what << " element " << i << ": x=" << x[i] << " scale=" << scale << " got 0x" << std::hex
                    << int(got[i]) << " want 0x" << int(want);
    }
  }
  EXPECT_EQ(bad, 0u) << what;
}

}  // namespace

TEST(Amax, ExactOnEveryDtypeAndSize) {
  for (DType dt : kWide) {
    for (int64_t n : {1, 7, 127, 129, 300, 4099, 100003}) {
      const Tensor x = spread_tensor({n}, dt, 10 + n);
      const Tensor a = ops::amax(x);
      EXPECT_EQ(a.dim(), 0);
      EXPECT_EQ(a.item<double>(), ref_amax(x.to_vector<float>())) << dtype_name(dt) << " n=" << n;
    }
  }
  EXPECT_EQ(ops::amax(Tensor::empty({0})).item<float>(), 0.0f);
  EXPECT_EQ(ops::amax(Tensor::from_vector<float>({-3, 2, -0.0f}, {3})).item<float>(), 3.0f);
  const Tensor t = mpt::testing::random_tensor({37, 41}, DType::F32, 3).t();  // strided input
  EXPECT_EQ(ops::amax(t).item<double>(), ref_amax(t.to_vector<float>()));
}

TEST(Amax, NaNPropagatesAndInfinityWins) {
  for (bool vector : {true, false}) {
    kernels::cpu::set_vector_conversions(vector);
    for (int64_t pos : {0, 5, 16, 99999}) {
      std::vector<float> v = mpt::testing::random_tensor({100000}, DType::F32, 4).to_vector<float>();
      v[pos] = std::numeric_limits<float>::quiet_NaN();
      const float a = ops::amax(Tensor::from_vector(v, {100000})).item<float>();
      EXPECT_TRUE(std::isnan(a)) << "NaN at " << pos;
      uint32_t bits;
      std::memcpy(&bits, &a, 4);
      EXPECT_EQ(bits, 0x7FC00000u) << "canonical NaN";
      v[pos] = -std::numeric_limits<float>::infinity();
      EXPECT_EQ(ops::amax(Tensor::from_vector(v, {100000})).item<float>(), std::numeric_limits<float>::infinity());
    }
  }
  kernels::cpu::set_vector_conversions(true);
}

// scaling-spec.md B2 (TE compute_scale_from_amax) C1-C8 and B5 (margin), with the brief's NaN rule.
TEST(ScaleFromAmax, SpecTable) {
  const kernels::math::ScaleFromAmax e4{448.0f, 0, false}, e4p2{448.0f, 0, true}, e5{57344.0f, 0, false};
  EXPECT_EQ(e4(2.0f), 224.0f);
  EXPECT_EQ(e4(3.0f), 448.0f / 3.0f);
  EXPECT_EQ(e4(3.0f), 149.33333f);
  EXPECT_EQ(e4p2(3.0f), 128.0f);
  EXPECT_EQ(e4(0.0f), 1.0f);
  EXPECT_EQ(e4(INFINITY), 1.0f);
  EXPECT_EQ(e4(NAN), 1.0f);
  EXPECT_EQ(e4(1e-40f), FLT_MAX);
  EXPECT_EQ(e4p2(1e-40f), 0x1p127f);
  EXPECT_EQ(e5(2.0f), 28672.0f);
  EXPECT_EQ((kernels::math::ScaleFromAmax{448.0f, 1, false}(2.0f)), 112.0f);
}

TEST(QuantizeFp8, GivenScaleMatchesReferenceBitForBit) {
  mpt::testing::PoisonAllocations poison;  // unwritten codes read 0xFF (NaN) and fail
  for (bool vector : {true, false}) {
    kernels::cpu::set_vector_conversions(vector);
    for (DType dt : kWide) {
      for (DType fp8 : kFp8) {
        for (bool saturate : {true, false}) {
          for (int64_t n : {1, 15, 17, 300, 70001}) {
            const Tensor x = spread_tensor({n}, dt, 100 + n);
            const float scale = fp8 == DType::F8E4M3 ? 3.5f : 900.25f;
            const Tensor amax = Tensor::empty({});
            ops::QuantizeOptions o;
            o.scale = scalar(scale);
            o.amax = amax;
            o.saturation = saturate ? Fp8Saturation::Saturate : Fp8Saturation::NoSaturate;
            const ops::Quantized q = ops::quantize_fp8(x, fp8, o);
            const std::string what = fmt::format("{}->{} sat={} n={} vector={}", dtype_name(dt), dtype_name(fp8),
                                                 saturate, n, vector);
            EXPECT_EQ(q.data.dtype(), fp8);
            EXPECT_EQ(q.data.shape(), x.shape());
            const std::vector<float> xv = x.to_vector<float>();
            expect_codes(codes(q.data), xv, scale, fp8, saturate, what);
            EXPECT_EQ(q.scale_inv.item<float>(), 1.0f / scale) << what;
            EXPECT_EQ(amax.item<double>(), ref_amax(xv)) << what;
          }
        }
      }
    }
  }
  kernels::cpu::set_vector_conversions(true);
}

TEST(QuantizeFp8, SaturationCountedAndSpecials) {
  // E4M3 with scale 4: every |x * 4| >= 432 rounds to 448 (432 is the tie between 416 and 448, to even).
  const Tensor x = spread_tensor({20000}, DType::F32, 7);
  const std::vector<float> xv = x.to_vector<float>();
  size_t want_max = 0, beyond = 0;
  for (float v : xv) {
    want_max += std::fabs(v * 4.0f) >= 432.0f;
    beyond += std::fabs(v * 4.0f) > 464.0f;
  }
  ASSERT_GT(beyond, 100u) << "the input must overflow E4M3";
  ops::QuantizeOptions o;
  o.scale = scalar(4.0f);
  const std::vector<uint8_t> sat = codes(ops::quantize_fp8(x, DType::F8E4M3, o).data);
  EXPECT_EQ(static_cast<size_t>(std::count_if(sat.begin(), sat.end(), [](uint8_t c) { return (c & 0x7F) == 0x7E; })),
            want_max);
  o.saturation = Fp8Saturation::NoSaturate;
  const std::vector<uint8_t> nosat = codes(ops::quantize_fp8(x, DType::F8E4M3, o).data);
  EXPECT_EQ(static_cast<size_t>(std::count_if(nosat.begin(), nosat.end(), [](uint8_t c) { return (c & 0x7F) == 0x7F; })),
            beyond);

  // NaN -> 0x7F; +-Inf -> +-max saturating, NaN (E4M3: 0x7F / 0xFF) or +-Inf (E5M2) not; -0 stays -0;
  // 2^-10 is half the smallest E4M3 subnormal: a tie to 0; 3 * 2^-10 rounds to 2 * 2^-9; 17 ties to 16; -3.3 -> -3.25.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor s = Tensor::from_vector<float>({NAN, inf, -inf, -0.0f, 0x1p-10f, 3 * 0x1p-10f, 17.0f, -3.3f}, {8});
  ops::QuantizeOptions one;
  one.scale = scalar(1.0f);
  EXPECT_EQ(codes(ops::quantize_fp8(s, DType::F8E4M3, one).data),
            (std::vector<uint8_t>{0x7F, 0x7E, 0xFE, 0x80, 0x00, 0x02, 0x58, 0xC5}));
  one.saturation = Fp8Saturation::NoSaturate;
  EXPECT_EQ(codes(ops::quantize_fp8(s, DType::F8E4M3, one).data),
            (std::vector<uint8_t>{0x7F, 0x7F, 0xFF, 0x80, 0x00, 0x02, 0x58, 0xC5}));
  EXPECT_EQ(codes(ops::quantize_fp8(s, DType::F8E5M2, one).data)[1], 0x7C);
  EXPECT_EQ(codes(ops::quantize_fp8(s, DType::F8E5M2, one).data)[2], 0xFC);
}

TEST(QuantizeFp8, CurrentScalingUsesAmaxAndMapsTheMaxToFp8Max) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : kWide) {
    for (DType fp8 : kFp8) {
      for (int margin : {0, 2}) {
        const Tensor x = mpt::testing::random_tensor({129, 31}, dt, 5 + margin, 7.0);
        const std::vector<float> xv = x.to_vector<float>();
        const float amax = static_cast<float>(ref_amax(xv));
        const float scale = std::ldexp(fp8_max(fp8), -margin) / amax;
        ops::QuantizeOptions o;
        o.margin = margin;
        o.amax = Tensor::empty({});
        const ops::Quantized q = ops::quantize_fp8(x, fp8, o);
        const std::string what = fmt::format("{} -> {} margin {}", dtype_name(dt), dtype_name(fp8), margin);
        expect_codes(codes(q.data), xv, scale, fp8, true, what);
        EXPECT_EQ(q.scale_inv.item<float>(), 1.0f / scale) << what;
        EXPECT_EQ(o.amax.item<float>(), amax) << what;
        const size_t arg = static_cast<size_t>(std::max_element(xv.begin(), xv.end(), [](float a, float b) {
                             return std::fabs(a) < std::fabs(b);
                           }) - xv.begin());
        const double top = test::ref_decode(ref_format(fp8), codes(q.data)[arg]);
        EXPECT_EQ(std::fabs(top), std::ldexp(fp8_max(fp8), -margin)) << what;
      }
    }
  }
  // Power-of-two scale, and the guards: an all-zero tensor and a NaN tensor quantize with scale 1.
  ops::QuantizeOptions p2;
  p2.power_of_2 = true;
  EXPECT_EQ(ops::quantize_fp8(Tensor::from_vector<float>({3, -1}, {2}), DType::F8E4M3, p2).scale_inv.item<float>(),
            1.0f / 128);
  EXPECT_EQ(ops::quantize_fp8(Tensor::zeros({5}), DType::F8E4M3).scale_inv.item<float>(), 1.0f);
  const ops::Quantized nan = ops::quantize_fp8(Tensor::from_vector<float>({NAN, 2}, {2}), DType::F8E4M3);
  EXPECT_EQ(nan.scale_inv.item<float>(), 1.0f);
  EXPECT_EQ(codes(nan.data), (std::vector<uint8_t>{0x7F, 0x40}));
}

// amax_accumulate (delayed scaling's amax written straight into amax_history[0]): the output becomes
// fmax(its value, max |x| with NaN skipped), for the plain and the transposing quantization alike, and the codes do
// not change. Without amax_ignore_nan (a NaN could not be folded) or without an output it is refused.
TEST(QuantizeFp8, AmaxAccumulateFoldsIntoTheOutputsValue) {
  const Tensor x = Tensor::from_vector<float>({1.5f, -2.75f, NAN, 0.25f, -0.5f, 2.0f}, {2, 3});
  for (bool transpose : {false, true}) {
    for (const auto& [before, after] : std::vector<std::pair<float, float>>{{0.0f, 2.75f}, {1.0f, 2.75f},
                                                                            {3.5f, 3.5f}, {INFINITY, INFINITY}}) {
      ops::QuantizeOptions o;
      o.scale = scalar(4.0f);
      o.amax = scalar(before);
      o.amax_ignore_nan = true;
      o.amax_accumulate = true;
      const ops::Quantized q = transpose ? ops::quantize_fp8_transpose(x, DType::F8E4M3, o).first
                                         : ops::quantize_fp8(x, DType::F8E4M3, o);
      EXPECT_EQ(o.amax.item<float>(), after) << "before " << before << " transpose " << transpose;
      ops::QuantizeOptions plain = o;
      plain.amax = Tensor{};
      plain.amax_accumulate = false;
      EXPECT_EQ(codes(q.data), codes(ops::quantize_fp8(x, DType::F8E4M3, plain).data)) << before;
    }
  }
  ops::QuantizeOptions nan_kept;
  nan_kept.scale = scalar(1.0f);
  nan_kept.amax = scalar(0.0f);
  nan_kept.amax_accumulate = true;
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E4M3, nan_kept), "[quantize_fp8] amax_accumulate folds into the amax output");
  nan_kept.amax_ignore_nan = true;
  nan_kept.amax = Tensor{};
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E4M3, nan_kept), "needs `amax` and amax_ignore_nan");
}

// gelu: the codes and amax of gelu(x) (tanh GELU rounded to x's dtype), checked against the GELU computed here in
// float64 and rounded to bf16 (within the float GELU's error, a bf16 tie aside, the same codes); under current scaling
// (no scale given) with the scale from gelu(x)'s amax; refused with a dbias.
TEST(QuantizeFp8, GeluQuantizesTheGeluOfTheInput) {
  const Tensor x = Tensor::from_vector<float>({-3.0f, -1.0f, -0.25f, 0.0f, 0.5f, 1.0f, 2.0f, 6.5f}, {2, 4})
                       .to(DType::BF16);
  ops::QuantizeOptions o;
  o.scale = scalar(8.0f);
  o.amax = scalar(0.0f);
  o.amax_ignore_nan = true;
  o.amax_accumulate = true;
  o.gelu = true;
  const auto [q, qt] = ops::quantize_fp8_transpose(x, DType::F8E4M3, o);
  std::vector<float> want;
  double amax = 0;
  for (float v : x.to_vector<float>()) {
    const double d = v, g = 0.5 * d * (1 + std::tanh(std::sqrt(2 / M_PI) * (d + 0.044715 * d * d * d)));
    const float gb = Tensor::from_vector<float>({static_cast<float>(g)}, {1}).to(DType::BF16).item<float>();
    want.push_back(gb * 8.0f);
    amax = std::max(amax, std::fabs(static_cast<double>(gb)));
  }
  const Tensor want_codes = Tensor::from_vector<float>(want, {2, 4}).to(DType::F8E4M3);
  EXPECT_EQ(codes(q.data), codes(want_codes));
  EXPECT_EQ(codes(qt.data), codes(want_codes.t().contiguous()));
  EXPECT_EQ(o.amax.item<float>(), static_cast<float>(amax));  // gelu(6.5) = 6.5 in bf16
  EXPECT_EQ(codes(ops::quantize_fp8(x, DType::F8E4M3, o).data), codes(want_codes));

  ops::QuantizeOptions current;  // scale = 448 / amax(gelu(x)) = 448 / 6.5, not 448 / 6.5 by chance: gelu(-3) < 0.01
  current.gelu = true;
  current.amax_ignore_nan = true;
  const auto [cq, cqt] = ops::quantize_fp8_transpose(x, DType::F8E4M3, current);
  const float cscale = 448.0f / static_cast<float>(amax);
  std::vector<float> cwant;
  for (float w : want) cwant.push_back(w / 8.0f * cscale);
  const Tensor cwant_codes = Tensor::from_vector<float>(cwant, {2, 4}).to(DType::F8E4M3);
  EXPECT_EQ(codes(cq.data), codes(cwant_codes));
  EXPECT_EQ(codes(cqt.data), codes(cwant_codes.t().contiguous()));
  EXPECT_EQ(cq.scale_inv.item<float>(), 1.0f / cscale);
  const Tensor neg = Tensor::from_vector<float>({-3.0f, -4.0f}, {1, 2}).to(DType::BF16);  // |x| 4, |gelu(x)| < 0.01
  EXPECT_GT(1.0f / ops::quantize_fp8(neg, DType::F8E4M3, current).scale_inv.item<float>(), 448.0f / 0.01f)
      << "the scale is gelu(x)'s (448 / 0.0036), not x's (448 / 4)";
  o.dbias = Tensor::empty({4});
  EXPECT_MPT_ERROR(ops::quantize_fp8_transpose(x, DType::F8E4M3, o), "gelu quantizes gelu(x), which takes no dbias");
}

// The bias gradient fused into cast + transpose (TE's cast_transpose_dbias): dbias[c] is the column sum of the 2-d
// view of x in the order kernels/math/quantize.h fixes (FP32, tiles of 32 rows top to bottom, then the tiles in
// order up to 32 of them, beyond that in at most 32 groups of consecutive tiles and the groups in order, one
// rounding), checked bit for bit against that order written out here, and against the float64 sum within the FP32
// summation's bound (rows x 2^-24 x sum |x|) plus the output's half ulp; the codes are unchanged. 1100 rows: 35 tiles
// in 18 groups of 2 (the last of 1); 2049: 65 tiles in 22 groups of 3 (the last of 2).
TEST(QuantizeFp8Transpose, FusedDbiasIsTheColumnSumsInTileOrder) {
  const std::vector<Shape> shapes = {{1, 1}, {31, 5}, {33, 40}, {64, 64}, {100, 257}, {2, 45, 33}, {300, 3},
                                     {1100, 19}, {2049, 2}};
  for (const Shape& shape : shapes) {
    for (DType dt : kWide) {
      const Tensor x = spread_tensor(shape, dt, 7 + numel(shape));
      const int64_t cols = shape.back(), rows = numel(shape) / cols;
      const std::vector<double> xs = x.to_vector<double>();
      for (DType out : {DType::F32, DType::BF16, DType::F16}) {
        const std::string what = fmt::format("{} {} -> dbias {}", shape_str(shape), dtype_name(dt), dtype_name(out));
        ops::QuantizeOptions o;
        o.scale = scalar(8.0f);
        o.dbias = Tensor::empty({cols}, out);
        const auto [q, qt] = ops::quantize_fp8_transpose(x, DType::F8E4M3, o);
        ops::QuantizeOptions plain;
        plain.scale = o.scale;
        EXPECT_EQ(codes(qt.data), codes(ops::quantize_fp8_transpose(x, DType::F8E4M3, plain).second.data)) << what;
        const std::vector<double> got = o.dbias.to_vector<double>();
        for (int64_t c = 0; c < cols; ++c) {
          const int64_t tiles = (rows + 31) / 32;
          const int64_t per_group = (tiles + std::min<int64_t>(tiles, 32) - 1) / std::min<int64_t>(tiles, 32);
          float total = 0.0f;
          double exact = 0, magnitude = 0;
          for (int64_t g0 = 0; g0 < tiles; g0 += per_group) {
            float group = 0.0f;
            for (int64_t t = g0; t < std::min(tiles, g0 + per_group); ++t) {
              float part = 0.0f;
              for (int64_t r = t * 32; r < std::min(rows, t * 32 + 32); ++r)
                part += static_cast<float>(xs[r * cols + c]);
              group += part;
            }
            total += group;
          }
          for (int64_t r = 0; r < rows; ++r) exact += xs[r * cols + c], magnitude += std::fabs(xs[r * cols + c]);
          const double want = Tensor::full({}, total, DType::F32).to(out).item<double>();
          ASSERT_EQ(got[c], want) << what << " column " << c;
          if (std::isinf(want)) continue;  // beyond f16's range: the bit check above covers it
          // FP32's sequential sums, then the one rounding to `out` (relative, or half its smallest subnormal).
          const double half_ulp = out == DType::F32 ? 0x1p-24 : out == DType::BF16 ? 0x1p-8 : 0x1p-11;
          const double sum_error = rows * 0x1p-24 * magnitude;
          const double floor = out == DType::F16 ? 0x1p-25 : 0x1p-150;
          EXPECT_LE(std::fabs(got[c] - exact), (1 + half_ulp) * sum_error + half_ulp * std::fabs(exact) + floor)
              << what << " column " << c;
        }
      }
    }
  }
  ops::QuantizeOptions bad;
  bad.scale = scalar(1.0f);
  bad.dbias = Tensor::empty({4});
  const Tensor x = Tensor::ones({3, 4});
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E4M3, bad), "[quantize_fp8] dbias is fused into quantize_fp8_transpose only");
  bad.dbias = Tensor::empty({3});
  EXPECT_MPT_ERROR(ops::quantize_fp8_transpose(x, DType::F8E4M3, bad),
                   "[quantize_fp8_transpose] dbias must be a contiguous [4] f32, bf16 or f16 tensor");
  bad.dbias = Tensor::empty({4}, DType::I32);
  EXPECT_MPT_ERROR(ops::quantize_fp8_transpose(x, DType::F8E4M3, bad), "dbias must be a contiguous [4]");
}

// Block scaling's columnwise 1x128 quantization (transpose) fuses the same bias gradient: the bits of the per-tensor
// cast + transpose's dbias (checked above against the order written out), and the codes unchanged.
TEST(QuantizeBlockwise, TransposedQuantizationFusesTheSameDbias) {
  for (const Shape& shape : std::vector<Shape>{{1, 3}, {33, 40}, {130, 257}, {300, 5}}) {
    for (DType dt : kWide) {
      const Tensor x = spread_tensor(shape, dt, 3 + numel(shape));
      for (DType out : {DType::F32, DType::BF16}) {
        const std::string what = fmt::format("{} {} -> dbias {}", shape_str(shape), dtype_name(dt), dtype_name(out));
        ops::BlockQuantizeOptions o{.transpose = true, .dbias = Tensor::empty({shape[1]}, out)};
        const ops::Quantized q = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, o);
        ops::QuantizeOptions per_tensor;
        per_tensor.scale = scalar(1.0f);
        per_tensor.dbias = Tensor::empty({shape[1]}, out);
        ops::quantize_fp8_transpose(x, DType::F8E4M3, per_tensor);
        EXPECT_EQ(o.dbias.to_vector<double>(), per_tensor.dbias.to_vector<double>()) << what;
        const ops::Quantized plain = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128,
                                                             {.transpose = true});
        EXPECT_EQ(codes(q.data), codes(plain.data)) << what;
      }
    }
  }
  ops::BlockQuantizeOptions rowwise{.dbias = Tensor::empty({4})};
  EXPECT_MPT_ERROR(ops::quantize_blockwise(Tensor::ones({3, 4}), DType::F8E4M3, ops::ScaleLayout::Block1x128, rowwise),
                   "[quantize_blockwise] dbias is fused into the transposed (columnwise) 1x128 quantization only");
}

TEST(QuantizeFp8Transpose, EqualsQuantizeThenTransposeBitForBit) {
  mpt::testing::PoisonAllocations poison;
  const std::vector<Shape> shapes = {{1, 1}, {1, 300}, {300, 1}, {127, 129}, {129, 127}, {64, 64}, {300, 257},
                                     {2, 33, 70}, {77}, {70, 8200}};
  for (bool vector : {true, false}) {
    kernels::cpu::set_vector_conversions(vector);
    for (const Shape& shape : shapes) {
      for (DType dt : kWide) {
        for (DType fp8 : kFp8) {
          const Tensor x = spread_tensor(shape, dt, 31 + numel(shape));
          for (bool current : {false, true}) {
            ops::QuantizeOptions o;
            if (!current) o.scale = scalar(2.5f);
            o.amax = Tensor::empty({});
            const auto [q, qt] = ops::quantize_fp8_transpose(x, fp8, o);
            const std::string what = fmt::format("{} {}->{} current={} vector={}", shape_str(shape), dtype_name(dt),
                                                 dtype_name(fp8), current, vector);
            const int64_t cols = shape.back(), rows = numel(shape) / cols;
            EXPECT_EQ(q.data.shape(), shape) << what;
            EXPECT_EQ(qt.data.shape(), (Shape{cols, rows})) << what;
            EXPECT_TRUE(q.scale_inv.shares_storage(qt.scale_inv)) << what;
            const ops::Quantized plain = ops::quantize_fp8(x, fp8, o);
            const std::vector<uint8_t> a = codes(q.data), b = codes(plain.data), t = codes(qt.data);
            EXPECT_EQ(a, b) << what;
            size_t bad = 0;
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t c = 0; c < cols; ++c) bad += t[c * rows + r] != b[r * cols + c];
            }
            EXPECT_EQ(bad, 0u) << what;
            EXPECT_EQ(q.scale_inv.item<float>(), plain.scale_inv.item<float>()) << what;
            EXPECT_EQ(o.amax.item<double>(), ref_amax(x.to_vector<float>())) << what;
          }
        }
      }
    }
  }
  kernels::cpu::set_vector_conversions(true);
}

namespace {

// Checks one block-quantized tensor against the reference: per block amax, s = fp8_max / amax in float, codes,
// scale_inv, the block's largest element at +-fp8_max, and the dequantized values within half a step.
void check_blockwise(const Tensor& x, DType fp8, ops::ScaleLayout layout, const std::string& what) {
  const ops::Quantized q = ops::quantize_blockwise(x, fp8, layout);
  const int64_t cols = x.size(x.dim() - 1), rows = x.numel() / cols;
  const int64_t br = layout == ops::ScaleLayout::Block1x128 ? 1 : 128;
  const int64_t srows = (rows + br - 1) / br, scols = (cols + 127) / 128;
  ASSERT_EQ(q.scale_inv.shape(), (Shape{srows, scols})) << what;
  EXPECT_EQ(q.layout, layout);
  const std::vector<float> xv = x.to_vector<float>(), si = q.scale_inv.to_vector<float>();
  const std::vector<uint8_t> got = codes(q.data);
  const std::vector<double> deq = ops::dequantize(q, DType::F32).to_vector<double>();
  const double half_step = fp8 == DType::F8E4M3 ? 0x1p-4 : 0x1p-3;
  const double subnormal_half = fp8 == DType::F8E4M3 ? 0x1p-10 : 0x1p-17;
  size_t bad_codes = 0, bad_max = 0, bad_deq = 0;
  for (int64_t b = 0; b < srows * scols; ++b) {
    const int64_t r0 = (b / scols) * br, c0 = (b % scols) * 128;
    std::vector<int64_t> idx;
    for (int64_t r = r0; r < std::min(rows, r0 + br); ++r) {
      for (int64_t c = c0; c < std::min(cols, c0 + 128); ++c) idx.push_back(r * cols + c);
    }
    double amax = 0;
    int64_t arg = idx[0];
    for (int64_t i : idx) {
      if (std::fabs(static_cast<double>(xv[i])) > amax) amax = std::fabs(static_cast<double>(xv[i])), arg = i;
    }
    const float s = amax == 0 ? 1.0f : fp8_max(fp8) / static_cast<float>(amax);
    EXPECT_EQ(si[b], 1.0f / s) << what << " block " << b;
    for (int64_t i : idx) {
      bad_codes += got[i] != ref_quantize(xv[i], s, fp8, true);
      bad_deq += std::fabs(deq[i] - xv[i]) > half_step * std::fabs(xv[i]) * (1 + 1e-6) + subnormal_half * si[b];
    }
    if (amax > 0) bad_max += std::fabs(static_cast<double>(test::ref_decode(ref_format(fp8), got[arg]))) != fp8_max(fp8);
  }
  EXPECT_EQ(bad_codes, 0u) << what;
  EXPECT_EQ(bad_max, 0u) << what;
  EXPECT_EQ(bad_deq, 0u) << what;
}

}  // namespace

TEST(QuantizeBlockwise, MatchesReferenceOnOddShapes) {
  mpt::testing::PoisonAllocations poison;
  const std::vector<Shape> shapes = {{1, 1}, {1, 127}, {3, 129}, {127, 300}, {129, 256}, {300, 129}, {2, 65, 130}, {129}};
  for (const Shape& shape : shapes) {
    for (DType dt : kWide) {
      for (DType fp8 : kFp8) {
        for (ops::ScaleLayout layout : {ops::ScaleLayout::Block1x128, ops::ScaleLayout::Block128x128}) {
          // Magnitudes varying by row and column, so blocks get very different scales.
          const Tensor x = spread_tensor(shape, dt, 71 + numel(shape));
          check_blockwise(x, fp8, layout,
                          fmt::format("{} {}->{} {}", shape_str(shape), dtype_name(dt), dtype_name(fp8),
                                      layout == ops::ScaleLayout::Block1x128 ? "1x128" : "128x128"));
        }
      }
    }
  }
}

TEST(QuantizeBlockwise, TransposeOptionEqualsQuantizingTheTransposedCopyBitForBit) {
  mpt::testing::PoisonAllocations poison;
  for (const Shape& shape : std::vector<Shape>{{1, 1}, {5, 17}, {127, 300}, {129, 33}, {300, 129}, {256, 48}}) {
    for (DType dt : kWide) {
      for (DType fp8 : kFp8) {
        for (bool pow2 : {false, true}) {
          const Tensor x = spread_tensor(shape, dt, 91 + numel(shape));
          const ops::Quantized want =
              ops::quantize_blockwise(x.t().contiguous(), fp8, ops::ScaleLayout::Block1x128, {.power_of_2 = pow2});
          const ops::Quantized got =
              ops::quantize_blockwise(x, fp8, ops::ScaleLayout::Block1x128, {.power_of_2 = pow2, .transpose = true});
          const std::string what = fmt::format("{} {}->{} pow2 {}", shape_str(shape), dtype_name(dt), dtype_name(fp8), pow2);
          ASSERT_EQ(got.data.shape(), want.data.shape()) << what;
          ASSERT_EQ(got.scale_inv.shape(), want.scale_inv.shape()) << what;
          EXPECT_EQ(got.data.to_vector<double>(), want.data.to_vector<double>()) << what;
          EXPECT_EQ(got.scale_inv.to_vector<float>(), want.scale_inv.to_vector<float>()) << what;
        }
      }
    }
  }
  EXPECT_MPT_ERROR(ops::quantize_blockwise(Tensor::zeros({2, 3, 4}), DType::F8E4M3, ops::ScaleLayout::Block1x128,
                                           {.transpose = true}),
                   "[quantize_blockwise] transpose quantizes a 2-d input's transpose in 1x128 blocks, got f32[2, 3, 4]");
}

// Both operands of a block-scaled GEMM pair: the rowwise and the transposed 1x128 quantizations (the device's one-pass
// kernel is held to them by GpuCast.BlockQuantizationBothWaysMatchesCpu), the dbias from the transposed one; the
// options it cannot take are refused by name.
TEST(QuantizeBlockwise, TransposePairIsBothQuantizations) {
  const Tensor x = spread_tensor({129, 300}, DType::BF16, 5);
  ops::BlockQuantizeOptions o{.power_of_2 = true, .dbias = Tensor::empty({300})};
  const auto [q, qt] = ops::quantize_blockwise_transpose(x, DType::F8E4M3, o);
  const ops::Quantized want =
      ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, {.power_of_2 = true});
  const ops::BlockQuantizeOptions ot{.power_of_2 = true, .transpose = true, .dbias = Tensor::empty({300})};
  const ops::Quantized want_t = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, ot);
  EXPECT_EQ(q.data.to_vector<double>(), want.data.to_vector<double>());
  EXPECT_EQ(q.scale_inv.to_vector<float>(), want.scale_inv.to_vector<float>());
  EXPECT_EQ(qt.data.to_vector<double>(), want_t.data.to_vector<double>());
  EXPECT_EQ(qt.scale_inv.to_vector<float>(), want_t.scale_inv.to_vector<float>());
  EXPECT_EQ(o.dbias.to_vector<float>(), ot.dbias.to_vector<float>());
  const std::vector<double> xs = x.to_vector<double>(), db = o.dbias.to_vector<double>();
  for (size_t c = 0; c < 300; ++c) {  // the column sums in float64, within FP32 summation's rounding (129 terms)
    double sum = 0, abs_sum = 0;
    for (size_t r = 0; r < 129; ++r) sum += xs[r * 300 + c], abs_sum += std::abs(xs[r * 300 + c]);
    EXPECT_NEAR(db[c], sum, 129 * 0x1p-24 * abs_sum) << "column " << c;
  }
  EXPECT_MPT_ERROR(ops::quantize_blockwise_transpose(Tensor::zeros({2, 3, 4}), DType::F8E4M3),
                   "[quantize_blockwise_transpose] expected a 2-d input and options without transpose (both come "
                   "back), got f32[2, 3, 4]");
  EXPECT_MPT_ERROR(ops::quantize_blockwise_transpose(Tensor::zeros({2, 4}), DType::F8E4M3, {.transpose = true}),
                   "got f32[2, 4] cpu with transpose");

  // dgelu_aux: the blocks of gelu_backward(dh, pre) (checked against float64 by the GELU tests), dbias its column sums.
  const Tensor dh = spread_tensor({129, 300}, DType::BF16, 6), pre = spread_tensor({129, 300}, DType::BF16, 7);
  ops::BlockQuantizeOptions od{.dbias = Tensor::empty({300})};
  od.dgelu_aux = pre;
  const auto [qd, qdt] = ops::quantize_blockwise_transpose(dh, DType::F8E4M3, od);
  const Tensor dpre = ops::gelu_backward(dh, pre);
  ops::BlockQuantizeOptions odt{.transpose = true, .dbias = Tensor::empty({300})};
  EXPECT_EQ(qd.data.to_vector<double>(),
            ops::quantize_blockwise(dpre, DType::F8E4M3, ops::ScaleLayout::Block1x128).data.to_vector<double>());
  EXPECT_EQ(qdt.data.to_vector<double>(),
            ops::quantize_blockwise(dpre, DType::F8E4M3, ops::ScaleLayout::Block1x128, odt).data.to_vector<double>());
  EXPECT_EQ(od.dbias.to_vector<float>(), odt.dbias.to_vector<float>());
  EXPECT_NE(qd.data.to_vector<double>(),
            ops::quantize_blockwise(dh, DType::F8E4M3, ops::ScaleLayout::Block1x128).data.to_vector<double>());
  // 128 x 128 tiles: the codes and the transposes of the codes and of the scale grid (W^T shares W's tile scales).
  const Tensor w = spread_tensor({300, 129}, DType::F32, 8);
  const ops::Quantized wq = ops::quantize_blockwise(w, DType::F8E4M3, ops::ScaleLayout::Block128x128);
  const auto [wq2, wqt] = ops::quantize_blockwise_transpose(w, DType::F8E4M3, {}, ops::ScaleLayout::Block128x128);
  EXPECT_EQ(wq2.data.to_vector<double>(), wq.data.to_vector<double>());
  EXPECT_EQ(wqt.data.to_vector<double>(), wq.data.t().contiguous().to_vector<double>());
  EXPECT_EQ(wqt.scale_inv.shape(), (Shape{2, 3}));
  EXPECT_EQ(wqt.scale_inv.to_vector<float>(), wq.scale_inv.t().contiguous().to_vector<float>());
  EXPECT_MPT_ERROR(ops::quantize_blockwise_transpose(w, DType::F8E4M3, {.dbias = Tensor::empty({129})},
                                                     ops::ScaleLayout::Block128x128),
                   "[quantize_blockwise_transpose] 128x128 blocks take no dbias, gelu or dgelu_aux");
  od.gelu = true;
  EXPECT_MPT_ERROR(ops::quantize_blockwise_transpose(dh, DType::F8E4M3, od),
                   "[quantize_blockwise_transpose] dgelu_aux must have the input's shape, dtype and device");
  od.gelu = false;
  od.dgelu_aux = pre.to(DType::F32);
  EXPECT_MPT_ERROR(ops::quantize_blockwise_transpose(dh, DType::F8E4M3, od), "got f32[129, 300]");
  EXPECT_MPT_ERROR(ops::quantize_blockwise(dh, DType::F8E4M3, ops::ScaleLayout::Block1x128, od),
                   "[quantize_blockwise] dgelu_aux is taken by quantize_blockwise_transpose only");
}

// gelu: 1x128 blocks (rowwise and transposed) of gelu(x), each block's scale from gelu(x)'s amax: bit for bit the
// blocks of ops::gelu(x) (the GELU checked against float64 by QuantizeFp8.GeluQuantizesTheGeluOfTheInput), and not
// those of x; refused for 128x128 blocks and with a dbias.
TEST(QuantizeBlockwise, GeluQuantizesTheGeluOfTheInputInBlocks) {
  for (const Shape& shape : std::vector<Shape>{{5, 17}, {129, 300}, {256, 48}}) {
    for (DType dt : kWide) {
      const Tensor x = spread_tensor(shape, dt, 7 + numel(shape)), g = ops::gelu(x);
      for (bool transpose : {false, true}) {
        const std::string what = fmt::format("{} {} transpose {}", shape_str(shape), dtype_name(dt), transpose);
        const ops::BlockQuantizeOptions plain{.power_of_2 = true, .transpose = transpose};
        ops::BlockQuantizeOptions o = plain;
        o.gelu = true;
        const ops::Quantized got = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, o);
        const ops::Quantized want = ops::quantize_blockwise(g, DType::F8E4M3, ops::ScaleLayout::Block1x128, plain);
        const ops::Quantized of_x = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, plain);
        EXPECT_EQ(got.data.to_vector<double>(), want.data.to_vector<double>()) << what;
        EXPECT_EQ(got.scale_inv.to_vector<float>(), want.scale_inv.to_vector<float>()) << what;
        EXPECT_NE(got.scale_inv.to_vector<float>(), of_x.scale_inv.to_vector<float>()) << what;
      }
    }
  }
  ops::BlockQuantizeOptions o{.transpose = true, .dbias = Tensor::empty({4})};
  o.gelu = true;
  EXPECT_MPT_ERROR(ops::quantize_blockwise(Tensor::zeros({2, 4}), DType::F8E4M3, ops::ScaleLayout::Block1x128, o),
                   "[quantize_blockwise] gelu quantizes gelu(x) in 1x128 blocks without dbias, got 1x128 blocks and a "
                   "dbias");
  o = {};
  o.gelu = true;
  EXPECT_MPT_ERROR(ops::quantize_blockwise(Tensor::zeros({2, 4}), DType::F8E4M3, ops::ScaleLayout::Block128x128, o),
                   "got 128x128 blocks");
}

TEST(QuantizeBlockwise, SpecCasesAndScaleShapes) {
  // scaling-spec.md D1/D2: one 4.0 among 1.0s, then an all-zero block.
  std::vector<float> v(256, 1.0f);
  v[5] = 4.0f;
  std::fill(v.begin() + 128, v.end(), 0.0f);
  const Tensor x = Tensor::from_vector(v, {1, 256}).to(DType::BF16);
  const ops::Quantized fp32 = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128);
  EXPECT_EQ(fp32.scale_inv.to_vector<float>(), (std::vector<float>{1.0f / 112, 1.0f}));
  const ops::Quantized p2 = ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128, {.power_of_2 = true});
  EXPECT_EQ(p2.scale_inv.to_vector<float>(), (std::vector<float>{1.0f / 64, 1.0f}));
  const std::vector<float> qv = p2.data.to_vector<float>();
  EXPECT_EQ(qv[5], 256.0f);
  EXPECT_EQ(qv[0], 64.0f);
  EXPECT_EQ(qv[200], 0.0f);
  // D4 / D5 shapes in our compact layout (no padding to 4).
  EXPECT_EQ(ops::quantize_blockwise(Tensor::ones({130, 260}), DType::F8E4M3, ops::ScaleLayout::Block128x128).scale_inv.shape(),
            (Shape{2, 3}));
  EXPECT_EQ(ops::quantize_blockwise(Tensor::ones({3, 256}), DType::F8E4M3, ops::ScaleLayout::Block1x128).scale_inv.shape(),
            (Shape{3, 2}));
  // A block holding NaN or Inf has no finite amax: scale 1; NaN stays NaN, Inf saturates.
  const Tensor special = Tensor::from_vector<float>({NAN, 2, std::numeric_limits<float>::infinity(), 3}, {2, 2});
  const ops::Quantized sq = ops::quantize_blockwise(special, DType::F8E4M3, ops::ScaleLayout::Block1x128);
  EXPECT_EQ(sq.scale_inv.to_vector<float>(), (std::vector<float>{1, 1}));
  EXPECT_EQ(codes(sq.data), (std::vector<uint8_t>{0x7F, 0x40, 0x7E, 0x44}));
}

TEST(Dequantize, PerTensorMatchesExactProductRoundedOnce) {
  mpt::testing::PoisonAllocations poison;
  std::vector<uint8_t> all(256 * 9);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint8_t>(i * 7 + i / 256);
  for (DType fp8 : kFp8) {
    Tensor data = Tensor::empty({static_cast<int64_t>(all.size())}, fp8);
    std::memcpy(data.data_ptr(), all.data(), all.size());
    for (float scale_inv : {1.0f, 0.0078125f, 3.1e-5f, 1.7f}) {
      const ops::Quantized q{data, scalar(scale_inv), ops::ScaleLayout::PerTensor};
      for (DType out : kWide) {
        const Tensor y = ops::dequantize(q, out);
        EXPECT_EQ(y.dtype(), out);
        const std::vector<double> got = y.to_vector<double>();
        size_t bad = 0;
        for (size_t i = 0; i < all.size(); ++i) {
          // The product in float (rounded once from the exact long double product), then rounded to `out`: the
          // order the kernels define (opmath float, then store).
          const float product = static_cast<float>(test::ref_decode(ref_format(fp8), all[i]) * scale_inv);
          double want = product;
          if (out != DType::F32) {
            want = static_cast<double>(test::ref_decode(ref_format(out), test::ref_encode(ref_format(out), product, false)));
          }
          bad += !(got[i] == want || (std::isnan(got[i]) && std::isnan(want)));
        }
        EXPECT_EQ(bad, 0u) << dtype_name(fp8) << " -> " << dtype_name(out) << " scale_inv " << scale_inv;
      }
    }
  }
}

TEST(Dequantize, RoundTripWithinHalfAStep) {
  for (DType fp8 : kFp8) {
    const Tensor x = mpt::testing::random_tensor({1000}, DType::F32, 9, 5.0);
    const ops::Quantized q = ops::quantize_fp8(x, fp8);
    const std::vector<double> back = ops::dequantize(q, DType::F32).to_vector<double>(), xv = x.to_vector<double>();
    const double half_step = fp8 == DType::F8E4M3 ? 0x1p-4 : 0x1p-3;
    const double floor = (fp8 == DType::F8E4M3 ? 0x1p-10 : 0x1p-17) * q.scale_inv.item<double>();
    for (size_t i = 0; i < xv.size(); ++i) {
      ASSERT_LE(std::fabs(back[i] - xv[i]), half_step * std::fabs(xv[i]) * (1 + 1e-6) + floor) << i;
    }
  }
}

TEST(Cast, RejectsBadArguments) {
  const Tensor x = Tensor::ones({4, 4});
  EXPECT_MPT_ERROR(ops::amax(Tensor::zeros({3}, DType::I32)), "[amax] expected the input to be f32, f16 or bf16, got i32");
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F16), "[quantize_fp8] expected an fp8 dtype (f8e4m3 or f8e5m2), got f16");
  EXPECT_MPT_ERROR(ops::quantize_fp8(x.to(DType::F8E4M3), DType::F8E4M3), "expected the input to be f32, f16 or bf16");
  EXPECT_MPT_ERROR(ops::quantize_fp8(Tensor(), DType::F8E4M3), "[quantize_fp8] argument 0 is an undefined tensor");
  ops::QuantizeOptions o;
  o.scale = Tensor::ones({2});
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E4M3, o), "the scale must be an f32 tensor with one element");
  o.scale = Tensor::ones({}, DType::BF16);
  EXPECT_MPT_ERROR(ops::quantize_fp8_transpose(x, DType::F8E4M3, o), "[quantize_fp8_transpose] the scale must be");
  o = {};
  o.amax = Tensor::ones({3});
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E5M2, o), "the amax output must be an f32 tensor with one element");
  o = {};
  o.margin = 65;
  EXPECT_MPT_ERROR(ops::quantize_fp8(x, DType::F8E5M2, o), "margin must be in [0, 64], got 65");
  EXPECT_MPT_ERROR(ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::PerTensor), "expected a block layout");
  EXPECT_MPT_ERROR(ops::quantize_blockwise(x, DType::BF16, ops::ScaleLayout::Block1x128), "expected an fp8 dtype");
  const ops::Quantized q = ops::quantize_blockwise(Tensor::ones({4, 300}), DType::F8E4M3, ops::ScaleLayout::Block1x128);
  EXPECT_MPT_ERROR(ops::dequantize({q.data, q.scale_inv, ops::ScaleLayout::Block128x128}),
                   "[dequantize] a 128x128 scale_inv for data f8e4m3[4, 300] cpu must have shape [1, 3], got f32[4, 3]");
  EXPECT_MPT_ERROR(ops::dequantize(q, DType::I32), "[dequantize] expected the output dtype to be f32, f16 or bf16, got i32");
  EXPECT_MPT_ERROR(ops::dequantize({q.data, q.scale_inv.to(DType::F16), q.layout}), "scale_inv must be f32");
}

// Several matrices of 1-byte codes transposed at once: each the byte transpose of its source (checked element by
// element), any dtype of one byte; mismatched lists, wide dtypes, wrong shapes and a destination sharing its source's
// storage are refused.
TEST(TransposeCodes, EachDestinationIsItsSourceTransposed) {
  const std::vector<Shape> shapes = {{1, 1}, {16, 8}, {48, 40}, {136, 200}, {3, 70}};
  std::vector<Tensor> src, dst;
  for (size_t k = 0; k < shapes.size(); ++k) {
    const DType d = k % 2 == 0 ? DType::F8E4M3 : DType::U8;
    src.push_back(mpt::testing::random_tensor(shapes[k], DType::F32, 60 + k, 100.0).to(d));
    dst.push_back(Tensor::zeros({shapes[k][1], shapes[k][0]}, d));
  }
  ops::transpose_codes(src, dst);
  for (size_t k = 0; k < shapes.size(); ++k) {
    const auto* a = static_cast<const uint8_t*>(src[k].data_ptr());
    const auto* b = static_cast<const uint8_t*>(dst[k].data_ptr());
    const int64_t rows = shapes[k][0], cols = shapes[k][1];
    int64_t wrong = 0;
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) wrong += a[r * cols + c] != b[c * rows + r];
    EXPECT_EQ(wrong, 0) << "matrix " << k;
  }
  ops::transpose_codes({}, {});
  const Tensor a = Tensor::zeros({16, 8}, DType::F8E4M3);
  EXPECT_MPT_ERROR(ops::transpose_codes(std::vector<Tensor>{a}, {}), "[transpose_codes] 1 sources for 0 destinations");
  const std::vector<Tensor> wide{a.to(DType::BF16)}, wide_t{a.t().contiguous()};
  EXPECT_MPT_ERROR(ops::transpose_codes(wide, wide_t),
                   "source 0: expected a contiguous 2-d tensor of 1-byte codes");
  EXPECT_MPT_ERROR(ops::transpose_codes(std::vector<Tensor>{a}, std::vector<Tensor>{a.clone()}),
                   "destination 0: expected a contiguous f8e4m3[8, 16] on cpu apart from its source, got "
                   "f8e4m3[16, 8]");
  EXPECT_MPT_ERROR(ops::transpose_codes(std::vector<Tensor>{a}, std::vector<Tensor>{a.view({8, 16})}),
                   "apart from its source");
}
