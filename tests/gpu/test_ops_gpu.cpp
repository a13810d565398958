// tests/gpu/test_ops_gpu.cpp: elementwise, GELU, LayerNorm, softmax and cross-entropy forward and backward on cuda:0 against the CPU backend (bit-exact under emulation where the arithmetic order is the same; skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>
#include <string>

#include "device_test.h"
#include "norm_checks.h"
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::Match;
using testing::expect_match;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

// Every op in this file runs the same functor in the same order on both backends (kernels/math/*.h; reductions over
// rows in the fixed order of docs/design.md), so under emulation the bits must agree. On a real GPU nvcc contracts
// a * b + c into FMAs and uses libdevice, hence the per-dtype tolerance with a small slack there.
const DType kFloat16s[] = {DType::F32, DType::F16, DType::BF16};

// Not order-identical, even under emulation: reductions along a row. The CPU kernels sum a row with `omp simd`
// lanes (kernels/cpu/layernorm.cpp:35-40, kernels/cpu/softmax.cpp) and LayerNorm's dweight/dbias over a fixed number
// of row chunks (kernels/cpu/layernorm.cpp:14, 125); the CUDA kernels sum strided per lane and then through a warp
// tree (kernels/cuda/layernorm.cu: a row per warp) and dweight/dbias over 512 block slices in groups
// (partial_sums.cuh); the cross-entropy's Mean/Sum over rows likewise. tests/emu/test_layernorm_emu.cpp documents the
// same (tolerances there).
// The statistics then agree to a few float roundings and each output, rounded once to its dtype, may land one ulp
// (2 u <= 2 rtol of tolerance(dtype)) away: slack 2 for outputs, 4 for gradients (one more reduction: dx's row means,
// dweight's sum over rows).
Match row_reduced(DType dt, double slack) { return Match::close(dt, slack); }

// The CPU's saved statistics on the device: backward compared on identical inputs.
ops::LayerNormSaved saved_on_gpu(const ops::LayerNormSaved& s) { return {to_gpu(s.mean), to_gpu(s.rstd)}; }

std::string tag(const char* what, DType dt) { return std::string(what) + " " + std::string(dtype_name(dt)); }

TEST(GpuOps, ElementwiseForwardWithBroadcastsMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor a = random_tensor({3, 5, 77}, dt, 1), b = random_tensor({3, 5, 77}, dt, 2);
    const Tensor bias = random_tensor({77}, dt, 3), mid = random_tensor({3, 1, 77}, dt, 4);
    const Tensor col = random_tensor({5, 1}, dt, 5);  // not a trailing suffix: b is expanded first
    const Tensor ga = to_gpu(a), gb = to_gpu(b);
    expect_match(ops::add(ga, gb), ops::add(a, b), Match::exact(dt), tag("add", dt));
    expect_match(ops::add(ga, to_gpu(bias)), ops::add(a, bias), Match::exact(dt), tag("add [C] bias", dt));
    expect_match(ops::add(ga, to_gpu(mid)), ops::add(a, mid), Match::exact(dt), tag("add [B,1,C]", dt));
    expect_match(ops::mul(ga, gb), ops::mul(a, b), Match::exact(dt), tag("mul", dt));
    expect_match(ops::mul(ga, to_gpu(col)), ops::mul(a, col), Match::exact(dt), tag("mul [T,1]", dt));
    expect_match(ops::scale(ga, -0.37), ops::scale(a, -0.37), Match::exact(dt), tag("scale", dt));
    // add_: in place, with alpha and a broadcast operand.
    Tensor ca = a.clone(), cg = ga.clone();
    ops::add_(ca, b, 0.25);
    ops::add_(cg, gb, 0.25);
    expect_match(cg, ca, Match::exact(dt), tag("add_ alpha", dt));
    ops::add_(ca, bias, -3.0);
    ops::add_(cg, to_gpu(bias), -3.0);
    expect_match(cg, ca, Match::exact(dt), tag("add_ broadcast bias", dt));
    ops::add_(ca, mid);
    ops::add_(cg, to_gpu(mid));
    expect_match(cg, ca, Match::exact(dt), tag("add_ broadcast [B,1,C]", dt));
  }
}

TEST(GpuOps, ElementwiseBackwardMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor a = random_tensor({3, 5, 77}, dt, 6), mid = random_tensor({3, 1, 77}, dt, 7);
    const Tensor dy = random_tensor({3, 5, 77}, dt, 8), bias = random_tensor({77}, dt, 9);
    const auto ab = ops::add_backward(dy, mid.shape());
    const auto gab = ops::add_backward(to_gpu(dy), mid.shape());
    expect_match(gab.da, ab.da, Match::exact(dt), tag("add_backward da", dt));
    expect_match(gab.db, ab.db, Match::exact(dt), tag("add_backward db (sum over T)", dt));
    const auto mb = ops::mul_backward(dy, a, bias);
    const auto gmb = ops::mul_backward(to_gpu(dy), to_gpu(a), to_gpu(bias));
    expect_match(gmb.da, mb.da, Match::exact(dt), tag("mul_backward da", dt));
    expect_match(gmb.db, mb.db, Match::exact(dt, 4), tag("mul_backward db (sum over B, T)", dt));
    // Accumulating forms: into existing gradients.
    const Tensor da0 = random_tensor({3, 5, 77}, dt, 10), db0 = random_tensor({77}, dt, 11);
    const auto acc = ops::mul_backward(dy, a, bias, da0.clone(), db0.clone());
    const auto gacc = ops::mul_backward(to_gpu(dy), to_gpu(a), to_gpu(bias), to_gpu(da0), to_gpu(db0));
    expect_match(gacc.da, acc.da, Match::exact(dt), tag("mul_backward da +=", dt));
    expect_match(gacc.db, acc.db, Match::exact(dt, 4), tag("mul_backward db +=", dt));
    expect_match(ops::scale_backward(to_gpu(dy), 1.5, to_gpu(da0)), ops::scale_backward(dy, 1.5, da0.clone()),
                 Match::exact(dt), tag("scale_backward +=", dt));
  }
}

TEST(GpuOps, GeluForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({37, 203}, dt, 12, 3.0), dy = random_tensor({37, 203}, dt, 13);
    expect_match(ops::gelu(to_gpu(x)), ops::gelu(x), Match::exact(dt), tag("gelu", dt));
    expect_match(ops::gelu_backward(to_gpu(dy), to_gpu(x)), ops::gelu_backward(dy, x), Match::exact(dt),
                 tag("gelu_backward", dt));
    const Tensor dx0 = random_tensor({37, 203}, dt, 14);
    expect_match(ops::gelu_backward(to_gpu(dy), to_gpu(x), to_gpu(dx0)), ops::gelu_backward(dy, x, dx0.clone()),
                 Match::exact(dt), tag("gelu_backward +=", dt));
  }
  // Large rows through the vectorised map kernel (a length that is not a multiple of the vector width).
  const Tensor big = random_tensor({37, 1001}, DType::BF16, 15, 4.0);
  expect_match(ops::gelu(to_gpu(big)), ops::gelu(big), Match::exact(DType::BF16), "gelu bf16 37x1001");
}

TEST(GpuOps, LayerNormForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const std::vector<DType> weight_dtypes = dt == DType::F32 ? std::vector<DType>{dt} : std::vector<DType>{dt, DType::F32};
    for (DType wdt : weight_dtypes) {
      const std::string w = std::string(" weights ") + std::string(dtype_name(wdt));
      const Tensor x = random_tensor({2, 19, 203}, dt, 16, 2.0), dy = random_tensor({2, 19, 203}, dt, 17);
      const Tensor weight = random_tensor({203}, wdt, 18), bias = random_tensor({203}, wdt, 19);
      for (bool with_bias : {true, false}) {
        const std::string b = with_bias ? " bias" : " no bias";
        const Tensor bb = with_bias ? bias : Tensor();
        const auto want = ops::layer_norm(x, weight, bb);
        const auto got = ops::layer_norm(to_gpu(x), to_gpu(weight), with_bias ? to_gpu(bias) : Tensor());
        expect_match(got.y, want.y, row_reduced(dt, 2), tag("layer_norm y", dt) + w + b);
        expect_match(got.saved.mean, want.saved.mean, row_reduced(DType::F32, 2), tag("layer_norm mean", dt) + w + b);
        expect_match(got.saved.rstd, want.saved.rstd, row_reduced(DType::F32, 2), tag("layer_norm rstd", dt) + w + b);
        const auto gw = ops::layer_norm_backward(dy, x, weight, want.saved, with_bias);
        const auto gg = ops::layer_norm_backward(to_gpu(dy), to_gpu(x), to_gpu(weight), saved_on_gpu(want.saved),
                                                 with_bias);
        expect_match(gg.dx, gw.dx, row_reduced(dt, 4), tag("layer_norm dx", dt) + w + b);
        expect_match(gg.dweight, gw.dweight, row_reduced(wdt, 4), tag("layer_norm dweight", dt) + w + b);
        if (with_bias) {
          expect_match(gg.dbias, gw.dbias, row_reduced(wdt, 4), tag("layer_norm dbias", dt) + w + b);
        } else {
          EXPECT_FALSE(gg.dbias.defined());
        }
      }
      // Accumulating into given gradients.
      const Tensor dx0 = random_tensor(x.shape(), dt, 20), dw0 = random_tensor({203}, wdt, 21);
      const Tensor db0 = random_tensor({203}, wdt, 22);
      const auto want = ops::layer_norm(x, weight, bias);
      const auto got = ops::layer_norm(to_gpu(x), to_gpu(weight), to_gpu(bias));
      const auto gw = ops::layer_norm_backward(dy, x, weight, want.saved, true, {dx0.clone(), dw0.clone(), db0.clone()});
      const auto gg = ops::layer_norm_backward(to_gpu(dy), to_gpu(x), to_gpu(weight), saved_on_gpu(want.saved), true,
                                               {to_gpu(dx0), to_gpu(dw0), to_gpu(db0)});
      expect_match(gg.dx, gw.dx, row_reduced(dt, 4), tag("layer_norm dx +=", dt) + w);
      expect_match(gg.dweight, gw.dweight, row_reduced(wdt, 4), tag("layer_norm dweight +=", dt) + w);
      expect_match(gg.dbias, gw.dbias, row_reduced(wdt, 4), tag("layer_norm dbias +=", dt) + w);
    }
  }
}

// split_qkv_heads on the device: q, k, v and d(qkv) (written slot by slot with strided device copies; k unused, so its
// slots are zero-filled through a strided view) have the CPU's bits.
TEST(GpuOps, SplitQkvHeadsAndItsGradientMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const int64_t B = 2, T = 7, H = 3, D = 8, C = H * D;
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor qkv = random_tensor({B, T, 3 * C}, dt, 60);
    const Tensor gq = random_tensor({B, H, T, D}, dt, 61), gv = random_tensor({B, H, T, D}, dt, 62);
    std::vector<Tensor> out;
    for (const bool gpu : {false, true}) {
      const Tensor a = (gpu ? to_gpu(qkv) : qkv.clone()).requires_grad_(true);
      const ops::QkvHeads h = ops::split_qkv_heads(a, H);
      ops::add(ops::sum(ops::mul(h.q, gpu ? to_gpu(gq) : gq)), ops::sum(ops::mul(h.v, gpu ? to_gpu(gv) : gv)))
          .backward();
      out.insert(out.end(), {h.q, h.k, h.v, a.grad()});
    }
    for (size_t i = 0; i < 4; ++i)
      expect_match(out[4 + i], out[i], Match::exact(dt), tag("split_qkv_heads", dt) + " output " + std::to_string(i));
  }
}

// A residual norm's f16/bf16 x beside an f32 residual, on the device: tests/support/norm_checks.h.
TEST(GpuOps, ResidualNormsFoldAHalfSublayerOutputBitForBit) {
  MPT_REQUIRE_GPU(8);
  testing::expect_residual_norm_folds_half_x(to_gpu(Tensor::zeros({1})).device());
}

// A norm's FP8 output on the device: the codes and amax of ops::quantize_fp8 of the f32 norm (norm_checks.h).
TEST(GpuOps, NormFp8OutputIsTheDelayedQuantizationOfTheF32Norm) {
  MPT_REQUIRE_GPU(8);
  testing::expect_norm_fp8_output_is_the_quantized_norm(to_gpu(Tensor::zeros({1})).device());
}

// Under current scaling (two passes and the scale between them on the device): norm_checks.h.
TEST(GpuOps, NormFp8CurrentOutputIsTheCurrentQuantizationOfTheF32Norm) {
  MPT_REQUIRE_GPU(8);
  testing::expect_norm_fp8_current_output_is_the_quantized_norm(to_gpu(Tensor::zeros({1})).device());
}

TEST(GpuOps, NormFp8OutputOfAHalfStream) {
  MPT_REQUIRE_GPU(8);
  testing::expect_half_stream_norm_fp8_output(to_gpu(Tensor::zeros({1})).device());
}

// The norms' y_dtype on the device: an f32 row normalised and stored as bf16/f16 (vector path at 96 columns, scalar
// at 37) has the bits of the f32 norm followed by the cast, on the same backend; its backward reading dy in the half
// dtype has those of the f32 backward of dy widened (accumulating into given gradients too). Against the CPU: as
// LayerNormForwardAndBackwardMatchCpu.
TEST(GpuOps, NormsWriteAHalfOutputOfAnF32InputAsTheCastWouldBitForBit) {
  MPT_REQUIRE_GPU(8);
  for (const DType half : {DType::BF16, DType::F16}) {
    for (const int64_t cols : {96, 37}) {
      for (const int kind : {0, 1, 2}) {  // layer_norm, residual_layer_norm, rms_norm
        const std::string what = tag("norm", half) + " cols " + std::to_string(cols) + " kind " + std::to_string(kind);
        const Tensor x = random_tensor({4, 9, cols}, DType::F32, 40, 2.0);
        const Tensor r = random_tensor({4, 9, cols}, DType::F32, 41);
        const Tensor w = random_tensor({cols}, DType::F32, 42), b = random_tensor({cols}, DType::F32, 43);
        const Tensor dy = to_gpu(random_tensor({4, 9, cols}, half, 44));
        const Tensor gx = to_gpu(x), gr = to_gpu(r), gw = to_gpu(w), gb = to_gpu(b);
        auto norm = [&](const Tensor& in, const Tensor& res, const Tensor& wt, const Tensor& bs,
                        std::optional<DType> y_dtype) -> std::pair<Tensor, ops::LayerNormResult> {
          if (kind == 1) {
            ops::ResidualLayerNormResult o = ops::residual_layer_norm(in, res, wt, bs, 1e-5, y_dtype);
            return {o.sum, {o.y, o.saved}};
          }
          return {in, kind == 2 ? ops::rms_norm(in, wt, 1e-6, y_dtype) : ops::layer_norm(in, wt, bs, 1e-5, y_dtype)};
        };
        const auto [normed_in, fused] = norm(gx, gr, gw, gb, half);
        const auto [unfused_in, unfused] = norm(gx, gr, gw, gb, std::nullopt);
        expect_match(fused.y, unfused.y.to(half), Match::exact(half), what + " y");
        expect_match(fused.saved.rstd, unfused.saved.rstd, Match::exact(DType::F32), what + " rstd");
        expect_match(normed_in, unfused_in, Match::exact(DType::F32), what + " sum");
        const auto cpu = norm(x, r, w, b, half).second;
        expect_match(fused.y, cpu.y, row_reduced(half, 2), what + " y against the CPU");
        const bool bias = kind != 2;
        const auto gf = ops::layer_norm_backward(dy, normed_in, gw, fused.saved, bias);
        const auto gu = ops::layer_norm_backward(dy.to(DType::F32), normed_in, gw, fused.saved, bias);
        expect_match(gf.dx, gu.dx, Match::exact(DType::F32), what + " dx");
        expect_match(gf.dweight, gu.dweight, Match::exact(DType::F32), what + " dweight");
        if (bias) expect_match(gf.dbias, gu.dbias, Match::exact(DType::F32), what + " dbias");
        const Tensor dx0 = to_gpu(random_tensor(x.shape(), DType::F32, 45));
        const auto af =
            ops::layer_norm_backward(dy, normed_in, gw, fused.saved, bias, {dx0.clone(), Tensor(), Tensor()});
        const auto au = ops::layer_norm_backward(dy.to(DType::F32), normed_in, gw, fused.saved, bias,
                                                 {dx0.clone(), Tensor(), Tensor()});
        expect_match(af.dx, au.dx, Match::exact(DType::F32), what + " dx +=");
      }
    }
  }
}

TEST(GpuOps, ResidualLayerNormMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({3, 7, 131}, dt, 23), res = random_tensor({3, 7, 131}, dt, 24, 4.0);
    const Tensor weight = random_tensor({131}, DType::F32, 25), bias = random_tensor({131}, DType::F32, 26);
    const auto want = ops::residual_layer_norm(x, res, weight, bias);
    const auto got = ops::residual_layer_norm(to_gpu(x), to_gpu(res), to_gpu(weight), to_gpu(bias));
    expect_match(got.sum, want.sum, Match::exact(dt), tag("residual sum", dt));
    expect_match(got.y, want.y, row_reduced(dt, 2), tag("residual layer_norm y", dt));
    expect_match(got.saved.mean, want.saved.mean, row_reduced(DType::F32, 2), tag("residual mean", dt));
    expect_match(got.saved.rstd, want.saved.rstd, row_reduced(DType::F32, 2), tag("residual rstd", dt));
    const Tensor dy = random_tensor({3, 7, 131}, dt, 27);
    const auto gw = ops::layer_norm_backward(dy, want.sum, weight, want.saved);
    const auto gg = ops::layer_norm_backward(to_gpu(dy), got.sum, to_gpu(weight), saved_on_gpu(want.saved));
    expect_match(gg.dx, gw.dx, row_reduced(dt, 4), tag("residual layer_norm dx", dt));
    expect_match(gg.dweight, gw.dweight, row_reduced(DType::F32, 4), tag("residual dweight", dt));
  }
}

TEST(GpuOps, SoftmaxForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (int64_t cols : {1, 33, 1000, 1031}) {
      const std::string c = " cols " + std::to_string(cols);
      const Tensor x = random_tensor({2, 9, cols}, dt, 28, 3.0), dy = random_tensor({2, 9, cols}, dt, 29);
      const Tensor y = ops::softmax(x), gy = ops::softmax(to_gpu(x));
      expect_match(gy, y, row_reduced(dt, 2), tag("softmax", dt) + c);
      expect_match(ops::softmax_backward(to_gpu(dy), to_gpu(y)), ops::softmax_backward(dy, y), row_reduced(dt, 4),
                   tag("softmax_backward", dt) + c);
      const Tensor dx0 = random_tensor(x.shape(), dt, 30);
      expect_match(ops::softmax_backward(to_gpu(dy), to_gpu(y), to_gpu(dx0)), ops::softmax_backward(dy, y, dx0.clone()),
                   row_reduced(dt, 4), tag("softmax_backward +=", dt) + c);
    }
  }
}

// Per row (logsumexp, dlogits) the CPU and CUDA kernels are order-identical: bit-exact under emulation. The loss's
// Mean/Sum over rows is not (see row_reduced): tolerance(f32) x 10 there, as for a GPU's reduction trees.
TEST(GpuOps, SoftmaxCrossEntropyVariantsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (DType tdt : {DType::I64, DType::I32}) {
      const Tensor logits = random_tensor({3, 7, 1031}, dt, 31, 3.0);
      std::vector<int64_t> t(21);
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 389 + 11) % 1031);
      t[4] = t[17] = -100;  // ignored rows
      t[9] = 1030;          // the last class
      const Tensor targets = Tensor::from_vector(t, {3, 7}).to(tdt);
      for (auto red : {ops::LossReduction::Mean, ops::LossReduction::Sum, ops::LossReduction::None}) {
        const std::string name = tag("cross-entropy", dt) + " targets " + std::string(dtype_name(tdt)) + " reduction " +
                                 std::to_string(static_cast<int>(red));
        const ops::CrossEntropyOptions opt{.reduction = red};
        const auto want = ops::softmax_cross_entropy(logits, targets, opt);
        const auto got = ops::softmax_cross_entropy(to_gpu(logits), to_gpu(targets), opt);
        expect_match(got.loss, want.loss,
                     red == ops::LossReduction::None ? Match::exact(DType::F32, 10) : row_reduced(DType::F32, 10),
                     name + " loss");
        expect_match(got.saved.lse, want.saved.lse, Match::exact(DType::F32, 10), name + " lse");
        expect_match(got.saved.valid_count, want.saved.valid_count, Match::exact(DType::F32), name + " valid count");
        const Tensor dloss = red == ops::LossReduction::None ? random_tensor({3, 7}, DType::F32, 32)
                                                              : Tensor::full({}, 0.75, DType::F32);
        const Tensor dl = ops::softmax_cross_entropy_backward(dloss, logits, targets, want.saved, opt);
        expect_match(ops::softmax_cross_entropy_backward(to_gpu(dloss), to_gpu(logits), to_gpu(targets), got.saved, opt),
                     dl, Match::exact(dt, 2), name + " dlogits");
        const Tensor dl0 = random_tensor(logits.shape(), dt, 33);
        expect_match(ops::softmax_cross_entropy_backward(to_gpu(dloss), to_gpu(logits), to_gpu(targets), got.saved,
                                                         opt, to_gpu(dl0)),
                     ops::softmax_cross_entropy_backward(dloss, logits, targets, want.saved, opt, dl0.clone()),
                     Match::exact(dt, 2), name + " dlogits +=");
        expect_match(ops::softmax_cross_entropy_backward_in_place(to_gpu(dloss), to_gpu(logits), to_gpu(targets),
                                                                  got.saved, opt),
                     dl, Match::exact(dt, 2), name + " dlogits in place");
      }
    }
  }
}

TEST(GpuOps, SoftmaxCrossEntropyGpt2VocabularyMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const Tensor logits = random_tensor({5, 50257}, DType::BF16, 34, 3.0);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{0, 50256, 17, -100, 31337}, {5});
  const auto want = ops::softmax_cross_entropy(logits, targets);
  const auto got = ops::softmax_cross_entropy(to_gpu(logits), to_gpu(targets));
  expect_match(got.loss, want.loss, row_reduced(DType::F32, 10), "cross-entropy loss V=50257 (mean over rows)");
  const Tensor dloss = Tensor::full({}, 1.0, DType::F32);
  expect_match(ops::softmax_cross_entropy_backward(to_gpu(dloss), to_gpu(logits), to_gpu(targets), got.saved),
               ops::softmax_cross_entropy_backward(dloss, logits, targets, want.saved), Match::exact(DType::BF16, 1),
               "cross-entropy dlogits V=50257");
}

// A known upstream gradient (CrossEntropyOptions::gradient, the Trainer's path): on the device the fused kernel gives
// the unfused kernels' loss, lse and dlogits bits (one block per row with the same reductions; padded rows, their
// padding 0), and the CPU's fused gradient within the padded rows' bound.
TEST(GpuOps, SoftmaxCrossEntropyKnownGradientGivesTheUnfusedBits) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (auto red : {ops::LossReduction::Mean, ops::LossReduction::Sum}) {
      const std::string name =
          tag("known-gradient cross-entropy", dt) + (red == ops::LossReduction::Mean ? " mean" : " sum");
      const Tensor logits = random_tensor({3, 7, 1031}, dt, 36, 3.0);
      std::vector<int64_t> t(21);
      for (size_t i = 0; i < t.size(); ++i) t[i] = static_cast<int64_t>((i * 389 + 11) % 1000);
      t[5] = -100;
      const Tensor targets = Tensor::from_vector(t, {3, 7});
      ops::CrossEntropyOptions opt{.reduction = red, .classes = 1000};
      const Tensor seed = Tensor::full({}, 0.75, DType::F32);
      const auto unfused = ops::softmax_cross_entropy(to_gpu(logits), to_gpu(targets), opt);
      const Tensor want = ops::softmax_cross_entropy_backward(to_gpu(seed), to_gpu(logits), to_gpu(targets),
                                                              unfused.saved, opt);
      Tensor leaf = to_gpu(logits);
      leaf.requires_grad_();
      opt.gradient = to_gpu(seed);
      const auto fused = ops::softmax_cross_entropy(ops::scale(leaf, 1.0), to_gpu(targets), opt);
      EXPECT_TRUE(testing::same_bits(fused.loss, unfused.loss)) << name << " loss";
      EXPECT_TRUE(testing::same_bits(fused.saved.lse, unfused.saved.lse)) << name << " lse";
      fused.loss.backward(opt.gradient);
      EXPECT_TRUE(testing::same_bits(leaf.grad(), want)) << name << " dlogits";
      Tensor cpu_leaf = logits.clone();
      cpu_leaf.requires_grad_();
      opt.gradient = seed;
      ops::softmax_cross_entropy(ops::scale(cpu_leaf, 1.0), targets, opt).loss.backward(seed);
      // Padded rows are summed in another order on each device (their logsumexp agrees to rounding, as in
      // CrossEntropyEmu.PaddedRowsMatchCpu): close, not the same bits.
      expect_match(leaf.grad(), cpu_leaf.grad(), row_reduced(dt, 4), name + " dlogits vs the CPU");
    }
  }
}

// The CPU throws at once. CUDA reads nothing back: with check_targets (the default) the kernel reports the row as a
// deferred device error, thrown at the next synchronisation (here: reading the loss), and cleared; without it the
// row gives a NaN loss.
TEST(GpuOps, CrossEntropyOutOfRangeTarget) {
  MPT_REQUIRE_GPU(8);
  const Tensor logits = random_tensor({3, 11}, DType::F32, 35);
  const Tensor targets = Tensor::from_vector(std::vector<int64_t>{1, 11, 2}, {3});
  EXPECT_MPT_ERROR(ops::softmax_cross_entropy(logits, targets), "target 11 at row 1 is out of range [0, 11)");
  const Tensor gl = to_gpu(logits), gt = to_gpu(targets);
  const auto deferred = ops::softmax_cross_entropy(gl, gt);  // no throw yet: nothing was read back
  EXPECT_MPT_ERROR(deferred.loss.item<float>(), "[cross_entropy] target 11 at position 1 is out of range [0, 11)");
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 10, 2}, {3});
  EXPECT_NEAR(ops::softmax_cross_entropy(gl, to_gpu(good)).loss.item<float>(),
              ops::softmax_cross_entropy(logits, good).loss.item<float>(), 1e-5)
      << "the error was cleared";
  const auto unchecked = ops::softmax_cross_entropy(to_gpu(logits), to_gpu(targets),
                                                    {.reduction = ops::LossReduction::None, .check_targets = false});
  const std::vector<float> loss = unchecked.loss.to_vector<float>();
  ASSERT_EQ(loss.size(), 3u);
  EXPECT_TRUE(std::isfinite(loss[0]) && std::isfinite(loss[2]));
  EXPECT_TRUE(std::isnan(loss[1]));
}

}  // namespace
}  // namespace mpt
