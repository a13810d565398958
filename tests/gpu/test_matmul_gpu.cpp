// tests/gpu/test_matmul_gpu.cpp: matmul (f32/f16/bf16, batched, broadcast, transposes, beta, gradients; FP8 per-tensor and block-scaled, FP8 output with amax) on cuda:0 against the CPU within the derived GEMM bound (skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "device_test.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif
#include "mpt/mpt.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::abs64;
using testing::expect_gemm_close;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

// GEMMs are never bit-exact against the CPU, not even under emulation (oneDNN accumulates in FP32 in its own order;
// the cuBLASLt double accumulates in float64): every check here is the derived bound of expect_gemm_close.

std::string name_of(DType d) { return std::string(dtype_name(d)); }

// |alpha| |op(A)| |op(B)| in f64, the magnitude the bound scales with.
Tensor magnitude(const Tensor& a, const Tensor& b, const ops::MatmulOptions& opt) {
  ops::MatmulOptions o;
  o.trans_a = opt.trans_a;
  o.trans_b = opt.trans_b;
  o.alpha = std::abs(opt.alpha);
  return ops::matmul(abs64(a), abs64(b), o);
}

TEST(GpuMatmul, DenseTransposesBatchesAndBroadcastsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const int64_t m = 67, n = 91, k = 130;
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        const Shape as = ta ? Shape{k, m} : Shape{m, k}, bs = tb ? Shape{n, k} : Shape{k, n};
        const auto batched = [](Shape s, int64_t b) { s.insert(s.begin(), b); return s; };
        struct Operands { Tensor a, b; const char* what; };
        const std::vector<Operands> cases = {
            {random_tensor(as, dt, 1), random_tensor(bs, dt, 2), "2-d"},
            {random_tensor(batched(as, 3), dt, 3), random_tensor(batched(bs, 3), dt, 4), "batched"},
            {random_tensor(batched(as, 3), dt, 5), random_tensor(bs, dt, 6), "b broadcast"},
            {random_tensor(as, dt, 7), random_tensor(batched(bs, 2), dt, 8), "a broadcast"}};
        for (const Operands& c : cases) {
          std::vector<ops::MatmulOptions> opts = {{.trans_a = ta, .trans_b = tb},
                                                  {.trans_a = ta, .trans_b = tb, .alpha = -0.75f}};
          if (dt != DType::F32) opts.push_back({.trans_a = ta, .trans_b = tb, .out_dtype = DType::F32});
          for (const auto& opt : opts) {
            const std::string name = name_of(dt) + " " + c.what + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
                                     " alpha " + std::to_string(opt.alpha) +
                                     (opt.out_dtype ? " out " + name_of(*opt.out_dtype) : "");
            const Tensor want = ops::matmul(c.a, c.b, opt);
            const Tensor got = ops::matmul(to_gpu(c.a), to_gpu(c.b), opt);
            ASSERT_TRUE(got.device().is_cuda()) << name;
            expect_gemm_close(got, want, magnitude(c.a, c.b, opt), k, 0, name);
          }
        }
      }
    }
  }
}

// A Stream of the user's that ran a GEMM ends with its last owner, and the cuBLASLt workspace cached for it goes back
// with it (the workspace used to own its stream, so that neither ever went: 32 MiB and a stream per Stream made).
TEST(GpuMatmul, AUserStreamEndsAndItsCublasLtWorkspaceGoesWithIt) {
  MPT_REQUIRE_GPU(8);
  const Tensor a = to_gpu(random_tensor({64, 96}, DType::BF16, 1));
  const Tensor b = to_gpu(random_tensor({96, 48}, DType::BF16, 2));
  const Tensor want = to_cpu(ops::matmul(a, b));  // on the current stream, whose workspace stays
  const Stream current = Stream::current(Device::cuda(0));
  const int64_t before = memory_stats(Device::cuda(0)).current_bytes;
  for (int round = 0; round < 3; ++round) {
    std::weak_ptr<void> handle;
    {
      Stream side(Device::cuda(0));
      handle = side.shared_native();
      Event inputs(Device::cuda(0));
      inputs.record(current);
      inputs.wait(side);
      const StreamGuard guard(side);
      const Tensor c = ops::matmul(a, b);
      EXPECT_GT(memory_stats(Device::cuda(0)).current_bytes, before + static_cast<int64_t>(c.nbytes()))
          << "round " << round << ": the side stream's workspace";
      EXPECT_TRUE(testing::same_bits(to_cpu(c), want)) << "round " << round;
    }
    EXPECT_TRUE(handle.expired()) << "round " << round << ": the stream outlived its last Stream";
    EXPECT_EQ(memory_stats(Device::cuda(0)).current_bytes, before) << "round " << round << ": its workspace stayed";
  }
}

// Strided (transposed / sliced view) inputs are read in place or copied; beta accumulates into c.
TEST(GpuMatmul, ViewsAndMatmulOutWithBetaMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor a = random_tensor({130, 67}, dt, 9), b = random_tensor({91, 260}, dt, 10);
    const Tensor av = a.t(), bv = b.slice(1, 0, 260, 2);  // (67, 130) transposed view, (91, 130) strided columns
    const ops::MatmulOptions opt{.trans_b = true};
    const Tensor mag = magnitude(av, bv, opt);
    expect_gemm_close(ops::matmul(to_gpu(a).t(), to_gpu(b).slice(1, 0, 260, 2), opt), ops::matmul(av, bv, opt), mag,
                      130, 0, name_of(dt) + " transposed and strided views");
    const Tensor c0 = random_tensor({67, 91}, dt, 11);
    Tensor cc = c0.clone(), cg = to_gpu(c0);
    ops::matmul_out(av, bv, cc, 0.5f, opt);
    ops::matmul_out(to_gpu(a).t(), to_gpu(b).slice(1, 0, 260, 2), cg, 0.5f, opt);
    // beta c adds 0.5 |c| to the magnitude (one more rounding on each side).
    expect_gemm_close(cg, cc, ops::add(mag, ops::scale(abs64(c0), 0.5)), 131, 0, name_of(dt) + " matmul_out beta 0.5");
  }
}

TEST(GpuMatmul, GradientsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    for (bool tb : {false, true}) {
      const Tensor a = random_tensor({3, 37, 70}, dt, 12), b = random_tensor(tb ? Shape{45, 70} : Shape{70, 45}, dt, 13);
      const Tensor dc = random_tensor({3, 37, 45}, dt, 14);
      const ops::MatmulOptions opt{.trans_b = tb, .alpha = 1.5f};
      const std::string n = name_of(dt) + (tb ? " B^T" : " B");
      const auto want = ops::matmul_backward(dc, a, b, opt);
      const auto got = ops::matmul_backward(to_gpu(dc), to_gpu(a), to_gpu(b), opt);
      // da = alpha dc op(b)^T (contraction over n = 45); db sums over the batch as well (3 * 37 terms).
      const Tensor mag_a = ops::matmul_grad_a(abs64(dc), abs64(a), abs64(b), opt);
      const Tensor mag_b = ops::matmul_grad_b(abs64(dc), abs64(a), abs64(b), opt);
      expect_gemm_close(got.da, want.da, mag_a, 45, 0, n + " da");
      expect_gemm_close(got.db, want.db, mag_b, 3 * 37, 0, n + " db (summed over the broadcast batch)");
      // Accumulating a 16-bit gradient into an f32 master gradient.
      const Tensor da0 = random_tensor(a.shape(), DType::F32, 15);
      expect_gemm_close(ops::matmul_grad_a(to_gpu(dc), to_gpu(a), to_gpu(b), opt, to_gpu(da0)),
                        ops::matmul_grad_a(dc, a, b, opt, da0.clone()), ops::add(mag_a, abs64(da0)), 46, 0,
                        n + " da += into f32");
    }
  }
}

// ops::linear on CUDA (the bias added to an FP32 product and rounded once, the CPU's fused numerics; dW in the FP32
// master's dtype; db in FP32) against the CPU, forward and every gradient.
TEST(GpuLinear, BiasEpilogueAndMasterGradientsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = random_tensor({40, 70}, dt, 21), master = random_tensor({45, 70}, DType::F32, 22);
    const Tensor bias = random_tensor({45}, DType::F32, 23, 4.0), dy = random_tensor({40, 45}, dt, 24);
    const Tensor wc = master.to(dt);
    auto run = [&](auto on) {
      const Tensor xi = on(x).requires_grad_(true), wi = on(master).requires_grad_(true), bi = on(bias).requires_grad_(true);
      const Tensor y = ops::linear(xi, wi, bi, {.compute_weight = dt == DType::F32 ? Tensor{} : on(wc)});
      y.backward(on(dy));
      return std::vector<Tensor>{to_cpu(y), to_cpu(xi.grad()), to_cpu(wi.grad()), to_cpu(bi.grad())};
    };
    const auto want = run([](const Tensor& t) { return t.clone(); });
    const auto got = run([](const Tensor& t) { return to_gpu(t); });
    const std::string n = name_of(dt);
    ASSERT_EQ(got[2].dtype(), DType::F32);
    ASSERT_EQ(got[3].dtype(), DType::F32);
    const Tensor mag_y = ops::add(ops::matmul(abs64(x), abs64(wc), {.trans_b = true}), abs64(bias));
    expect_gemm_close(got[0], want[0], mag_y, 71, testing::bias_read_roundoff(bias, dt, false), n + " y");
    expect_gemm_close(got[1], want[1], ops::matmul(abs64(dy), abs64(wc)), 45, 0, n + " dx");
    expect_gemm_close(got[2], want[2], ops::matmul(abs64(dy), abs64(x), {.trans_a = true}), 40, 0, n + " dW");
    expect_gemm_close(got[3], want[3], ops::sum(abs64(dy), 0), 40, 0, n + " db");
  }
}

// A Linear whose width is not a multiple of 8 (GPT-2's 50257-token LM head; here 8197 x 1024, over the 16 MiB
// threshold): its CUDA GEMMs run on zero-padded copies (n, then k and m of the gradients rounded up to 64), with the
// CPU's results, forward, dx, dW and the bias gradient. Under emulation the copies show as extra launches against
// an aligned width.
TEST(GpuLinear, OddWidthsRunOnPaddedCopiesAndMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16}) {
    const int64_t n = 8197, k = 1024, rows = 16;
    const Tensor x = random_tensor({rows, k}, dt, 31), w = random_tensor({n, k}, dt, 32);
    const Tensor bias = random_tensor({n}, dt, 33), dy = random_tensor({rows, n}, dt, 34);
    auto run = [&](auto on) {
      const Tensor xi = on(x).requires_grad_(true), wi = on(w).requires_grad_(true), bi = on(bias).requires_grad_(true);
      const Tensor y = ops::linear(xi, wi, bi);
      y.backward(on(dy));
      return std::vector<Tensor>{to_cpu(y), to_cpu(xi.grad()), to_cpu(wi.grad()), to_cpu(bi.grad())};
    };
    const auto want = run([](const Tensor& t) { return t.clone(); });
    const auto got = run([](const Tensor& t) { return to_gpu(t); });
    const std::string name = name_of(dt) + " width " + std::to_string(n);
    const Tensor mag_y = ops::add(ops::matmul(abs64(x), abs64(w), {.trans_b = true}), abs64(bias));
    expect_gemm_close(got[0], want[0], mag_y, k + 1, testing::bias_read_roundoff(bias, dt, false), name + " y");
    expect_gemm_close(got[1], want[1], ops::matmul(abs64(dy), abs64(w)), n, 0, name + " dx");
    expect_gemm_close(got[2], want[2], ops::matmul(abs64(dy), abs64(x), {.trans_a = true}), rows, 0, name + " dW");
    expect_gemm_close(got[3], want[3], ops::sum(abs64(dy), 0), rows, 0, name + " db");
#if defined(MPT_CUDA_EMULATION)
    // The same step at the aligned width 8256: the odd one adds the zero fills and copies of the padding.
    auto launches = [&](int64_t width) {
      const Tensor xa = to_gpu(x).requires_grad_(true);
      const Tensor wa = to_gpu(random_tensor({width, k}, dt, 35)).requires_grad_(true);
      const Tensor ba = to_gpu(random_tensor({width}, dt, 36)).requires_grad_(true);
      const Tensor dya = to_gpu(random_tensor({rows, width}, dt, 37));
      cuda_emu::reset_counters();
      ops::linear(xa, wa, ba).backward(dya);
      return cuda_emu::counters().kernel_launches;
    };
    EXPECT_GE(launches(n), launches(8256) + 6) << name;
#endif
  }
}

// ops::mlp on CUDA runs its GELU in cuBLASLt's GELU_AUX_BIAS / DGELU_BGRAD epilogues, the CPU beside its GEMMs. f32:
// within FP32's GEMM error of the CPU (normwise). bf16 with FP32 masters: each device against the f32 run, the GPU's
// error at most twice the CPU's (the GPU rounds once fewer: the GELU sees the FP32 product), floor 1e-3.
TEST(GpuMlp, GeluEpiloguesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const int64_t n = 40, c = 32, h = 128;
  struct Out {
    std::vector<Tensor> t;  // y, dx, dW1, db1, dW2, db2 on the CPU
  };
  auto run = [&](DType dt, auto on) {
    const Tensor x0 = random_tensor({n, c}, DType::F32, 31), dy0 = random_tensor({n, c}, DType::F32, 36);
    Tensor x = on(x0.to(dt)).requires_grad_(true);
    Tensor w1 = on(random_tensor({h, c}, DType::F32, 32, 0.3)).requires_grad_(true);
    Tensor b1 = on(random_tensor({h}, DType::F32, 33)).requires_grad_(true);
    Tensor w2 = on(random_tensor({c, h}, DType::F32, 34, 0.2)).requires_grad_(true);
    Tensor b2 = on(random_tensor({c}, DType::F32, 35)).requires_grad_(true);
    const bool low = dt != DType::F32;
    const Tensor y = ops::mlp(x, w1, b1, w2, b2,
                              {.compute_w1 = low ? w1.detach().to(dt) : Tensor{},
                               .compute_w2 = low ? w2.detach().to(dt) : Tensor{}});
    y.backward(on(dy0.to(dt)));
    return Out{{to_cpu(y).to(DType::F32), to_cpu(x.grad()).to(DType::F32), to_cpu(w1.grad()), to_cpu(b1.grad()),
                to_cpu(w2.grad()), to_cpu(b2.grad())}};
  };
  const auto cpu = [](const Tensor& t) { return t.clone(); };
  const auto gpu = [](const Tensor& t) { return to_gpu(t); };
  const char* names[] = {"y", "dx", "dW1", "db1", "dW2", "db2"};
  const Out f32_cpu = run(DType::F32, cpu), f32_gpu = run(DType::F32, gpu);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_LE(testing::normwise_error(f32_gpu.t[i], f32_cpu.t[i]), 1e-5) << "f32 " << names[i];
  }
  const Out b_cpu = run(DType::BF16, cpu), b_gpu = run(DType::BF16, gpu);
  for (size_t i = 0; i < 6; ++i) {
    const double e_cpu = testing::normwise_error(b_cpu.t[i], f32_cpu.t[i]);
    const double e_gpu = testing::normwise_error(b_gpu.t[i], f32_cpu.t[i]);
    EXPECT_LE(e_gpu, std::max(1e-3, 2 * e_cpu)) << "bf16 " << names[i] << " (the CPU's error " << e_cpu << ")";
  }
}

struct Fp8Operands {
  ops::Quantized a, b;  // a (m, k), b (n, k): the TN layout
};

Fp8Operands quantize_pair(int64_t m, int64_t n, int64_t k, DType fa, DType fb, bool block) {
  const Tensor x = random_tensor({m, k}, DType::F32, 16, 2.0), w = random_tensor({n, k}, DType::F32, 17, 0.5);
  if (block)
    return {ops::quantize_blockwise(x, fa, ops::ScaleLayout::Block1x128),
            ops::quantize_blockwise(w, fb, ops::ScaleLayout::Block128x128)};
  return {ops::quantize_fp8(x, fa), ops::quantize_fp8(w, fb)};
}

ops::Fp8Scaling scaling_of(const ops::Quantized& q, bool on_gpu) {
  const Tensor s = on_gpu ? to_gpu(q.scale_inv) : q.scale_inv;
  switch (q.layout) {
    case ops::ScaleLayout::Block1x128: return ops::Fp8Scaling::block_1x128(s);
    case ops::ScaleLayout::Block128x128: return ops::Fp8Scaling::block_128x128(s);
    default: return ops::Fp8Scaling::per_tensor(s);
  }
}

// The FP8 codes and scales are the same bits on both sides; only the accumulation differs: its order (the CPU's block
// kernel promotes per 128-long K block, like the tensor cores; the emulated cuBLASLt accumulates in float64) and, on
// real FP8 tensor cores, its precision (testing::fp8_accumulation_roundoff).
void check_fp8(const Fp8Operands& q, int64_t k, DType out, const std::string& name) {
  ops::MatmulOptions cpu_opt{.trans_b = true, .out_dtype = out, .scale_a = scaling_of(q.a, false),
                             .scale_b = scaling_of(q.b, false)};
  ops::MatmulOptions gpu_opt{.trans_b = true, .out_dtype = out, .scale_a = scaling_of(q.a, true),
                             .scale_b = scaling_of(q.b, true)};
  const Tensor want = ops::matmul(q.a.data, q.b.data, cpu_opt);
  const Tensor got = ops::matmul(to_gpu(q.a.data), to_gpu(q.b.data), gpu_opt);
  const Tensor mag = ops::matmul(abs64(ops::dequantize(q.a, DType::F32)), abs64(ops::dequantize(q.b, DType::F32)),
                                 {.trans_b = true});
  expect_gemm_close(got, want, mag, k, 0, name + " out " + name_of(out), testing::fp8_accumulation_roundoff());
}

// cuBLASLt's FP8 GEMMs take m, n and k (and the leading dimensions) in multiples of 16 (kernels/cuda/lib/
// gemm_cublaslt.h, R2.2a / R2.4; the emulation enforces the same, tests/support/cuda_emu/cublaslt_validate.cpp:91),
// so the FP8 shapes here are multiples of 16 with K not a multiple of 128 (a partial K block). The CPU accepts any
// shape; UnsupportedFp8ShapeIsAnErrorOnCuda pins down what CUDA does with the others.
TEST(GpuMatmul, Fp8PerTensorMatchesCpu) {
  MPT_REQUIRE_GPU(9);  // FP8 tensor cores: sm_89 / sm_90 (the emulated device is 9.0)
  const int64_t m = 80, n = 48, k = 160;
  for (auto [fa, fb] : {std::pair{DType::F8E4M3, DType::F8E4M3}, std::pair{DType::F8E4M3, DType::F8E5M2},
                        std::pair{DType::F8E5M2, DType::F8E4M3}}) {
    const Fp8Operands q = quantize_pair(m, n, k, fa, fb, false);
    for (DType out : {DType::F32, DType::BF16, DType::F16})
      check_fp8(q, k, out, "FP8 per tensor " + name_of(fa) + " x " + name_of(fb));
  }
}

// FP8 output: codes = saturate(D * out_scale) and out_amax = max |D|; the codes may differ by one FP8 rounding where
// the two D straddle a rounding boundary, hence the bound on the decoded values in the FP8 output's unit roundoff.
TEST(GpuMatmul, Fp8OutputWithScaleAndAmaxMatchesCpu) {
  MPT_REQUIRE_GPU(9);
  const int64_t m = 80, n = 48, k = 160;
  const Fp8Operands q = quantize_pair(m, n, k, DType::F8E4M3, DType::F8E4M3, false);
  const Tensor out_scale = Tensor::full({}, 3.0, DType::F32);
  Tensor amax_c = Tensor::zeros({}, DType::F32), amax_g = to_gpu(amax_c);
  ops::MatmulOptions cpu_opt{.trans_b = true, .out_dtype = DType::F8E4M3, .scale_a = scaling_of(q.a, false),
                             .scale_b = scaling_of(q.b, false), .out_scale = out_scale, .out_amax = amax_c};
  ops::MatmulOptions gpu_opt{.trans_b = true, .out_dtype = DType::F8E4M3, .scale_a = scaling_of(q.a, true),
                             .scale_b = scaling_of(q.b, true), .out_scale = to_gpu(out_scale), .out_amax = amax_g};
  const Tensor want = ops::matmul(q.a.data, q.b.data, cpu_opt);
  const Tensor got = ops::matmul(to_gpu(q.a.data), to_gpu(q.b.data), gpu_opt);
  const Tensor mag = ops::matmul(abs64(ops::dequantize(q.a)), abs64(ops::dequantize(q.b)), {.trans_b = true});
  // Below 2^-6 e4m3 is subnormal with step 2^-9: each side's rounding errs by at most 2^-10 there.
  expect_gemm_close(got, want, ops::scale(mag, 3.0), k, 0x1p-9, "FP8 e4m3 output codes",
                    testing::fp8_accumulation_roundoff());
  // |max|D_gpu| - max|D_cpu|| <= max_ij |D_gpu - D_cpu|: the FP32 bound with the largest magnitude.
  double mag_max = 0;
  for (double v : mag.to_vector<double>()) mag_max = std::max(mag_max, v);
  expect_gemm_close(amax_g, amax_c, Tensor::full({}, mag_max, DType::F64), k, 0, "FP8 output amax",
                    testing::fp8_accumulation_roundoff());
}

TEST(GpuMatmul, Fp8BlockScaledMatchesCpu) {
  MPT_REQUIRE_GPU(9);  // cuBLASLt's VEC128 / BLK128x128 scale modes need Hopper
  for (auto [m, n, k] : {std::tuple<int64_t, int64_t, int64_t>{144, 208, 288}, {16, 96, 128}, {256, 384, 384}}) {
    const Fp8Operands q = quantize_pair(m, n, k, DType::F8E4M3, DType::F8E4M3, true);
    for (DType out : {DType::BF16, DType::F32})
      check_fp8(q, k, out, "FP8 block-scaled " + std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  }
}

// FP8 operands with the MLP's GELU epilogues (fp8::fp8_mlp's GEMMs). Per-tensor scaling runs cuBLASLt's
// GELU_AUX_BIAS and DGELU_BGRAD (the emulated device takes them; one matmul, no kernel of ours); block scaling, which the
// emulated cuBLASLt refuses with a GELU epilogue, as real cuBLASLt may, runs the GEMM plain with the GELU kernels after
// it, and the refusal is remembered. Bounds, elementwise, with m = |A||B| and u the bf16 output's unit roundoff:
//   pre (the aux): a GEMM with a bias, as check_fp8;
//   h = gelu(pre): the CPU applies the GELU to pre rounded to bf16, CUDA to the FP32 sum (or f64 under emulation),
//     and |gelu'| <= 1.13, so |dh| <= 1.13 (2 k u_acc m + u |pre|) + 2 u |h| + 1e-6 (the tanh approximations);
//   dgelu: out = (A B^T) * gelu'(aux) with the same aux on both sides: |d out| <= 1.13 (2 k u_acc m + u |A B^T|) +
//     2 u |out|; the bias gradient (its column sums, bf16) within the sum of those bounds plus 2 u |db|.
void expect_within(const Tensor& got, const Tensor& want, const std::vector<double>& bound, const std::string& what) {
  const std::vector<double> g = to_cpu(got).to_vector<double>(), w = to_cpu(want).to_vector<double>();
  ASSERT_EQ(g.size(), bound.size()) << what;
  double worst = 0;
  size_t wi = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double d = std::fabs(g[i] - w[i]), r = d == 0 ? 0 : d / bound[i];
    if (!(r <= worst)) worst = r, wi = i;
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << wi << " got " << g[wi] << ", CPU " << w[wi] << ", bound "
                        << bound[wi];
}

TEST(GpuMatmul, Fp8GeluEpiloguesMatchCpu) {
  MPT_REQUIRE_GPU(9);
  const int64_t m = 48, n = 256, k = 160;
  const double u = 0x1p-8, ua = testing::fp8_accumulation_roundoff(), g1 = 1.13;
  for (bool block : {false, true}) {
    const std::string name = block ? "block" : "per tensor";
    const Fp8Operands q = quantize_pair(m, n, k, DType::F8E4M3, DType::F8E4M3, block);
    const Tensor bias = random_tensor({n}, DType::BF16, 40);
    const Tensor mag = ops::matmul(abs64(ops::dequantize(q.a, DType::F32)), abs64(ops::dequantize(q.b, DType::F32)),
                                   {.trans_b = true});
    auto opts = [&](bool gpu) {
      return ops::MatmulOptions{.trans_b = true, .out_dtype = DType::BF16, .scale_a = scaling_of(q.a, gpu),
                                .scale_b = scaling_of(q.b, gpu)};
    };
    // Forward: h = gelu(A B^T + bias), pre = A B^T + bias.
    Tensor pre_c = Tensor::empty({m, n}, DType::BF16), pre_g = to_gpu(pre_c);
    ops::MatmulOptions oc = opts(false), og = opts(true);
    oc.bias = bias, og.bias = to_gpu(bias);
    oc.gelu_aux = pre_c, og.gelu_aux = pre_g;
    const Tensor h_c = ops::matmul(q.a.data, q.b.data, oc);
    const Tensor ag = to_gpu(q.a.data), bg = to_gpu(q.b.data);
#if defined(MPT_CUDA_EMULATION)
    cuda_emu::reset_counters();
#endif
    const Tensor h_g = ops::matmul(ag, bg, og);
#if defined(MPT_CUDA_EMULATION)
    if (!block) {
      EXPECT_EQ(cuda_emu::counters().matmuls, 1u) << name;
      EXPECT_EQ(cuda_emu::counters().kernel_launches, 0u) << name << ": the GELU is in the GEMM";
    }
#endif
    expect_gemm_close(pre_g, pre_c, ops::add(mag, abs64(bias)), k + 1, 0, name + " pre", ua);
    const std::vector<double> mv = mag.to_vector<double>(), pv = pre_c.to_vector<double>(), hv = h_c.to_vector<double>();
    std::vector<double> bound(mv.size());
    for (size_t i = 0; i < mv.size(); ++i)
      bound[i] = g1 * (2 * (k + 1) * ua * mv[i] + u * std::fabs(pv[i])) + 2 * u * std::fabs(hv[i]) + 1e-6;
    expect_within(h_g, h_c, bound, name + " gelu(pre)");

    // Backward: out = (A B^T) * gelu'(pre), db = its column sums; the aux is the CPU's pre on both sides.
    const Tensor prod = ops::matmul(q.a.data, q.b.data, opts(false));
    Tensor db_c = Tensor::empty({n}, DType::BF16), db_g = to_gpu(db_c);
    ops::MatmulOptions bc = opts(false), bg_opt = opts(true);
    bc.dgelu_aux = pre_c, bg_opt.dgelu_aux = to_gpu(pre_c);
    bc.aux_bias_grad = db_c, bg_opt.aux_bias_grad = db_g;
    const Tensor d_c = ops::matmul(q.a.data, q.b.data, bc);
    const Tensor d_g = ops::matmul(ag, bg, bg_opt);
    const std::vector<double> prv = prod.to_vector<double>(), dv = d_c.to_vector<double>(), dbv = db_c.to_vector<double>();
    std::vector<double> db_bound(static_cast<size_t>(n), 0.0);
    for (size_t i = 0; i < mv.size(); ++i) {
      bound[i] = g1 * (2 * k * ua * mv[i] + u * std::fabs(prv[i])) + 2 * u * std::fabs(dv[i]) + 1e-6;
      db_bound[i % static_cast<size_t>(n)] += bound[i];
    }
    expect_within(d_g, d_c, bound, name + " dgelu");
    for (size_t j = 0; j < db_bound.size(); ++j) db_bound[j] += 2 * u * std::fabs(dbv[j]) + 1e-6;
    expect_within(db_g, db_c, db_bound, name + " dgelu bias gradient");
  }
}

// An FP8 problem cuBLASLt cannot run (m = 130) is an mpt::Error that names the constraint, not a crash or garbage.
TEST(GpuMatmul, UnsupportedFp8ShapeIsAnErrorOnCuda) {
  MPT_REQUIRE_GPU(9);
  const Fp8Operands q = quantize_pair(130, 208, 288, DType::F8E4M3, DType::F8E4M3, true);
  const ops::MatmulOptions gpu_opt{.trans_b = true, .out_dtype = DType::BF16, .scale_a = scaling_of(q.a, true),
                                   .scale_b = scaling_of(q.b, true)};
  EXPECT_MPT_ERROR(ops::matmul(to_gpu(q.a.data), to_gpu(q.b.data), gpu_opt), "multiples of 16");
}

}  // namespace
}  // namespace mpt
