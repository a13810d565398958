// tests/ops/test_packed_linear.cpp: ops::packed_linear (several projections of one input as one GEMM) and
// ops::swiglu_packed against float64, finite differences and the separate ops they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "matmul_reference.h"
#include "mpt/amp/master_weights.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/pointwise.h"
#include "mpt/ops/reduction.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::expect_gemm_close;
using mpt::testing::gemm_reference;
using mpt::testing::HostOperand;
using mpt::testing::random_tensor;
using mpt::testing::same_bits;

namespace {

// The weights' rows stacked, in float64: the reference's W.
Tensor stacked(const std::vector<Tensor>& ws) {
  std::vector<double> v;
  int64_t rows = 0;
  for (const Tensor& w : ws) {
    const std::vector<double> wv = w.to_vector<double>();
    v.insert(v.end(), wv.begin(), wv.end());
    rows += w.size(0);
  }
  return Tensor::from_vector(v, {rows, ws[0].size(1)});
}

std::vector<Tensor> projections(DType dt, int64_t k, uint64_t seed) {
  return {random_tensor({7, k}, dt, seed), random_tensor({3, k}, dt, seed + 1), random_tensor({5, k}, dt, seed + 2)};
}

// The sum of two GEMMs' results: both values added, the bound over both products and the final addition's rounding.
mpt::testing::GemmReference two_gemms(const mpt::testing::GemmReference& r1, const mpt::testing::GemmReference& r2) {
  const std::vector<double> v1 = r1.value.to_vector<double>(), v2 = r2.value.to_vector<double>();
  const std::vector<double> s1 = r1.abs_sum.to_vector<double>(), s2 = r2.abs_sum.to_vector<double>();
  std::vector<double> v(v1.size()), s(v1.size());
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = v1[i] + v2[i];
    s[i] = s1[i] + s2[i] + std::abs(v[i]);
  }
  return {Tensor::from_vector(v, r1.value.shape()), Tensor::from_vector(s, r1.value.shape()), r1.k + 1};
}

}  // namespace

// y = x [W_0; W_1; W_2]^T in every dtype, and its three gradients, against float64 with the FP32-accumulation bound.
TEST(PackedLinear, OutputAndGradientsMatchFloat64InEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  const int64_t n = 9, k = 40;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const Tensor x = random_tensor({n, k}, dt, 1).requires_grad_();
    std::vector<Tensor> ws = projections(dt, k, 2);
    for (Tensor& w : ws) w.requires_grad_();
    const Tensor y = ops::packed_linear(x, ws);
    ASSERT_EQ(y.shape(), (Shape{n, 15}));
    EXPECT_EQ(y.dtype(), dt);
    const Tensor wp = stacked(ws);
    expect_gemm_close(y, gemm_reference(HostOperand(x, false, true), HostOperand(wp, true, false), 1.0, {n, 15}), dt,
                      fmt::format("{} y", dt));
    const Tensor dy = random_tensor({n, 15}, dt, 5);
    y.backward(dy);
    EXPECT_EQ(x.grad().dtype(), dt);
    expect_gemm_close(x.grad(), gemm_reference(HostOperand(dy, false, true), HostOperand(wp, false, false), 1.0,
                                               {n, k}), dt, fmt::format("{} dx", dt));
    int64_t at = 0;
    for (size_t i = 0; i < ws.size(); ++i) {
      const Tensor dyi = dy.slice(1, at, at + ws[i].size(0)).contiguous();
      expect_gemm_close(ws[i].grad(), gemm_reference(HostOperand(dyi, true, true), HostOperand(x, false, false), 1.0,
                                                     ws[i].shape()), dt, fmt::format("{} dW{}", dt, i));
      at += ws[i].size(0);
    }
  }
}

TEST(PackedLinear, GradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({4, 6}, DType::F64, 11);
  std::vector<Tensor> in{x};
  for (const Tensor& w : projections(DType::F64, 6, 12)) in.push_back(w);
  const auto fn = [](const std::vector<Tensor>& t) {
    return ops::packed_linear(t[0], {t[1], t[2], t[3]});
  };
  const Tensor weights = random_tensor({4, 15}, DType::F64, 13);
  const std::vector<Tensor> numeric = mpt::testing::numeric_gradients(fn, in, weights);
  std::vector<Tensor> leaves;
  for (const Tensor& t : in) leaves.push_back(t.clone().requires_grad_());
  fn(leaves).backward(weights);
  for (size_t i = 0; i < leaves.size(); ++i)
    mpt::testing::expect_close(leaves[i].grad(), numeric[i], {1e-6, 1e-8}, fmt::format("input {}", i));
}

// A bf16 GEMM over FP32 masters (the packed compute copy): dW in f32 into the masters, added across micro-batches by
// the GEMM, and dx in f32 unrounded when asked (a norm of the f32 stream reads it), each against float64 of the bf16
// operands.
TEST(PackedLinear, Bf16GemmWritesF32MasterGradientsAndAnF32InputGradient) {
  const int64_t n = 12, k = 64;
  // x: the recorded bf16 cast of an f32 leaf (a norm's output of the f32 stream), whose backward passes an f32
  // gradient on unrounded.
  const Tensor leaf = random_tensor({n, k}, DType::BF16, 21).to(DType::F32).requires_grad_();
  const Tensor x = leaf.detach().to(DType::BF16);  // the references' x
  std::vector<Tensor> masters = projections(DType::F32, k, 22);
  for (Tensor& m : masters) m.requires_grad_();
  Tensor packed;
  {
    autograd::NoGradGuard no_grad;
    packed = amp::packed_compute_copy(masters, DType::BF16);
  }
  const Tensor dy1 = random_tensor({n, 15}, DType::BF16, 23), dy2 = random_tensor({n, 15}, DType::BF16, 24);
  for (const Tensor& dy : {dy1, dy2})
    ops::packed_linear(leaf.to(DType::BF16), masters, {.compute_weight = packed, .grad_x_dtype = DType::F32})
        .backward(dy);
  ASSERT_EQ(leaf.grad().dtype(), DType::F32);
  // dx summed over both micro-batches: dy1 Wp + dy2 Wp (each GEMM's f32 result, then one f32 addition).
  const auto a = [](const Tensor& t) { return HostOperand(t, false, true); };
  expect_gemm_close(leaf.grad(), two_gemms(gemm_reference(a(dy1), HostOperand(packed, false, false), 1.0, {n, k}),
                                        gemm_reference(a(dy2), HostOperand(packed, false, false), 1.0, {n, k})),
                    DType::F32, "dx");
  int64_t at = 0;
  for (size_t i = 0; i < masters.size(); ++i) {
    ASSERT_EQ(masters[i].grad().dtype(), DType::F32);
    const auto ref = [&](const Tensor& dy) {
      const Tensor d = dy.slice(1, at, at + masters[i].size(0)).contiguous();
      return gemm_reference(HostOperand(d, true, true), HostOperand(x, false, false), 1.0, masters[i].shape());
    };
    expect_gemm_close(masters[i].grad(), two_gemms(ref(dy1), ref(dy2)), DType::F32, fmt::format("dW{}", i));
    at += masters[i].size(0);
  }
}

// The packed GEMM's columns are each projection's: against ops::linear per weight, within the bound of two FP32
// accumulations of the same products; a frozen projection gets no gradient and the others theirs.
TEST(PackedLinear, ColumnsAreEachProjectionAndFrozenWeightsGetNoGradient) {
  const Tensor x = random_tensor({5, 32}, DType::F32, 31).requires_grad_();
  std::vector<Tensor> ws = projections(DType::F32, 32, 32);
  ws[0].requires_grad_();
  ws[2].requires_grad_();
  const Tensor y = ops::packed_linear(x, ws);
  int64_t at = 0;
  for (const Tensor& w : ws) {
    const Tensor yi = ops::linear(x.detach(), w.detach());
    expect_gemm_close(y.slice(1, at, at + w.size(0)).contiguous(),
                      gemm_reference(HostOperand(x, false, true), HostOperand(w, true, false), 1.0, yi.shape()),
                      DType::F32, "column block");
    EXPECT_LE(mpt::testing::max_abs_error(y.slice(1, at, at + w.size(0)).contiguous(), yi), 1e-5);
    at += w.size(0);
  }
  ops::sum(y).backward();
  EXPECT_TRUE(ws[0].grad().defined());
  EXPECT_FALSE(ws[1].grad().defined());
  EXPECT_TRUE(ws[2].grad().defined());
  EXPECT_TRUE(x.grad().defined());
}

TEST(PackedLinear, RejectsBadArguments) {
  const Tensor x = random_tensor({4, 8}, DType::F32, 41);
  const Tensor w = random_tensor({3, 8}, DType::F32, 42);
  EXPECT_MPT_ERROR(ops::packed_linear(x, {}), "expected 1 to 8 weights, got 0");
  EXPECT_MPT_ERROR(ops::packed_linear(x, std::vector<Tensor>(9, w)), "expected 1 to 8 weights, got 9");
  EXPECT_MPT_ERROR(ops::packed_linear(x, {w, random_tensor({3, 7}, DType::F32, 43)}),
                   "every weight must be [M_i, 8]");
  EXPECT_MPT_ERROR(ops::packed_linear(x, {w, w.to(DType::BF16)}), "of one dtype (f32)");
  EXPECT_MPT_ERROR(ops::packed_linear(x.to(DType::F16), {w.to(DType::BF16)}), "must have x's dtype (f16)");
  EXPECT_MPT_ERROR(ops::packed_linear(x, {w, w}, {.compute_weight = random_tensor({5, 8}, DType::F32, 44)}),
                   "compute_weight must be the weights' rows packed, [6, 8] f32");
  EXPECT_MPT_ERROR(ops::packed_linear(x.to(DType::BF16), {w.to(DType::BF16)}, {.grad_x_dtype = DType::F16}),
                   "grad_x_dtype must be x's dtype (bf16) or f32");
  EXPECT_MPT_ERROR(ops::packed_linear(random_tensor({2, 3, 8}, DType::F32, 45), {w}), "expected x [N, K]");
}

// swiglu_packed(gate | up) has the bits of swiglu(gate, up), and its one gradient tensor the bits of swiglu's two,
// side by side.
TEST(SwigluPacked, BitsOfSwigluOnTheHalves) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    for (int64_t f : {1, 8, 13, 64}) {
      const Tensor gu = random_tensor({3, 5, 2 * f}, dt, 50 + f, 3.0).requires_grad_();
      const Tensor gate = gu.detach().slice(2, 0, f).contiguous().requires_grad_();
      const Tensor up = gu.detach().slice(2, f, 2 * f).contiguous().requires_grad_();
      const Tensor y = ops::swiglu_packed(gu), ref = ops::swiglu(gate, up);
      ASSERT_EQ(y.shape(), (Shape{3, 5, f}));
      EXPECT_TRUE(same_bits(y, ref)) << dtype_name(dt) << " f " << f;
      const Tensor dy = random_tensor({3, 5, f}, dt, 60 + f);
      y.backward(dy);
      ref.backward(dy);
      EXPECT_TRUE(same_bits(gu.grad().slice(2, 0, f).contiguous(), gate.grad())) << dtype_name(dt) << " f " << f;
      EXPECT_TRUE(same_bits(gu.grad().slice(2, f, 2 * f).contiguous(), up.grad())) << dtype_name(dt) << " f " << f;
    }
  }
  EXPECT_MPT_ERROR(ops::swiglu_packed(random_tensor({2, 5}, DType::F32, 70)), "expected gu [..., 2F]");
}
