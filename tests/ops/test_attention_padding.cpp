// tests/ops/test_attention_padding.cpp: key-padded causal attention and ignore_index cross-entropy against PyTorch
// goldens (tests/goldens/masked_attention.safetensors), and what padding must leave untouched.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "kernels/cpu/attention.h"
#include "mpt/io/safetensors.h"
#include "mpt/ops/attention.h"
#include "mpt/ops/softmax.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;

namespace {

const io::SafetensorsFile& goldens() {
  static const io::SafetensorsFile file(MPT_GOLDENS_DIR "/masked_attention.safetensors");
  return file;
}

Tensor golden(const std::string& name) { return goldens().tensor(name); }

using mpt::testing::same_bits;

// max |got - ref| / max |ref|.
double relative_error(const Tensor& got, const Tensor& ref) {
  const auto g = got.to(DType::F64).contiguous().to_vector<double>(), r = ref.contiguous().to_vector<double>();
  double err = 0, mag = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::isnan(g[i]) ? INFINITY : std::abs(g[i] - r[i]));
    mag = std::max(mag, std::abs(r[i]));
  }
  return err / mag;
}

Tensor lengths_of(const std::vector<int32_t>& len) {
  return Tensor::from_vector(len, {static_cast<int64_t>(len.size())});
}

// Runs every golden case in `dtype` (inputs rounded to it) and requires out, lse, dq, dk, dv within `tol` of
// PyTorch's float64 scaled_dot_product_attention with the boolean mask tril & (j < lengths[b]).
void check_goldens(DType dtype, double tol) {
  for (const char* c : {"case0", "case1", "case2"}) {
    const std::string p = std::string(c) + ".";
    const Tensor q = golden(p + "q").to(dtype), k = golden(p + "k").to(dtype), v = golden(p + "v").to(dtype);
    const Tensor dout = golden(p + "dout").to(dtype);
    ops::AttentionOptions o;
    o.lengths = golden(p + "lengths");
    const auto f = ops::causal_attention(q, k, v, o);
    const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse, o);
    const std::pair<const char*, const Tensor*> got[] = {
        {"out", &f.out}, {"lse", &f.lse}, {"dq", &g.dq}, {"dk", &g.dk}, {"dv", &g.dv}};
    for (const auto& [name, t] : got) {
      EXPECT_LE(relative_error(*t, golden(p + name)), tol) << c << " " << name << " in " << dtype_name(dtype);
    }
  }
}

}  // namespace

TEST(AttentionPaddingGoldens, F64MatchesPyTorchSdpaWithMask) { check_goldens(DType::F64, 1e-12); }

// f32 inputs rounded from the f64 goldens: the error is f32 arithmetic on O(1) values over a few hundred terms.
TEST(AttentionPaddingGoldens, F32MatchesPyTorchSdpaWithMask) { check_goldens(DType::F32, 2e-6); }

// The same call through autograd: loss = sum(out * dout) gives the goldens' gradients.
TEST(AttentionPaddingGoldens, AutogradGivesTheGoldenGradients) {
  const Tensor q = golden("case0.q").requires_grad_(), k = golden("case0.k").requires_grad_();
  const Tensor v = golden("case0.v").requires_grad_();
  ops::AttentionOptions o;
  o.lengths = golden("case0.lengths");
  const auto f = ops::causal_attention(q, k, v, o);
  f.out.backward(golden("case0.dout"));
  EXPECT_LE(relative_error(q.grad(), golden("case0.dq")), 1e-12);
  EXPECT_LE(relative_error(k.grad(), golden("case0.dk")), 1e-12);
  EXPECT_LE(relative_error(v.grad(), golden("case0.dv")), 1e-12);
}

TEST(CrossEntropyGoldens, IgnoreIndexMatchesPyTorch) {
  const Tensor logits = golden("ce.logits"), targets = golden("ce.targets");
  for (const auto reduction : {ops::LossReduction::Mean, ops::LossReduction::Sum}) {
    const bool mean = reduction == ops::LossReduction::Mean;
    ops::CrossEntropyOptions o;
    o.reduction = reduction;
    const auto r = ops::softmax_cross_entropy(logits, targets, o);
    const double ref = golden(mean ? "ce.loss_mean" : "ce.loss_sum").to_vector<double>().at(0);
    EXPECT_NEAR(r.loss.to_vector<double>().at(0), ref, 1e-13 * std::abs(ref)) << (mean ? "mean" : "sum");
    const Tensor dl = ops::softmax_cross_entropy_backward(Tensor::full({}, 1.0, DType::F64), logits, targets,
                                                          r.saved, o);
    EXPECT_LE(relative_error(dl, golden(mean ? "ce.dlogits_mean" : "ce.dlogits_sum")), 1e-13);
  }
}

// What makes padding correct whatever the reference: a sample's real rows are computed as if it were alone (the same
// bits as the unpadded sample), and the padding's values reach no real row.
TEST(AttentionPadding, RealRowsAreTheUnpaddedSamplesBitForBit) {
  const int64_t B = 3, H = 2, T = 150, D = 16;
  const std::vector<int32_t> len = {150, 64, 71};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor q = mpt::testing::random_tensor({B, H, T, D}, dt, 1);
    const Tensor k = mpt::testing::random_tensor({B, H, T, D}, dt, 2);
    const Tensor v = mpt::testing::random_tensor({B, H, T, D}, dt, 3);
    Tensor dout = mpt::testing::random_tensor({B, H, T, D}, dt, 4);
    for (int64_t b = 0; b < B; ++b) dout.select(0, b).slice(1, len[b], T).zero_();  // the loss ignores padding
    ops::AttentionOptions o;
    o.lengths = lengths_of(len);
    const auto f = ops::causal_attention(q, k, v, o);
    const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse, o);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = len[b];
      auto alone = [&](const Tensor& x) { return x.slice(0, b, b + 1).slice(2, 0, n).contiguous(); };
      const auto fa = ops::causal_attention(alone(q), alone(k), alone(v));
      const auto ga = ops::causal_attention_backward(alone(dout), alone(q), alone(k), alone(v), fa.out, fa.lse);
      EXPECT_TRUE(same_bits(alone(f.out), fa.out)) << "out, sample " << b << " " << dtype_name(dt);
      EXPECT_TRUE(same_bits(f.lse.slice(0, b, b + 1).slice(2, 0, n), fa.lse)) << "lse, sample " << b;
      EXPECT_TRUE(same_bits(alone(g.dq), ga.dq)) << "dq, sample " << b << " " << dtype_name(dt);
      EXPECT_TRUE(same_bits(alone(g.dk), ga.dk)) << "dk, sample " << b << " " << dtype_name(dt);
      EXPECT_TRUE(same_bits(alone(g.dv), ga.dv)) << "dv, sample " << b << " " << dtype_name(dt);
      // Padding keys and values are never attended: their gradients are exactly zero.
      for (const Tensor* pad : {&g.dk, &g.dv}) {
        for (double x : pad->select(0, b).slice(1, n, T).to(DType::F64).contiguous().to_vector<double>())
          ASSERT_EQ(x, 0.0) << "sample " << b;
      }
    }
  }
}

TEST(AttentionPadding, PaddingValuesReachNoRealRow) {
  const int64_t B = 2, H = 2, T = 90, D = 8;
  const std::vector<int32_t> len = {40, 90};
  const Tensor q = mpt::testing::random_tensor({B, H, T, D}, DType::F32, 11);
  const Tensor k = mpt::testing::random_tensor({B, H, T, D}, DType::F32, 12);
  const Tensor v = mpt::testing::random_tensor({B, H, T, D}, DType::F32, 13);
  Tensor k2 = k.clone(), v2 = v.clone();
  k2.select(0, 0).slice(1, 40, T).copy_(mpt::testing::random_tensor({H, T - 40, D}, DType::F32, 14, 50.0));
  v2.select(0, 0).slice(1, 40, T).copy_(mpt::testing::random_tensor({H, T - 40, D}, DType::F32, 15, 50.0));
  ops::AttentionOptions o;
  o.lengths = lengths_of(len);
  const auto a = ops::causal_attention(q, k, v, o), b = ops::causal_attention(q, k2, v2, o);
  EXPECT_TRUE(same_bits(a.out, b.out)) << "padding keys changed an output (padding rows included)";
  EXPECT_TRUE(same_bits(a.lse, b.lse));
  const auto plain = ops::causal_attention(q, k2, v2);  // without the mask they do reach the padding rows
  EXPECT_FALSE(same_bits(plain.out.select(0, 0).slice(1, 40, T), a.out.select(0, 0).slice(1, 40, T)));
}

TEST(AttentionPadding, FullLengthsAreThePlainCausalAttention) {
  const Tensor q = mpt::testing::random_tensor({2, 3, 70, 8}, DType::F32, 21);
  const Tensor k = mpt::testing::random_tensor({2, 3, 70, 8}, DType::F32, 22);
  const Tensor v = mpt::testing::random_tensor({2, 3, 70, 8}, DType::F32, 23);
  ops::AttentionOptions o;
  o.lengths = lengths_of({70, 70});
  EXPECT_TRUE(same_bits(ops::causal_attention(q, k, v, o).out, ops::causal_attention(q, k, v).out));
}

// The CUDA fallback's softmax rows (their CPU reference) with key padding: row r keeps keys j <= i, j < lengths[b].
TEST(AttentionPadding, CausalSoftmaxRowsHonourTheLengths) {
  const int64_t B = 2, H = 2, t = 5;
  const int32_t len[] = {2, 5};
  std::vector<double> x(B * H * t * t), y(x.size()), lse(B * H * t);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(double(i));
  kernels::cpu::causal_softmax_forward(x.data(), y.data(), lse.data(), B * H * t, t, 0.5, {len, H});
  for (int64_t r = 0; r < B * H * t; ++r) {
    const int64_t i = r % t, n = std::min<int64_t>(i + 1, len[r / t / H]);
    double sum = 0;
    for (int64_t j = 0; j < n; ++j) sum += std::exp(0.5 * x[r * t + j]);
    for (int64_t j = 0; j < t; ++j) {
      const double want = j < n ? std::exp(0.5 * x[r * t + j]) / sum : 0.0;
      ASSERT_NEAR(y[r * t + j], want, 1e-15) << "row " << r << " key " << j;
    }
    ASSERT_NEAR(lse[r], std::log(sum), 1e-14) << "row " << r;
  }
}

// A model's lengths, checked once (prepare_key_lengths): undefined when no sample is padded, the same values
// otherwise (on the CPU: the host tensor the kernels read), errors naming the model; the ops take the result as is.
TEST(AttentionPadding, PrepareKeyLengthsChecksOnceForEveryLayer) {
  EXPECT_FALSE(ops::prepare_key_lengths({}, 2, 6, Device::cpu(), "GPT").defined());
  EXPECT_FALSE(ops::prepare_key_lengths(lengths_of({6, 6}), 2, 6, Device::cpu(), "GPT").defined());
  const Tensor keys = ops::prepare_key_lengths(lengths_of({6, 2}), 2, 6, Device::cpu(), "GPT");
  ASSERT_TRUE(keys.defined());
  EXPECT_EQ(keys.to_vector<int32_t>(), (std::vector<int32_t>{6, 2}));
  auto err = [](const Tensor& lengths, const char* model) {
    return mpt::testing::error_message([&] { (void)ops::prepare_key_lengths(lengths, 2, 6, Device::cpu(), model); });
  };
  EXPECT_PRED2(mpt::testing::contains, err(lengths_of({6, 0}), "GPT"), "[GPT] lengths[1] = 0 is outside [1, T = 6]");
  EXPECT_PRED2(mpt::testing::contains, err(lengths_of({6}), "Llama"),
               "[Llama] lengths must be i32 [B] on the CPU (B = 2), got i32[1]");
  const Tensor q = mpt::testing::random_tensor({2, 1, 6, 4}, DType::F32, 31);
  ops::AttentionOptions raw, prepared;
  raw.lengths = lengths_of({6, 2});
  prepared.lengths = keys;
  EXPECT_TRUE(same_bits(ops::causal_attention(q, q, q, prepared).out, ops::causal_attention(q, q, q, raw).out));
}

TEST(AttentionPadding, RejectsBadLengths) {
  const Tensor q = mpt::testing::random_tensor({2, 1, 6, 4}, DType::F32, 31);
  auto err = [&](const Tensor& lengths) {
    ops::AttentionOptions o;
    o.lengths = lengths;
    return mpt::testing::error_message([&] { ops::causal_attention(q, q, q, o); });
  };
  EXPECT_PRED2(mpt::testing::contains, err(lengths_of({6, 0})),
               "[causal_attention] lengths[1] = 0 is outside [1, T = 6] (q f32[2, 1, 6, 4]");
  EXPECT_PRED2(mpt::testing::contains, err(lengths_of({7, 1})), "lengths[0] = 7 is outside [1, T = 6]");
  EXPECT_PRED2(mpt::testing::contains, err(lengths_of({6})), "lengths must be i32 [B] on the CPU (B = 2 from q");
  EXPECT_PRED2(mpt::testing::contains, err(Tensor::from_vector(std::vector<int64_t>{6, 6}, {2})),
               "lengths must be i32 [B] on the CPU");
  ops::AttentionOptions o;
  o.lengths = lengths_of({3, 0});
  const auto f = ops::causal_attention(q, q, q);
  EXPECT_PRED2(mpt::testing::contains,
               mpt::testing::error_message([&] { ops::causal_attention_backward(q, q, q, q, f.out, f.lse, o); }),
               "[causal_attention_backward] lengths[1] = 0 is outside [1, T = 6]");
}
