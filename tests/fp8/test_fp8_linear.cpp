// tests/fp8/test_fp8_linear.cpp: fp8::fp8_linear forward and gradients per recipe against float64 references on the
// dequantized operands (tight) and on the unquantized ones (FP8 error bound), amax recording, telemetry and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>
#include <vector>

#include "mpt/fp8/scaling.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/cast.h"
#include "mpt/ops/elementwise.h"
#include "mpt/fp8/linear.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using fp8::Fp8Role;
using mpt::testing::random_tensor;

constexpr double kU = 0x1p-24;  // f32 unit roundoff

// Unit roundoff of a result dtype (its final rounding).
double unit_roundoff(DType t) {
  switch (t) {
    case DType::BF16: return 0x1p-8;
    case DType::F16: return 0x1p-11;
    default: return kU;
  }
}

Tensor f64(const Tensor& t) { return t.detach().to(DType::F64); }

Tensor abs64(const Tensor& t) {
  std::vector<double> v = t.to_vector<double>();
  for (double& x : v) x = std::fabs(x);
  return Tensor::from_vector(v, t.shape());
}

Tensor axpy(double a, const Tensor& x, const Tensor& y) { return ops::add(ops::scale(x, a), y); }  // a x + y

Tensor mm(const Tensor& a, const Tensor& b, bool ta = false, bool tb = false) {
  ops::MatmulOptions o;
  o.trans_a = ta;
  o.trans_b = tb;
  return ops::matmul(a, b, o);
}

// code * scale_inv of every element, exactly (f64), shaped like the codes.
Tensor exact_dequant(const ops::Quantized& q) {
  std::vector<double> v = q.data.to_vector<double>();
  const std::vector<double> si = q.scale_inv.to_vector<double>();
  const int64_t cols = q.data.size(-1), kb = (cols + 127) / 128;
  const int64_t br = q.layout == ops::ScaleLayout::Block128x128 ? 128 : 1;
  for (size_t i = 0; i < v.size(); ++i) {
    const int64_t r = static_cast<int64_t>(i) / cols, c = static_cast<int64_t>(i) % cols;
    v[i] *= q.layout == ops::ScaleLayout::PerTensor ? si[0] : si[static_cast<size_t>((r / br) * kb + c / 128)];
  }
  return Tensor::from_vector(v, q.data.shape());
}

double max_of(const Tensor& t) {
  double m = 0;
  for (double v : t.to_vector<double>()) m = std::fmax(m, v);
  return m;
}

// One operand as the op's GEMMs see it, rebuilt from the public quantizers: `row` is what the GEMM contracting over
// its columns reads, `col` what the GEMM contracting over its rows reads (both f64, shaped like t). Quantization
// error per element: |q(v) - v| <= rel |v| + abs (rel: half an ulp of the format; abs: half its smallest subnormal
// times the largest scale_inv, the underflow region).
struct RefOperand {
  Tensor row, col;
  double rel = 0, abs = 0;
};

RefOperand reference_operand(const Tensor& t, const fp8::Fp8Recipe& recipe, Fp8Role role, float delayed_scale) {
  const DType fmt = fp8::fp8_dtype(recipe, role);
  RefOperand r;
  r.rel = fmt == DType::F8E4M3 ? 0x1p-4 : 0x1p-3;
  const double half_subnormal = fmt == DType::F8E4M3 ? 0x1p-10 : 0x1p-17;
  if (const auto* b = std::get_if<fp8::BlockScaling>(&recipe)) {
    const ops::BlockQuantizeOptions o{b->power_2_scale};
    if (role == Fp8Role::Weight) {
      const ops::Quantized q = ops::quantize_blockwise(t, fmt, ops::ScaleLayout::Block128x128, o);
      r.row = r.col = exact_dequant(q);
      r.abs = half_subnormal * max_of(q.scale_inv.to(DType::F64));
    } else {
      const ops::Quantized q = ops::quantize_blockwise(t, fmt, ops::ScaleLayout::Block1x128, o);
      const ops::Quantized qc = ops::quantize_blockwise(t.t().contiguous(), fmt, ops::ScaleLayout::Block1x128, o);
      r.row = exact_dequant(q);
      r.col = exact_dequant(qc).t().contiguous();
      r.abs = half_subnormal * std::fmax(max_of(q.scale_inv.to(DType::F64)), max_of(qc.scale_inv.to(DType::F64)));
    }
    return r;
  }
  float s = delayed_scale;
  if (const auto* c = std::get_if<fp8::CurrentScaling>(&recipe)) {
    s = fp8::compute_scale_from_amax(fp8::amax_ignore_nan(t), fp8::fp8_max(fmt), c->power_2_scale, c->amax_epsilon);
  }
  ops::QuantizeOptions o;
  o.scale = Tensor::full({}, s);
  const ops::Quantized q = ops::quantize_fp8(t, fmt, o);
  r.row = r.col = exact_dequant(q);
  r.abs = half_subnormal * q.scale_inv.item<double>();
  return r;
}

// A GEMM's reference and error bounds. op(a): (rows, k) and op(b): (k, cols) are the high-precision values; qa and
// qb their quantized counterparts (same orientation). tight: f32 accumulation of the exact products, |products|
// summed, plus the bias add and one rounding to `out`. loose: the quantization bound above, propagated through the
// products: |q(a)q(b) - ab| <= (ea+eb+ea eb)|a||b| + da(1+eb)|b| + db(1+ea)|a| + da db, summed over k.
struct GemmCheck {
  Tensor ref, exact, tight, loose;
};

GemmCheck gemm_check(const Tensor& qa, const Tensor& qb, const Tensor& a, const Tensor& b, const RefOperand& ra,
                     const RefOperand& rb, const Tensor& bias, DType out) {
  const int64_t k = a.size(1);
  GemmCheck g;
  g.ref = mm(qa, qb);
  g.exact = mm(a, b);
  Tensor sum_abs = mm(abs64(qa), abs64(qb));
  if (bias.defined()) {
    g.ref = ops::add(g.ref, bias);
    g.exact = ops::add(g.exact, bias);
    sum_abs = ops::add(sum_abs, abs64(bias));
  }
  const double uo = unit_roundoff(out);
  const Tensor acc = ops::scale(sum_abs, static_cast<double>(k + 10) * kU);
  g.tight = axpy(uo, ops::add(abs64(g.ref), acc), acc);
  const Tensor abs_a = abs64(a), abs_b = abs64(b);
  Tensor quant = ops::scale(mm(abs_a, abs_b), ra.rel + rb.rel + ra.rel * rb.rel);
  quant = axpy(ra.abs * (1 + rb.rel), mm(Tensor::ones(a.shape(), DType::F64), abs_b), quant);
  quant = axpy(rb.abs * (1 + ra.rel), mm(abs_a, Tensor::ones(b.shape(), DType::F64)), quant);
  quant = ops::add(quant, Tensor::full(quant.shape(), static_cast<double>(k) * ra.abs * rb.abs, DType::F64));
  g.loose = axpy(uo, ops::add(abs64(g.exact), quant), ops::add(quant, g.tight));
  return g;
}

struct Errors {
  double ratio = 0;    // max |got - ref| / bound (<= 1 passes)
  double max_abs = 0;  // max |got - ref|
  double rel_fro = 0;  // ||got - ref|| / ||ref||
};

Errors compare(const Tensor& got, const Tensor& ref, const Tensor& bound) {
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>(), b = bound.to_vector<double>();
  EXPECT_EQ(g.size(), r.size());
  Errors e;
  double num = 0, den = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(g[i] - r[i]);
    e.ratio = std::fmax(e.ratio, std::isnan(d) ? INFINITY : d / std::fmax(b[i], 1e-300));
    e.max_abs = std::fmax(e.max_abs, d);
    num += d * d;
    den += r[i] * r[i];
  }
  e.rel_fro = std::sqrt(num / den);
  return e;
}

struct Case {
  std::string name;
  fp8::Fp8Recipe recipe;
  DType x_dtype = DType::F32, w_dtype = DType::F32;
  Shape x_shape{37, 200};
  int64_t m = 130;
  bool bias = true;
};
void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }  // not 112 bytes of hex in every test name

std::vector<Case> cases() {
  using fp8::Fp8Format;
  std::vector<Case> c;
  c.push_back({"DelayedHybrid", fp8::DelayedScaling{16, fp8::AmaxAlgo::Max, 0, Fp8Format::Hybrid}});
  c.push_back({"DelayedE4M3", fp8::DelayedScaling{16, fp8::AmaxAlgo::Max, 0, Fp8Format::E4M3}});
  c.push_back({"Current", fp8::CurrentScaling{}});
  c.push_back({"CurrentE4M3Pow2", fp8::CurrentScaling{Fp8Format::E4M3, true, 0.0f}});
  c.push_back({"Block", fp8::BlockScaling{}});
  c.push_back({"BlockFp32Scales", fp8::BlockScaling{false}});
  c.push_back({"CurrentBf16x3d", fp8::CurrentScaling{}, DType::BF16, DType::F32, {3, 13, 200}, 130, false});
  c.push_back({"BlockBf16Weight", fp8::BlockScaling{}, DType::BF16, DType::BF16});
  c.push_back({"DelayedBf16x3d", fp8::DelayedScaling{}, DType::BF16, DType::F32, {2, 20, 129}, 257, true});
  return c;
}

class Fp8LinearRecipes : public ::testing::TestWithParam<Case> {};

// One training step of the layer checked against both references. Returns nothing; prints the measured errors.
void check_step(const Case& c, const fp8::Fp8LinearMetas& metas, const Tensor& x, const Tensor& w, const Tensor& b,
                const Tensor& dy, const std::string& label) {
  const int64_t k = x.size(-1);
  const float sx = metas.input ? metas.input->scale.item<float>() : 0.0f;
  const float sw = metas.weight ? metas.weight->scale.item<float>() : 0.0f;
  const float sg = metas.grad_output ? metas.grad_output->scale.item<float>() : 0.0f;
  x.set_grad(Tensor());
  w.set_grad(Tensor());
  if (b.defined()) b.set_grad(Tensor());
  const Tensor y = fp8::fp8_linear(x, w, b, {c.recipe, metas, std::nullopt});
  ASSERT_EQ(y.dtype(), x.dtype());
  y.backward(dy);

  const Tensor x2 = x.detach().reshape({-1, k}), dy2 = dy.reshape({-1, c.m});
  const RefOperand rx = reference_operand(x2, c.recipe, Fp8Role::Input, sx);
  const RefOperand rw = reference_operand(w.detach(), c.recipe, Fp8Role::Weight, sw);
  const RefOperand rg = reference_operand(dy2, c.recipe, Fp8Role::GradOutput, sg);
  const Tensor b64 = b.defined() ? f64(b) : Tensor();
  const Tensor x64 = f64(x2), w64 = f64(w), dy64 = f64(dy2);

  struct Out {
    const char* what;
    Tensor got;
    GemmCheck check;
  };
  const std::vector<Out> outs = {
      {"y", y.reshape({-1, c.m}), gemm_check(rx.row, rw.row.t(), x64, w64.t(), rx, rw, b64, x.dtype())},
      {"dx", x.grad().reshape({-1, k}), gemm_check(rg.row, rw.col, dy64, w64, rg, rw, Tensor(), x.dtype())},
      {"dW", w.grad(), gemm_check(rg.col.t(), rx.col, dy64.t(), x64, rg, rx, Tensor(), w.dtype())},
  };
  for (const Out& o : outs) {
    ASSERT_TRUE(o.got.defined()) << o.what;
    const Errors tight = compare(o.got, o.check.ref, o.check.tight);
    const Errors loose = compare(o.got, o.check.exact, o.check.loose);
    EXPECT_LE(tight.ratio, 1.0) << label << " " << o.what << " vs the dequantized reference";
    EXPECT_LE(loose.ratio, 1.0) << label << " " << o.what << " vs the unquantized reference";
    std::printf("  %-28s %-2s dequantized: max err %.3g (%.3f of bound)   unquantized: rel Frobenius %.4f, "
                "%.3f of bound\n", label.c_str(), o.what, tight.max_abs, tight.ratio, loose.rel_fro, loose.ratio);
  }
  if (b.defined()) {
    ASSERT_TRUE(b.grad().defined());
    ASSERT_EQ(b.grad().dtype(), b.dtype());
    const Tensor ref = ops::sum(dy64, 0);
    const double n = static_cast<double>(dy2.size(0));
    const Tensor bound = axpy(unit_roundoff(b.dtype()), abs64(ref),
                              ops::scale(ops::sum(abs64(dy64), 0), (n + 10) * kU));
    EXPECT_LE(compare(b.grad(), ref, bound).ratio, 1.0) << label << " db";
  }
}

TEST_P(Fp8LinearRecipes, ForwardAndGradientsMatchReferences) {
  const Case& c = GetParam();
  fp8::Fp8ScalingState state(c.recipe);
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  const int64_t k = c.x_shape.back();
  const Tensor x = random_tensor(c.x_shape, c.x_dtype, 11).requires_grad_();
  const Tensor w = random_tensor({c.m, k}, c.w_dtype, 12, 0.05).requires_grad_();
  const Tensor b = c.bias ? random_tensor({c.m}, c.w_dtype, 13, 0.1).requires_grad_() : Tensor();
  Shape y_shape = c.x_shape;
  y_shape.back() = c.m;
  const Tensor dy = random_tensor(y_shape, c.x_dtype, 14, 1e-3);
  EXPECT_EQ(fp8::fp8_linear(x, w, b, {c.recipe, metas, std::nullopt}).shape(), y_shape);
  if (!std::holds_alternative<fp8::DelayedScaling>(c.recipe)) {
    check_step(c, metas, x, w, b, dy, c.name);
    return;
  }
  // Delayed: the first step runs with scale 1 and records amaxes; the update turns them into scales for step 2.
  fp8::Fp8ScalingState fresh(c.recipe);
  const fp8::Fp8LinearMetas m1 = fresh.register_linear("fc");
  check_step(c, m1, x, w, b, dy, c.name + " step 1");
  EXPECT_EQ(m1.input->current_amax(), fp8::amax_ignore_nan(x));
  EXPECT_EQ(m1.weight->current_amax(), fp8::amax_ignore_nan(w));
  EXPECT_EQ(m1.grad_output->current_amax(), fp8::amax_ignore_nan(dy));
  fresh.update();
  EXPECT_EQ(m1.input->scale.item<float>(), 448.0f / fp8::amax_ignore_nan(x));
  EXPECT_EQ(m1.weight->scale.item<float>(), 448.0f / fp8::amax_ignore_nan(w));
  EXPECT_EQ(m1.grad_output->scale.item<float>(), fp8::fp8_max(m1.grad_output->dtype) / fp8::amax_ignore_nan(dy));
  check_step(c, m1, x, w, b, dy, c.name + " step 2");
}

INSTANTIATE_TEST_SUITE_P(Fp8, Fp8LinearRecipes, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name; });

TEST(Fp8Linear, MicroBatchesShareScalesAndTheStepAmaxIsTheirMax) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  const Tensor w = random_tensor({8, 16}, DType::F32, 1).requires_grad_();
  const Tensor x1 = random_tensor({4, 16}, DType::F32, 2);
  const Tensor x2 = ops::scale(x1, 3.0);
  for (const Tensor& x : {x1, x2}) {
    fp8::fp8_linear(x, w, Tensor(), {fp8::DelayedScaling{}, metas, std::nullopt}).backward(Tensor::ones({4, 8}));
  }
  EXPECT_EQ(metas.input->current_amax(), fp8::amax_ignore_nan(x2));
  EXPECT_EQ(metas.input->scale.item<float>(), 1.0f);
  state.update();
  EXPECT_EQ(metas.input->scale.item<float>(), 448.0f / fp8::amax_ignore_nan(x2));
  EXPECT_EQ(metas.grad_output->scale.item<float>(), 57344.0f);  // amax of dy = 1
}

TEST(Fp8Linear, WeightGradientAccumulatesIntoTheMasterGradient) {
  const Tensor x = random_tensor({5, 40}, DType::BF16, 3);
  const Tensor w = random_tensor({6, 40}, DType::F32, 4).requires_grad_();
  const fp8::Fp8LinearConfig cfg{fp8::CurrentScaling{}, {}, DType::F32};
  const Tensor y = fp8::fp8_linear(x, w, Tensor(), cfg);
  EXPECT_EQ(y.dtype(), DType::F32);
  y.backward(Tensor::ones({5, 6}));
  const std::vector<float> once = w.grad().to_vector<float>();
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  EXPECT_FALSE(x.grad().defined());
  fp8::fp8_linear(x, w, Tensor(), cfg).backward(Tensor::ones({5, 6}));
  const std::vector<float> twice = w.grad().to_vector<float>();
  for (size_t i = 0; i < once.size(); ++i) ASSERT_EQ(twice[i], 2 * once[i]);
}

TEST(Fp8Linear, NoGradModeRecordsNothingAndComputesTheSameOutput) {
  const Tensor x = random_tensor({7, 33}, DType::F32, 5).requires_grad_();
  const Tensor w = random_tensor({9, 33}, DType::F32, 6).requires_grad_();
  const fp8::Fp8LinearConfig cfg{fp8::BlockScaling{}, {}, std::nullopt};
  const Tensor with_grad = fp8::fp8_linear(x, w, Tensor(), cfg);
  EXPECT_TRUE(with_grad.requires_grad());
  autograd::NoGradGuard no_grad;
  const Tensor y = fp8::fp8_linear(x, w, Tensor(), cfg);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_EQ(y.to_vector<float>(), with_grad.to_vector<float>());
}

TEST(Fp8Linear, VectorInputWithOnlyTheBiasTrainable) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  const Tensor x = random_tensor({24}, DType::F32, 7), w = random_tensor({5, 24}, DType::F32, 8);
  const Tensor b = random_tensor({5}, DType::F32, 9).requires_grad_();
  const Tensor y = fp8::fp8_linear(x, w, b, {fp8::DelayedScaling{}, metas, std::nullopt});
  EXPECT_EQ(y.shape(), (Shape{5}));
  const Tensor dy = random_tensor({5}, DType::F32, 10);
  y.backward(dy);
  EXPECT_EQ(b.grad().to_vector<float>(), dy.to_vector<float>());
  EXPECT_EQ(metas.grad_output->current_amax(), 0.0f);  // dy needed no quantization
}

TEST(Fp8Linear, TelemetryOnAConstructedInput) {
  // E4M3 at scale 1 (the first delayed step): 500 and -1000 saturate, 1e-4 and -5e-4 flush to zero.
  const Tensor x = Tensor::from_vector<float>({500.0f, -1000.0f, 1.0f, 1e-4f, 0.0f, 3.0f, 2e-3f, -5e-4f}, {2, 4});
  const Tensor w = Tensor::full({3, 4}, 0.5).requires_grad_();
  const fp8::DelayedScaling recipe{4, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::E4M3};
  fp8::Fp8ScalingState state(recipe);
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  EXPECT_EQ(state.telemetry().at("fc.input").count, 0);
  fp8::fp8_linear(x, w, Tensor(), {recipe, metas, std::nullopt}).backward(Tensor::ones({2, 3}));
  EXPECT_EQ(state.telemetry().at("fc.input").count, 0);  // off by default
  state.set_collect_telemetry(true);
  fp8::fp8_linear(x, w, Tensor(), {recipe, metas, std::nullopt}).backward(Tensor::full({2, 3}, 1e-4));
  const std::map<std::string, fp8::Fp8TensorStats> t = state.telemetry();
  const fp8::Fp8TensorStats& in = t.at("fc.input");
  EXPECT_EQ(in.count, 1);
  EXPECT_EQ(in.amax, 1000.0f);
  EXPECT_EQ(in.scale, 1.0f);
  EXPECT_EQ(in.saturated, 2.0 / 8);
  EXPECT_EQ(in.flushed, 2.0 / 8);
  EXPECT_EQ(t.at("fc.weight").saturated, 0.0);
  EXPECT_EQ(t.at("fc.weight").flushed, 0.0);
  const fp8::Fp8TensorStats& g = t.at("fc.grad_output");
  EXPECT_EQ(g.count, 1);
  EXPECT_EQ(g.amax, 1e-4f);
  EXPECT_EQ(g.flushed, 1.0);  // dy = 1e-4 is below E4M3's smallest subnormal at scale 1
  state.update();
  fp8::fp8_linear(x, w, Tensor(), {recipe, metas, std::nullopt}).backward(Tensor::full({2, 3}, 1e-4));
  const fp8::Fp8TensorStats in2 = state.telemetry().at("fc.input");
  EXPECT_EQ(in2.scale, 0.448f);  // 448 / 1000: nothing saturates any more
  EXPECT_EQ(in2.saturated, 0.0);
  EXPECT_EQ(state.telemetry().at("fc.grad_output").flushed, 0.0);

  fp8::Fp8ScalingState current(fp8::CurrentScaling{});
  current.set_collect_telemetry(true);
  const fp8::Fp8LinearMetas cm = current.register_linear("fc");
  fp8::fp8_linear(x, w, Tensor(), {fp8::CurrentScaling{}, cm, std::nullopt});
  EXPECT_EQ(current.telemetry().at("fc.input").scale, 0.448f);
  EXPECT_EQ(current.telemetry().at("fc.input").saturated, 0.0);
}

TEST(Fp8Linear, Errors) {
  fp8::Fp8ScalingState state(fp8::DelayedScaling{});
  const fp8::Fp8LinearMetas metas = state.register_linear("fc");
  const fp8::Fp8LinearConfig cfg{fp8::DelayedScaling{}, metas, std::nullopt};
  const Tensor x = Tensor::ones({4, 16}), w = Tensor::ones({8, 16});
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, Tensor::ones({8, 15}), Tensor(), cfg), "has K = 16 but weight");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, Tensor::ones({8}), Tensor(), cfg), "weight must be a 2-d");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x.to(DType::F64), w, Tensor(), cfg), "x must be a non-empty f32, bf16 or f16");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x.to(DType::F8E5M2), w, Tensor(), cfg), "x must be a non-empty f32, bf16 or f16");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor::ones({7}), cfg), "bias must be f32, bf16 or f16 of shape [8]");
  EXPECT_MPT_ERROR(fp8::fp8_linear(Tensor::ones({0, 16}), w, Tensor(), cfg), "x must be a non-empty");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {fp8::DelayedScaling{}, {}, std::nullopt}),
                   "delayed scaling needs metas.input");
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {fp8::DelayedScaling{}, metas, DType::F8E4M3}),
                   "out_dtype must be f32, bf16 or f16");
  const fp8::Fp8LinearMetas swapped{metas.weight, metas.weight, metas.grad_output};
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {fp8::DelayedScaling{}, swapped, std::nullopt}),
                   "metas.input is 'fc.weight', registered as weight");
  // Metas made for HYBRID (E5M2 gradients) used under an E4M3 recipe.
  const fp8::DelayedScaling e4m3{1024, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::E4M3};
  EXPECT_MPT_ERROR(fp8::fp8_linear(x, w, Tensor(), {e4m3, metas, std::nullopt}), "made for another recipe");
}

}  // namespace
}  // namespace mpt
