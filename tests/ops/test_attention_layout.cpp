// tests/ops/test_attention_layout.cpp: causal_attention on token-major operands (transpose(1, 2) views of contiguous
// (B, T, H, D), what projections write) runs in that layout without head copies, with the head-major path's bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using mpt::testing::same_bits;

// A (B, heads, T, D) operand stored (B, T, heads, D).
Tensor token_major(int64_t B, int64_t heads, int64_t T, int64_t D, DType dt, uint64_t seed) {
  return testing::random_tensor({B, T, heads, D}, dt, seed).transpose(1, 2);
}

// Stored (B, T, heads, D) (with one head both layouts are one).
bool is_token_major(const Tensor& x) {
  return x.transpose(1, 2).is_contiguous() && (x.size(1) == 1 || !x.is_contiguous());
}

struct Case {
  DType dt;
  int64_t heads, kv_heads;
  bool padded;
  std::string name() const {
    return std::string(dtype_name(dt)) + " H " + std::to_string(heads) + " H_kv " + std::to_string(kv_heads) +
           (padded ? " padded" : "");
  }
};

// Forward and backward on token-major q, k, v and dout give what the same values give head-major, bit for bit (the
// kernels read the same rows in the same order), and write out, dq, dk, dv token-major: the output projection then
// reads out, and the projections' backward reads dq, dk, dv, as views.
TEST(AttentionLayout, TokenMajorOperandsGiveTheHeadMajorBitsInTheirOwnLayout) {
  const int64_t B = 2, T = 70, D = 8;  // 70: two key blocks
  for (const Case& c : {Case{DType::F32, 4, 4, false}, Case{DType::BF16, 4, 2, false}, Case{DType::F32, 4, 1, true},
                        Case{DType::BF16, 6, 3, true}}) {
    ops::AttentionOptions o;
    if (c.padded) o.lengths = Tensor::from_vector(std::vector<int32_t>{T, 33}, {B});
    const Tensor q = token_major(B, c.heads, T, D, c.dt, 1), k = token_major(B, c.kv_heads, T, D, c.dt, 2);
    const Tensor v = token_major(B, c.kv_heads, T, D, c.dt, 3), dout = token_major(B, c.heads, T, D, c.dt, 4);
    const ops::AttentionResult r = ops::causal_attention(q, k, v, o);
    const ops::AttentionResult h = ops::causal_attention(q.contiguous(), k.contiguous(), v.contiguous(), o);
    EXPECT_TRUE(is_token_major(r.out)) << c.name();
    EXPECT_TRUE(h.out.is_contiguous()) << c.name();
    EXPECT_TRUE(same_bits(r.out, h.out)) << c.name();
    EXPECT_TRUE(same_bits(r.lse, h.lse)) << c.name();
    const ops::AttentionGrads g = ops::causal_attention_backward(dout, q, k, v, r.out, r.lse, o);
    const ops::AttentionGrads gh = ops::causal_attention_backward(dout.contiguous(), q.contiguous(), k.contiguous(),
                                                                  v.contiguous(), h.out, h.lse, o);
    for (const auto& [got, want, name] : {std::tuple{g.dq, gh.dq, "dq"}, std::tuple{g.dk, gh.dk, "dk"},
                                          std::tuple{g.dv, gh.dv, "dv"}}) {
      EXPECT_TRUE(is_token_major(got)) << name << " " << c.name();
      EXPECT_TRUE(want.is_contiguous()) << name << " " << c.name();
      EXPECT_TRUE(same_bits(got, want)) << name << " " << c.name();
    }
    // Mixed layouts: k, v and dout are brought to q's; the values do not change.
    const ops::AttentionResult m = ops::causal_attention(q, k.contiguous(), v.contiguous(), o);
    EXPECT_TRUE(is_token_major(m.out) && same_bits(m.out, h.out)) << c.name();
    const ops::AttentionGrads gm = ops::causal_attention_backward(dout.contiguous(), q, k.contiguous(), v, m.out,
                                                                  m.lse, o);
    EXPECT_TRUE(same_bits(gm.dq, gh.dq) && same_bits(gm.dk, gh.dk) && same_bits(gm.dv, gh.dv)) << c.name();
  }
}

// Through autograd, as Llama's attention uses it: the output viewed back to (B, T, H * D) is the output's own storage
// (no copy), and the gradients reaching the (B, T, heads, D) projections' outputs are the explicit backward's.
TEST(AttentionLayout, AutogradOnProjectionViewsCopiesNoHeads) {
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, D = 8;
  Tensor qs = testing::random_tensor({B, T, H, D}, DType::F32, 5), ks = testing::random_tensor({B, T, Hkv, D},
                                                                                              DType::F32, 6);
  Tensor vs = testing::random_tensor({B, T, Hkv, D}, DType::F32, 7);
  for (Tensor* t : {&qs, &ks, &vs}) t->requires_grad_();
  const ops::AttentionResult r = ops::causal_attention(qs.transpose(1, 2), ks.transpose(1, 2), vs.transpose(1, 2));
  const Tensor y = r.out.transpose(1, 2).reshape({B, T, H * D});
  EXPECT_TRUE(y.shares_storage(r.out));
  const Tensor dy = testing::random_tensor({B, T, H * D}, DType::F32, 8);
  y.backward(dy);
  const ops::AttentionGrads want =
      ops::causal_attention_backward(dy.view({B, T, H, D}).transpose(1, 2), qs.detach().transpose(1, 2),
                                     ks.detach().transpose(1, 2), vs.detach().transpose(1, 2), r.out.detach(), r.lse);
  EXPECT_TRUE(same_bits(qs.grad(), want.dq.transpose(1, 2)));
  EXPECT_TRUE(same_bits(ks.grad(), want.dk.transpose(1, 2)));
  EXPECT_TRUE(same_bits(vs.grad(), want.dv.transpose(1, 2)));
}

// Gradients given to accumulate into, in a layout other than the kernels' (head-major here, token-major operands),
// get the fresh gradients added: exactly before + fresh in float64.
TEST(AttentionLayout, AccumulatesIntoGradientsOfTheOtherLayout) {
  const int64_t B = 1, T = 33, H = 4, Hkv = 2, D = 8;
  const Tensor q = token_major(B, H, T, D, DType::F64, 11), k = token_major(B, Hkv, T, D, DType::F64, 12);
  const Tensor v = token_major(B, Hkv, T, D, DType::F64, 13), dout = token_major(B, H, T, D, DType::F64, 14);
  const ops::AttentionResult f = ops::causal_attention(q, k, v);
  const ops::AttentionGrads fresh = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
  ops::AttentionGrads given{testing::random_tensor({B, H, T, D}, DType::F64, 15),
                            testing::random_tensor({B, Hkv, T, D}, DType::F64, 16),
                            testing::random_tensor({B, Hkv, T, D}, DType::F64, 17)};
  const std::vector<Tensor> before{given.dq.clone(), given.dk.clone(), given.dv.clone()};
  const ops::AttentionGrads out = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse, {}, given);
  EXPECT_TRUE(out.dq.shares_storage(given.dq) && out.dk.shares_storage(given.dk) && out.dv.shares_storage(given.dv));
  const Tensor* got[] = {&given.dq, &given.dk, &given.dv};
  const Tensor* add[] = {&fresh.dq, &fresh.dk, &fresh.dv};
  for (int i = 0; i < 3; ++i) {
    const auto g = got[i]->to_vector<double>(), b = before[static_cast<size_t>(i)].to_vector<double>();
    const auto a = add[i]->contiguous().to_vector<double>();
    for (size_t e = 0; e < g.size(); ++e) ASSERT_EQ(g[e], b[e] + a[e]) << "gradient " << i << " element " << e;
  }
}

}  // namespace
}  // namespace mpt
