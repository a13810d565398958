// tests/ops/test_attention_qkv.cpp: causal_attention_qkv (q, k, v read from the fused projection's (B, T, 3C)
// output, or Llama's (B, T, (H + 2 H_kv) D), the output written (B, T, C), d(qkv) in one tensor) against the
// head-major op, bit for bit, and its errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/attention.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;

namespace {

using mpt::testing::same_bits;

struct Case {
  int64_t B, T, H, D;
  std::vector<int32_t> lengths;  // empty: no key padding
  int64_t Hkv = 0;               // 0: H (GPT's layout); fewer: Llama's grouped-query layout
};

// The head-major path GPT ran before: split_qkv_heads (one copy), causal_attention, the output transposed back to
// (B, T, C) and its gradient through autograd; and the packed op with dout pushed through its backward node.
struct Outputs {
  Tensor out, lse, dqkv;
};

// The reference: q, k, v as slices of qkv viewed (B, T, H + 2 H_kv, D) (GPT's layout: split_qkv_heads, one copy),
// causal_attention, the output transposed back to (B, T, C), d(qkv) through autograd.
Outputs head_major(const Tensor& qkv, const Tensor& dout, int64_t H, int64_t Hkv, const ops::AttentionOptions& o) {
  Tensor x = qkv.clone();
  x.requires_grad_();
  ops::AttentionResult r;
  if (Hkv == H) {
    const ops::QkvHeads h = ops::split_qkv_heads(x, H);
    r = ops::causal_attention(h.q, h.k, h.v, o);
  } else {
    const Tensor all = x.view({qkv.size(0), qkv.size(1), H + 2 * Hkv, -1});
    r = ops::causal_attention(all.slice(2, 0, H).transpose(1, 2), all.slice(2, H, H + Hkv).transpose(1, 2),
                              all.slice(2, H + Hkv, H + 2 * Hkv).transpose(1, 2), o);
  }
  const Tensor out = r.out.transpose(1, 2).reshape(dout.shape());
  out.backward(dout);
  return {out.detach(), r.lse, x.grad()};
}

Outputs packed(const Tensor& qkv, const Tensor& dout, int64_t H, int64_t Hkv, const ops::AttentionOptions& o) {
  Tensor x = qkv.clone();
  x.requires_grad_();
  const ops::AttentionResult r =
      Hkv == H ? ops::causal_attention_qkv(x, H, o) : ops::causal_attention_qkv(x, H, Hkv, o);
  r.out.backward(dout);
  return {r.out.detach(), r.lse, x.grad()};
}

// Every dtype, odd T (partial 64-row blocks), D not a multiple of 16 (padded vectors), one and several heads, key
// padding with a length-1 sample, GPT's layout and Llama's grouped-query one (H_kv of 1, 2 and 4, and = H): out, lse and d(qkv) equal the head-major op's bit for bit (the kernels do the same
// arithmetic on the same values; only where they read and write moved), with both CPU builds of the kernels.
TEST(AttentionQkv, MatchesTheHeadMajorOpBitForBit) {
  const std::vector<Case> cases = {{2, 67, 3, 16, {}},    {1, 130, 2, 8, {}},           {3, 77, 2, 24, {77, 30, 1}},
                                   {1, 1, 1, 4, {}},      {2, 67, 6, 16, {}, 2},        {3, 77, 4, 8, {77, 30, 1}, 1},
                                   {1, 70, 4, 24, {}, 4}};
  for (bool avx512 : {true, false}) {
    kernels::cpu::set_attention_avx512(avx512);
    for (DType dt : {DType::F32, DType::F64, DType::BF16, DType::F16}) {
      for (const Case& c : cases) {
        const int64_t Hkv = c.Hkv > 0 ? c.Hkv : c.H;
        const std::string n = std::string(dtype_name(dt)) + " B" + std::to_string(c.B) + " T" + std::to_string(c.T) +
                              " H" + std::to_string(c.H) + " Hkv" + std::to_string(Hkv) + " D" + std::to_string(c.D) +
                              (c.lengths.empty() ? "" : " padded") + (avx512 ? "" : " generic");
        const int64_t C = c.H * c.D;
        const Tensor qkv = mpt::testing::random_tensor({c.B, c.T, (c.H + 2 * Hkv) * c.D}, dt, 11);
        const Tensor dout = mpt::testing::random_tensor({c.B, c.T, C}, dt, 12);
        ops::AttentionOptions o;
        if (!c.lengths.empty()) o.lengths = Tensor::from_vector(c.lengths, {c.B});
        const Outputs want = head_major(qkv, dout, c.H, Hkv, o), got = packed(qkv, dout, c.H, Hkv, o);
        EXPECT_EQ(got.out.shape(), (Shape{c.B, c.T, C})) << n;
        EXPECT_TRUE(got.out.is_contiguous()) << n;
        EXPECT_TRUE(same_bits(got.out, want.out)) << "out " << n;
        EXPECT_TRUE(same_bits(got.lse, want.lse)) << "lse " << n;
        EXPECT_TRUE(same_bits(got.dqkv, want.dqkv)) << "d(qkv) " << n;
        // The explicit backward gives the node's gradient.
        autograd::NoGradGuard no_grad;
        const Tensor d = ops::causal_attention_qkv_backward(dout, qkv, got.out, got.lse, c.H, Hkv, o);
        EXPECT_TRUE(same_bits(d, want.dqkv)) << "causal_attention_qkv_backward " << n;
      }
    }
  }
  kernels::cpu::set_attention_avx512(true);
}

// The head-major op is held to float64 references elsewhere (test_attention.cpp); one independent check here too:
// each output row of head h is the softmax-weighted sum of the value rows, computed directly in float64 from qkv.
TEST(AttentionQkv, ForwardMatchesAFloat64ReferenceOnTheFusedLayout) {
  const int64_t B = 2, T = 9, H = 2, D = 4, C = H * D;
  const Tensor qkv = mpt::testing::random_tensor({B, T, 3 * C}, DType::F64, 5);
  const ops::AttentionResult r = ops::causal_attention_qkv(qkv, H);
  const std::vector<double> x = qkv.to_vector<double>(), out = r.out.to_vector<double>();
  const auto at = [&](int64_t b, int64_t t, int64_t part, int64_t h, int64_t d) {
    return x[static_cast<size_t>(((b * T + t) * 3 + part) * C + h * D + d)];
  };
  double worst = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> s(static_cast<size_t>(i + 1));
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += at(b, i, 0, h, d) * at(b, j, 1, h, d);
          s[static_cast<size_t>(j)] = dot / 2.0;  // 1 / sqrt(D)
          m = std::max(m, s[static_cast<size_t>(j)]);
        }
        for (double& e : s) sum += (e = std::exp(e - m));
        for (int64_t d = 0; d < D; ++d) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j) o += s[static_cast<size_t>(j)] / sum * at(b, j, 2, h, d);
          worst = std::max(worst, std::abs(out[static_cast<size_t>((b * T + i) * C + h * D + d)] - o));
        }
      }
  EXPECT_LE(worst, 1e-14);
}

TEST(AttentionQkv, RejectsWhatItCannotRun) {
  const Tensor qkv = Tensor::zeros({2, 5, 12}, DType::F32);
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 5, 10}, DType::F32), 2),
                   "[causal_attention_qkv] expected qkv [B, T, 3 * C] with C a non-zero multiple of n_head 2, got "
                   "f32[2, 5, 10]");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({10, 12}, DType::F32), 2), "expected qkv [B, T, 3 * C]");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(qkv, 0), "multiple of n_head 0");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 12, 5}, DType::F32).transpose(1, 2), 2),
                   "[causal_attention_qkv] qkv must be contiguous");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 5, 12}, DType::I32), 2), "causal_attention_qkv");
  ops::AttentionOptions bad;
  bad.lengths = Tensor::from_vector(std::vector<int32_t>{5, 6}, {2});
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(qkv, 2, bad), "[causal_attention_qkv] lengths[1] = 6 is outside");
  const ops::AttentionResult r = ops::causal_attention_qkv(qkv, 2);
  EXPECT_MPT_ERROR(ops::causal_attention_qkv_backward(Tensor::zeros({2, 5, 6}, DType::F32), qkv, r.out, r.lse, 2),
                   "[causal_attention_qkv_backward] dout");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv_backward(r.out, qkv, r.out, r.lse.to(DType::F64), 2),
                   "[causal_attention_qkv_backward]");
  // The grouped-query form: n_kv_head must divide n_head, and the row hold (n_head + 2 n_kv_head) heads.
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 5, 14}, DType::F32), 4, 3),
                   "[causal_attention_qkv] n_kv_head 3 must divide n_head 4");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 5, 14}, DType::F32), 4, 2),
                   "[causal_attention_qkv] expected qkv [B, T, (n_head + 2 n_kv_head) * D] with D >= 1 for n_head 4 "
                   "and n_kv_head 2 (a multiple of 8), got f32[2, 5, 14]");
  EXPECT_MPT_ERROR(ops::causal_attention_qkv(Tensor::zeros({2, 5, 16}, DType::F32), 4, 0), "must divide n_head 4");
}

}  // namespace
