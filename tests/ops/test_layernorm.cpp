// tests/ops/test_layernorm.cpp: LayerNorm and residual add + LayerNorm against float64 math and finite differences.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>

#include "grad_destinations.h"
#include "mpt/autograd/engine.h"
#include "mpt/ops/elementwise.h"
#include "mpt/autograd/node.h"
#include "mpt/ops/layernorm.h"
#include "norm_checks.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;
using mpt::testing::tolerance;

namespace {

struct RefLayerNorm {
  std::vector<double> y, mean, rstd;
};

// Independent float64 LayerNorm over the last dimension (two-pass variance, biased).
RefLayerNorm ln_ref(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                    int64_t cols, double eps) {
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  RefLayerNorm r{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < cols; ++c) m += x[i * cols + c];
    m /= static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) v += (x[i * cols + c] - m) * (x[i * cols + c] - m);
    const double rstd = 1 / std::sqrt(v / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c)
      r.y[i * cols + c] = (x[i * cols + c] - m) * rstd * w[c] + (b.empty() ? 0.0 : b[c]);
    r.mean[i] = m;
    r.rstd[i] = rstd;
  }
  return r;
}

Tensor ref_y(const Tensor& x, const Tensor& w, const Tensor& b, double eps = 1e-5) {
  const auto bias = b.defined() ? b.to_vector<double>() : std::vector<double>();
  return Tensor::from_vector(ln_ref(x.to_vector<double>(), w.to_vector<double>(), bias, x.size(-1), eps).y, x.shape());
}

using mpt::testing::same_bits;

// Float sums of `terms` products of magnitude <= `magnitude` round with absolute error <= terms * magnitude * 2^-24
// (each addition rounds once, relative to a partial sum no larger than the total of magnitudes).
mpt::testing::Tolerance with_sum_error(DType dt, int64_t terms, double magnitude) {
  const auto t = tolerance(dt);
  return {t.rtol, t.atol + static_cast<double>(terms) * magnitude * 0x1p-24};
}

}  // namespace

TEST(LayerNorm, ForwardMatchesFloat64ReferenceInEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    for (int64_t cols : {1, 7, 65, 1000, 4099}) {
      const Tensor x = random_tensor({3, cols}, dt, 10 + cols, 2.0);
      const Tensor w = random_tensor({cols}, dt, 20 + cols), b = random_tensor({cols}, dt, 30 + cols);
      const auto r = ops::layer_norm(x, w, b);
      const std::string what = fmt::format("layer_norm {} C={}", dtype_name(dt), cols);
      EXPECT_EQ(r.y.dtype(), dt);
      mpt::testing::expect_close(r.y, ref_y(x, w, b), tolerance(dt), what);
      const auto ref = ln_ref(x.to_vector<double>(), w.to_vector<double>(), b.to_vector<double>(), cols, 1e-5);
      const DType st = dt == DType::F64 ? DType::F64 : DType::F32;
      ASSERT_EQ(r.saved.mean.dtype(), st);
      ASSERT_EQ(r.saved.mean.shape(), Shape({3}));
      mpt::testing::expect_close(r.saved.mean, Tensor::from_vector(ref.mean, {3}), tolerance(st), what + " mean");
      mpt::testing::expect_close(r.saved.rstd, Tensor::from_vector(ref.rstd, {3}), tolerance(st), what + " rstd");
    }
  }
}

TEST(LayerNorm, F32ParametersWithLowPrecisionActivationsAndNoBias) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = random_tensor({2, 3, 129}, dt, 1, 3.0);
    const Tensor w = random_tensor({129}, DType::F32, 2), b = random_tensor({129}, DType::F32, 3);
    mpt::testing::expect_close(ops::layer_norm(x, w, b).y, ref_y(x, w, b), tolerance(dt), "f32 weight and bias");
    mpt::testing::expect_close(ops::layer_norm(x, w, Tensor()).y, ref_y(x, w, Tensor()), tolerance(dt), "no bias");
  }
}

TEST(LayerNorm, WorksOnNonContiguousInputsAndCustomEps) {
  const Tensor x = random_tensor({9, 4}, DType::F32, 5).t();  // (4, 9), rows of 9
  const Tensor w = random_tensor({9}, DType::F32, 6), b = random_tensor({9}, DType::F32, 7);
  mpt::testing::expect_close(ops::layer_norm(x, w, b, 0.5).y, ref_y(x, w, b, 0.5), tolerance(DType::F32), "eps 0.5");
}

TEST(LayerNorm, BackwardMatchesFiniteDifferencesInFloat64) {
  for (int64_t cols : {1, 5, 37}) {
    const Tensor x = random_tensor({3, cols}, DType::F64, 40 + cols, 2.0);
    const Tensor w = random_tensor({cols}, DType::F64, 41), b = random_tensor({cols}, DType::F64, 42);
    const Tensor dy = random_tensor({3, cols}, DType::F64, 43);
    const auto numeric = mpt::testing::numeric_gradients(
        [](const std::vector<Tensor>& in) { return ops::layer_norm(in[0], in[1], in[2]).y; }, {x, w, b}, dy);
    const auto saved = ops::layer_norm(x, w, b).saved;
    const auto g = ops::layer_norm_backward(dy, x, w, saved);
    const std::string what = fmt::format("C={}", cols);
    mpt::testing::expect_close(g.dx, numeric[0], {1e-6, 1e-7}, "dx vs finite differences " + what);
    mpt::testing::expect_close(g.dweight, numeric[1], {1e-6, 1e-7}, "dweight vs finite differences " + what);
    mpt::testing::expect_close(g.dbias, numeric[2], {1e-6, 1e-7}, "dbias vs finite differences " + what);
  }
}

TEST(LayerNorm, BackwardInLowPrecisionMatchesFloat64) {
  mpt::testing::PoisonAllocations poison;
  const int64_t rows = 67;  // more rows than the 32 partial-sum chunks, not a multiple of them
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (DType pt : {dt, DType::F32}) {
      for (int64_t cols : {7, 200, 1029}) {
        const Tensor x = random_tensor({rows, cols}, dt, 50 + cols, 2.0), dy = random_tensor({rows, cols}, dt, 51);
        const Tensor w = random_tensor({cols}, pt, 52), b = random_tensor({cols}, pt, 53);
        const auto saved = ops::layer_norm(x, w, b).saved;
        const auto g = ops::layer_norm_backward(dy, x, w, saved);
        const auto x64 = x.to(DType::F64), w64 = w.to(DType::F64);
        const auto ref =
            ops::layer_norm_backward(dy.to(DType::F64), x64, w64, ops::layer_norm(x64, w64, b.to(DType::F64)).saved);
        const std::string what = fmt::format("{} weight {} C={}", dtype_name(dt), dtype_name(pt), cols);
        EXPECT_EQ(g.dx.dtype(), dt);
        EXPECT_EQ(g.dweight.dtype(), pt);
        // dx: the float terms (|dy w rstd| up to ~20 with these inputs) cancel, 2C products each;
        // dweight, dbias: sums over rows of |dy xhat| <= ~20.
        mpt::testing::expect_close(g.dx, ref.dx, with_sum_error(dt, 2 * cols, 20), "dx " + what);
        mpt::testing::expect_close(g.dweight, ref.dweight, with_sum_error(pt, rows, 20), "dweight " + what);
        mpt::testing::expect_close(g.dbias, ref.dbias, with_sum_error(pt, rows, 20), "dbias " + what);
      }
    }
  }
}

TEST(LayerNorm, BackwardAccumulatesIntoGivenGradients) {
  const Tensor x = random_tensor({4, 33}, DType::F64, 60), dy = random_tensor({4, 33}, DType::F64, 61);
  const Tensor w = random_tensor({33}, DType::F64, 62), b = random_tensor({33}, DType::F64, 63);
  const auto saved = ops::layer_norm(x, w, b).saved;
  const auto fresh = ops::layer_norm_backward(dy, x, w, saved);
  ops::LayerNormGrads into{random_tensor({4, 33}, DType::F64, 64), random_tensor({33}, DType::F64, 65), Tensor()};
  const auto dx0 = into.dx.to_vector<double>(), dw0 = into.dweight.to_vector<double>();
  const auto out = ops::layer_norm_backward(dy, x, w, saved, true, into);
  EXPECT_TRUE(out.dx.shares_storage(into.dx));
  EXPECT_TRUE(out.dweight.shares_storage(into.dweight));
  const auto dx = out.dx.to_vector<double>(), dw = out.dweight.to_vector<double>();
  const auto fdx = fresh.dx.to_vector<double>(), fdw = fresh.dweight.to_vector<double>();
  for (size_t i = 0; i < dx.size(); ++i) EXPECT_DOUBLE_EQ(dx[i], dx0[i] + fdx[i]);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw[i], dw0[i] + fdw[i]);
  EXPECT_EQ(out.dbias.to_vector<double>(), fresh.dbias.to_vector<double>()) << "dbias not given: overwritten";
}

TEST(LayerNorm, ParameterGradientsDoNotDependOnTheThreadCount) {
  const Tensor x = random_tensor({301, 96}, DType::BF16, 70), dy = random_tensor({301, 96}, DType::BF16, 71);
  const Tensor w = random_tensor({96}, DType::F32, 72), b = random_tensor({96}, DType::F32, 73);
  const auto saved = ops::layer_norm(x, w, b).saved;
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const auto one = ops::layer_norm_backward(dy, x, w, saved);
  omp_set_num_threads(2);
  const auto two = ops::layer_norm_backward(dy, x, w, saved);
  omp_set_num_threads(threads);
  EXPECT_TRUE(same_bits(one.dweight, two.dweight));
  EXPECT_TRUE(same_bits(one.dbias, two.dbias));
  EXPECT_TRUE(same_bits(one.dx, two.dx));
}

TEST(LayerNorm, EmptyBatchGivesZeroParameterGradients) {
  const Tensor x = Tensor::empty({0, 5}), w = random_tensor({5}, DType::F32, 1);
  const auto r = ops::layer_norm(x, w, w);
  EXPECT_EQ(r.y.shape(), Shape({0, 5}));
  const auto g = ops::layer_norm_backward(Tensor::empty({0, 5}), x, w, r.saved);
  EXPECT_EQ(g.dweight.to_vector<float>(), std::vector<float>(5, 0.0f));
  EXPECT_EQ(g.dbias.to_vector<float>(), std::vector<float>(5, 0.0f));
}

// The fused op's error against float64 (of LN(x + residual) computed exactly) is at most twice the error of
// the unfused low-precision computation: the add rounded to the dtype, then layer_norm.
TEST(ResidualLayerNorm, ErrorAtMostTwiceTheUnfusedLowPrecisionError) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (int64_t cols : {7, 768, 1001}) {
      const Tensor x = random_tensor({5, cols}, dt, 80 + cols), res = random_tensor({5, cols}, dt, 81 + cols, 2.0);
      const Tensor w = random_tensor({cols}, dt, 82), b = random_tensor({cols}, dt, 83);
      auto s64 = x.to_vector<double>();
      const auto r64 = res.to_vector<double>();
      for (size_t i = 0; i < s64.size(); ++i) s64[i] += r64[i];
      const Tensor exact_sum = Tensor::from_vector(s64, x.shape());
      const Tensor ref = ref_y(exact_sum, w, b);
      const Tensor unfused_sum = exact_sum.to(dt);  // an add computed exactly and rounded once to dt
      const Tensor unfused = ops::layer_norm(unfused_sum, w, b).y;
      const auto fused = ops::residual_layer_norm(x, res, w, b);
      const std::string what = fmt::format("{} C={}", dtype_name(dt), cols);
      EXPECT_TRUE(same_bits(fused.sum, unfused_sum)) << "the residual stream " << what;
      const double err_fused = mpt::testing::max_abs_error(fused.y, ref);
      const double err_unfused = mpt::testing::max_abs_error(unfused, ref);
      EXPECT_LE(err_fused, 2 * err_unfused) << what;
      mpt::testing::expect_close(fused.y, ref_y(fused.sum, w, b), tolerance(dt), "fused vs reference " + what);
      const auto saved = ops::layer_norm(unfused_sum, w, b).saved;
      EXPECT_TRUE(same_bits(fused.saved.mean, saved.mean) && same_bits(fused.saved.rstd, saved.rstd)) << what;
    }
  }
}

TEST(ResidualLayerNorm, BackwardThroughTheSumMatchesFiniteDifferences) {
  const Tensor x = random_tensor({3, 11}, DType::F64, 90), res = random_tensor({3, 11}, DType::F64, 91);
  const Tensor w = random_tensor({11}, DType::F64, 92), b = random_tensor({11}, DType::F64, 93);
  const Tensor dy = random_tensor({3, 11}, DType::F64, 94);
  const auto numeric = mpt::testing::numeric_gradients(
      [&](const std::vector<Tensor>& in) { return ops::residual_layer_norm(in[0], in[1], w, b).y; }, {x, res}, dy);
  const auto fwd = ops::residual_layer_norm(x, res, w, b);
  const auto g = ops::layer_norm_backward(dy, fwd.sum, w, fwd.saved);
  mpt::testing::expect_close(g.dx, numeric[0], {1e-6, 1e-7}, "d x");
  mpt::testing::expect_close(g.dx, numeric[1], {1e-6, 1e-7}, "d residual");
}

// Each norm's y_dtype: an f32 input's norm written as f16/bf16 is the f32 norm rounded once, so y, the statistics and
// (through autograd, dy in the half dtype) every gradient have the bits of the norm followed by a cast. Both the
// vector (96 columns) and the scalar (37) row paths; the residual norms with gradients through the sum too.
TEST(LayerNorm, HalfOutputOfAnF32InputIsTheNormThenItsCastBitForBit) {
  enum Kind { kLayer, kRms, kResidualLayer, kResidualRms };
  for (const DType half : {DType::BF16, DType::F16}) {
    for (const Kind kind : {kLayer, kRms, kResidualLayer, kResidualRms}) {
      for (const int64_t cols : {96, 37}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(half) << " kind " << kind << " cols " << cols);
        const bool rms = kind == kRms || kind == kResidualRms, residual = kind >= kResidualLayer;
        const uint64_t seed = 300 + static_cast<uint64_t>(cols);
        const Tensor x = random_tensor({5, 3, cols}, DType::F32, seed, 2.0);
        const Tensor r = random_tensor({5, 3, cols}, DType::F32, seed + 1, 2.0);
        const Tensor w = random_tensor({cols}, DType::F32, seed + 2), b = random_tensor({cols}, DType::F32, seed + 3);
        const Tensor dy = random_tensor({5, 3, cols}, half, seed + 4);
        const Tensor dsum = random_tensor({5, 3, cols}, DType::F32, seed + 5);
        // y, the saved statistics, then the gradients of x, r, w, b (those the kind has).
        auto run = [&](std::optional<DType> y_dtype) {
          std::vector<Tensor> leaves;
          for (const Tensor* t : {&x, &r, &w, &b}) leaves.push_back(t->clone().requires_grad_());
          const Tensor &lx = leaves[0], &lr = leaves[1], &lw = leaves[2], &lb = leaves[3];
          Tensor y, sum, mean, rstd;
          if (residual) {
            ops::ResidualLayerNormResult o = rms ? ops::residual_rms_norm(lx, lr, lw, 1e-6, y_dtype)
                                                 : ops::residual_layer_norm(lx, lr, lw, lb, 1e-5, y_dtype);
            y = o.y, sum = o.sum, mean = o.saved.mean, rstd = o.saved.rstd;
          } else {
            ops::LayerNormResult o =
                rms ? ops::rms_norm(lx, lw, 1e-6, y_dtype) : ops::layer_norm(lx, lw, lb, 1e-5, y_dtype);
            y = o.y, mean = o.saved.mean, rstd = o.saved.rstd;
          }
          if (!y_dtype) y = y.to(half);
          EXPECT_EQ(y.dtype(), half);
          if (residual) {
            autograd::backward({y, sum}, {dy, dsum});
          } else {
            y.backward(dy);
          }
          std::vector<Tensor> out{y, mean, rstd};
          for (const Tensor& l : leaves)
            if (l.grad().defined()) out.push_back(l.grad());
          return out;
        };
        const std::vector<Tensor> fused = run(half), unfused = run(std::nullopt);
        ASSERT_EQ(fused.size(), unfused.size());
        ASSERT_EQ(fused.size(), 3u + (residual ? 2u : 1u) + 1u + (rms ? 0u : 1u));  // y, stats, dx (dr), dw (db)
        for (size_t i = 0; i < fused.size(); ++i) EXPECT_TRUE(same_bits(fused[i], unfused[i])) << "output " << i;
      }
    }
  }
}

// A residual norm's x in f16/bf16 beside an f32 residual: tests/support/norm_checks.h (also run on the device).
TEST(ResidualLayerNorm, HalfSublayerOutputAndTheSumsGradientFoldInBitForBit) {
  mpt::testing::expect_residual_norm_folds_half_x(Device::cpu());
}

// A norm's FP8 output is ops::quantize_fp8 of its f32 output: tests/support/norm_checks.h (also run on the device).
TEST(LayerNorm, Fp8OutputIsTheDelayedQuantizationOfTheF32NormBitForBit) {
  mpt::testing::expect_norm_fp8_output_is_the_quantized_norm(Device::cpu());
}

// Under current scaling (NormOutput::fp8_current) the same against quantize_fp8's current scaling of the f32 norm.
TEST(LayerNorm, Fp8CurrentOutputIsTheCurrentQuantizationOfTheF32NormBitForBit) {
  mpt::testing::expect_norm_fp8_current_output_is_the_quantized_norm(Device::cpu());
}

// The norm of a half residual stream writes E4M3 codes too (amp::Policy::residual under FP8).
TEST(LayerNorm, Fp8OutputOfAHalfStream) { mpt::testing::expect_half_stream_norm_fp8_output(Device::cpu()); }

TEST(LayerNorm, Fp8OutputRejectsWhatItCannotQuantize) {
  const Tensor x = Tensor::zeros({2, 4}), w = Tensor::ones({4}), one = Tensor::ones({});
  EXPECT_MPT_ERROR(ops::layer_norm(x.to(DType::BF16), w.to(DType::BF16), Tensor(), 1e-5,
                                   ops::NormOutput::fp8(one, one)),
                   "[layer_norm] an f8e4m3 output is made from f32 parameters and f32 activations (x f32, or f16/bf16 "
                   "beside an f32 residual) or f16/bf16 ones (x the same): got activations bf16, weight bf16");
  EXPECT_MPT_ERROR(ops::residual_layer_norm(x.to(DType::F16), x.to(DType::BF16), w, Tensor(), 1e-5,
                                            ops::NormOutput::fp8(one, one)),
                   "got activations bf16, weight f32, x f16");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor(), 1e-5, ops::NormOutput::fp8(one, Tensor())),
                   "[layer_norm] an f8e4m3 output needs its amax as one contiguous f32 element");
  EXPECT_MPT_ERROR(ops::rms_norm(x, w, 1e-6, ops::NormOutput::fp8(Tensor::ones({2}), one)),
                   "[rms_norm] an f8e4m3 output needs its scale as one contiguous f32 element");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor(), 1e-5, DType::F8E5M2),
                   "[layer_norm] an FP8 output is f8e4m3 (NormOutput::fp8), got f8e5m2");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor(), 1e-5, DType::F8E4M3),
                   "[layer_norm] an f8e4m3 output needs its scale");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor(), 1e-5, ops::NormOutput::fp8_current(one, Tensor())),
                   "[layer_norm] an f8e4m3 output needs its scale_inv as one contiguous f32 element on cpu "
                   "(NormOutput::fp8_current)");
}

TEST(LayerNorm, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({2, 4}), w = Tensor::ones({4});
  EXPECT_MPT_ERROR(ops::layer_norm(Tensor::zeros({2, 4}, DType::I32), w, w), "[layer_norm] expected a f32, f64");
  EXPECT_MPT_ERROR(ops::layer_norm(x, Tensor::ones({3}), w), "[layer_norm] weight must have shape [4]");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor::ones({5})), "[layer_norm] bias must have shape [4]");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, Tensor::ones({4}, DType::BF16)), "dtype mismatch");
  EXPECT_MPT_ERROR(ops::layer_norm(x, Tensor::ones({4}, DType::BF16), Tensor()), "weight must be f32 or f32");
  EXPECT_MPT_ERROR(ops::layer_norm(x.to(DType::BF16), Tensor::ones({4}, DType::F16), Tensor()),
                   "weight must be bf16 or f32");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, w, -1.0), "eps must be finite and >= 0");
  EXPECT_MPT_ERROR(ops::layer_norm(Tensor::zeros({2, 0}), Tensor::ones({0}), Tensor()), "dimension is empty");
  EXPECT_MPT_ERROR(ops::layer_norm(Tensor(), w, w), "[layer_norm] argument 0 is an undefined tensor");
  EXPECT_MPT_ERROR(ops::residual_layer_norm(x, Tensor::zeros({2, 5}), w, w), "[residual_layer_norm] residual must");
  EXPECT_MPT_ERROR(ops::residual_layer_norm(x, x.to(DType::BF16), w.to(DType::BF16), w.to(DType::BF16)),
                   "[residual_layer_norm] x (beside the residual) must be bf16 (the activations' dtype) or, with f32 "
                   "activations, f16 or bf16; got f32");
  EXPECT_MPT_ERROR(ops::residual_layer_norm(x.to(DType::F16), x, w, w, 1e-5, DType::BF16),
                   "[residual_layer_norm] the output dtype (bf16) and x (beside the residual) (f16) must be one "
                   "low-precision dtype");
  EXPECT_MPT_ERROR(ops::layer_norm(x, w, w, 1e-5, DType::F64),
                   "[layer_norm] the output dtype must be f32 (the activations' dtype) or, with f32 activations, f16 "
                   "or bf16; got f64");
  EXPECT_MPT_ERROR(ops::rms_norm(x.to(DType::BF16), w, 1e-6, DType::F32), "[rms_norm] the output dtype must be");
  const auto saved_bf16 = ops::layer_norm(x.to(DType::BF16), w, w).saved;
  EXPECT_MPT_ERROR(ops::layer_norm_backward(x.to(DType::F16), x.to(DType::BF16), w, saved_bf16),
                   "[layer_norm_backward] dy must be bf16 (the activations' dtype) or, with f32 activations, f16 or "
                   "bf16; got f16");
  const auto saved = ops::layer_norm(x, w, w).saved;
  EXPECT_MPT_ERROR(ops::layer_norm_backward(Tensor::zeros({2, 3}), x, w, saved), "[layer_norm_backward] dy must");
  EXPECT_MPT_ERROR(ops::layer_norm_backward(x, x, w, {saved.mean, Tensor::zeros({3})}), "saved statistics must");
  EXPECT_MPT_ERROR(ops::layer_norm_backward(x, x, w, {saved.mean.to(DType::F64), saved.rstd}), "must be f32");
  EXPECT_MPT_ERROR(ops::layer_norm_backward(x, x, w, saved, false, {Tensor(), Tensor(), Tensor::zeros({4})}),
                   "has_bias is false");
  EXPECT_MPT_ERROR(ops::layer_norm_backward(x, x, w, saved, true, {Tensor::zeros({2, 4}).t(), Tensor(), Tensor()}),
                   "dx must have shape");
  EXPECT_MPT_ERROR(
      ops::layer_norm_backward(x, x, w, saved, true, {Tensor(), Tensor::zeros({4}, DType::F16), Tensor()}),
      "[layer_norm_backward] dweight and dbias are written in the weight's dtype, or bf16 for an f32 weight: got f16 "
      "for f32[4] cpu");
  EXPECT_MPT_ERROR(
      ops::layer_norm_backward(x, x, w, saved, true, {Tensor(), Tensor::zeros({4}, DType::BF16), Tensor::zeros({4})}),
      "dbias to accumulate into must be bf16");
}

// BF16 gradients of FP32 norm parameters (autograd::set_grad_dtype: amp::Policy::grads): the kernels round the same
// float sums once to BF16, so dweight and dbias are the FP32 ones rounded, bit for bit, accumulating into an existing
// BF16 gradient too (its value widened, added, rounded once); through autograd, a weight whose gradient dtype is BF16
// gets them from the norm directly. LayerNorm, RMSNorm and the fused residual norm, BF16 and FP32 activations.
TEST(LayerNorm, Bf16ParameterGradientsAreTheFp32OnesRoundedOnce) {
  const int64_t rows = 37, cols = 96;
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    const Tensor x = random_tensor({rows, cols}, act, 51), dy = random_tensor({rows, cols}, act, 52);
    const Tensor w = random_tensor({cols}, DType::F32, 53), b = random_tensor({cols}, DType::F32, 54);
    const auto saved = ops::layer_norm(x, w, b).saved;
    const Tensor d0 = random_tensor({cols}, DType::F32, 55).to(DType::BF16), e0 = random_tensor({cols}, DType::F32, 56).to(DType::BF16);
    const ops::LayerNormGrads wide = ops::layer_norm_backward(dy, x, w, saved, true, {Tensor(), d0.to(DType::F32), e0.to(DType::F32)});
    const ops::LayerNormGrads low = ops::layer_norm_backward(dy, x, w, saved, true, {Tensor(), d0.clone(), e0.clone()});
    ASSERT_EQ(low.dweight.dtype(), DType::BF16);
    EXPECT_TRUE(mpt::testing::same_bits(low.dweight, wide.dweight.to(DType::BF16))) << "dweight";
    EXPECT_TRUE(mpt::testing::same_bits(low.dbias, wide.dbias.to(DType::BF16))) << "dbias";
    EXPECT_TRUE(mpt::testing::same_bits(low.dx, wide.dx)) << "dx is untouched";
    // Through autograd: the norms' parameters with BF16 gradients against plain FP32 leaves.
    for (int kind = 0; kind < 3; ++kind) {  // layer_norm, rms_norm, residual_layer_norm
      SCOPED_TRACE(kind);
      const Tensor r = random_tensor({rows, cols}, act, 57);
      auto run = [&](bool bf16_grads) {
        Tensor lw = w.clone().requires_grad_(true), lb = b.clone().requires_grad_(true);
        if (bf16_grads) autograd::set_grad_dtype(lw, DType::BF16), autograd::set_grad_dtype(lb, DType::BF16);
        Tensor y = kind == 0   ? ops::layer_norm(x, lw, lb).y
                   : kind == 1 ? ops::rms_norm(x, lw).y
                               : ops::residual_layer_norm(x, r, lw, lb).y;
        y.backward(dy);
        return std::pair{lw.grad(), lb.grad()};
      };
      const auto [w32, b32] = run(false);
      const auto [w16, b16] = run(true);
      ASSERT_EQ(w16.dtype(), DType::BF16);
      EXPECT_TRUE(mpt::testing::same_bits(w16, w32.to(DType::BF16))) << "weight";
      if (kind != 1) {
        EXPECT_TRUE(mpt::testing::same_bits(b16, b32.to(DType::BF16))) << "bias";
      }
    }
  }
}

// The norms' weight and bias gradients made in their destinations (autograd::set_grad_destination: DataParallel's
// buckets, slices of one NaN-filled buffer here): the kernels write the fresh ones (never reading them) and add the
// second micro-batch's into them; the bits of the same passes without destinations. LayerNorm, RMSNorm and both fused
// residual norms (through y and through the sum), f32 and with BF16 gradients of FP32 weights beside BF16 activations.
TEST(LayerNorm, ParameterGradientsAreWrittenIntoTheirDestinations) {
  const int64_t rows = 37, cols = 96;
  std::vector<Tensor> init;
  for (uint64_t i = 0; i < 6; ++i) init.push_back(random_tensor({cols}, DType::F32, 60 + i));
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    mpt::testing::expect_gradients_made_in_destinations(
        init,
        [&](const std::vector<Tensor>& p) {
          for (uint64_t micro = 0; micro < 2; ++micro) {
            const Tensor x = random_tensor({rows, cols}, act, 70 + micro), r = random_tensor({rows, cols}, act, 72 + micro);
            const Tensor y0 = ops::layer_norm(x, p[0], p[1]).y;
            const Tensor y1 = ops::rms_norm(x, p[2]).y;
            const ops::ResidualLayerNormResult s2 = ops::residual_layer_norm(x, r, p[3], p[4]);
            const ops::ResidualLayerNormResult s3 = ops::residual_rms_norm(x, r, p[5]);
            std::vector<Tensor> dy;
            for (uint64_t k = 0; k < 6; ++k) dy.push_back(random_tensor({rows, cols}, act, 80 + 10 * micro + k));
            autograd::backward({y0, y1, s2.y, s2.sum, s3.y, s3.sum}, dy);
          }
        },
        act == DType::BF16 ? std::optional<DType>(DType::BF16) : std::nullopt);
  }
}
