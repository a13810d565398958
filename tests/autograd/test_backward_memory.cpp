// tests/autograd/test_backward_memory.cpp: backward frees each layer's activations as it goes; checkpoints cut peaks.
#include <gtest/gtest.h>

#include <cstdio>
#include <utility>
#include <vector>

#include "mpt/autograd/checkpoint.h"
#include "mpt/autograd/engine.h"
#include "mpt/core/memory.h"
#include "mpt/ops/activation.h"
#include "mpt/ops/elementwise.h"
#include "mpt/ops/layernorm.h"
#include "mpt/ops/matmul.h"
#include "mpt/ops/reduction.h"

namespace mpt {
namespace {

namespace ag = autograd;

// current_bytes counts the bytes requested by live allocations (src/core/cpu_allocator.cpp: += on allocate, -= on
// free, whether the block then goes back to the pool or not), so it moves by exactly a tensor's nbytes.
int64_t live_bytes() { return memory_stats(Device::cpu()).current_bytes; }

constexpr int kLayers = 8;
constexpr int64_t kBatch = 768, kWidth = 128;
constexpr auto kF32 = static_cast<int64_t>(sizeof(float));
constexpr int64_t kAct = kBatch * kWidth * kF32;  // one (B, C) f32 activation: 384 KiB
// What the graph keeps for one layer h -> gelu(layer_norm(h) W^T + b): LayerNorm's input h and its statistics
// (mean and rstd, f32 [B] each), the matmul's input n = layer_norm(h) and GELU's input z. (The matmul output is
// consumed by the bias add, which saves nothing; the weight is a parameter, not an activation.)
constexpr int64_t kLayerBytes = 3 * kAct + 2 * kBatch * kF32;  // 1,185,792 bytes
// What backward allocates for good as a layer finishes: W.grad and b.grad.
constexpr int64_t kGradBytes = (kWidth * kWidth + kWidth) * kF32;

struct Mlp {
  std::vector<Tensor> w, b;
  Tensor ln_w;  // shared, no grad: keeps the parameter gradients small next to the activations
};

Mlp make_mlp() {
  Generator gen(42);
  Mlp m;
  for (int k = 0; k < kLayers; ++k) {
    m.w.push_back(Tensor::normal({kWidth, kWidth}, 0, 0.09, DType::F32, Device::cpu(), gen).requires_grad_());
    m.b.push_back(Tensor::normal({kWidth}, 0, 0.1, DType::F32, Device::cpu(), gen).requires_grad_());
  }
  m.ln_w = Tensor::ones({kWidth});
  return m;
}

Tensor input() {
  Generator gen(7);
  return Tensor::normal({kBatch, kWidth}, 0, 1, DType::F32, Device::cpu(), gen);  // needs no grad
}

// (B, C) -> (B, C)
Tensor layer(const Mlp& m, int k, const Tensor& h) {
  const auto i = static_cast<size_t>(k);
  const Tensor n = ops::layer_norm(h, m.ln_w, Tensor{}).y;
  const Tensor z = ops::add(ops::matmul(n, m.w[i], {.trans_b = true}), m.b[i]);  // (B, C)
  return ops::gelu(z);
}

Tensor loss_of(const Mlp& m, const Tensor& x, bool checkpointed) {
  Tensor h = x;
  for (int k = 0; k < kLayers; ++k)
    h = checkpointed ? ag::checkpoint([&m, k](const Tensor& a) { return layer(m, k, a); }, h) : layer(m, k, h);
  return ops::sum(h);  // saves no input: only the layers hold activations
}

// The live bytes each weight's post-accumulate hook sees, in firing order: (layer, bytes).
using Readings = std::vector<std::pair<int, int64_t>>;

void record_hooks(const Mlp& m, Readings& readings) {
  for (int k = 0; k < kLayers; ++k)
    m.w[static_cast<size_t>(k)].register_post_accumulate_grad_hook(
        [&readings, k](const Tensor&) { readings.emplace_back(k, live_bytes()); });
}

void print(const char* what, const Readings& r) {
  std::printf("%s: live bytes at each weight's hook (layer: MiB, drop since the previous hook):\n", what);
  int64_t previous = r.empty() ? 0 : r.front().second;
  for (const auto& [k, bytes] : r) {
    std::printf("  layer %d: %.3f MiB  (%+.3f MiB)\n", k, static_cast<double>(bytes) / (1 << 20),
                static_cast<double>(previous - bytes) / (1 << 20));
    previous = bytes;
  }
}

TEST(BackwardMemory, EachLayersActivationsAreFreedAsBackwardPassesIt) {
  Readings readings;
  const Mlp m = make_mlp();
  record_hooks(m, readings);
  const Tensor x = input();
  loss_of(m, x, false).backward();
  print("backward", readings);
  ASSERT_EQ(readings.size(), static_cast<size_t>(kLayers));
  for (int i = 0; i < kLayers; ++i) EXPECT_EQ(readings[static_cast<size_t>(i)].first, kLayers - 1 - i);
  // Between two hooks backward runs LayerNorm of the later layer (freeing h and the statistics) and GELU and matmul
  // of the earlier one (freeing z and n), and allocates that layer's W.grad and b.grad; the engine's in-flight
  // gradients are the same tensors' sizes at every hook. So each step drops kLayerBytes - kGradBytes.
  for (size_t i = 1; i < readings.size(); ++i)
    EXPECT_GE(readings[i - 1].second - readings[i].second, kLayerBytes - kGradBytes) << "step " << i;
  EXPECT_GE(readings.front().second - readings.back().second, (kLayers - 2) * kLayerBytes * 9 / 10);
}

TEST(BackwardMemory, RetainGraphKeepsTheActivations) {
  Readings readings;
  const Mlp m = make_mlp();
  record_hooks(m, readings);
  const Tensor x = input();
  loss_of(m, x, false).backward(Tensor{}, /*retain_graph=*/true);
  print("backward with retain_graph", readings);
  ASSERT_EQ(readings.size(), static_cast<size_t>(kLayers));
  // Nothing saved is freed; only the gradients grow. At most one in-flight gradient buffer (one activation's
  // size) can have gone by the last hook.
  EXPECT_LT(readings.front().second - readings.back().second, kAct);
}

// Peak live bytes of one forward + backward, above what was live before it (parameters, input).
int64_t step_peak(bool checkpointed) {
  const Mlp m = make_mlp();
  const Tensor x = input();
  reset_peak_memory_stats(Device::cpu());
  const int64_t before = live_bytes();
  loss_of(m, x, checkpointed).backward();
  return memory_stats(Device::cpu()).peak_bytes - before;
}

TEST(BackwardMemory, CheckpointingEveryLayerLowersThePeak) {
  const int64_t plain = step_peak(false);
  const int64_t checkpointed = step_peak(true);
  std::printf("peak above baseline: plain %.3f MiB, every layer checkpointed %.3f MiB (one layer saves %.3f MiB)\n",
              static_cast<double>(plain) / (1 << 20), static_cast<double>(checkpointed) / (1 << 20),
              static_cast<double>(kLayerBytes) / (1 << 20));
  // Plain: when backward starts, every layer's saved activations are live: (kLayers - 1) * kLayerBytes + 2 * kAct
  // (layer 0 records no LayerNorm, its input x needing no grad, so it keeps only n and z), i.e. 3 * kLayers - 1
  // activations. Checkpointed: the segment inputs h_1 .. h_{kLayers-1} (x is in the baseline), plus at worst one
  // segment's recomputation and nested backward: its n, z and output, the incoming gradient, and the gradients it
  // makes one at a time (dz, dn, dh and dh's clone in the detached input's .grad), never more than 6 activations
  // (plus statistics) at once. So the gap is at least (3 * kLayers - 1) - (kLayers - 1) - 6 = 2 * kLayers - 6
  // activations, less the [B] statistics.
  EXPECT_LT(checkpointed, plain - (2 * kLayers - 6) * kAct + 2 * kBatch * kF32);
}

}  // namespace
}  // namespace mpt
