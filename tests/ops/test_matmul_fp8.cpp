// tests/ops/test_matmul_fp8.cpp: FP8 matmul (per-tensor and 1x128 / 128x128 block scaling) against dequantize(A) x
// dequantize(B) in float64, both block-scaling algorithms, FP8 outputs (saturation, amax) and FP8 errors.
#include <gtest/gtest.h>

#include <cmath>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/gemm.h"
#include "matmul_reference.h"
#include "mpt/ops/matmul.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::expect_gemm_close;
using mpt::testing::gemm_reference;
using mpt::testing::HostOperand;
using mpt::testing::random_tensor;
using Kind = ops::Fp8Scaling::Kind;

namespace {

constexpr int64_t kB = 128;
int64_t blocks(int64_t x) { return (x + kB - 1) / kB; }

// Fresh FP8 codes (never zero) with values up to a few units.
Tensor fp8_codes(const Shape& shape, DType fmt, uint64_t seed) { return random_tensor(shape, DType::F32, seed, 3.0).to(fmt); }

// Random positive scales: powers of two in [1/8, 8] or arbitrary values in [1/4, 4].
Tensor random_scales(const Shape& shape, bool pow2, uint64_t seed) {
  Generator gen(seed);
  std::vector<double> u = Tensor::uniform(shape, 0, 1, DType::F64, Device::cpu(), gen).to_vector<double>();
  for (double& x : u) x = pow2 ? std::ldexp(1.0, static_cast<int>(std::floor(x * 7)) - 3) : 0.25 + 3.75 * x;
  return Tensor::from_vector(u, shape).to(DType::F32);
}

// An operand with its scaling: op() is rows x k (m x k for A, n x k for op(B)^T), stored (rows, k) when k_inner
// (A plain, B transposed) else (k, rows); scales for `kind`.
struct Fp8Operand {
  Tensor codes;
  ops::Fp8Scaling scaling;
  HostOperand host(bool trans, bool k_is_col) const {
    HostOperand h(codes, trans, k_is_col);
    const std::vector<double> s = scaling.scale_inv.to_vector<double>();
    const Kind kind = scaling.kind;
    const int64_t kb = scaling.scale_inv.dim() >= 2 ? scaling.scale_inv.size(-1) : 1;
    const int64_t per_batch = scaling.scale_inv.dim() == 3 ? scaling.scale_inv.numel() / scaling.scale_inv.size(0) : 0;
    h.scale = [s, kind, kb, per_batch](int64_t b, int64_t row, int64_t kk) {
      if (kind == Kind::PerTensor) return s[0];
      const int64_t r = kind == Kind::Block1x128 ? row : row / kB;
      return s[static_cast<size_t>(b * per_batch + r * kb + kk / kB)];
    };
    return h;
  }
};

Fp8Operand make_operand(int64_t batch, int64_t rows, int64_t k, bool k_inner, DType fmt, Kind kind, bool pow2,
                        uint64_t seed) {
  Shape shape = k_inner ? Shape{rows, k} : Shape{k, rows};
  Shape sshape = kind == Kind::PerTensor ? Shape{1} : Shape{kind == Kind::Block1x128 ? rows : blocks(rows), blocks(k)};
  if (batch > 0) {
    shape.insert(shape.begin(), batch);
    if (kind != Kind::PerTensor) sshape.insert(sshape.begin(), batch);
  }
  return {fp8_codes(shape, fmt, seed), {kind, random_scales(sshape, pow2, seed + 1000)}};
}

}  // namespace

TEST(Fp8Matmul, DefaultOutputIsF32) {
  const Fp8Operand a = make_operand(0, 3, 4, true, DType::F8E4M3, Kind::PerTensor, true, 1);
  const Fp8Operand b = make_operand(0, 5, 4, true, DType::F8E4M3, Kind::PerTensor, true, 2);
  EXPECT_EQ(ops::matmul(a.codes, b.codes, {.trans_b = true, .scale_a = a.scaling, .scale_b = b.scaling}).dtype(),
            DType::F32);
}

// Runs the enclosing scope with the vector kernels on or off (kernels/cpu/convert.h): off, FP8 GEMMs take the
// oneDNN paths (one bf16 GEMM, or one per K slice for block scales) instead of the AVX512-BF16 kernel.
struct VectorKernels {
  explicit VectorKernels(bool on) { kernels::cpu::set_vector_conversions(on); }
  ~VectorKernels() { kernels::cpu::set_vector_conversions(true); }
};

class Fp8BlockPaths : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(VectorKernelsOnOff, Fp8BlockPaths, ::testing::Bool());

TEST_P(Fp8BlockPaths, PerTensorScalesEveryFormatPairAndOutput) {
  // On: the AVX512-BF16 kernel with the per-tensor scales as uniform block scales; off: one oneDNN bf16 GEMM.
  mpt::testing::PoisonAllocations poison;
  const VectorKernels vector(GetParam());
  const int64_t m = 37, n = 53, k = 300;
  uint64_t seed = 1;
  for (DType fa : {DType::F8E4M3, DType::F8E5M2})
    for (DType fb : {DType::F8E4M3, DType::F8E5M2})
      for (auto [ta, tb] : std::vector<std::pair<bool, bool>>{{false, true}, {true, false}, {false, false}})
        for (DType out : {DType::F32, DType::BF16, DType::F16}) {
          Fp8Operand a = make_operand(0, m, k, !ta, fa, Kind::PerTensor, false, seed++);
          Fp8Operand b = make_operand(0, n, k, tb, fb, Kind::PerTensor, false, seed++);
          const ops::MatmulOptions opt{.trans_a = ta, .trans_b = tb, .alpha = 0.75f, .out_dtype = out,
                                       .scale_a = a.scaling, .scale_b = b.scaling};
          const Tensor c = ops::matmul(a.codes, b.codes, opt);
          EXPECT_EQ(c.dtype(), out);
          const auto ref = gemm_reference(a.host(ta, true), b.host(tb, false), 0.75, {m, n});
          expect_gemm_close(c, ref, out, fmt::format("{} x {} -> {} ta={} tb={}", fa, fb, out, ta, tb));
        }
}


TEST_P(Fp8BlockPaths, BlockScalingMatchesDequantizedFloat64) {
  mpt::testing::PoisonAllocations poison;
  const VectorKernels vector(GetParam());
  // m: 130 = 2 x 48 + 34 rows (row tiles of the AVX512-BF16 kernel, a partial 12-row register tile), n: 197 (a
  // partial 32-column panel), k: 300 (K blocks of 128, 128, 44).
  const int64_t m = 130, n = 197, k = 300;
  uint64_t seed = 100;
  struct Case {
    const char* what;
    bool ta, tb;
    Kind ka, kb;
  };
  for (const Case& cs : {Case{"fprop x(1x128) W^T(128x128)", false, true, Kind::Block1x128, Kind::Block128x128},
                         Case{"dgrad dy(1x128) W(128x128)", false, false, Kind::Block1x128, Kind::Block128x128},
                         Case{"wgrad dy^T(1x128) x(1x128)", true, false, Kind::Block1x128, Kind::Block1x128},
                         Case{"128x128 x per-tensor", true, true, Kind::Block128x128, Kind::PerTensor}})
    for (bool pow2 : {true, false})
      for (DType out : {DType::F32, DType::BF16}) {
        const DType fb = cs.ka == Kind::Block128x128 ? DType::F8E5M2 : DType::F8E4M3;
        Fp8Operand a = make_operand(0, m, k, !cs.ta, DType::F8E4M3, cs.ka, pow2, seed++);
        Fp8Operand b = make_operand(0, n, k, cs.tb, fb, cs.kb, pow2, seed++);
        const ops::MatmulOptions opt{.trans_a = cs.ta, .trans_b = cs.tb, .alpha = 1.5f, .out_dtype = out,
                                     .scale_a = a.scaling, .scale_b = b.scaling};
        const Tensor c = ops::matmul(a.codes, b.codes, opt);
        const auto ref = gemm_reference(a.host(cs.ta, true), b.host(cs.tb, false), 1.5, {m, n});
        expect_gemm_close(c, ref, out, fmt::format("{} pow2={} -> {}", cs.what, pow2, out));
      }
}

TEST_P(Fp8BlockPaths, AccumulatesIntoCWithBetaAndOddK) {
  // C = alpha * dequant(A) dequant(B) + beta * C into a strided bf16 view (ldc > n), K odd (the last bf16 pair is
  // half padding), A stored transposed (the kernel's pair-major packing) and B not (its column panels).
  mpt::testing::PoisonAllocations poison;
  const VectorKernels vector(GetParam());
  const int64_t m = 61, n = 45, k = 259;
  const Fp8Operand a = make_operand(0, m, k, false, DType::F8E5M2, Kind::Block1x128, false, 41);
  const Fp8Operand b = make_operand(0, n, k, false, DType::F8E4M3, Kind::Block128x128, false, 42);
  for (DType out : {DType::F32, DType::BF16}) {
    const Tensor storage = random_tensor({m, n + 7}, out, 43, 2.0);
    const Tensor c = storage.slice(1, 0, n);
    const Tensor c0 = c.contiguous();
    const ops::MatmulOptions opt{.trans_a = true, .alpha = 0.75f, .scale_a = a.scaling, .scale_b = b.scaling};
    ops::matmul_out(a.codes, b.codes, c, 0.5f, opt);
    const auto ref = gemm_reference(a.host(true, true), b.host(false, false), 0.75, {m, n}, c0, 0.5);
    expect_gemm_close(c, ref, out, fmt::format("beta -> {}", out), 0x1p-24, c0, 0.5);
  }
}

TEST(Fp8Matmul, FoldedAndPerKBlockAlgorithmsAgreeWithTheReference) {
  // Power-of-two scales can be folded into the bf16 operands; force each algorithm on the same inputs.
  namespace kc = kernels::cpu;
  const int64_t m = 77, n = 141, k = 385;
  const Fp8Operand a = make_operand(0, m, k, true, DType::F8E4M3, Kind::Block1x128, true, 7);
  const Fp8Operand b = make_operand(0, n, k, true, DType::F8E4M3, Kind::Block128x128, true, 8);
  const auto ref = gemm_reference(a.host(false, true), b.host(true, false), 1.0, {m, n});
  for (kc::BlockScaleAlgo algo : {kc::BlockScaleAlgo::Fold, kc::BlockScaleAlgo::PerKBlock}) {
    Tensor c = Tensor::full({m, n}, std::nan(""), DType::F32);
    kc::GemmParams p;
    p.m = m, p.n = n, p.k = k, p.trans_b = true, p.lda = k, p.ldb = k, p.ldc = n;
    kc::Fp8GemmArgs args;
    args.a = {kc::ScaleMode::Block1x128, a.scaling.scale_inv.data<float>()};
    args.b = {kc::ScaleMode::Block128x128, b.scaling.scale_inv.data<float>()};
    args.algo = algo;
    kc::gemm_fp8(p, a.codes.data<f8e4m3>(), b.codes.data<f8e4m3>(), c.data<float>(), args);
    expect_gemm_close(c, ref, DType::F32, algo == kc::BlockScaleAlgo::Fold ? "folded" : "per K block");
  }
}

TEST(Fp8Matmul, BatchedBlockScaling) {
  mpt::testing::PoisonAllocations poison;
  const int64_t batch = 2, m = 45, n = 131, k = 200;
  for (bool batched_b : {false, true})
    for (bool pow2 : {true, false}) {
      Fp8Operand a = make_operand(batch, m, k, true, DType::F8E4M3, Kind::Block1x128, pow2, 11);
      Fp8Operand b = make_operand(batched_b ? batch : 0, n, k, true, DType::F8E4M3, Kind::Block128x128, pow2, 12);
      const ops::MatmulOptions opt{.trans_b = true, .out_dtype = DType::BF16, .scale_a = a.scaling, .scale_b = b.scaling};
      const Tensor c = ops::matmul(a.codes, b.codes, opt);
      ASSERT_EQ(c.shape(), (Shape{batch, m, n}));
      const auto ref = gemm_reference(a.host(false, true), b.host(true, false), 1.0, c.shape());
      expect_gemm_close(c, ref, DType::BF16, fmt::format("batched b={} pow2={}", batched_b, pow2));
    }
}

TEST(Fp8Matmul, Fp8OutputSaturatesAndRecordsAmax) {
  const int64_t m = 67, n = 91, k = 260;
  uint64_t seed = 300;
  for (DType out : {DType::F8E4M3, DType::F8E5M2})
    for (Kind kind : {Kind::PerTensor, Kind::Block1x128}) {
      Fp8Operand a = make_operand(0, m, k, true, DType::F8E4M3, kind, false, seed++);
      Fp8Operand b = make_operand(0, n, k, true, DType::F8E4M3, kind, false, seed++);
      ops::MatmulOptions opt{.trans_b = true, .alpha = 0.5f, .out_dtype = DType::F32, .scale_a = a.scaling,
                             .scale_b = b.scaling};
      const Tensor d32 = ops::matmul(a.codes, b.codes, opt);
      const auto ref = gemm_reference(a.host(false, true), b.host(true, false), 0.5, {m, n});
      expect_gemm_close(d32, ref, DType::F32, "f32 D");
      const std::vector<float> d = d32.to_vector<float>();
      float dmax = 0;
      for (float x : d) dmax = std::max(dmax, std::abs(x));
      const float fmax = out == DType::F8E4M3 ? kE4M3Max : kE5M2Max;
      const float scale = fmax / (0.7f * dmax);  // the largest 30% of the range saturates
      opt.out_dtype = out;
      opt.out_scale = Tensor::full({1}, scale, DType::F32);
      opt.out_amax = Tensor::full({1}, -1.0, DType::F32);
      Tensor q;
      {
        mpt::testing::PoisonAllocations poison;
        q = ops::matmul(a.codes, b.codes, opt);
      }
      const std::vector<float> qv = q.to_vector<float>();
      int saturated = 0;
      for (size_t i = 0; i < d.size(); ++i) {
        const float want = out == DType::F8E4M3 ? static_cast<float>(f8e4m3(d[i] * scale))
                                                : static_cast<float>(f8e5m2(d[i] * scale));
        ASSERT_EQ(qv[i], want) << "element " << i << " D " << d[i];
        if (std::abs(d[i] * scale) > fmax) {
          ++saturated;
          EXPECT_EQ(qv[i], std::copysign(fmax, d[i]));
        }
      }
      EXPECT_GT(saturated, 0) << "the test must exercise saturation";
      EXPECT_EQ(opt.out_amax.item<float>(), dmax);
      double ref_max = 0, bound = 0;
      const std::vector<double> r = ref.value.to_vector<double>(), s = ref.abs_sum.to_vector<double>();
      for (size_t i = 0; i < r.size(); ++i) ref_max = std::max(ref_max, std::abs(r[i])), bound = std::max(bound, s[i]);
      EXPECT_NEAR(opt.out_amax.item<float>(), ref_max, mpt::testing::gamma_n(k + 8, 0x1p-24) * bound);
    }
}

TEST(Fp8Matmul, ErrorsNameTheProblem) {
  const Fp8Operand a = make_operand(0, 4, 130, true, DType::F8E4M3, Kind::Block1x128, true, 1);
  const Fp8Operand b = make_operand(0, 6, 130, true, DType::F8E5M2, Kind::Block128x128, true, 2);
  const ops::MatmulOptions ok{.trans_b = true, .scale_a = a.scaling, .scale_b = b.scaling};
  EXPECT_NO_THROW(ops::matmul(a.codes, b.codes, ok));
  EXPECT_MPT_ERROR(ops::matmul(a.codes, b.codes, {.trans_b = true, .scale_b = b.scaling}), "needs scale_a.scale_inv");
  EXPECT_MPT_ERROR(ops::matmul(a.codes, b.codes, {.trans_b = true, .scale_a = a.scaling,
                                                  .scale_b = {Kind::Block1x128, a.scaling.scale_inv}}),
                   "1x128 block scale_b.scale_inv for f8e5m2[6, 130] cpu (non-K rows 6, k 130) must have shape [6, 2]");
  EXPECT_MPT_ERROR(ops::matmul(a.codes, b.codes.to(DType::BF16), ok), "unsupported dtype pair");
  ops::MatmulOptions fp8_out = ok;
  fp8_out.out_dtype = DType::F8E4M3;
  EXPECT_MPT_ERROR(ops::matmul(a.codes, b.codes, fp8_out), "needs out_scale");
  fp8_out.out_scale = Tensor::ones({1});
  EXPECT_MPT_ERROR(ops::matmul_out(a.codes, b.codes, Tensor::zeros({4, 6}, DType::F8E4M3), 1.0f, fp8_out),
                   "cannot accumulate");
  ops::MatmulOptions amax_f32 = ok;
  amax_f32.out_amax = Tensor::zeros({1});
  EXPECT_MPT_ERROR(ops::matmul(a.codes, b.codes, amax_f32), "apply to FP8 outputs only");
  EXPECT_MPT_ERROR(ops::matmul_backward(Tensor::ones({4, 6}), a.codes, b.codes, ok), "quantize dc");
}
