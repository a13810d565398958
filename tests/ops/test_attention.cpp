// tests/ops/test_attention.cpp: causal attention vs float64 naive attention, finite differences, causality.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/attention.h"
#include "mpt/ops/attention.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::tolerance;

namespace {

// Naive attention written from the definition: per head the full T x T score matrix in float64.
struct Ref {
  std::vector<double> out, lse, dq, dk, dv;
};

struct Dims {
  int64_t b, h, t, d;
  int64_t heads() const { return b * h; }
  Shape shape() const { return {b, h, t, d}; }
};

Ref ref_forward(const Dims& s, const std::vector<double>& q, const std::vector<double>& k,
                const std::vector<double>& v, double scale) {
  Ref r{std::vector<double>(q.size()), std::vector<double>(s.heads() * s.t), {}, {}, {}};
  std::vector<double> p(s.t);
  for (int64_t h = 0; h < s.heads(); ++h) {
    const int64_t base = h * s.t * s.d;
    for (int64_t i = 0; i < s.t; ++i) {
      double mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0;
        for (int64_t c = 0; c < s.d; ++c) dot += q[base + i * s.d + c] * k[base + j * s.d + c];
        p[j] = dot * scale;
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += (p[j] = std::exp(p[j] - mx));
      for (int64_t c = 0; c < s.d; ++c) {
        double acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[j] / sum * v[base + j * s.d + c];
        r.out[base + i * s.d + c] = acc;
      }
      r.lse[h * s.t + i] = mx + std::log(sum);
    }
  }
  return r;
}

// Naive backward in float64; D_i = rowsum(dO_i * out_i) uses the `out` handed to backward, as the op does.
Ref ref_backward(const Dims& s, const std::vector<double>& q, const std::vector<double>& k,
                 const std::vector<double>& v, const std::vector<double>& out, const std::vector<double>& dout,
                 double scale) {
  const Ref f = ref_forward(s, q, k, v, scale);
  Ref r{{}, {}, std::vector<double>(q.size()), std::vector<double>(q.size()), std::vector<double>(q.size())};
  for (int64_t h = 0; h < s.heads(); ++h) {
    const int64_t base = h * s.t * s.d;
    for (int64_t i = 0; i < s.t; ++i) {
      double delta = 0;
      for (int64_t c = 0; c < s.d; ++c) delta += dout[base + i * s.d + c] * out[base + i * s.d + c];
      for (int64_t j = 0; j <= i; ++j) {
        double dot = 0, dp = 0;
        for (int64_t c = 0; c < s.d; ++c) {
          dot += q[base + i * s.d + c] * k[base + j * s.d + c];
          dp += dout[base + i * s.d + c] * v[base + j * s.d + c];
        }
        const double p = std::exp(dot * scale - f.lse[h * s.t + i]);
        const double ds = p * (dp - delta) * scale;
        for (int64_t c = 0; c < s.d; ++c) {
          r.dv[base + j * s.d + c] += p * dout[base + i * s.d + c];
          r.dq[base + i * s.d + c] += ds * k[base + j * s.d + c];
          r.dk[base + j * s.d + c] += ds * q[base + i * s.d + c];
        }
      }
    }
  }
  return r;
}

// The same attention done naively in low precision T, as a framework would without fusion: scores, probabilities
// and output each rounded to T (products accumulated in float).
template <class T>
std::vector<double> naive_low_precision(const Dims& s, const std::vector<double>& q, const std::vector<double>& k,
                                        const std::vector<double>& v, double scale) {
  auto rnd = [](float x) { return static_cast<float>(static_cast<T>(x)); };
  std::vector<double> out(q.size());
  std::vector<float> p(s.t);
  for (int64_t h = 0; h < s.heads(); ++h) {
    const int64_t base = h * s.t * s.d;
    for (int64_t i = 0; i < s.t; ++i) {
      float mx = -INFINITY, sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        float dot = 0;
        for (int64_t c = 0; c < s.d; ++c) dot += float(q[base + i * s.d + c]) * float(k[base + j * s.d + c]);
        p[j] = rnd(rnd(dot) * rnd(float(scale)));
        mx = std::max(mx, p[j]);
      }
      for (int64_t j = 0; j <= i; ++j) sum += std::exp(p[j] - mx);
      for (int64_t j = 0; j <= i; ++j) p[j] = rnd(std::exp(p[j] - mx) / sum);
      for (int64_t c = 0; c < s.d; ++c) {
        float acc = 0;
        for (int64_t j = 0; j <= i; ++j) acc += p[j] * float(v[base + j * s.d + c]);
        out[base + i * s.d + c] = rnd(acc);
      }
    }
  }
  return out;
}

double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::isnan(a[i]) ? INFINITY : std::abs(a[i] - b[i]));
  return m;
}

Tensor as_tensor(const std::vector<double>& v, const Shape& shape) { return Tensor::from_vector(v, shape); }

using mpt::testing::same_bits;

const Dims kShapes[] = {{1, 3, 1, 8},  {2, 2, 1, 64}, {1, 3, 7, 8},    {2, 2, 7, 64},  {1, 3, 64, 8},
                        {2, 2, 64, 64}, {1, 3, 100, 8}, {2, 2, 100, 64}, {1, 3, 257, 8}, {2, 2, 257, 64}};

}  // namespace

TEST(Attention, ForwardMatchesFloat64ReferenceInF32AndF64) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::F64}) {
    for (const Dims& s : kShapes) {
      const Tensor q = mpt::testing::random_tensor(s.shape(), dt, 1 + s.t, 1.5);
      const Tensor k = mpt::testing::random_tensor(s.shape(), dt, 2 + s.t, 1.5);
      const Tensor v = mpt::testing::random_tensor(s.shape(), dt, 3 + s.t);
      const auto r = ops::causal_attention(q, k, v);
      const Ref ref = ref_forward(s, q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(),
                                  1 / std::sqrt(double(s.d)));
      const std::string what = fmt::format("{} {}", dtype_name(dt), shape_str(s.shape()));
      ASSERT_EQ(r.out.dtype(), dt);
      ASSERT_EQ(r.lse.dtype(), dt);
      mpt::testing::expect_close(r.out, as_tensor(ref.out, s.shape()), tolerance(dt), "out " + what);
      mpt::testing::expect_close(r.lse, as_tensor(ref.lse, {s.b, s.h, s.t}), tolerance(dt), "lse " + what);
    }
  }
}

// flash-attention's rule for fused low-precision kernels: the error against float64 is at most twice that of
// the naive computation in the same precision (plus 1e-6 absolute for the cases where both are ~exact).
template <class T>
void check_low_precision_forward() {
  mpt::testing::PoisonAllocations poison;
  const DType dt = dtype_of<T>();
  for (const Dims& s : kShapes) {
    const Tensor q = mpt::testing::random_tensor(s.shape(), dt, 11 + s.t, 1.5);
    const Tensor k = mpt::testing::random_tensor(s.shape(), dt, 12 + s.t, 1.5);
    const Tensor v = mpt::testing::random_tensor(s.shape(), dt, 13 + s.t);
    const auto qd = q.to_vector<double>(), kd = k.to_vector<double>(), vd = v.to_vector<double>();
    const double scale = 1 / std::sqrt(double(s.d));
    const auto r = ops::causal_attention(q, k, v);
    ASSERT_EQ(r.lse.dtype(), DType::F32);
    const Ref ref = ref_forward(s, qd, kd, vd, scale);
    const double fused = max_abs_diff(r.out.to_vector<double>(), ref.out);
    const double naive = max_abs_diff(naive_low_precision<T>(s, qd, kd, vd, scale), ref.out);
    EXPECT_LE(fused, 2 * naive + 1e-6) << dtype_name(dt) << " " << shape_str(s.shape()) << " naive error " << naive;
    mpt::testing::expect_close(r.lse, as_tensor(ref.lse, {s.b, s.h, s.t}), tolerance(DType::F32),
                               fmt::format("lse {} {}", dtype_name(dt), shape_str(s.shape())));
  }
}

TEST(Attention, ForwardBf16WithinTwiceTheNaiveBf16Error) { check_low_precision_forward<bf16>(); }
TEST(Attention, ForwardF16WithinTwiceTheNaiveF16Error) { check_low_precision_forward<f16>(); }

TEST(Attention, ExplicitScaleAndNonContiguousInputs) {
  const Dims s{2, 3, 37, 5};
  // (B, T, H, D) storage viewed as (B, H, T, D), as a model's QKV projection produces it.
  const Tensor q = mpt::testing::random_tensor({2, 37, 3, 5}, DType::F32, 21).transpose(1, 2);
  const Tensor k = mpt::testing::random_tensor({2, 37, 3, 5}, DType::F32, 22).transpose(1, 2);
  const Tensor v = mpt::testing::random_tensor({2, 37, 3, 5}, DType::F32, 23).transpose(1, 2);
  const auto r = ops::causal_attention(q, k, v, {.scale = 0.3});
  const Ref ref = ref_forward(s, q.contiguous().to_vector<double>(), k.contiguous().to_vector<double>(),
                              v.contiguous().to_vector<double>(), 0.3);
  mpt::testing::expect_close(r.out, as_tensor(ref.out, s.shape()), tolerance(DType::F32), "scale 0.3");
  EXPECT_TRUE(same_bits(r.out, ops::causal_attention(q.contiguous(), k.contiguous(), v.contiguous(), {0.3}).out));
}

TEST(Attention, BackwardMatchesFiniteDifferencesInFloat64) {
  for (const Dims& s : {Dims{1, 2, 7, 8}, Dims{1, 1, 70, 3}}) {  // 70: two blocks; 3: padded head dimension
    const Tensor q = mpt::testing::random_tensor(s.shape(), DType::F64, 31 + s.t);
    const Tensor k = mpt::testing::random_tensor(s.shape(), DType::F64, 32 + s.t);
    const Tensor v = mpt::testing::random_tensor(s.shape(), DType::F64, 33 + s.t);
    const Tensor w = mpt::testing::random_tensor(s.shape(), DType::F64, 34 + s.t);
    const auto numeric = mpt::testing::numeric_gradients(
        [](const std::vector<Tensor>& in) { return ops::causal_attention(in[0], in[1], in[2]).out; }, {q, k, v}, w);
    const auto f = ops::causal_attention(q, k, v);
    const auto g = ops::causal_attention_backward(w, q, k, v, f.out, f.lse);
    const std::string what = shape_str(s.shape());
    mpt::testing::expect_close(g.dq, numeric[0], {1e-6, 1e-8}, "dq vs finite differences " + what);
    mpt::testing::expect_close(g.dk, numeric[1], {1e-6, 1e-8}, "dk vs finite differences " + what);
    mpt::testing::expect_close(g.dv, numeric[2], {1e-6, 1e-8}, "dv vs finite differences " + what);
  }
}

// f32 and bf16 gradients against float64 naive backward from the same (rounded) inputs and forward output: the
// kernel computes in float and rounds each gradient once, so the dtype's tolerance applies.
TEST(Attention, BackwardMatchesFloat64ReferenceInF32AndBf16) {
  mpt::testing::PoisonAllocations poison;
  for (DType dt : {DType::F32, DType::BF16}) {
    for (const Dims& s : {Dims{1, 3, 7, 8}, Dims{2, 2, 100, 64}, Dims{1, 2, 257, 8}}) {
      const Tensor q = mpt::testing::random_tensor(s.shape(), dt, 41 + s.t);
      const Tensor k = mpt::testing::random_tensor(s.shape(), dt, 42 + s.t);
      const Tensor v = mpt::testing::random_tensor(s.shape(), dt, 43 + s.t);
      const Tensor dout = mpt::testing::random_tensor(s.shape(), dt, 44 + s.t);
      const auto f = ops::causal_attention(q, k, v);
      const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
      const Ref ref = ref_backward(s, q.to_vector<double>(), k.to_vector<double>(), v.to_vector<double>(),
                                   f.out.to_vector<double>(), dout.to_vector<double>(), 1 / std::sqrt(double(s.d)));
      const std::string what = fmt::format("{} {}", dtype_name(dt), shape_str(s.shape()));
      mpt::testing::expect_close(g.dq, as_tensor(ref.dq, s.shape()), tolerance(dt), "dq " + what);
      mpt::testing::expect_close(g.dk, as_tensor(ref.dk, s.shape()), tolerance(dt), "dk " + what);
      mpt::testing::expect_close(g.dv, as_tensor(ref.dv, s.shape()), tolerance(dt), "dv " + what);
    }
  }
}

// CPUs without AVX-512 run the generic build of the loops: same math, checked here against float64 too.
TEST(Attention, GenericBuildMatchesFloat64Reference) {
  struct Restore {
    ~Restore() { kernels::cpu::set_attention_avx512(true); }
  } restore;
  kernels::cpu::set_attention_avx512(false);
  mpt::testing::PoisonAllocations poison;
  const Dims s{2, 2, 100, 24};
  const double scale = 1 / std::sqrt(24.0);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor q = mpt::testing::random_tensor(s.shape(), dt, 91);
    const Tensor k = mpt::testing::random_tensor(s.shape(), dt, 92);
    const Tensor v = mpt::testing::random_tensor(s.shape(), dt, 93);
    const Tensor dout = mpt::testing::random_tensor(s.shape(), dt, 94);
    const auto f = ops::causal_attention(q, k, v);
    const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
    const auto qd = q.to_vector<double>(), kd = k.to_vector<double>(), vd = v.to_vector<double>();
    const Ref rf = ref_forward(s, qd, kd, vd, scale);
    const Ref rb = ref_backward(s, qd, kd, vd, f.out.to_vector<double>(), dout.to_vector<double>(), scale);
    const std::string what = fmt::format("generic {}", dtype_name(dt));
    mpt::testing::expect_close(f.out, as_tensor(rf.out, s.shape()), tolerance(dt), "out " + what);  // rounded once
    mpt::testing::expect_close(f.lse, as_tensor(rf.lse, {s.b, s.h, s.t}), tolerance(DType::F32), "lse " + what);
    mpt::testing::expect_close(g.dq, as_tensor(rb.dq, s.shape()), tolerance(dt), "dq " + what);
    mpt::testing::expect_close(g.dk, as_tensor(rb.dk, s.shape()), tolerance(dt), "dk " + what);
    mpt::testing::expect_close(g.dv, as_tensor(rb.dv, s.shape()), tolerance(dt), "dv " + what);
  }
}

TEST(Attention, BackwardAccumulatesIntoGivenGradients) {
  const Dims s{1, 2, 33, 8};
  const Tensor q = mpt::testing::random_tensor(s.shape(), DType::F64, 51);
  const Tensor k = mpt::testing::random_tensor(s.shape(), DType::F64, 52);
  const Tensor v = mpt::testing::random_tensor(s.shape(), DType::F64, 53);
  const Tensor dout = mpt::testing::random_tensor(s.shape(), DType::F64, 54);
  const auto f = ops::causal_attention(q, k, v);
  const auto fresh = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
  ops::AttentionGrads given{mpt::testing::random_tensor(s.shape(), DType::F64, 55),
                            mpt::testing::random_tensor(s.shape(), DType::F64, 56),
                            mpt::testing::random_tensor(s.shape(), DType::F64, 57)};
  const auto before = std::vector<Tensor>{given.dq.clone(), given.dk.clone(), given.dv.clone()};
  const auto out = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse, {}, given);
  EXPECT_TRUE(out.dq.shares_storage(given.dq) && out.dk.shares_storage(given.dk) && out.dv.shares_storage(given.dv));
  const Tensor* got[] = {&given.dq, &given.dk, &given.dv};
  const Tensor* add[] = {&fresh.dq, &fresh.dk, &fresh.dv};
  for (int i = 0; i < 3; ++i) {
    const auto g = got[i]->to_vector<double>(), b = before[i].to_vector<double>(), a = add[i]->to_vector<double>();
    for (size_t e = 0; e < g.size(); ++e) ASSERT_EQ(g[e], b[e] + a[e]) << "gradient " << i << " element " << e;
  }
}

// Changing keys and values at positions >= cut must leave every earlier output, lse and dq row bit-identical.
TEST(Attention, IsExactlyCausal) {
  const Dims s{1, 2, 100, 16};
  for (int64_t cut : {37, 64, 70}) {
    const Tensor q = mpt::testing::random_tensor(s.shape(), DType::F32, 61);
    const Tensor k = mpt::testing::random_tensor(s.shape(), DType::F32, 62);
    const Tensor v = mpt::testing::random_tensor(s.shape(), DType::F32, 63);
    const Tensor dout = mpt::testing::random_tensor(s.shape(), DType::F32, 64);
    Tensor k2 = k.clone(), v2 = v.clone();
    k2.slice(2, cut, s.t).copy_(mpt::testing::random_tensor({1, 2, s.t - cut, 16}, DType::F32, 65, 4.0));
    v2.slice(2, cut, s.t).copy_(mpt::testing::random_tensor({1, 2, s.t - cut, 16}, DType::F32, 66, 4.0));
    const auto a = ops::causal_attention(q, k, v), b = ops::causal_attention(q, k2, v2);
    EXPECT_FALSE(same_bits(a.out.slice(2, cut, s.t), b.out.slice(2, cut, s.t))) << "the change had no effect";
    EXPECT_TRUE(same_bits(a.out.slice(2, 0, cut), b.out.slice(2, 0, cut))) << "out, cut " << cut;
    EXPECT_TRUE(same_bits(a.lse.slice(2, 0, cut), b.lse.slice(2, 0, cut))) << "lse, cut " << cut;
    const auto ga = ops::causal_attention_backward(dout, q, k, v, a.out, a.lse);
    const auto gb = ops::causal_attention_backward(dout, q, k2, v2, b.out, b.lse);
    EXPECT_TRUE(same_bits(ga.dq.slice(2, 0, cut), gb.dq.slice(2, 0, cut))) << "dq, cut " << cut;
  }
}

TEST(Attention, IsDeterministicAcrossRunsAndThreadCounts) {
  const Dims s{2, 3, 130, 24};
  const Tensor q = mpt::testing::random_tensor(s.shape(), DType::BF16, 71);
  const Tensor k = mpt::testing::random_tensor(s.shape(), DType::BF16, 72);
  const Tensor v = mpt::testing::random_tensor(s.shape(), DType::BF16, 73);
  const Tensor dout = mpt::testing::random_tensor(s.shape(), DType::BF16, 74);
  const int threads = omp_get_max_threads();
  std::vector<Tensor> runs[3];
  for (int run = 0; run < 3; ++run) {
    omp_set_num_threads(run == 1 ? 1 : std::max(2, threads));
    const auto f = ops::causal_attention(q, k, v);
    const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
    runs[run] = {f.out, f.lse, g.dq, g.dk, g.dv};
  }
  omp_set_num_threads(threads);
  for (int run = 1; run < 3; ++run)
    for (size_t i = 0; i < runs[0].size(); ++i) EXPECT_TRUE(same_bits(runs[0][i], runs[run][i])) << run << " " << i;
}

// T = 2048: the op allocates nothing of size T x T (its scratch is per block and per head, O(T * D)).
TEST(Attention, LongSequenceNeverAllocatesTxT) {
  const Dims s{1, 2, 2048, 64};
  const Tensor q = mpt::testing::random_tensor(s.shape(), DType::F32, 81);
  const Tensor k = mpt::testing::random_tensor(s.shape(), DType::F32, 82);
  const Tensor v = mpt::testing::random_tensor(s.shape(), DType::F32, 83);
  const Tensor dout = mpt::testing::random_tensor(s.shape(), DType::F32, 84);
  const auto before = memory_stats(Device::cpu()).current_bytes;
  reset_peak_memory_stats(Device::cpu());
  const auto f = ops::causal_attention(q, k, v);
  const auto g = ops::causal_attention_backward(dout, q, k, v, f.out, f.lse);
  const int64_t used = memory_stats(Device::cpu()).peak_bytes - before;
  const int64_t txt = s.heads() * s.t * s.t * 4;  // 32 MiB: what one f32 score matrix per head would take
  EXPECT_LE(used, 4 * static_cast<int64_t>(q.nbytes()) + 65536) << "T x T would be " << txt;
  EXPECT_LT(used, txt / 4);
  // The last rows of the second head against float64, computed for those rows only.
  const auto qd = q.to_vector<double>(), kd = k.to_vector<double>(), vd = v.to_vector<double>();
  const auto out = f.out.to_vector<double>();
  const double scale = 1.0 / 8;
  for (int64_t i : {0, 1000, 2046, 2047}) {
    const int64_t base = s.t * s.d;  // head 1
    std::vector<double> p(i + 1);
    double mx = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= i; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < s.d; ++c) dot += qd[base + i * s.d + c] * kd[base + j * s.d + c];
      mx = std::max(mx, p[j] = dot * scale);
    }
    for (double& e : p) sum += (e = std::exp(e - mx));
    for (int64_t c = 0; c < s.d; ++c) {
      double ref = 0;
      for (int64_t j = 0; j <= i; ++j) ref += p[j] / sum * vd[base + j * s.d + c];
      EXPECT_NEAR(out[base + i * s.d + c], ref, 1e-5 + 1.3e-6 * std::abs(ref)) << "row " << i << " col " << c;
    }
  }
  for (const Tensor* t : {&g.dq, &g.dk, &g.dv}) {
    const auto vals = t->to_vector<double>();
    EXPECT_TRUE(std::all_of(vals.begin(), vals.end(), [](double e) { return std::isfinite(e); }));
  }
}

TEST(Attention, RejectsBadArguments) {
  const Tensor x = Tensor::zeros({1, 2, 3, 4});
  EXPECT_MPT_ERROR(ops::causal_attention(Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4}), Tensor::zeros({2, 3, 4})),
                   "[causal_attention] q must be (B, H, T, D), got f32[2, 3, 4]");
  EXPECT_MPT_ERROR(ops::causal_attention(x, Tensor::zeros({1, 2, 4, 4}), x), "[causal_attention] k must have shape");
  EXPECT_MPT_ERROR(ops::causal_attention(x, x, Tensor::zeros({1, 2, 3, 4}, DType::BF16)), "dtype mismatch");
  const Tensor ints = Tensor::zeros({1, 2, 3, 4}, DType::I32);
  EXPECT_MPT_ERROR(ops::causal_attention(ints, ints, ints),
                   "expected a f32, f64, f16 or bf16 tensor");
  EXPECT_MPT_ERROR(ops::causal_attention(x, x, x, {.scale = -1}), "scale must be finite and >= 0");
  const Tensor empty_d = Tensor::zeros({1, 2, 3, 0});
  EXPECT_MPT_ERROR(ops::causal_attention(empty_d, empty_d, empty_d), "the head dimension D must be at least 1");
  const Tensor no_tokens = Tensor::zeros({1, 2, 0, 4});
  EXPECT_EQ(ops::causal_attention(no_tokens, no_tokens, no_tokens).lse.numel(), 0);
  const auto f = ops::causal_attention(x, x, x);
  EXPECT_MPT_ERROR(ops::causal_attention_backward(x, x, x, x, f.out, f.lse.to(DType::F64)), "lse must be f32");
  EXPECT_MPT_ERROR(ops::causal_attention_backward(x, x, x, x, f.out, Tensor::zeros({1, 2, 4})), "lse must have shape");
  EXPECT_MPT_ERROR(ops::causal_attention_backward(Tensor::zeros({1, 2, 3, 5}), x, x, x, f.out, f.lse),
                   "dout must have shape");
  EXPECT_MPT_ERROR(ops::causal_attention_backward(x, x, x, x, f.out, f.lse, {}, {x.clone(), {}, {}}),
                   "give all three of dq, dk, dv");
  const Tensor strided = Tensor::zeros({1, 3, 2, 4}).transpose(1, 2);
  EXPECT_MPT_ERROR(ops::causal_attention_backward(x, x, x, x, f.out, f.lse, {}, {x.clone(), x.clone(), strided}),
                   "must be contiguous");
}
