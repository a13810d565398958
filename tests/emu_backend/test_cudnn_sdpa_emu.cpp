// tests/emu_backend/test_cudnn_sdpa_emu.cpp: attention's cuDNN path (plans, variant packs, lengths, the fused QKV
// layout's strides) run end to end on the emulated cuDNN (cuda_emu/cudnn.h), against the CPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "cuda_emu/counters.h"
#include "cuda_emu/cudnn.h"
#include "mpt/core/stream.h"
#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

Tensor cpu(const Tensor& t) { return t.to(Device::cpu()); }

double max_abs(const Tensor& t) {
  double m = 0;
  for (double v : cpu(t).to(DType::F64).contiguous().to_vector<double>()) m = std::max(m, std::fabs(v));
  return m;
}

// max |got - want| / max |want|.
double normwise_error(const Tensor& got, const Tensor& want) {
  const auto g = cpu(got).to(DType::F64).contiguous().to_vector<double>();
  const auto w = cpu(want).to(DType::F64).contiguous().to_vector<double>();
  double err = 0, mag = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    err = std::max(err, std::isnan(g[i]) ? INFINITY : std::fabs(g[i] - w[i]));
    mag = std::max(mag, std::fabs(w[i]));
  }
  return err / mag;
}

using mpt::testing::same_bits;

// The double on, on a stream of the test's own (mptrain caches a cuDNN handle per stream, a failed one too).
class CudnnSdpaEmu : public ::testing::Test {
 protected:
  void SetUp() override { cuda_emu::set_cudnn_sdpa(true); }
  void TearDown() override { cuda_emu::set_cudnn_sdpa(false); }
  Stream stream_{Device::cuda(0)};
  StreamGuard guard_{stream_};
};

// One attention through the cuDNN path, head-major and in GPT's fused layout: the path runs (two graph executions
// per forward + backward), both layouts give the same bits (the double does the same arithmetic on the same values,
// read at the strides each graph declares: a wrong stride reads other elements or faults), and both match the CPU
// within the bounds GpuAttention derives for P rounded to the I/O dtype (tests/gpu/test_attention_fp8_linear_gpu.cpp).
TEST_F(CudnnSdpaEmu, HeadMajorAndFusedLayoutsRunOnCudnnAndMatchCpu) {
  const int64_t B = 3, T = 45, H = 2, D = 64, C = H * D;
  for (bool padded : {false, true}) {
    ops::AttentionOptions o;
    if (padded) o.lengths = Tensor::from_vector(std::vector<int32_t>{45, 20, 1}, {B});
    for (DType dt : {DType::BF16, DType::F16}) {
      const std::string n = std::string(dtype_name(dt)) + (padded ? " padded" : "");
      const Tensor qkv = testing::random_tensor({B, T, 3 * C}, dt, 21);
      const Tensor dout = testing::random_tensor({B, T, C}, dt, 22);
      const Device gpu = Device::cuda(0);
      const uint64_t before = cuda_emu::cudnn_sdpa_executions();
      const ops::AttentionResult fused = ops::causal_attention_qkv(qkv.to(gpu), H, o);
      const Tensor dfused = ops::causal_attention_qkv_backward(dout.to(gpu), qkv.to(gpu), fused.out, fused.lse, H, o);
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 2) << n;
      // Head-major: the same q, k, v and dout copied out of the fused tensors.
      const ops::QkvHeads h = ops::split_qkv_heads(qkv.to(gpu), H);
      const Tensor dout_h = dout.to(gpu).view({B, T, H, D}).transpose(1, 2).contiguous();
      const ops::AttentionResult plain = ops::causal_attention(h.q, h.k, h.v, o);
      const ops::AttentionGrads g = ops::causal_attention_backward(dout_h, h.q, h.k, h.v, plain.out, plain.lse, o);
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 4) << n;
      EXPECT_TRUE(same_bits(fused.out, plain.out.transpose(1, 2).reshape({B, T, C}))) << "out " << n;
      EXPECT_TRUE(same_bits(fused.lse, plain.lse)) << "lse " << n;
      const Tensor dplain = Tensor::empty({B, T, 3, H, D}, dt, gpu);
      dplain.select(2, 0).transpose(1, 2).copy_(g.dq);
      dplain.select(2, 1).transpose(1, 2).copy_(g.dk);
      dplain.select(2, 2).transpose(1, 2).copy_(g.dv);
      EXPECT_TRUE(same_bits(dfused, dplain.reshape({B, T, 3 * C}))) << "d(qkv) " << n;

      const ops::AttentionResult want = ops::causal_attention_qkv(qkv, H, o);
      const Tensor dwant = ops::causal_attention_qkv_backward(dout, qkv, want.out, want.lse, H, o);
      const double u = dt == DType::BF16 ? 0x1p-8 : 0x1p-11, u32 = 0x1p-24, vmax = max_abs(qkv);
      const auto og = cpu(fused.out).to(DType::F64).to_vector<double>();
      const auto ow = want.out.to(DType::F64).to_vector<double>();
      for (size_t i = 0; i < ow.size(); ++i)
        ASSERT_NEAR(og[i], ow[i], 2 * u * std::fabs(ow[i]) + (u + 2 * static_cast<double>(T) * u32) * vmax) << n;
      const double score_max = vmax * vmax * std::sqrt(static_cast<double>(D));
      const auto lg = cpu(fused.lse).to_vector<double>(), lw = want.lse.to_vector<double>();
      for (size_t i = 0; i < lw.size(); ++i)
        ASSERT_NEAR(lg[i], lw[i], 8 * u32 * std::fabs(lw[i]) + 2 * static_cast<double>(D) * u32 * score_max) << n;
      for (int64_t part = 0; part < 3; ++part)  // dq, dk, dv
        EXPECT_LE(normwise_error(dfused.slice(2, part * C, (part + 1) * C), dwant.slice(2, part * C, (part + 1) * C)),
                  8 * u)
            << "d(qkv) part " << part << " " << n;
      if (padded) {  // sample 1's padding keys (20..44) get exactly zero dk and dv (zeroed before the graph runs)
        for (double x : cpu(dfused).select(0, 1).slice(0, 20, T).slice(1, C, 3 * C).to(DType::F64).contiguous()
                            .to_vector<double>())
          ASSERT_EQ(x, 0.0) << n;
      }
    }
  }
}

// Llama's attention on the cuDNN path: token-major q, k, v with fewer kv heads, read in place (the graph declares the
// H_kv heads at the projections' strides: no repeated kv heads, no head copies, one launch per pass unpadded). Against
// the same values head-major with the kv heads repeated in memory (the multi-head graph, whose agreement with the CPU
// the test above checks): out, lse and dq bit for bit, dk and dv the group sums of the repeated heads' gradients (each
// rounded to the I/O dtype, summed in f32, rounded: what the grouped graph declares; G = 2, so no order to differ).
TEST_F(CudnnSdpaEmu, GroupedQueryTokenMajorReadsTheKvHeadsInPlace) {
  const int64_t B = 2, T = 45, H = 4, Hkv = 2, D = 64;
  const Device gpu = Device::cuda(0);
  for (bool padded : {false, true}) {
    ops::AttentionOptions o;
    if (padded) o.lengths = Tensor::from_vector(std::vector<int32_t>{45, 20}, {B});
    for (DType dt : {DType::BF16, DType::F16}) {
      const std::string n = std::string(dtype_name(dt)) + (padded ? " padded" : "");
      const auto token_major = [&](int64_t heads, uint64_t seed) {
        return testing::random_tensor({B, T, heads, D}, dt, seed).to(gpu).transpose(1, 2);
      };
      const Tensor q = token_major(H, 31), k = token_major(Hkv, 32), v = token_major(Hkv, 33);
      const Tensor dout = token_major(H, 34);
      const uint64_t before = cuda_emu::cudnn_sdpa_executions(), launches = cuda_emu::counters().kernel_launches;
      const ops::AttentionResult r = ops::causal_attention(q, k, v, o);
      if (!padded) {
        EXPECT_EQ(cuda_emu::counters().kernel_launches, launches + 1) << n;
      }
      const ops::AttentionGrads g = ops::causal_attention_backward(dout, q, k, v, r.out, r.lse, o);
      if (!padded) {
        EXPECT_EQ(cuda_emu::counters().kernel_launches, launches + 2) << n;
      }
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 2) << n;
      EXPECT_TRUE(r.out.transpose(1, 2).is_contiguous()) << n;
      EXPECT_EQ(g.dk.shape(), k.shape()) << n;
      EXPECT_TRUE(g.dq.transpose(1, 2).is_contiguous() && g.dk.transpose(1, 2).is_contiguous() &&
                  g.dv.transpose(1, 2).is_contiguous())
          << n;

      const auto repeated = [&](const Tensor& kv) {
        return kv.contiguous().unsqueeze(2).expand({B, Hkv, H / Hkv, T, D}).reshape({B, H, T, D}).contiguous();
      };
      const Tensor qh = q.contiguous(), kh = repeated(k), vh = repeated(v);
      const ops::AttentionResult m = ops::causal_attention(qh, kh, vh, o);
      const ops::AttentionGrads gm = ops::causal_attention_backward(dout.contiguous(), qh, kh, vh, m.out, m.lse, o);
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 4) << n;
      EXPECT_TRUE(same_bits(r.out, m.out)) << "out " << n;
      EXPECT_TRUE(same_bits(r.lse, m.lse)) << "lse " << n;
      EXPECT_TRUE(same_bits(g.dq, gm.dq)) << "dq " << n;
      const Shape grouped{B, Hkv, H / Hkv, T, D};
      EXPECT_TRUE(same_bits(g.dk, ops::sum(gm.dk.view(grouped), 2))) << "dk " << n;
      EXPECT_TRUE(same_bits(g.dv, ops::sum(gm.dv.view(grouped), 2))) << "dv " << n;
      EXPECT_GT(max_abs(g.dk), 0.0) << n;
    }
  }
}

// Llama's packed row on the cuDNN path (ops::rope_qkv's output: each token's H q heads, then H_kv k heads, then H_kv
// v heads): the packed graph reads q, k and v at that row's strides and writes d(qkv) as one tensor, one launch per
// pass unpadded; out, lse and every gradient the bits of the grouped token-major graph on the same heads (the test
// above ties that one to the multi-head graph), the padding keys' dk and dv exactly zero.
TEST_F(CudnnSdpaEmu, GroupedQueryPackedRowReadsQkvInPlace) {
  const int64_t B = 2, T = 45, H = 4, Hkv = 2, D = 64, W = (H + 2 * Hkv) * D;
  const Device gpu = Device::cuda(0);
  for (bool padded : {false, true}) {
    ops::AttentionOptions o;
    if (padded) o.lengths = Tensor::from_vector(std::vector<int32_t>{45, 20}, {B});
    for (DType dt : {DType::BF16, DType::F16}) {
      const std::string n = std::string(dtype_name(dt)) + (padded ? " padded" : "");
      const Tensor qkv = testing::random_tensor({B, T, W}, dt, 41).to(gpu);
      const Tensor dout = testing::random_tensor({B, T, H * D}, dt, 42).to(gpu);
      const uint64_t before = cuda_emu::cudnn_sdpa_executions(), launches = cuda_emu::counters().kernel_launches;
      const ops::AttentionResult r = ops::causal_attention_qkv(qkv, H, Hkv, o);
      const Tensor dqkv = ops::causal_attention_qkv_backward(dout, qkv, r.out, r.lse, H, Hkv, o);
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 2) << n;
      if (!padded) {
        EXPECT_EQ(cuda_emu::counters().kernel_launches, launches + 2) << n;
      }
      ASSERT_EQ(dqkv.shape(), qkv.shape()) << n;

      const Tensor all = qkv.view({B, T, H + 2 * Hkv, D});
      const Tensor q = all.slice(2, 0, H).contiguous().transpose(1, 2);
      const Tensor k = all.slice(2, H, H + Hkv).contiguous().transpose(1, 2);
      const Tensor v = all.slice(2, H + Hkv, H + 2 * Hkv).contiguous().transpose(1, 2);
      const Tensor dout_h = dout.view({B, T, H, D}).transpose(1, 2);
      const ops::AttentionResult m = ops::causal_attention(q, k, v, o);
      const ops::AttentionGrads g = ops::causal_attention_backward(dout_h, q, k, v, m.out, m.lse, o);
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 4) << n;
      EXPECT_TRUE(same_bits(r.out, m.out.transpose(1, 2).reshape({B, T, H * D}))) << "out " << n;
      EXPECT_TRUE(same_bits(r.lse, m.lse)) << "lse " << n;
      const Tensor d = dqkv.view({B, T, H + 2 * Hkv, D});
      EXPECT_TRUE(same_bits(d.slice(2, 0, H).contiguous(), g.dq.transpose(1, 2).contiguous())) << "dq " << n;
      EXPECT_TRUE(same_bits(d.slice(2, H, H + Hkv).contiguous(), g.dk.transpose(1, 2).contiguous())) << "dk " << n;
      EXPECT_TRUE(same_bits(d.slice(2, H + Hkv, H + 2 * Hkv).contiguous(), g.dv.transpose(1, 2).contiguous()))
          << "dv " << n;
      EXPECT_GT(max_abs(g.dk), 0.0) << n;
      if (padded) {  // sample 1's padding keys (20..44): exactly zero dk and dv
        for (double x : cpu(d).select(0, 1).slice(0, 20, T).slice(1, H, H + 2 * Hkv).to(DType::F64).contiguous()
                            .to_vector<double>())
          ASSERT_EQ(x, 0.0) << n;
      }
    }
  }
}

// One BF16-autocast loss + backward of a model on cuda:0 (the cuDNN double on) and of its CPU twin (the same
// initialisation): each attention layer runs cuDNN once per pass, the losses agree within u relative and every
// gradient within `bound_u` u normwise.
void expect_bf16_step_matches_cpu(const nn::LanguageModel& cpu_model, const nn::LanguageModel& gpu_model,
                                    double bound_u) {
  std::vector<int32_t> tokens(2 * 32), targets(2 * 32);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3) % 64);
    targets[i] = static_cast<int32_t>((i * 5 + 1) % 64);
  }
  const Tensor x = Tensor::from_vector(tokens, {2, 32}), y = Tensor::from_vector(targets, {2, 32});
  const uint64_t before = cuda_emu::cudnn_sdpa_executions();
  double loss_gpu = 0, loss_cpu = 0;
  {
    const amp::Autocast autocast(amp::Policy::bf16());
    const Tensor l = gpu_model.loss(x.to(Device::cuda(0)), y.to(Device::cuda(0)));
    l.backward();
    loss_gpu = cpu(l).to(DType::F64).item<double>();
    const Tensor lc = cpu_model.loss(x, y);
    lc.backward();
    loss_cpu = lc.to(DType::F64).item<double>();
  }
  EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 2 * static_cast<uint64_t>(cpu_model.num_layers()));
  constexpr double u = 0x1p-8;  // BF16's unit roundoff
  EXPECT_NEAR(loss_gpu, loss_cpu, u * std::fabs(loss_cpu));
  const auto gp = gpu_model.named_parameters(), cp = cpu_model.named_parameters();
  EXPECT_EQ(gp.size(), cp.size());
  double worst = 0;
  for (size_t i = 0; i < std::min(gp.size(), cp.size()); ++i) {
    const double e = normwise_error(gp[i].tensor.grad(), cp[i].tensor.grad());
    worst = std::max(worst, e);
    EXPECT_LE(e, bound_u * u) << gp[i].name;
  }
  std::printf("worst normwise gradient error %.3g, loss %.3g\n", worst, std::fabs(loss_gpu - loss_cpu) / loss_cpu);
}

// GPT-2's attention shape through the whole cuDNN path in record-only mode is what bench_step_cost measures; here a
// small GPT's BF16 step: the attention layers take the cuDNN path (2 executions per layer) and the loss and every
// gradient match the CPU's. Both sides run BF16 Autocast on the same weights, so they differ only where the paths
// do: the attention (P rounded to BF16 here, f32 on the CPU: within 8u normwise for its gradients, GpuAttention's
// derivation) and then, per block the gradient crosses on its way (2 here), the BF16 rounding of the two GEMM inputs
// downstream of it, each able to move by one ulp (u): 8u + 2 x 2u = 12u = 0.047 normwise (measured 0.026). The loss
// (a mean of the log-softmax of BF16 logits) moves by less than one BF16 rounding of the logits: u relative.
// A CudaGraph's stream gets a cuDNN handle of its own for the attention its step runs; destroying the graph destroys
// that handle (core/stream_resources.h), three graphs in a row leaving the live handles as they were. The plans cached
// meanwhile were built with a handle no stream owns, so they keep running on other streams' handles afterwards (the
// double refuses a plan whose building handle was destroyed, as it does a destroyed handle).
TEST_F(CudnnSdpaEmu, AGraphsStreamGivesItsHandleBackAndThePlansStay) {
  const int64_t B = 2, H = 2, D = 64;
  const Device gpu = Device::cuda(0);
  auto qkv = [&](int64_t T, uint64_t seed) {
    std::vector<Tensor> out;
    for (uint64_t i = 0; i < 3; ++i) out.push_back(testing::random_tensor({B, H, T, D}, DType::BF16, seed + i).to(gpu));
    return out;
  };
  const std::vector<Tensor> a = qkv(32, 31);
  const Tensor want = ops::causal_attention(a[0], a[1], a[2]).out;  // the fixture's stream: its handle, the builder's
  const size_t live = cuda_emu::cudnn_live_handles();
  for (int g = 0; g < 3; ++g) {
    // A shape first seen inside the graph: its plan is built while the graph's stream runs the step.
    const std::vector<Tensor> b = qkv(40 + 8 * g, 40 + 3 * static_cast<uint64_t>(g));
    Tensor out, out_b, kept_b;
    const uint64_t first = cuda_emu::cudnn_sdpa_executions();
    {
      CudaGraph graph(gpu);
      const std::function<void()> step = [&] {
        out = ops::causal_attention(a[0], a[1], a[2]).out;
        out_b = ops::causal_attention(b[0], b[1], b[2]).out;
      };
      graph.warmup(step);
      graph.warmup(step);
      graph.capture(step);
      graph.replay();
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), first + 6) << "graph " << g << ": not on cuDNN";
      EXPECT_EQ(cuda_emu::cudnn_live_handles(), live + 1) << "graph " << g << ": its stream's handle";
      EXPECT_TRUE(same_bits(out, want)) << "graph " << g;
      kept_b = out_b.to(Device::cpu());
    }
    EXPECT_EQ(cuda_emu::cudnn_live_handles(), live) << "graph " << g << " destroyed";
    // The plan built during the graph's warm-up runs on the fixture stream's handle after the graph is gone.
    const uint64_t before = cuda_emu::cudnn_sdpa_executions();
    EXPECT_TRUE(same_bits(ops::causal_attention(b[0], b[1], b[2]).out.to(Device::cpu()), kept_b)) << "graph " << g;
    EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 1) << "graph " << g << ": its plan no longer runs";
  }
}

// A Stream of the user's that ran attention ends with its last owner and destroys the cuDNN handle made for it.
TEST_F(CudnnSdpaEmu, AUserStreamsHandleIsDestroyedWithTheStream) {
  const Device gpu = Device::cuda(0);
  std::vector<Tensor> a;
  for (uint64_t i = 0; i < 3; ++i) a.push_back(testing::random_tensor({2, 2, 24, 64}, DType::BF16, 50 + i).to(gpu));
  const Tensor want = cpu(ops::causal_attention(a[0], a[1], a[2]).out);  // the fixture's stream and handle
  const size_t live = cuda_emu::cudnn_live_handles();
  for (int round = 0; round < 3; ++round) {
    std::weak_ptr<void> handle;
    {
      Stream side(gpu);
      handle = side.shared_native();
      Event inputs(gpu);
      inputs.record(stream_);
      inputs.wait(side);
      const StreamGuard guard(side);
      const uint64_t before = cuda_emu::cudnn_sdpa_executions();
      EXPECT_TRUE(same_bits(cpu(ops::causal_attention(a[0], a[1], a[2]).out), want)) << "round " << round;
      EXPECT_EQ(cuda_emu::cudnn_sdpa_executions(), before + 1) << "round " << round << ": not on cuDNN";
      EXPECT_EQ(cuda_emu::cudnn_live_handles(), live + 1) << "round " << round << ": the side stream's handle";
    }
    EXPECT_TRUE(handle.expired()) << "round " << round << ": the stream outlived its last Stream";
    EXPECT_EQ(cuda_emu::cudnn_live_handles(), live) << "round " << round << ": its handle stayed";
  }
}

TEST_F(CudnnSdpaEmu, GptStepUnderBf16AutocastRunsItsAttentionOnCudnn) {
  nn::GPTConfig c;
  c.vocab_size = 64, c.block_size = 32, c.n_layer = 2, c.n_head = 2, c.n_embd = 64, c.dropout = 0;
  nn::GPT cpu_model(c), gpu_model(c);  // the same initialisation (GPTConfig::seed)
  gpu_model.to(Device::cuda(0));
  expect_bf16_step_matches_cpu(cpu_model, gpu_model, 12);
}

// The same for a small Llama (4 heads over 2 kv heads): its attention takes the projections' token-major outputs and
// the 2 kv heads to cuDNN's grouped graph in place (no head copies: GQA's dK and dV summed by the graph). The bound
// is GPT's 12u plus G u = 2u for the grouped dK and dV, each query head's rounded to BF16 before the group sum (the
// graph's declared per-head tensors; the CPU sums in f32 and rounds once). Measured: 0.0084 (2.1u).
TEST_F(CudnnSdpaEmu, LlamaStepUnderBf16AutocastRunsGroupedQueryAttentionOnCudnn) {
  nn::LlamaConfig c;
  c.vocab_size = 64, c.block_size = 32, c.n_layer = 2, c.n_head = 4, c.n_kv_head = 2, c.n_embd = 128;
  nn::Llama cpu_model(c), gpu_model(c);  // the same initialisation (LlamaConfig::seed)
  gpu_model.to(Device::cuda(0));
  expect_bf16_step_matches_cpu(cpu_model, gpu_model, 14);
}

}  // namespace
}  // namespace mpt
