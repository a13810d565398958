// tests/gpu/test_pointwise_gpu.cpp: the general op set (unary, binary, comparisons, where, cat, max/min, losses,
// batched matmul), the Llama ops and a Llama's training and generation on cuda:0 against the CPU backend, forward and
// backward through autograd (skipped without a GPU).
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "device_test.h"
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

const DType kFloat16s[] = {DType::F32, DType::F16, DType::BF16};

// Runs fn on CPU copies and on cuda:0 copies of the inputs, then backward with the same output gradient, and compares
// outputs and input gradients. Elementwise ops run the same functors in the same order: exact under emulation.
void expect_same(const std::string& what, const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                 const std::vector<Tensor>& inputs, const Match& match) {
  std::vector<Tensor> cpu, gpu;
  for (const Tensor& t : inputs) {
    cpu.push_back(t.clone().requires_grad_());
    gpu.push_back(to_gpu(t).requires_grad_());
  }
  const Tensor yc = fn(cpu), yg = fn(gpu);
  expect_match(yg, yc, match, what + " forward");
  const Tensor dy = random_tensor(yc.shape(), yc.dtype(), 99);
  yc.backward(dy);
  yg.backward(to_gpu(dy));
  for (size_t i = 0; i < inputs.size(); ++i) {
    expect_match(gpu[i].grad(), cpu[i].grad(), match, what + " grad " + std::to_string(i));
  }
}

std::string tag(const char* what, DType dt) { return std::string(what) + " " + std::string(dtype_name(dt)); }

TEST(GpuPointwise, UnaryOpsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops_ = {
      {"neg", [](const Tensor& x) { return ops::neg(x); }},
      {"abs", [](const Tensor& x) { return ops::abs(x); }},
      {"relu", [](const Tensor& x) { return ops::relu(x); }},
      {"silu", [](const Tensor& x) { return ops::silu(x); }},
      {"tanh", [](const Tensor& x) { return ops::tanh(x); }},
      {"sigmoid", [](const Tensor& x) { return ops::sigmoid(x); }},
      {"exp", [](const Tensor& x) { return ops::exp(x); }},
      {"log", [](const Tensor& x) { return ops::log(ops::abs(x)); }},
      {"sqrt", [](const Tensor& x) { return ops::sqrt(ops::abs(x)); }},
      {"rsqrt", [](const Tensor& x) { return ops::rsqrt(ops::abs(x)); }},
      {"softplus", [](const Tensor& x) { return ops::softplus(x); }},
      {"pow 2", [](const Tensor& x) { return ops::pow(x, 2); }},
      {"clamp", [](const Tensor& x) { return ops::clamp(x, -0.5, 0.75); }}};
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({7, 301}, dt, 1);
    for (const auto& [name, op] : ops_) {
      expect_same(tag(name, dt), [&op](const std::vector<Tensor>& in) { return op(in[0]); }, {x}, Match::exact(dt));
    }
  }
}

TEST(GpuPointwise, BinaryCompareWhereMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor a = random_tensor({3, 4, 40}, dt, 2), b = random_tensor({4, 1}, dt, 3);
    // The broadcast gradient of b is summed over rows: a reduction whose order differs between backends.
    const Match summed = Match::close(dt, 4);
    expect_same(tag("sub", dt), [](const std::vector<Tensor>& in) { return in[0] - in[1]; }, {a, b}, summed);
    expect_same(tag("div", dt), [](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a, b}, summed);
    expect_same(tag("maximum", dt), [](const std::vector<Tensor>& in) { return ops::maximum(in[0], in[1]); }, {a, b},
                summed);
    expect_same(tag("pow", dt),
                [](const std::vector<Tensor>& in) { return ops::pow(ops::abs(in[0]), ops::abs(in[1])); }, {a, b},
                summed);
    expect_match(ops::lt(to_gpu(a), to_gpu(b)), ops::lt(a, b), Match::exact(testing::Tolerance{0, 0}), tag("lt", dt));
    expect_same(tag("where", dt),
                [](const std::vector<Tensor>& in) { return ops::where(ops::gt(in[0], 0.0), in[0], in[1]); }, {a, b},
                summed);
    expect_same(tag("cat", dt), [](const std::vector<Tensor>& in) { return ops::cat({in[0], in[0] * 2.0}, 1); }, {a},
                Match::exact(dt));
    expect_same(tag("max", dt), [](const std::vector<Tensor>& in) { return ops::max(in[0], 1).values; }, {a},
                Match::exact(dt));
    expect_match(ops::argmax(to_gpu(a), -1), ops::argmax(a, -1), Match::exact(testing::Tolerance{0, 0}),
                 tag("argmax", dt));
    // Same-shape operands: the GPU writes both gradients in one kernel (binary_backward_both), the CPU's bits.
    const Tensor c = random_tensor({3, 4, 40}, dt, 4);
    expect_same(tag("swiglu", dt), [](const std::vector<Tensor>& in) { return ops::swiglu(in[0], in[1]); }, {a, c},
                Match::exact(dt));
    expect_same(tag("div, same shapes", dt), [](const std::vector<Tensor>& in) { return in[0] / in[1]; }, {a, c},
                Match::exact(dt));
  }
}

TEST(GpuPointwise, LossesAndBatchedMatmulMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({6, 9}, dt, 4), y = random_tensor({6, 9}, dt, 5);
    const Match reduced = Match::close(DType::F32, 4);
    expect_same(tag("mse", dt), [](const std::vector<Tensor>& in) { return ops::mse_loss(in[0], in[1]); }, {x, y},
                reduced);
    expect_same(tag("bce", dt),
                [](const std::vector<Tensor>& in) {
                  return ops::binary_cross_entropy_with_logits(in[0], ops::sigmoid(in[1]));
                },
                {x, y}, reduced);
    const Tensor t = Tensor::from_vector<int64_t>({1, 2, -100, 8, 0, 3}, {6});
    expect_same(tag("cross_entropy smoothing", dt),
                [&t](const std::vector<Tensor>& in) {
                  const Tensor tt = in[0].device().is_cpu() ? t : to_gpu(t);
                  return ops::cross_entropy(in[0], tt, {.label_smoothing = 0.1});
                },
                {x}, reduced);
    const Tensor q = random_tensor({2, 3, 5, 8}, dt, 6), k = random_tensor({2, 1, 8, 4}, dt, 7);
    expect_same(tag("matmul 4-d broadcast", dt),
                [](const std::vector<Tensor>& in) { return ops::matmul(in[0], in[1]); }, {q, k}, Match::close(dt, 4));
  }
}

}  // namespace
}  // namespace mpt

namespace mpt {
namespace {

TEST(GpuLlamaOps, RmsNormAndRopeMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({3, 5, 96}, dt, 8), res = random_tensor({3, 5, 96}, dt, 9);
    const Tensor w = random_tensor({96}, DType::F32, 10);
    // Row statistics: reduction orders differ between the backends (as for LayerNorm).
    const Match rows = Match::close(dt, 4);
    expect_same(tag("rms_norm", dt), [&](const std::vector<Tensor>& in) { return ops::rms_norm(in[0], in[1]).y; },
                {x, dt == DType::F32 ? w : w.to(dt)}, rows);
    expect_same(tag("residual_rms_norm", dt),
                [&](const std::vector<Tensor>& in) {
                  const auto r = ops::residual_rms_norm(in[0], in[1], in[2]);
                  return r.y + r.sum;
                },
                {x, res, dt == DType::F32 ? w : w.to(dt)}, rows);
    const ops::RopeTable cpu_table = ops::rope_table(12, 32), gpu_table{to_gpu(cpu_table.cos), to_gpu(cpu_table.sin)};
    const Tensor q = random_tensor({2, 6, 3, 32}, dt, 11);
    expect_same(tag("rope", dt),
                [&](const std::vector<Tensor>& in) {
                  return ops::rope(in[0], in[0].device().is_cpu() ? cpu_table : gpu_table, 5);
                },
                {q}, Match::exact(dt));
  }
}

}  // namespace
}  // namespace mpt

namespace mpt {
namespace {

// Llama's packed projections: ops::rope_qkv and ops::swiglu_packed bit for bit (rope's and swiglu's functors; swiglu
// in one pass over gate | up, the vector path at F 64 and the scalar one at F 13), and ops::packed_linear's one GEMM
// with its per-weight gradient GEMMs on strided columns of dy, as close as the backends' GEMMs are (their blockings
// differ).
TEST(GpuLlamaOps, PackedProjectionAndSwigluMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (int64_t f : {13, 64}) {
      expect_same(tag("swiglu_packed", dt), [](const std::vector<Tensor>& in) { return ops::swiglu_packed(in[0]); },
                  {random_tensor({3, 5, 2 * f}, dt, 20 + f, 3.0)}, Match::exact(dt));
    }
    const ops::RopeTable cpu_table = ops::rope_table(12, 16), gpu_table{to_gpu(cpu_table.cos), to_gpu(cpu_table.sin)};
    expect_same(tag("rope_qkv", dt),
                [&](const std::vector<Tensor>& in) {
                  const ops::QkvRotated r = ops::rope_qkv(in[0], in[0].device().is_cpu() ? cpu_table : gpu_table, 4,
                                                          2, 3);
                  return ops::cat({r.q, r.k, r.v}, 2);
                },
                {random_tensor({2, 6, 8, 16}, dt, 34)}, Match::exact(dt));
    expect_same(tag("packed_linear", dt),
                [](const std::vector<Tensor>& in) { return ops::packed_linear(in[0], {in[1], in[2], in[3]}); },
                {random_tensor({9, 48}, dt, 30), random_tensor({16, 48}, dt, 31), random_tensor({8, 48}, dt, 32),
                 random_tensor({8, 48}, dt, 33)},
                Match::close(dt, 4));
  }
}

}  // namespace
}  // namespace mpt

namespace mpt {
namespace {

nn::LlamaConfig gpu_llama(Device device) {
  nn::LlamaConfig c = nn::llama_preset("llama-tiny");
  c.vocab_size = 48;
  c.n_layer = 3;  // the FP8 policy keeps the first and last blocks in BF16: model.layers.1 runs FP8
  c.where.device = device;
  return c;
}

struct LlamaRun {
  std::vector<double> losses;
  mpt::StateDict grads;  // the first step's, on the CPU
};

LlamaRun train_llama(const nn::Llama& init, Device dev, const char* precision) {
  const std::vector<int64_t> ids_v = {1, 5, 9, 2, 7, 3, 3, 8, 11, 40, 2, 0, 17, 6, 6, 1, 4, 30, 29, 8, 12, 13, 14, 15};
  nn::Llama model(gpu_llama(dev));
  model.load_state_dict(init.state_dict());
  const amp::Policy policy = amp::Policy::named(precision, 3, dev, "model.layers");
  optim::AdamW opt(model.parameters(), {.lr = 3e-3});
  const Tensor ids = Tensor::from_vector(ids_v, {2, 12}, dev);
  LlamaRun r;
  for (int step = 0; step < 3; ++step) {
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast(policy);
      loss = model.loss(ids, ids);
    }
    loss.backward();
    if (step == 0)
      for (const auto& p : model.named_parameters()) r.grads[p.name] = to_cpu(p.tensor.grad());
    opt.step();
    if (policy.fp8_state) policy.fp8_state->update();
    r.losses.push_back(loss.item<double>());
  }
  return r;
}

// A Llama (GQA 4/2, rotary, SwiGLU) trained for three AdamW steps on cuda:0 and on the CPU from the same weights. FP32:
// the first step's gradients and every loss (the later ones after the device's optimizer steps) agree to 1e-5. BF16 and
// FP8-block: measured against the CPU's FP32 run, the device's error is at most twice the CPU's own error in that
// precision (or 1e-3), as tests/gpu/test_train_gpu.cpp holds GPT-2 (the backends round differently before each
// quantization, so they do not agree with each other more closely than each agrees with FP32).
TEST(GpuLlama, TrainsLikeTheCpuInEveryPrecision) {
  MPT_REQUIRE_GPU(8);
  const nn::Llama init(gpu_llama(Device::cpu()));
  const LlamaRun ref = train_llama(init, Device::cpu(), "fp32");
  const LlamaRun gpu32 = train_llama(init, Device::cuda(0), "fp32");
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(gpu32.losses[s], ref.losses[s], 1e-5 * ref.losses[s]) << "fp32 step " << s;
  for (const auto& [k, t] : ref.grads) EXPECT_LE(testing::normwise_error(gpu32.grads.at(k), t), 1e-5) << "fp32 " << k;
  for (const char* precision : {"bf16", "fp8-block"}) {
    const LlamaRun cpu = train_llama(init, Device::cpu(), precision);
    const LlamaRun gpu = train_llama(init, Device::cuda(0), precision);
    for (int s = 0; s < 3; ++s) {
      const double own = std::fabs(cpu.losses[s] - ref.losses[s]);
      EXPECT_LE(std::fabs(gpu.losses[s] - ref.losses[s]), std::max(2 * own, 1e-3 * ref.losses[s]))
          << precision << " step " << s;
    }
    for (const auto& [k, t] : ref.grads) {
      const double own = testing::normwise_error(cpu.grads.at(k), t);
      EXPECT_LE(testing::normwise_error(gpu.grads.at(k), t), std::max(2 * own, 1e-3)) << precision << " " << k;
    }
  }
}

// KV-cache generation on the device gives the CPU's logits.
TEST(GpuLlama, CachedGenerationMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const nn::Llama cpu(gpu_llama(Device::cpu()));
  nn::Llama gpu(gpu_llama(Device::cuda(0)));
  gpu.load_state_dict(cpu.state_dict());
  const Tensor prompt = Tensor::from_vector(std::vector<int64_t>{3, 1, 4, 1, 5, 9, 2, 6}, {1, 8});
  nn::KvCache c_cache, g_cache;
  Tensor c = cpu.forward_cached(prompt, c_cache), g = gpu.forward_cached(to_gpu(prompt), g_cache);
  for (int64_t t : {5, 3, 5}) {
    const Tensor next = Tensor::from_vector(std::vector<int64_t>{t}, {1, 1});
    c = cpu.forward_cached(next, c_cache);
    g = gpu.forward_cached(to_gpu(next), g_cache);
  }
  EXPECT_LE(testing::normwise_error(to_cpu(g), c), 1e-5);
}

}  // namespace
}  // namespace mpt
