// tests/ops/test_linear.cpp: ops::linear (bias fused into the GEMM, dW in the master's dtype, FP32 bias gradient)
// and split_qkv_heads against float64, finite differences and the unfused ops they replace.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "grad_destinations.h"
#include "matmul_reference.h"
#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/memory.h"
#include "mpt/ops/attention.h"
#include "mpt/ops/cast.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/embedding.h"
#include "mpt/ops/linear.h"
#include "mpt/ops/mlp.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::expect_gemm_close;
using mpt::testing::gemm_reference;
using mpt::testing::HostOperand;
using mpt::testing::random_tensor;

namespace {

// x W^T + b in float64, with the bias folded into the reference and its magnitude into the error bound.
mpt::testing::GemmReference linear_reference(const Tensor& x, const Tensor& w, const Tensor& b) {
  auto ref = gemm_reference(HostOperand(x, false, true), HostOperand(w, true, false), 1.0, {x.size(0), w.size(0)});
  if (!b.defined()) return ref;
  std::vector<double> v = ref.value.to_vector<double>(), s = ref.abs_sum.to_vector<double>();
  const std::vector<double> bv = b.to_vector<double>();
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] += bv[i % bv.size()];
    s[i] += std::abs(bv[i % bv.size()]);
  }
  return {Tensor::from_vector(v, ref.value.shape()), Tensor::from_vector(s, ref.value.shape()), ref.k};
}

double max_abs_error(const Tensor& got, const Tensor& ref) {
  const std::vector<double> g = got.to_vector<double>(), r = ref.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::abs(g[i] - r[i]));
  return worst;
}

}  // namespace

TEST(Linear, ForwardMatchesFloat64InEveryDtypeWithAndWithoutBias) {
  mpt::testing::PoisonAllocations poison;
  const int64_t n = 37, k = 300, m = 53;
  uint64_t seed = 11;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64})
    for (int bias_kind = 0; bias_kind < 3; ++bias_kind) {  // none, the input's dtype, f32
      const Tensor x = random_tensor({n, k}, dt, seed++), w = random_tensor({m, k}, dt, seed++);
      const Tensor b = bias_kind == 0 ? Tensor{} : random_tensor({m}, bias_kind == 1 ? dt : DType::F32, seed++, 4.0);
      const Tensor y = ops::linear(x, w, b);
      EXPECT_EQ(y.dtype(), dt);
      expect_gemm_close(y, linear_reference(x, w, b), dt, fmt::format("{} bias kind {}", dt, bias_kind),
                        dt == DType::F64 ? 0x1p-53 : 0x1p-24);
    }
}

TEST(Linear, FusedBiasIsNoLessAccurateThanMatmulThenAdd) {
  // The fused epilogue rounds once (acc + b in FP32, then to BF16/F16); matmul-then-add rounds the product first.
  const int64_t n = 64, k = 256, m = 96;
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor x = random_tensor({n, k}, dt, 3), w = random_tensor({m, k}, dt, 4);
    const Tensor b = random_tensor({m}, DType::F32, 5, 8.0);
    const Tensor ref = linear_reference(x, w, b).value;
    const Tensor fused = ops::linear(x, w, b);
    const Tensor unfused = ops::add(ops::matmul(x, w, {.trans_b = true}), b.to(dt));
    EXPECT_LE(max_abs_error(fused, ref), max_abs_error(unfused, ref)) << dtype_name(dt);
  }
}

TEST(Linear, MasterWeightAndComputeCopyGradientsMatchFloat64) {
  // A BF16 GEMM reading the compute copy of an FP32 master: dW arrives in FP32 without a BF16 rounding, db in FP32.
  const int64_t n = 70, k = 48, m = 40;
  for (DType dt : {DType::BF16, DType::F16}) {
    const Tensor master = random_tensor({m, k}, DType::F32, 21).requires_grad_(true);
    const Tensor bias = random_tensor({m}, DType::F32, 22).requires_grad_(true);
    const Tensor x = random_tensor({n, k}, dt, 23).requires_grad_(true);
    const Tensor wc = master.detach().to(dt);
    const Tensor y = ops::linear(x, master, bias, {.compute_weight = wc});
    const Tensor dy = random_tensor({n, m}, dt, 24);
    y.backward(dy);
    ASSERT_EQ(master.grad().dtype(), DType::F32);
    ASSERT_EQ(bias.grad().dtype(), DType::F32);
    ASSERT_EQ(x.grad().dtype(), dt);
    // References from the exact low-precision values, in float64.
    const Tensor dy64 = dy.to(DType::F64), x64 = x.detach().to(DType::F64), w64 = wc.to(DType::F64);
    auto dw = gemm_reference(HostOperand(dy64, true, true), HostOperand(x64, false, false), 1.0, {m, k});
    expect_gemm_close(master.grad(), dw, DType::F32, fmt::format("dW {}", dt));
    auto dx = gemm_reference(HostOperand(dy64, false, true), HostOperand(w64, false, false), 1.0, {n, k});
    expect_gemm_close(x.grad(), dx, dt, fmt::format("dx {}", dt));
    const std::vector<double> dyv = dy64.to_vector<double>(), db = bias.grad().to_vector<double>();
    for (int64_t j = 0; j < m; ++j) {
      double s = 0, a = 0;
      for (int64_t i = 0; i < n; ++i) s += dyv[static_cast<size_t>(i * m + j)], a += std::abs(dyv[static_cast<size_t>(i * m + j)]);
      EXPECT_NEAR(db[static_cast<size_t>(j)], s, 16 * 0x1p-24 * a) << "db " << dtype_name(dt) << " column " << j;
    }
  }
}

// Gradient accumulation: a later micro-batch's dW is added into the weight's gradient by its GEMM (beta = 1; the
// engine offers the leaf's .grad, autograd::Node::apply_partial), the fused MLP's two weights too. The bits are those
// of the separate gradient added (FP32 product, one rounding of the sum), and no [out, in] gradient is allocated
// for the second micro-batch. FP32 and a BF16 GEMM on FP32 masters (Autocast's regime).
TEST(Linear, ALaterMicroBatchAddsItsWeightGradientInTheGemm) {
  const int64_t n = 8, k = 512, m = 768, f = 256;
  const int64_t w_bytes = m * k * 4;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w0 = random_tensor({m, k}, DType::F32, 31), b0 = random_tensor({m}, DType::F32, 32);
    const Tensor w1_0 = random_tensor({f, m}, DType::F32, 33), w2_0 = random_tensor({k, f}, DType::F32, 34);
    const Tensor x1 = random_tensor({n, k}, dt, 35), x2 = random_tensor({n, k}, dt, 36);
    const Tensor dy1 = random_tensor({n, k}, dt, 37), dy2 = random_tensor({n, k}, dt, 38);
    // linear -> mlp (W1 [f, m], W2 [k, f]); y's gradient dy. The GEMMs read copies in dt, made once (as Autocast
    // caches them), so that a micro-batch allocates activations and gradients only.
    const Tensor wc = w0.to(dt), w1c = w1_0.to(dt), w2c = w2_0.to(dt);
    auto micro_batch = [&](const Tensor& w, const Tensor& b, const Tensor& w1, const Tensor& w2, const Tensor& x,
                           const Tensor& dy) {
      const Tensor h = ops::linear(x, w, b, {.compute_weight = wc});
      const Tensor y = ops::mlp(h, w1, Tensor{}, w2, Tensor{}, {.compute_w1 = w1c, .compute_w2 = w2c});
      y.backward(dy);
    };
    Tensor w = w0.clone().requires_grad_(true), b = b0.clone().requires_grad_(true);
    Tensor w1 = w1_0.clone().requires_grad_(true), w2 = w2_0.clone().requires_grad_(true);
    micro_batch(w, b, w1, w2, x1, dy1);
    const Tensor first_w = w.grad();
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory_stats(Device::cpu());
    micro_batch(w, b, w1, w2, x2, dy2);
    EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before, w_bytes) << "a second [out, in] dW was allocated";
    EXPECT_TRUE(w.grad().shares_storage(first_w)) << "in place";
    // The reference: each micro-batch's gradients on their own leaves, added.
    std::vector<Tensor> sums;
    {
      Tensor wa = w0.clone().requires_grad_(true), ba = b0.clone().requires_grad_(true);
      Tensor w1a = w1_0.clone().requires_grad_(true), w2a = w2_0.clone().requires_grad_(true);
      Tensor wb = w0.clone().requires_grad_(true), bb = b0.clone().requires_grad_(true);
      Tensor w1b = w1_0.clone().requires_grad_(true), w2b = w2_0.clone().requires_grad_(true);
      micro_batch(wa, ba, w1a, w2a, x1, dy1);
      micro_batch(wb, bb, w1b, w2b, x2, dy2);
      for (auto [a, c] : {std::pair{wa, wb}, {ba, bb}, {w1a, w1b}, {w2a, w2b}})
        sums.push_back(ops::add(a.grad(), c.grad()));
    }
    EXPECT_TRUE(mpt::testing::same_bits(w.grad(), sums[0])) << "W";
    EXPECT_TRUE(mpt::testing::same_bits(b.grad(), sums[1])) << "b";
    EXPECT_TRUE(mpt::testing::same_bits(w1.grad(), sums[2])) << "MLP W1";
    EXPECT_TRUE(mpt::testing::same_bits(w2.grad(), sums[3])) << "MLP W2";
  }
}

// The LM head padded for cuBLASLt (LinearOptions::out_padded, GPT-2's 50257 rows run as 50304): AccumulateGrad keeps
// the first micro-batch's padded GEMM output as the gradient, and a later micro-batch's padded GEMM adds into that
// storage (its spare rows included, which nobody reads): the bits of the separate gradients added, no new padded dW.
// Not when something else holds the storage (a DataParallel bucket, whose next gradients follow): then a new one.
TEST(Linear, APaddedHeadsLaterMicroBatchAddsIntoItsGradientsStorage) {
  const int64_t n = 16, k = 64, rows = 1000, padded = 1024;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor w0 = random_tensor({rows, k}, DType::F32, 41);
    const Tensor x1 = random_tensor({n, k}, dt, 42), x2 = random_tensor({n, k}, dt, 43);
    const Tensor dy1 = random_tensor({n, padded}, dt, 44), dy2 = random_tensor({n, padded}, dt, 45);
    const Tensor wc = ops::padded_rows(w0, padded, dt);  // the padded compute copy Autocast caches
    auto micro_batch = [&](const Tensor& w, const Tensor& x, const Tensor& dy) {
      ops::linear(x, w, Tensor{}, {.compute_weight = wc, .out_padded = padded})
          .backward(dy);
    };
    Tensor w = w0.clone().requires_grad_(true);
    micro_batch(w, x1, dy1);
    const Storage* first = w.grad().storage().get();
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory_stats(Device::cpu());
    micro_batch(w, x2, dy2);
    EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before, rows * k * 4) << "a second padded dW was allocated";
    EXPECT_EQ(w.grad().storage().get(), first) << "in place";
    Tensor wa = w0.clone().requires_grad_(true), wb = w0.clone().requires_grad_(true);
    micro_batch(wa, x1, dy1);
    micro_batch(wb, x2, dy2);
    EXPECT_TRUE(mpt::testing::same_bits(w.grad(), ops::add(wa.grad(), wb.grad())));
    // Another holder of the gradient's storage: the GEMM writes a new gradient, the add leaves the holder's spare
    // rows alone.
    const Tensor holder(wa.grad().storage(), {padded, k}, {k, 1}, 0, DType::F32);
    const Tensor spare = holder.slice(0, rows, padded).clone();
    micro_batch(wa, x2, dy2);
    EXPECT_TRUE(mpt::testing::same_bits(holder.slice(0, rows, padded), spare));
    EXPECT_TRUE(mpt::testing::same_bits(wa.grad(), w.grad()));
  }
}

// BF16 gradients of FP32 masters (autograd::set_grad_dtype, amp::Policy::grads: llm.c's regime): linear's and the
// fused MLP's weight-gradient GEMMs write dW and the bias gradient in BF16, and a later micro-batch's GEMM adds into
// the BF16 gradient (beta = 1). dW against float64 of the exact operands (and of the first micro-batch's BF16 sum):
// the GEMM bound plus one BF16 rounding of the result; no FP32 [out, in] gradient is allocated in either micro-batch.
TEST(Linear, Bf16GradientsOfFp32MastersAreWrittenAndAccumulatedInBf16) {
  const int64_t n = 16, k = 384, m = 256, f = 128;
  const Tensor master = random_tensor({m, k}, DType::F32, 71).requires_grad_(true);
  const Tensor bias = random_tensor({m}, DType::F32, 72).requires_grad_(true);
  const Tensor w1 = random_tensor({f, m}, DType::F32, 73).requires_grad_(true);
  const Tensor w2 = random_tensor({k, f}, DType::F32, 74).requires_grad_(true);
  for (const Tensor& p : {master, bias, w1, w2}) autograd::set_grad_dtype(p, DType::BF16);
  EXPECT_EQ(autograd::grad_dtype(master), DType::BF16);
  const Tensor wc = master.detach().to(DType::BF16), w1c = w1.detach().to(DType::BF16),
               w2c = w2.detach().to(DType::BF16);
  const Tensor x1 = random_tensor({n, k}, DType::BF16, 75), x2 = random_tensor({n, k}, DType::BF16, 76);
  const Tensor dy1 = random_tensor({n, m}, DType::BF16, 77), dy2 = random_tensor({n, m}, DType::BF16, 78);
  const Tensor dz1 = random_tensor({n, k}, DType::BF16, 79), dz2 = random_tensor({n, k}, DType::BF16, 80);
  auto micro_batch = [&](const Tensor& x, const Tensor& dy, const Tensor& dz) {
    const int64_t before = memory_stats(Device::cpu()).current_bytes;
    reset_peak_memory_stats(Device::cpu());
    ops::linear(x, master, bias, {.compute_weight = wc}).backward(dy);
    EXPECT_LT(memory_stats(Device::cpu()).peak_bytes - before, m * k * 4) << "an FP32 [out, in] dW was allocated";
    // An MLP reading its own input: its W1 [f, m] and W2 [k, f] gradients in BF16 too.
    const Tensor h = random_tensor({n, m}, DType::BF16, 81);
    ops::mlp(h, w1, Tensor{}, w2, Tensor{}, {.compute_w1 = w1c, .compute_w2 = w2c}).backward(dz);
  };
  micro_batch(x1, dy1, dz1);
  for (const Tensor& p : {master, bias, w1, w2}) ASSERT_EQ(p.grad().dtype(), DType::BF16) << p.meta_str();
  const auto dw1 = gemm_reference(HostOperand(dy1, true, true), HostOperand(x1, false, false), 1.0, {m, k});
  expect_gemm_close(master.grad(), dw1, DType::BF16, "dW, micro-batch 1");
  const Tensor first = master.grad(), g1 = master.grad().clone();
  const Tensor first_w1 = w1.grad(), first_w2 = w2.grad();
  micro_batch(x2, dy2, dz2);
  EXPECT_TRUE(master.grad().shares_storage(first)) << "dW added in place";
  EXPECT_TRUE(w1.grad().shares_storage(first_w1) && w2.grad().shares_storage(first_w2)) << "the MLP's, in place";
  for (const Tensor& p : {master, bias, w1, w2}) ASSERT_EQ(p.grad().dtype(), DType::BF16) << p.meta_str();
  const auto dw2 = gemm_reference(HostOperand(dy2, true, true), HostOperand(x2, false, false), 1.0, {m, k}, g1, 1.0);
  expect_gemm_close(master.grad(), dw2, DType::BF16, "dW, micro-batch 2 added into the BF16 sum", 0x1p-24, g1, 1.0);
  // The bias: each micro-batch's column sums (FP32 accumulation over n rows) rounded to BF16, then added in BF16:
  // |got - s| <= u (|s1| + |s2|) + u |s1 + s2| + 2 n u32 sum |dy|, with u = 2^-8.
  const std::vector<double> a = dy1.to_vector<double>(), b = dy2.to_vector<double>(), got = bias.grad().to_vector<double>();
  for (int64_t j = 0; j < m; ++j) {
    double s1 = 0, s2 = 0, abs = 0;
    for (int64_t i = 0; i < n; ++i) {
      const size_t at = static_cast<size_t>(i * m + j);
      s1 += a[at], s2 += b[at], abs += std::abs(a[at]) + std::abs(b[at]);
    }
    const double bound = 0x1p-8 * (std::abs(s1) + std::abs(s2) + std::abs(s1 + s2)) + 2 * n * 0x1p-24 * abs;
    EXPECT_NEAR(got[static_cast<size_t>(j)], s1 + s2, bound) << "db column " << j;
  }
}

// Gradients made in their destinations (autograd::set_grad_destination: DataParallel's buckets, slices of one flat
// buffer filled with NaN here): linear's, the packed linear's and the fused MLP's weight-gradient GEMMs write dW there
// (beta = 0: the NaNs are never read) and the bias gradients come out of their epilogues there. A table tied to a
// padded head (GPT-2's): recorded before the head (GPT's order), the head's padded dW waits (a destination has no
// spare rows), the embedding adds into it and the sum stays the table's own gradient (DataParallel copies it);
// recorded after it, the embedding runs first, zeroes its destination and adds, and the head's dW is added there. A second micro-batch adds
// into them all. The bits of the same steps without destinations, in f32 and with BF16 gradients of FP32 masters.
TEST(Linear, GradientsAreWrittenIntoTheirDestinations) {
  const int64_t n = 16, k = 64, m = 48, f = 96, vocab = 40, padded = vocab + 8;
  std::vector<int64_t> id_values;
  for (int64_t i = 0; i < n; ++i) id_values.push_back((i * 7) % vocab);
  const Tensor ids = Tensor::from_vector(id_values, {n});
  const std::vector<Tensor> init = {random_tensor({m, k}, DType::F32, 91), random_tensor({m}, DType::F32, 92),
                                    random_tensor({f, m}, DType::F32, 93), random_tensor({f}, DType::F32, 94),
                                    random_tensor({m, f}, DType::F32, 95), random_tensor({m}, DType::F32, 96),
                                    random_tensor({vocab, m}, DType::F32, 97), random_tensor({8, m}, DType::F32, 98),
                                    random_tensor({24, m}, DType::F32, 99)};
  for (bool bf16 : {false, true}) {
    for (bool gpt_order : {true, false}) {
      SCOPED_TRACE(std::string(bf16 ? "bf16 operands, BF16 gradients of FP32 masters" : "f32") +
                   (gpt_order ? ", embedding first" : ", embedding last"));
      const DType dt = bf16 ? DType::BF16 : DType::F32;
      auto copy = [&](const Tensor& t) { return bf16 ? t.detach().to(DType::BF16) : Tensor{}; };
      mpt::testing::expect_gradients_made_in_destinations(
          init,
          [&](const std::vector<Tensor>& p) {
            for (uint64_t micro = 0; micro < 2; ++micro) {
              const Tensor x = random_tensor({n, k}, dt, 100 + micro);
              Tensor e;
              if (gpt_order) e = ops::embedding(ids, p[6]);
              const Tensor y = ops::linear(x, p[0], p[1], {.compute_weight = copy(p[0])});
              const Tensor z = ops::mlp(y, p[2], p[3], p[4], p[5], {.compute_w1 = copy(p[2]), .compute_w2 = copy(p[4])});
              const Tensor logits = ops::linear(
                  z, p[6], Tensor{},
                  {.compute_weight = bf16 ? ops::padded_rows(p[6], padded, DType::BF16) : Tensor{}, .out_padded = padded});
              if (!gpt_order) e = ops::embedding(ids, p[6]);
              const Tensor packed = ops::packed_linear(z, {p[7], p[8]});
              autograd::backward({logits, e, packed},
                                 {random_tensor({n, padded}, dt, 200 + micro), random_tensor({n, m}, DType::F32, 300 + micro),
                                  random_tensor({n, 32}, dt, 400 + micro)});
            }
          },
          bf16 ? std::optional<DType>(DType::BF16) : std::nullopt, gpt_order ? std::vector<size_t>{6} : std::vector<size_t>{});
    }
  }
}

// LinearOptions::compute_bias (what autocast passes on CUDA: the master bias's BF16 copy, cuBLASLt's bias type): the
// GEMM adds the copy's values, bit for bit what the master rounded to BF16 gives, and the gradient still goes to the
// FP32 master, bit for bit as without the copy. MlpOptions::compute_b1 / compute_b2 likewise.
TEST(Linear, ComputeBiasIsWhatTheGemmAddsAndTheGradientGoesToTheMaster) {
  const int64_t n = 33, k = 24, m = 16;
  const Tensor master = random_tensor({m, k}, DType::F32, 61), x = random_tensor({n, k}, DType::BF16, 63);
  const Tensor bias = random_tensor({m}, DType::F32, 62), dy = random_tensor({n, m}, DType::BF16, 64);
  const Tensor wc = master.to(DType::BF16), bc = bias.to(DType::BF16);
  Tensor b1 = bias.clone(), b2 = bias.clone(), rounded = bc.to(DType::F32);
  b1.requires_grad_(true);
  b2.requires_grad_(true);
  const Tensor with = ops::linear(x, master, b1, {.compute_weight = wc, .compute_bias = bc});
  const Tensor want = ops::linear(x, master, rounded, {.compute_weight = wc});
  EXPECT_EQ(with.to_vector<float>(), want.to_vector<float>());
  with.backward(dy);
  ops::linear(x, master, b2, {.compute_weight = wc}).backward(dy);
  ASSERT_EQ(b1.grad().dtype(), DType::F32);
  EXPECT_EQ(b1.grad().to_vector<float>(), b2.grad().to_vector<float>());
  // The MLP: both biases through their copies.
  const int64_t h = 32;
  const Tensor w1 = random_tensor({h, k}, DType::F32, 65), w2 = random_tensor({m, h}, DType::F32, 66);
  const Tensor c1 = random_tensor({h}, DType::F32, 67), c2 = random_tensor({m}, DType::F32, 68);
  const ops::MlpOptions base{.compute_w1 = w1.to(DType::BF16), .compute_w2 = w2.to(DType::BF16)};
  ops::MlpOptions copies = base;
  copies.compute_b1 = c1.to(DType::BF16), copies.compute_b2 = c2.to(DType::BF16);
  const Tensor y_copies = ops::mlp(x, w1, c1, w2, c2, copies);
  const Tensor r1 = c1.to(DType::BF16).to(DType::F32), r2 = c2.to(DType::BF16).to(DType::F32);
  const Tensor y_rounded = ops::mlp(x, w1, r1, w2, r2, base);
  EXPECT_EQ(y_copies.to_vector<float>(), y_rounded.to_vector<float>());
  EXPECT_MPT_ERROR(ops::linear(x, master, bias, {.compute_weight = wc, .compute_bias = bc.slice(0, 0, 8)}),
                   "[linear] compute_bias must be the bias's copy (its shape, on its device, in a float dtype): got "
                   "bf16[8] cpu for the bias f32[16] cpu");
  EXPECT_MPT_ERROR(ops::linear(x, master, {}, {.compute_weight = wc, .compute_bias = bc}), "for the bias none");
  EXPECT_MPT_ERROR(ops::mlp(x, w1, c1, w2, c2, {.compute_w1 = base.compute_w1, .compute_w2 = base.compute_w2,
                                                .compute_b2 = c1.to(DType::BF16)}),
                   "compute_b2 must be the bias's copy");
}

TEST(Linear, BackwardMatchesFiniteDifferencesInFloat64) {
  const Tensor x = random_tensor({5, 7}, DType::F64, 31), w = random_tensor({4, 7}, DType::F64, 32),
               b = random_tensor({4}, DType::F64, 33);
  const Tensor dy = random_tensor({5, 4}, DType::F64, 34);
  const auto numeric = mpt::testing::numeric_gradients(
      [](const std::vector<Tensor>& in) { return ops::linear(in[0], in[1], in[2]); }, {x, w, b}, dy);
  const Tensor xg = x.clone().requires_grad_(true), wg = w.clone().requires_grad_(true), bg = b.clone().requires_grad_(true);
  ops::linear(xg, wg, bg).backward(dy);
  mpt::testing::expect_close(xg.grad(), numeric[0], {1e-6, 1e-8}, "dx");
  mpt::testing::expect_close(wg.grad(), numeric[1], {1e-6, 1e-8}, "dW");
  mpt::testing::expect_close(bg.grad(), numeric[2], {1e-6, 1e-8}, "db");
}

TEST(Linear, FrozenWeightGetsNoGradientAndTheInputStillDoes) {
  const Tensor w = random_tensor({6, 5}, DType::F32, 41);  // frozen: no requires_grad
  const Tensor b = random_tensor({6}, DType::F32, 42).requires_grad_(true);
  const Tensor x = random_tensor({3, 5}, DType::F32, 43).requires_grad_(true);
  ops::linear(x, w, b).backward(Tensor::ones({3, 6}, DType::F32));
  EXPECT_FALSE(w.grad().defined());
  ASSERT_TRUE(x.grad().defined());
  const std::vector<float> db = b.grad().to_vector<float>();
  for (float v : db) EXPECT_EQ(v, 3.0f);
  // dx = ones W: each element is a column sum of W.
  const std::vector<double> wv = w.to_vector<double>(), dx = x.grad().to_vector<double>();
  for (int64_t j = 0; j < 5; ++j) {
    double s = 0;
    for (int64_t i = 0; i < 6; ++i) s += wv[static_cast<size_t>(i * 5 + j)];
    EXPECT_NEAR(dx[static_cast<size_t>(j)], s, 1e-5);
  }
}

TEST(Linear, ErrorsNameTheOpShapesAndDtypes) {
  const Tensor x = random_tensor({3, 5}, DType::F32, 1), w = random_tensor({4, 5}, DType::F32, 2);
  EXPECT_MPT_ERROR(ops::linear(x, random_tensor({4, 6}, DType::F32, 3)),
                   "[linear] expected x [N, K] and weight [M, K], got x f32[3, 5] cpu and weight f32[4, 6] cpu");
  EXPECT_MPT_ERROR(ops::linear(x, w, random_tensor({5}, DType::F32, 4)), "[linear] expected a bias [4], got f32[5]");
  EXPECT_MPT_ERROR(ops::linear(x.to(DType::F16), w.to(DType::BF16)), "[linear] the GEMM needs x and the weight");
  EXPECT_MPT_ERROR(ops::linear(x.to(DType::BF16), w.to(DType::F16), {}, {.compute_weight = w.to(DType::BF16)}),
                   "[linear] the weight f16[4, 5] cpu must have x's dtype (bf16)");
  EXPECT_MPT_ERROR(ops::linear(x.to(DType::BF16), w, {}, {.compute_weight = w.to(DType::F16)}), "(compute_weight)");
  const Tensor b = random_tensor({4}, DType::F32, 5);
  EXPECT_MPT_ERROR(ops::matmul(x, w, {.trans_b = true, .alpha = 2.0f, .bias = b}), "[matmul] the bias must be");
  const Tensor b_grad = b.clone().requires_grad_(true);
  EXPECT_MPT_ERROR(ops::matmul(x, w, {.trans_b = true, .bias = b_grad}), "use ops::linear");
}

TEST(SplitQkvHeads, MatchesTheViewsAndTheirGradientsIncludingAnUnusedOutput) {
  const int64_t B = 2, T = 5, H = 3, D = 4, C = H * D;
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor qkv = random_tensor({B, T, 3 * C}, dt, 51);
    const Tensor views = qkv.reshape({B, T, 3, H, D});
    const Tensor a = qkv.clone().requires_grad_(true);
    const ops::QkvHeads h = ops::split_qkv_heads(a, H);
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor& got = i == 0 ? h.q : i == 1 ? h.k : h.v;
      ASSERT_EQ(got.shape(), (Shape{B, H, T, D}));
      EXPECT_TRUE(got.is_contiguous());
      EXPECT_EQ(got.to_vector<double>(), views.select(2, i).transpose(1, 2).contiguous().to_vector<double>());
    }
    // q and v used, k not: d(qkv) holds dq and dv in their slots and zeros in k's.
    const Tensor gq = random_tensor({B, H, T, D}, dt, 52), gv = random_tensor({B, H, T, D}, dt, 53);
    ops::add(ops::sum(ops::mul(h.q, gq)), ops::sum(ops::mul(h.v, gv))).backward();
    const Tensor g = a.grad().reshape({B, T, 3, H, D});
    EXPECT_EQ(g.select(2, 0).transpose(1, 2).contiguous().to_vector<double>(), gq.to_vector<double>());
    EXPECT_EQ(g.select(2, 2).transpose(1, 2).contiguous().to_vector<double>(), gv.to_vector<double>());
    for (double v : g.select(2, 1).contiguous().to_vector<double>()) ASSERT_EQ(v, 0.0);
  }
  EXPECT_MPT_ERROR(ops::split_qkv_heads(Tensor::zeros({2, 5, 10}, DType::F32), 3),
                   "[split_qkv_heads] expected qkv [B, T, 3 * C] with C a multiple of n_head 3, got f32[2, 5, 10]");
}

TEST(Linear, Fp8GemmAddsTheBiasInItsEpilogueBeforeTheOneRounding) {
  // The same f32 product D either way: the epilogue's round(D + b) equals rounding the f32 sum of D and b.
  const int64_t n = 64, k = 256, m = 96;
  const Tensor x = random_tensor({n, k}, DType::F32, 61, 2.0), w = random_tensor({m, k}, DType::F32, 62, 0.5);
  const Tensor b = random_tensor({m}, DType::F32, 63, 4.0);
  for (ops::ScaleLayout layout : {ops::ScaleLayout::PerTensor, ops::ScaleLayout::Block1x128}) {
    const bool block = layout != ops::ScaleLayout::PerTensor;
    const ops::Quantized qx = block ? ops::quantize_blockwise(x, DType::F8E4M3, ops::ScaleLayout::Block1x128)
                                    : ops::quantize_fp8(x, DType::F8E4M3);
    const ops::Quantized qw = block ? ops::quantize_blockwise(w, DType::F8E4M3, ops::ScaleLayout::Block128x128)
                                    : ops::quantize_fp8(w, DType::F8E4M3);
    auto scaling = [](const ops::Quantized& q) {
      return q.layout == ops::ScaleLayout::Block1x128     ? ops::Fp8Scaling::block_1x128(q.scale_inv)
             : q.layout == ops::ScaleLayout::Block128x128 ? ops::Fp8Scaling::block_128x128(q.scale_inv)
                                                          : ops::Fp8Scaling::per_tensor(q.scale_inv);
    };
    ops::MatmulOptions o{.trans_b = true, .out_dtype = DType::F32, .scale_a = scaling(qx), .scale_b = scaling(qw)};
    const Tensor d = ops::matmul(qx.data, qw.data, o);
    for (DType out : {DType::F32, DType::BF16}) {
      o.out_dtype = out;
      o.bias = b;
      const Tensor y = ops::matmul(qx.data, qw.data, o);
      EXPECT_TRUE(mpt::testing::same_bits(y.to_vector<double>(), ops::add(d, b).to(out).to_vector<double>())) << dtype_name(out) << " block " << block;
      o.bias = Tensor{};
    }
  }
}

// out_padded: y [N, Mp] whose first M columns are x W^T (float64 reference) and the rest exactly 0; dx from a dy
// whose padding columns are 0 is the unpadded dx, and dW is the first M rows of the padded GEMM's gradient, both
// against float64; a bias or a width below M is refused.
TEST(Linear, OutPaddedWritesZeroColumnsAndKeepsTheGradients) {
  mpt::testing::PoisonAllocations poison;
  const int64_t n = 24, k = 40, m = 65, mp = 128;
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(fmt::format("{}", dt));
    const Tensor x0 = random_tensor({n, k}, dt, 3), w0 = random_tensor({m, k}, DType::F32, 4);
    const Tensor x = x0.detach().requires_grad_(true), w = w0.detach().requires_grad_(true);
    const Tensor wc = w0.to(dt);
    const Tensor y = dt == DType::F32 ? ops::linear(x, w, {}, {.out_padded = mp})
                                      : ops::linear(x, w, {}, {.compute_weight = wc, .out_padded = mp});
    ASSERT_EQ(y.shape(), (Shape{n, mp}));
    expect_gemm_close(y.slice(1, 0, m).contiguous(), linear_reference(x0, wc, {}), dt, "padded forward", 0x1p-24);
    const std::vector<double> pad = y.slice(1, m, mp).contiguous().to_vector<double>();
    for (double v : pad) ASSERT_EQ(v, 0.0);
    // dy: random in the classes, zero in the padding (what the padded cross-entropy writes).
    const Tensor g = random_tensor({n, m}, dt, 5);
    Tensor dy = Tensor::zeros({n, mp}, dt);
    dy.slice(1, 0, m).copy_(g);
    y.backward(dy);
    ASSERT_EQ(w.grad().shape(), (Shape{m, k}));
    EXPECT_EQ(w.grad().dtype(), DType::F32);
    expect_gemm_close(x.grad(), gemm_reference(HostOperand(g, false, true), HostOperand(wc, false, false), 1.0, {n, k}),
                      dt, "padded dx", 0x1p-24);
    expect_gemm_close(w.grad(), gemm_reference(HostOperand(g, true, true), HostOperand(x0, false, false), 1.0, {m, k}),
                      DType::F32, "padded dW", 0x1p-24);
  }
  const Tensor x = random_tensor({4, 8}, DType::F32, 6), w = random_tensor({5, 8}, DType::F32, 7);
  EXPECT_THROW(ops::linear(x, w, random_tensor({5}, DType::F32, 8), {.out_padded = 8}), Error);
  EXPECT_THROW(ops::linear(x, w, {}, {.out_padded = 4}), Error);
  EXPECT_EQ(ops::linear(x, w, {}, {.out_padded = 5}).shape(), (Shape{4, 5}));  // no padding: M itself
}
