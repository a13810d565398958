// tests/ops/test_llama_ops.cpp: RMSNorm (plain and with the fused residual add) and rotary embeddings against float64
// formulas and finite differences.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <tuple>

#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;
using mpt::testing::tolerance;

namespace {

// Independent float64 RMSNorm over the last dimension.
Tensor rms_ref(const Tensor& x, const Tensor& w, double eps) {
  const auto v = x.to_vector<double>(), wv = w.to_vector<double>();
  const int64_t cols = x.size(-1), rows = x.numel() / cols;
  std::vector<double> y(v.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0;
    for (int64_t c = 0; c < cols; ++c) ms += v[r * cols + c] * v[r * cols + c] / static_cast<double>(cols);
    const double rstd = 1 / std::sqrt(ms + eps);
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] = v[r * cols + c] * rstd * wv[c];
  }
  return Tensor::from_vector(y, x.shape());
}

// Independent float64 rotary embedding of x (B, T, H, D), Hugging Face's rotate_half convention.
Tensor rope_ref(const Tensor& x, double theta, int64_t position0) {
  const auto v = x.to_vector<double>();
  const int64_t B = x.size(0), T = x.size(1), H = x.size(2), D = x.size(3), half = D / 2;
  std::vector<double> y(v.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < half; ++i) {
          const double a = static_cast<double>(t + position0) * std::pow(theta, -2.0 * i / D);
          const int64_t base = ((b * T + t) * H + h) * D;
          const double x1 = v[base + i], x2 = v[base + i + half];
          y[base + i] = x1 * std::cos(a) - x2 * std::sin(a);
          y[base + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
        }
  return Tensor::from_vector(y, x.shape());
}

}  // namespace

TEST(RmsNorm, ForwardMatchesFloat64InEveryDtype) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    for (int64_t cols : {1, 7, 64, 1000}) {
      const Tensor x = random_tensor({3, 5, cols}, dt, 1 + cols, 2.0), w = random_tensor({cols}, dt, 2);
      const ops::LayerNormResult r = ops::rms_norm(x, w, 1e-6);
      EXPECT_EQ(r.y.dtype(), dt);
      EXPECT_TRUE(r.saved.rms);
      mpt::testing::expect_close(r.y, rms_ref(x, w, 1e-6), tolerance(dt), fmt::format("rms_norm {} {}",
                                                                                        dtype_name(dt), cols));
      for (double m : r.saved.mean.to_vector<double>()) ASSERT_EQ(m, 0.0);
    }
  }
  // f32 weights beside bf16 activations (FP32 masters).
  const Tensor x = random_tensor({4, 32}, DType::BF16, 3), w = random_tensor({32}, DType::F32, 4);
  mpt::testing::expect_close(ops::rms_norm(x, w).y, rms_ref(x, w, 1e-6), tolerance(DType::BF16), "f32 weight");
}

TEST(RmsNorm, GradientsMatchFiniteDifferences) {
  const Tensor x = random_tensor({3, 11}, DType::F64, 5), w = random_tensor({11}, DType::F64, 6);
  EXPECT_TRUE(autograd::gradcheck([](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], in[1]).y; },
                                  {x, w}));
  const Tensor res = random_tensor({3, 11}, DType::F64, 7);
  // Both outputs of the fused residual form: sum and the normalised sum, weighted together.
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) {
        const ops::ResidualLayerNormResult r = ops::residual_rms_norm(in[0], in[1], in[2]);
        return r.y * 2.0 + r.sum;
      },
      {x, res, w}));
  // The residual form equals rms_norm of the sum.
  const ops::ResidualLayerNormResult r = ops::residual_rms_norm(x, res, w);
  mpt::testing::expect_close(r.y, rms_ref(x + res, w, 1e-6), tolerance(DType::F64), "residual rms_norm");
}

TEST(Rope, MatchesFloat64WithOffsetsInEveryDtype) {
  const ops::RopeTable table = ops::rope_table(40, 16, 10000.0);
  const ops::RopeTable table64 = ops::rope_table(40, 16, 10000.0, Device::cpu(), DType::F64);
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    for (int64_t position0 : {0, 7}) {
      const Tensor x = random_tensor({2, 9, 3, 16}, dt, 8);
      const Tensor y = ops::rope(x, dt == DType::F64 ? table64 : table, position0);
      mpt::testing::expect_close(y, rope_ref(x, 10000.0, position0), tolerance(dt == DType::F64 ? DType::F32 : dt),
                                 fmt::format("rope {} offset {}", dtype_name(dt), position0));
    }
  }
  // Position 0 is the identity; generation (one token at offset t) equals row t of the full sequence.
  const Tensor x = random_tensor({1, 6, 2, 16}, DType::F32, 9);
  const Tensor full = ops::rope(x, table);
  EXPECT_EQ(full.slice(1, 0, 1).contiguous().to_vector<float>(), x.slice(1, 0, 1).contiguous().to_vector<float>());
  EXPECT_EQ(ops::rope(x.slice(1, 4, 5), table, 4).to_vector<float>(),
            full.slice(1, 4, 5).contiguous().to_vector<float>());
}

TEST(Rope, BackwardIsTheInverseRotation) {
  const ops::RopeTable table = ops::rope_table(8, 6, 500.0, Device::cpu(), DType::F64);
  EXPECT_TRUE(autograd::gradcheck([&](const std::vector<Tensor>& in) { return ops::rope(in[0], table, 2); },
                                  {random_tensor({2, 5, 3, 6}, DType::F64, 10)}));
  // Rotating and rotating back (the backward kernel on the forward's output) restores x.
  const Tensor x = random_tensor({1, 8, 1, 6}, DType::F64, 11).requires_grad_();
  const Tensor y = ops::rope(x, table);
  y.backward(y.detach());
  mpt::testing::expect_close(x.grad(), x.detach(), {1e-14, 1e-14}, "inverse rotation");
}

TEST(Rope, RejectsBadShapes) {
  const ops::RopeTable table = ops::rope_table(8, 16);
  const auto msg = [&](const Tensor& x, int64_t p0) {
    return mpt::testing::error_message([&] { ops::rope(x, table, p0); });
  };
  EXPECT_TRUE(mpt::testing::contains(msg(Tensor::zeros({2, 4, 16}), 0), "expected x (B, T, H, D)"));
  EXPECT_TRUE(mpt::testing::contains(msg(Tensor::zeros({1, 4, 2, 8}), 0), "head dimension"));
  EXPECT_TRUE(mpt::testing::contains(msg(Tensor::zeros({1, 4, 2, 16}), 6), "outside the table's 8 positions"));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([] { ops::rope_table(8, 7); }), "even head"));
}

TEST(GroupedQueryAttention, EqualsMultiHeadAttentionWithRepeatedKvHeads) {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor q = random_tensor({2, 6, 9, 8}, dt, 12), k = random_tensor({2, 2, 9, 8}, dt, 13);
    const Tensor v = random_tensor({2, 2, 9, 8}, dt, 14);
    // Query heads 0-2 read kv head 0, heads 3-5 kv head 1.
    const Tensor k6 = ops::cat({k.slice(1, 0, 1), k.slice(1, 0, 1), k.slice(1, 0, 1), k.slice(1, 1, 2),
                                k.slice(1, 1, 2), k.slice(1, 1, 2)}, 1);
    const Tensor v6 = ops::cat({v.slice(1, 0, 1), v.slice(1, 0, 1), v.slice(1, 0, 1), v.slice(1, 1, 2),
                                v.slice(1, 1, 2), v.slice(1, 1, 2)}, 1);
    const Tensor lengths = Tensor::from_vector<int32_t>({9, 5}, {2});
    const ops::AttentionResult gqa = ops::causal_attention(q, k, v, {.lengths = lengths});
    const ops::AttentionResult mha = ops::causal_attention(q, k6, v6, {.lengths = lengths});
    EXPECT_EQ(gqa.out.to_vector<float>(), mha.out.to_vector<float>()) << dtype_name(dt);
    // The direct backward: dq as the repeated heads' bit for bit; dk and dv sum each group's gradients in f32 and are
    // rounded once, so they lie within one rounding of the float64 backward of the repeated heads summed in float64
    // (plus f32 arithmetic). Repeating the heads in memory rounded each head's gradient before the sum: in bf16
    // here that missed this bound up to 37-fold, on 56 of 288 elements (cancelling sums).
    const Tensor dout = random_tensor(q.shape(), dt, 15);
    const ops::AttentionOptions padded{.lengths = lengths};
    const ops::AttentionGrads g = ops::causal_attention_backward(dout, q, k, v, gqa.out, gqa.lse, padded);
    const ops::AttentionGrads m = ops::causal_attention_backward(dout, q, k6, v6, mha.out, mha.lse, padded);
    EXPECT_EQ(g.dk.shape(), k.shape());
    EXPECT_EQ(g.dq.to_vector<float>(), m.dq.to_vector<float>()) << dtype_name(dt);
    const auto f64 = [](const Tensor& t) { return t.to(DType::F64); };
    // From the same (rounded) forward output and lse, so that only the backward's arithmetic differs.
    const ops::AttentionGrads m64 =
        ops::causal_attention_backward(f64(dout), f64(q), f64(k6), f64(v6), f64(mha.out), f64(mha.lse), padded);
    const double u = dt == DType::BF16 ? 0x1p-8 : 0x1p-24;
    for (const auto& [got, full, name] : {std::tuple{g.dk, m64.dk, "dk"}, std::tuple{g.dv, m64.dv, "dv"}}) {
      const auto want = ops::sum(full.view({2, 2, 3, 9, 8}), 2).to_vector<double>();
      const auto have = got.to(DType::F64).to_vector<double>();
      double scale = 0;
      for (double w : want) scale = std::max(scale, std::fabs(w));
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(have[i], want[i], u * std::fabs(want[i]) + 1e-5 * scale)
            << name << " " << dtype_name(dt) << " " << i;
    }
  }
  const Tensor q = random_tensor({1, 4, 5, 4}, DType::F64, 16), k = random_tensor({1, 1, 5, 4}, DType::F64, 17);
  const Tensor v = random_tensor({1, 1, 5, 4}, DType::F64, 18);
  EXPECT_TRUE(autograd::gradcheck(
      [](const std::vector<Tensor>& in) { return ops::causal_attention(in[0], in[1], in[2]).out; }, {q, k, v}));
  EXPECT_TRUE(mpt::testing::contains(mpt::testing::error_message([] {
                                       ops::causal_attention(Tensor::zeros({1, 6, 5, 4}), Tensor::zeros({1, 4, 5, 4}),
                                                             Tensor::zeros({1, 4, 5, 4}));
                                     }),
                                     "H_kv dividing q's heads"));
}

// rope_qkv on a packed (B, T, H + 2 H_kv, D) projection output: q and k with the bits of rope on their heads (copied
// out), v copied; backward one d(qkv) whose heads are rope's gradients of dq and dk and dv itself, and zeros for an
// output that got no gradient.
TEST(RopeQkv, BitsOfRopeOnEachProjectionAndOneGradient) {
  mpt::testing::PoisonAllocations poison;
  using mpt::testing::same_bits;
  const int64_t H = 4, Hkv = 2, D = 8;
  for (DType dt : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    const ops::RopeTable table = ops::rope_table(12, D, 500.0, Device::cpu(),
                                                 dt == DType::F64 ? DType::F64 : DType::F32);
    const Tensor qkv = random_tensor({2, 5, H + 2 * Hkv, D}, dt, 7).requires_grad_();
    const ops::QkvRotated r = ops::rope_qkv(qkv, table, H, Hkv, 3);
    const auto part = [&](int64_t from, int64_t n) {
      return qkv.detach().slice(2, from, from + n).contiguous().requires_grad_();
    };
    const Tensor q = part(0, H), k = part(H, Hkv), v = part(H + Hkv, Hkv);
    const Tensor qr = ops::rope(q, table, 3), kr = ops::rope(k, table, 3);
    EXPECT_TRUE(same_bits(r.q, qr)) << dtype_name(dt);
    EXPECT_TRUE(same_bits(r.k, kr)) << dtype_name(dt);
    EXPECT_TRUE(same_bits(r.v, v.detach())) << dtype_name(dt);
    // q, k and v are views of the one packed tensor causal_attention_qkv reads.
    EXPECT_TRUE(same_bits(r.packed, ops::cat({qr, kr, v}, 2).detach())) << dtype_name(dt);
    EXPECT_EQ(r.q.data_ptr(), r.packed.data_ptr()) << dtype_name(dt);
    const Tensor dq = random_tensor(r.q.shape(), dt, 8), dk = random_tensor(r.k.shape(), dt, 9);
    const Tensor dv = random_tensor(r.v.shape(), dt, 10);
    autograd::backward({r.q, r.k, r.v}, {dq, dk, dv});
    autograd::backward({qr, kr}, {dq, dk});
    const Tensor g = qkv.grad();
    ASSERT_EQ(g.shape(), qkv.shape());
    EXPECT_TRUE(same_bits(g.slice(2, 0, H).contiguous(), q.grad())) << dtype_name(dt);
    EXPECT_TRUE(same_bits(g.slice(2, H, H + Hkv).contiguous(), k.grad())) << dtype_name(dt);
    EXPECT_TRUE(same_bits(g.slice(2, H + Hkv, H + 2 * Hkv).contiguous(), dv)) << dtype_name(dt);
    // v unused: its heads of d(qkv) are zeros.
    qkv.set_grad(Tensor{});
    const ops::QkvRotated r2 = ops::rope_qkv(qkv, table, H, Hkv, 3);
    autograd::backward({r2.q, r2.k}, {dq, dk});
    EXPECT_EQ(qkv.grad().slice(2, H + Hkv, H + 2 * Hkv).contiguous().to_vector<double>(),
              std::vector<double>(static_cast<size_t>(2 * 5 * Hkv * D), 0.0));
    EXPECT_TRUE(same_bits(qkv.grad().slice(2, 0, H).contiguous(), q.grad())) << dtype_name(dt);
  }
  const ops::RopeTable table = ops::rope_table(12, D);
  EXPECT_MPT_ERROR(ops::rope_qkv(random_tensor({2, 5, 7, D}, DType::F32, 1), table, H, Hkv),
                   "expected qkv (B, T, n_head + 2 n_kv_head, D)");
  EXPECT_MPT_ERROR(ops::rope_qkv(random_tensor({2, 13, 8, D}, DType::F32, 1), table, H, Hkv, 0),
                   "are outside the table's 12 positions");
}
