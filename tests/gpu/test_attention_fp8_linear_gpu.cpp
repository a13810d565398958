// tests/gpu/test_attention_fp8_linear_gpu.cpp: causal attention forward/backward (head-major and in the fused QKV
// layout) and fp8_linear (delayed, current, block recipes, with the scaling metas) on cuda:0 against the CPU (skipped
// without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/fp8/scaling.h"
#include "mpt/mpt.h"
#include "mpt/fp8/linear.h"
#include "op_test.h"

namespace mpt {
namespace {

using testing::Match;
using testing::abs64;
using testing::expect_gemm_close;
using testing::expect_match;
using testing::normwise_error;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

std::string name_of(DType d) { return std::string(dtype_name(d)); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : to_cpu(t).to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// Attention: the CPU runs its flash kernel (online softmax, f32 probabilities); CUDA without cuDNN (always under
// emulation, and for f32) runs cuBLASLt GEMMs around the causal-softmax kernels and rounds P to the inputs' dtype for
// P V. So no bit-exactness; bounds per output element (u = the inputs' unit roundoff, T the sequence length):
//   out = sum_j p_j v_j with sum_j p_j = 1: P's rounding moves it by <= u max|v|, each side's FP32 accumulation by
//   <= T u32 max|v|, and each side rounds once: |d out| <= (u + 2 T u32) max|v| + 2 u |out|.
//   lse (f32): the scores differ by the GEMM order only (<= 2 D u32 |q||k| scale); lse moves by at most that max,
//   plus a few ulps of the exp/log arithmetic (8 u32 relative).
// The gradients go through dS = P (dP - rowsum(dO O)) and two more GEMMs; they are compared normwise (max error over
// max magnitude) within 8 u (P and dS rounded to the dtype once each on CUDA, plus the three GEMMs' roundings): a
// wrong mask, scale, transpose or missing accumulation gives O(1).
TEST(GpuAttention, CausalForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (const Shape& shape : {Shape{2, 3, 77, 64}, Shape{1, 2, 130, 32}, Shape{1, 1, 1, 16}}) {
      const std::string n = name_of(dt) + " " + shape_str(shape);
      const int64_t t = shape[2], d = shape[3];
      const Tensor q = random_tensor(shape, dt, 1), k = random_tensor(shape, dt, 2);
      const Tensor v = random_tensor(shape, dt, 3), dout = random_tensor(shape, dt, 4);
      const auto want = ops::causal_attention(q, k, v);
      const auto got = ops::causal_attention(to_gpu(q), to_gpu(k), to_gpu(v));
      const double u = testing::unit_roundoff(dt), u32 = 0x1p-24, vmax = max_abs(v);
      testing::Tolerance out_tol{2 * u, (u + 2 * static_cast<double>(t) * u32) * vmax};
      if (dt == DType::F32) out_tol.atol = 2 * static_cast<double>(t) * u32 * vmax;  // P stays f32
      expect_match(got.out, want.out, Match::close(out_tol), "attention out " + n);
      const double score_max = max_abs(q) * max_abs(k) * static_cast<double>(d) / std::sqrt(static_cast<double>(d));
      expect_match(got.lse, want.lse, Match::close({8 * u32, 2 * static_cast<double>(d) * u32 * score_max}),
                   "attention lse " + n);
      const auto gw = ops::causal_attention_backward(dout, q, k, v, want.out, want.lse);
      const auto gg = ops::causal_attention_backward(to_gpu(dout), to_gpu(q), to_gpu(k), to_gpu(v), got.out, got.lse);
      const double grad_tol = dt == DType::F32 ? 64 * static_cast<double>(t) * u32 : 8 * u;
      EXPECT_LE(normwise_error(gg.dq, gw.dq), grad_tol) << "attention dq " << n;
      EXPECT_LE(normwise_error(gg.dk, gw.dk), grad_tol) << "attention dk " << n;
      EXPECT_LE(normwise_error(gg.dv, gw.dv), grad_tol) << "attention dv " << n;
      // Accumulating into given gradients adds exactly the fresh ones (same device, same op).
      const Tensor z = Tensor::zeros(shape, dt, Device::cuda(0));
      ops::AttentionGrads into{z.clone(), z.clone(), z.clone()};
      const auto acc = ops::causal_attention_backward(to_gpu(dout), to_gpu(q), to_gpu(k), to_gpu(v), got.out, got.lse,
                                                      {}, into);
      EXPECT_TRUE(testing::same_bits(acc.dv, gg.dv)) << "accumulated dv " << n;
    }
  }
}

// Key padding (AttentionOptions::lengths) on the GEMM path (the lengths copied to the device, the softmax rows masked)
// against the CPU flash kernel, which skips the padding's key blocks: the bounds above, padding rows included.
TEST(GpuAttention, KeyPaddedForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Shape shape{3, 2, 77, 32};
  ops::AttentionOptions o;
  o.lengths = Tensor::from_vector(std::vector<int32_t>{77, 30, 1}, {3});
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::string n = name_of(dt) + " padded";
    const int64_t t = shape[2], d = shape[3];
    const Tensor q = random_tensor(shape, dt, 5), k = random_tensor(shape, dt, 6);
    const Tensor v = random_tensor(shape, dt, 7), dout = random_tensor(shape, dt, 8);
    const auto want = ops::causal_attention(q, k, v, o);
    const auto got = ops::causal_attention(to_gpu(q), to_gpu(k), to_gpu(v), o);
    const double u = testing::unit_roundoff(dt), u32 = 0x1p-24, vmax = max_abs(v);
    testing::Tolerance out_tol{2 * u, (u + 2 * static_cast<double>(t) * u32) * vmax};
    if (dt == DType::F32) out_tol.atol = 2 * static_cast<double>(t) * u32 * vmax;
    expect_match(got.out, want.out, Match::close(out_tol), "attention out " + n);
    const double score_max = max_abs(q) * max_abs(k) * static_cast<double>(d) / std::sqrt(static_cast<double>(d));
    expect_match(got.lse, want.lse, Match::close({8 * u32, 2 * static_cast<double>(d) * u32 * score_max}),
                 "attention lse " + n);
    const auto gw = ops::causal_attention_backward(dout, q, k, v, want.out, want.lse, o);
    const auto gg =
        ops::causal_attention_backward(to_gpu(dout), to_gpu(q), to_gpu(k), to_gpu(v), got.out, got.lse, o);
    const double grad_tol = dt == DType::F32 ? 64 * static_cast<double>(t) * u32 : 8 * u;
    EXPECT_LE(normwise_error(gg.dq, gw.dq), grad_tol) << "attention dq " << n;
    EXPECT_LE(normwise_error(gg.dk, gw.dk), grad_tol) << "attention dk " << n;
    EXPECT_LE(normwise_error(gg.dv, gw.dv), grad_tol) << "attention dv " << n;
    // The padding keys of sample 1 (positions 30..76) are attended by no query: exactly zero gradients.
    for (double x : to_cpu(gg.dk).select(0, 1).slice(1, 30, t).to(DType::F64).contiguous().to_vector<double>())
      ASSERT_EQ(x, 0.0) << n;
  }
}

// causal_attention_qkv on the device (cuDNN with the fused layout's strides where it runs, else the GEMM path on
// head-major copies) against the CPU kernel at the same strides, with the bounds above; plain and key-padded. Under
// emulation the GEMM path's copies are checked; on a GPU with cuDNN, the strides the graph declares.
TEST(GpuAttention, FusedQkvLayoutMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const int64_t B = 3, T = 77, H = 2, D = 64, C = H * D;
  for (bool padded : {false, true}) {
    ops::AttentionOptions o;
    if (padded) o.lengths = Tensor::from_vector(std::vector<int32_t>{77, 30, 1}, {B});
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      const std::string n = name_of(dt) + (padded ? " padded" : "");
      const Tensor qkv = random_tensor({B, T, 3 * C}, dt, 9), dout = random_tensor({B, T, C}, dt, 10);
      const auto want = ops::causal_attention_qkv(qkv, H, o);
      const auto got = ops::causal_attention_qkv(to_gpu(qkv), H, o);
      const double u = testing::unit_roundoff(dt), u32 = 0x1p-24, vmax = max_abs(qkv);
      testing::Tolerance out_tol{2 * u, (u + 2 * static_cast<double>(T) * u32) * vmax};
      if (dt == DType::F32) out_tol.atol = 2 * static_cast<double>(T) * u32 * vmax;
      expect_match(got.out, want.out, Match::close(out_tol), "fused-layout attention out " + n);
      const double score_max = vmax * vmax * static_cast<double>(D) / std::sqrt(static_cast<double>(D));
      expect_match(got.lse, want.lse, Match::close({8 * u32, 2 * static_cast<double>(D) * u32 * score_max}),
                   "fused-layout attention lse " + n);
      const Tensor gw = ops::causal_attention_qkv_backward(dout, qkv, want.out, want.lse, H, o);
      const Tensor gg = ops::causal_attention_qkv_backward(to_gpu(dout), to_gpu(qkv), got.out, got.lse, H, o);
      const double grad_tol = dt == DType::F32 ? 64 * static_cast<double>(T) * u32 : 8 * u;
      for (int64_t part = 0; part < 3; ++part) {  // dq, dk, dv: each normwise against its own magnitude
        EXPECT_LE(normwise_error(to_cpu(gg).slice(2, part * C, (part + 1) * C), gw.slice(2, part * C, (part + 1) * C)),
                  grad_tol)
            << "fused-layout d(qkv) part " << part << " " << n;
      }
      if (padded) {  // sample 1's padding keys (positions 30..76) get exactly zero dk and dv
        for (double x : to_cpu(gg).select(0, 1).slice(0, 30, T).slice(1, C, 3 * C).to(DType::F64).contiguous()
                            .to_vector<double>())
          ASSERT_EQ(x, 0.0) << n;
      }
    }
  }
}

struct Recipe {
  const char* name;
  fp8::Fp8Recipe recipe;
};

// One fp8_linear layer for a few steps on each device: x and W quantized (bit-identical codes: same inputs, same
// encoder), FP8 GEMMs (different accumulation order), bias added in FP32. The forward and the three gradients are
// held to the GEMM bound with |x||W| widened by FP8's rounding (codes are within (1 + u_fp8) of the values: 1.27 for
// two E4M3 operands, 1.41 with an E5M2 gradient); db (column sums of dy in FP32) is exact under emulation.
// The delayed recipe's amax histories and scales go through the same state updates on both devices.
// Shapes: K = 160, M = 96 and 3 x 48 = 144 tokens, multiples of 16 as cuBLASLt's FP8 GEMMs need (the wgrad GEMM
// contracts over the tokens); OddTokenCount covers the rest.
void check_fp8_linear(const Recipe& r, DType xdt, int64_t tokens_per_seq);

TEST(GpuFp8Linear, RecipesMatchCpuIncludingScalingState) {
  MPT_REQUIRE_GPU(9);
  const std::vector<Recipe> recipes = {
      {"delayed hybrid", fp8::DelayedScaling{4, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::Hybrid}},
      {"delayed e4m3 most recent", fp8::DelayedScaling{4, fp8::AmaxAlgo::MostRecent, 1, fp8::Fp8Format::E4M3}},
      {"current", fp8::CurrentScaling{}},
      {"current pow2", fp8::CurrentScaling{fp8::Fp8Format::E4M3, true, 0.0f}},
      {"block", fp8::BlockScaling{}},
      {"block f32 scales", fp8::BlockScaling{false}}};
  for (const Recipe& r : recipes)
    for (DType xdt : {DType::F32, DType::BF16}) check_fp8_linear(r, xdt, 48);
}

// A batch whose token count (3 x 43 = 129) is not a multiple of 16 trains on the CPU; the same call on CUDA must give
// the same results (the API states no shape constraint for x beyond (..., K)).
TEST(GpuFp8Linear, OddTokenCountMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  check_fp8_linear({"current, 129 tokens", fp8::CurrentScaling{}}, DType::BF16, 43);
  check_fp8_linear({"block, 129 tokens", fp8::BlockScaling{}}, DType::BF16, 43);
}

void check_fp8_linear(const Recipe& r, DType xdt, int64_t tokens_per_seq) {
  const int64_t k = 160, m = 96, tps = tokens_per_seq;
  const std::string n = std::string(r.name) + " x " + name_of(xdt);
  fp8::Fp8ScalingState sc(r.recipe, Device::cpu()), sg(r.recipe, Device::cuda(0));
  const fp8::Fp8LinearMetas mc = sc.register_linear("fc"), mg = sg.register_linear("fc");
  const Tensor w0 = random_tensor({m, k}, DType::F32, 5, 0.1), b0 = random_tensor({m}, DType::F32, 6);
  Tensor wc = w0.clone().requires_grad_(), bc = b0.clone().requires_grad_();
  Tensor wg = to_gpu(w0).requires_grad_(), bg = to_gpu(b0).requires_grad_();
  for (int step = 0; step < 3; ++step) {
    const std::string s = n + " step " + std::to_string(step);
    const Tensor x0 = random_tensor({3, tps, k}, xdt, 7 + static_cast<uint64_t>(step), 2.0);
    const Tensor dy = random_tensor({3, tps, m}, xdt, 17 + static_cast<uint64_t>(step));
    Tensor xc = x0.clone().requires_grad_(), xg = to_gpu(x0).requires_grad_();
    const Tensor yc = fp8::fp8_linear(xc, wc, bc, {r.recipe, mc, std::nullopt});
    const Tensor yg = fp8::fp8_linear(xg, wg, bg, {r.recipe, mg, std::nullopt});
    ASSERT_TRUE(yg.device().is_cuda()) << s;
    const double wide = 1.3, fp8_u = testing::fp8_accumulation_roundoff();
    expect_gemm_close(yg, yc, ops::add(ops::matmul(abs64(x0), ops::scale(abs64(w0), wide), {.trans_b = true}),
                                       abs64(b0)), k + 1, testing::bias_read_roundoff(b0, xdt, true),
                      "fp8_linear y " + s, fp8_u);
    yc.backward(dy);
    yg.backward(to_gpu(dy));
    const double wide_g = 1.45;
    expect_gemm_close(xg.grad(), xc.grad(), ops::scale(ops::matmul(abs64(dy), abs64(wc)), wide_g), m, 0,
                      "fp8_linear dx " + s, fp8_u);
    expect_gemm_close(wg.grad(), wc.grad(),
                      ops::scale(ops::matmul(abs64(dy).reshape({-1, m}), abs64(x0).reshape({-1, k}),
                                             {.trans_a = true}), wide_g),
                      3 * tps, 0, "fp8_linear dW " + s, fp8_u);
    expect_match(bg.grad(), bc.grad(), Match::exact(DType::F32, 4), "fp8_linear db " + s);
    // The recorded amaxes (max |x|, max |W|, max |dy|: same inputs) and, after update(), the scales.
    sc.update();
    sg.update();
    expect_match(sg.state_dict(), sc.state_dict(), Match::exact(DType::F32), "scaling state " + s);
    // The weights are not updated: both sides start the next step from the same W.
    for (const Tensor* p : {&wc, &bc, &wg, &bg}) p->set_grad(Tensor());
  }
}

// fp8::fp8_mlp on CUDA (the GELU in the FP8 GEMMs' epilogues; block scaling: the GEMMs plain with the GELU kernels,
// the emulated cuBLASLt refusing GELU with block scales) against the CPU (the GEMMs, then the kernels). The hidden
// activation and its gradient are quantized to FP8 between the GEMMs, so an element that lands on the other side of
// an FP8 rounding boundary on one device (the GELU sees the FP32 sum on CUDA, the bf16-rounded one on the CPU) moves
// by an FP8 step: no elementwise bound as tight as fp8_linear's. As GpuMlp.GeluEpiloguesMatchCpu does for bf16, each
// device is compared with the unquantized f32 MLP (ops::mlp on the CPU, same weights) and the GPU's normwise error must
// stay within twice the CPU's (floor 2^-6): a missing bias, GELU or GELU derivative, a transposed operand or stale
// scales give errors of order 1. Two steps, so the delayed recipe's second step runs on updated scales.
TEST(GpuFp8Mlp, RecipesMatchCpu) {
  MPT_REQUIRE_GPU(9);
  const int64_t n = 96, c = 160, h = 384;
  const std::vector<Recipe> recipes = {
      {"delayed hybrid", fp8::DelayedScaling{4, fp8::AmaxAlgo::Max, 0, fp8::Fp8Format::Hybrid}},
      {"current", fp8::CurrentScaling{}},
      {"block", fp8::BlockScaling{}}};
  const Tensor w1 = random_tensor({h, c}, DType::F32, 51, 0.15), b1 = random_tensor({h}, DType::F32, 52);
  const Tensor w2 = random_tensor({c, h}, DType::F32, 53, 0.1), b2 = random_tensor({c}, DType::F32, 54);
  const char* names[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
  for (const Recipe& r : recipes) {
    fp8::Fp8ScalingState sc(r.recipe, Device::cpu()), sg(r.recipe, Device::cuda(0));
    const fp8::Fp8LinearMetas c1 = sc.register_linear("fc"), c2 = sc.register_linear("proj");
    const fp8::Fp8LinearMetas g1 = sg.register_linear("fc"), g2 = sg.register_linear("proj");
    for (int step = 0; step < 2; ++step) {
      const std::string s = std::string(r.name) + " step " + std::to_string(step);
      const Tensor x0 = random_tensor({n, c}, DType::BF16, 60 + static_cast<uint64_t>(step), 2.0);
      const Tensor dy = random_tensor({n, c}, DType::BF16, 70 + static_cast<uint64_t>(step));
      auto run = [&](auto on, const fp8::Fp8LinearMetas& m1, const fp8::Fp8LinearMetas& m2, bool fp8) {
        Tensor x = on(fp8 ? x0 : x0.to(DType::F32)).requires_grad_();
        Tensor p[4] = {on(w1).requires_grad_(), on(b1).requires_grad_(), on(w2).requires_grad_(),
                       on(b2).requires_grad_()};
        const Tensor y = fp8 ? fp8::fp8_mlp(x, p[0], p[1], p[2], p[3],
                                            {.recipe = r.recipe, .metas1 = m1, .metas2 = m2, .out_dtype = DType::BF16})
                             : ops::mlp(x, p[0], p[1], p[2], p[3]);
        y.backward(on(fp8 ? dy : dy.to(DType::F32)));
        std::vector<Tensor> out{to_cpu(y).to(DType::F32), to_cpu(x.grad()).to(DType::F32)};
        for (const Tensor& t : p) out.push_back(to_cpu(t.grad()));
        return out;
      };
      const auto cpu = [](const Tensor& t) { return t.clone(); };
      const auto gpu = [](const Tensor& t) { return to_gpu(t); };
      const auto ref = run(cpu, c1, c2, false), want = run(cpu, c1, c2, true), got = run(gpu, g1, g2, true);
      for (size_t i = 0; i < 6; ++i) {
        const double e_cpu = normwise_error(want[i], ref[i]), e_gpu = normwise_error(got[i], ref[i]);
        EXPECT_LE(e_gpu, std::max(0x1p-6, 2 * e_cpu)) << s << " " << names[i] << " (the CPU's error " << e_cpu << ")";
        // FP8's own error (each gradient crosses up to three FP8 roundings of 2^-4, E5M2 2^-3, relative: dy, the
        // weights, dpre), measured 0.12 at most: a sanity bound that the reference is the right computation.
        EXPECT_LE(e_cpu, 0.25) << s << " " << names[i] << ": FP8's error against the f32 MLP";
      }
      sc.update();
      sg.update();
    }
    // Every meta saw an amax on both devices, and they agree to FP8 precision (h and dpre differ slightly).
    const auto dc = sc.state_dict(), dg = sg.state_dict();
    for (const auto& [key, t] : dc) {
      if (key.find("amax_history") == std::string::npos) continue;
      const std::vector<double> a = t.to_vector<double>(), b = to_cpu(dg.at(key)).to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(b[i], a[i], 0.07 * a[i]) << r.name << " " << key << " " << i;
    }
  }
}

}  // namespace
}  // namespace mpt
