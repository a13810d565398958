// tests/emu/test_traffic_emu.cpp: the bytes each CUDA launcher declares as read and written, against the shapes and dtypes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda_emu/counters.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/cuda/elementwise.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/gemm_scales.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/cuda/optim.h"
#include "kernels/cuda/pointwise.h"
#include "kernels/cuda/quantize.h"
#include "kernels/cuda/random.h"
#include "kernels/cuda/reduce.h"
#include "kernels/cuda/reduction.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/softmax.h"
#include "kernels/cuda/strided.h"
#include "kernels/math/numerics.h"

namespace {

using mpt::bf16;
using mpt::f16;
using mpt::f8e4m3;
using mpt::Fp8Saturation;
namespace cuda = mpt::kernels::cuda;
namespace math = mpt::kernels::math;
namespace emu = mpt::cuda_emu;

// The traffic of everything launched since the last reset: (read, written), launches, and no unsized launch.
struct Seen {
  uint64_t read, written, launches, unsized;
};

Seen seen() {
  const emu::Counters c = emu::counters();
  return {c.kernel_bytes_read, c.kernel_bytes_written, c.kernel_launches, c.kernel_launches_unsized};
}

#define EXPECT_TRAFFIC(read_bytes, written_bytes, launch_count)                                   \
  do {                                                                                            \
    const Seen s_ = seen();                                                                       \
    EXPECT_EQ(s_.read, static_cast<uint64_t>(read_bytes)) << "bytes read";                        \
    EXPECT_EQ(s_.written, static_cast<uint64_t>(written_bytes)) << "bytes written";               \
    EXPECT_EQ(s_.launches, static_cast<uint64_t>(launch_count)) << "launches";                    \
    EXPECT_EQ(s_.unsized, 0u) << "launches without sizes";                                        \
  } while (0)

template <class T>
std::vector<T> filled(int64_t n, float v = 0.5f) {
  return std::vector<T>(static_cast<size_t>(n), static_cast<T>(v));
}

}  // namespace

// map.cuh: every input once, the output once (and read too when accumulating).
TEST(TrafficEmu, MapOps) {
  constexpr int64_t n = 1000;
  const auto x = filled<float>(n), dy = filled<float>(n);
  auto y = filled<float>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::gelu_forward(x.data(), y.data(), n, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 4, n * 4, 1);

  const auto xb = filled<bf16>(n), dyb = filled<bf16>(n);
  auto dxb = filled<bf16>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::gelu_backward(dyb.data(), xb.data(), dxb.data(), n, /*accumulate=*/true, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(3 * n * 2, n * 2, 1);  // dy, x and the old dx

  emu::reset_counters();
  ASSERT_EQ(cuda::scale(x.data(), y.data(), n - 1, 2.0, /*accumulate=*/false, nullptr), cudaSuccess);
  EXPECT_TRAFFIC((n - 1) * 4, (n - 1) * 4, 1);

  // binary_backward: dy, a, b (three inputs) into out.
  emu::reset_counters();
  ASSERT_EQ(cuda::binary_backward(math::BinaryKind::Div, true, dy.data(), x.data(), x.data(), y.data(), n, false,
                                  nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(3 * n * 4, n * 4, 1);

  // binary_backward_both: dy, a, b read once, da and db written, one launch.
  auto y2 = filled<float>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::binary_backward_both(math::BinaryKind::SiluMul, dy.data(), x.data(), x.data(), y.data(), y2.data(),
                                       n, nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(3 * n * 4, 2 * n * 4, 1);
}

// broadcast.cuh: a once, b's period once, out written (read when accumulating); b_period == n is a plain map.
TEST(TrafficEmu, BroadcastBinaryOps) {
  constexpr int64_t rows = 4, cols = 96, n = rows * cols;
  const auto a = filled<float>(n), b = filled<float>(n);
  auto out = filled<float>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::add(a.data(), b.data(), out.data(), {n, cols, false}, 1.0, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 4 + cols * 4, n * 4, 1);

  emu::reset_counters();
  ASSERT_EQ(cuda::mul(a.data(), b.data(), out.data(), {n, cols, true}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 4 + cols * 4 + n * 4, n * 4, 1);

  emu::reset_counters();
  ASSERT_EQ(cuda::add(a.data(), b.data(), out.data(), {n, n, false}, 0.5, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * n * 4, n * 4, 1);

  // bf16 inputs, a byte mask out; an odd period takes the scalar kernel.
  const auto ab = filled<bf16>(3 * 7), bb = filled<bf16>(7);
  std::vector<uint8_t> mask(3 * 7);
  emu::reset_counters();
  ASSERT_EQ(cuda::compare(math::CompareKind::Lt, ab.data(), bb.data(), mask.data(), {21, 7, false}, nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(21 * 2 + 7 * 2, 21 * 1, 1);
}

TEST(TrafficEmu, DropoutWhereArgReduce) {
  constexpr int64_t n = 1001;
  const auto x = filled<f16>(n);
  auto y = filled<f16>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::dropout(x.data(), y.data(), n, {1, 0, 0.25f, false}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 2, n * 2, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::dropout(x.data(), y.data(), n, {1, 0, 0.25f, true}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * n * 2, n * 2, 1);

  const std::vector<uint8_t> cond(n, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::where(cond.data(), x.data(), x.data(), y.data(), n, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 1 + 2 * n * 2, n * 2, 1);  // cond, a and b (both counted), out

  // [outer 2, len 5, inner 3]: values and int64 indices per output.
  const auto v = filled<float>(2 * 5 * 3);
  std::vector<float> values(6);
  std::vector<int64_t> indices(6);
  emu::reset_counters();
  ASSERT_EQ(cuda::arg_reduce(true, v.data(), values.data(), indices.data(), {2, 5, 3}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(30 * 4, 6 * (4 + 8), 1);
}

TEST(TrafficEmu, LayerNormForward) {
  constexpr int64_t N = 3, D = 64;
  const auto x = filled<float>(N * D), r = filled<float>(N * D), w = filled<float>(D), b = filled<float>(D);
  auto y = filled<float>(N * D), sum = filled<float>(N * D);
  std::vector<float> mean(N), rstd(N);
  math::LayerNormForwardParams<float, float> p;
  p.x = x.data();
  p.weight = w.data();
  p.bias = b.data();
  p.y = y.data();
  p.mean = mean.data();
  p.rstd = rstd.data();
  p.rows = N;
  p.cols = D;
  emu::reset_counters();
  ASSERT_EQ(cuda::layer_norm_forward(p, nullptr), cudaSuccess);
  // x, weight, bias in; y, mean, rstd out.
  EXPECT_TRAFFIC(N * D * sizeof(float) + 2u * D * sizeof(float), N * D * sizeof(float) + 2u * N * sizeof(float), 1);

  p.residual = r.data();
  p.sum = sum.data();
  p.bias = nullptr;
  emu::reset_counters();
  ASSERT_EQ(cuda::layer_norm_forward(p, nullptr), cudaSuccess);
  // x, residual, weight in; sum, y, mean, rstd out.
  EXPECT_TRAFFIC(2u * N * D * sizeof(float) + D * sizeof(float),
                 2u * N * D * sizeof(float) + 2u * N * sizeof(float), 1);

  // bf16 activations, float parameters, a row width that is not a whole number of vectors.
  constexpr int64_t D2 = 7;
  const auto xb = filled<bf16>(N * D2);
  auto yb = filled<bf16>(N * D2);
  const auto w2 = filled<float>(D2), b2 = filled<float>(D2);
  math::LayerNormForwardParams<bf16, float> q;
  q.x = xb.data();
  q.weight = w2.data();
  q.bias = b2.data();
  q.y = yb.data();
  q.mean = mean.data();
  q.rstd = rstd.data();
  q.rows = N;
  q.cols = D2;
  emu::reset_counters();
  ASSERT_EQ(cuda::layer_norm_forward(q, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(N * D2 * 2 + 2 * D2 * 4, N * D2 * 2 + 2 * N * 4, 1);
}

// Two launches: dx and the per-block partials, then dweight/dbias from the partials.
TEST(TrafficEmu, LayerNormBackward) {
  constexpr int64_t N = 3, D = 64;
  const auto dy = filled<bf16>(N * D), x = filled<bf16>(N * D);
  const auto w = filled<float>(D);
  const std::vector<float> mean(N, 0.1f), rstd(N, 2.0f);
  auto dx = filled<bf16>(N * D);
  auto dw = filled<float>(D), db = filled<float>(D);
  std::vector<float> scratch(static_cast<size_t>(cuda::layer_norm_backward_scratch_floats(N, D)));
  math::LayerNormBackwardParams<bf16, float> p;
  p.dy = dy.data();
  p.x = x.data();
  p.weight = w.data();
  p.mean = mean.data();
  p.rstd = rstd.data();
  p.dx = dx.data();
  p.dweight = dw.data();
  p.dbias = db.data();
  p.rows = N;
  p.cols = D;
  p.accumulate_dx = p.accumulate_dweight = p.accumulate_dbias = true;
  emu::reset_counters();
  ASSERT_EQ(cuda::layer_norm_backward(p, scratch.data(), nullptr), cudaSuccess);
  const uint64_t blocks = 1;  // groups of 8 rows (a warp each), at most 512
  const uint64_t partials = blocks * 2 * D * sizeof(float);
  const uint64_t read1 = 3u * N * D * sizeof(bf16) + D * sizeof(float) + 2u * N * sizeof(float);  // dy, x, old dx, w
  const uint64_t written1 = N * D * sizeof(bf16) + partials;
  const uint64_t read2 = partials + 2u * D * sizeof(float);  // partials, old dweight and dbias
  const uint64_t written2 = 2u * D * sizeof(float);
  EXPECT_TRAFFIC(read1 + read2, written1 + written2, 2);

  // Rows too wide for shared memory (2 * 6200 floats and the staging > 48 KiB): the partials accumulate in the
  // scratch, read too; no dbias, nothing accumulated.
  constexpr int64_t N2 = 2, D2 = 6200;
  const auto dy2 = filled<float>(N2 * D2), x2 = filled<float>(N2 * D2), w2 = filled<float>(D2);
  auto dx2 = filled<float>(N2 * D2), dw2 = filled<float>(D2);
  std::vector<float> scratch2(static_cast<size_t>(cuda::layer_norm_backward_scratch_floats(N2, D2)));
  math::LayerNormBackwardParams<float, float> q;
  q.dy = dy2.data();
  q.x = x2.data();
  q.weight = w2.data();
  q.mean = mean.data();
  q.rstd = rstd.data();
  q.dx = dx2.data();
  q.dweight = dw2.data();
  q.rows = N2;
  q.cols = D2;
  emu::reset_counters();
  ASSERT_EQ(cuda::layer_norm_backward(q, scratch2.data(), nullptr), cudaSuccess);
  const uint64_t partials2 = uint64_t{1} * 2 * D2 * 4;  // one block
  EXPECT_TRAFFIC((2u * N2 * D2 * 4 + D2 * 4 + 2u * N2 * 4 + partials2) + partials2,
                 (N2 * D2 * 4 + partials2) + D2 * 4, 2);
}

TEST(TrafficEmu, SoftmaxForwardBackward) {
  constexpr int64_t rows = 4, cols = 100;
  const auto x = filled<f16>(rows * cols), dy = filled<f16>(rows * cols);
  auto y = filled<f16>(rows * cols), dx = filled<f16>(rows * cols);
  emu::reset_counters();
  ASSERT_EQ(cuda::softmax_rows(x.data(), y.data(), rows, cols, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(rows * cols * 2, rows * cols * 2, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::softmax_backward_rows(dy.data(), y.data(), dx.data(), rows, cols, false, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * rows * cols * 2, rows * cols * 2, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::softmax_backward_rows(dy.data(), y.data(), dx.data(), rows, cols, true, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(3 * rows * cols * 2, rows * cols * 2, 1);
}

TEST(TrafficEmu, CrossEntropyForwardReduceBackward) {
  constexpr int64_t rows = 4, vocab = 50;
  const auto logits = filled<bf16>(rows * vocab);
  const std::vector<int64_t> targets = {3, -100, 7, 49};
  std::vector<float> loss(rows), lse(rows);
  math::CrossEntropyForwardParams<bf16, int64_t> f;
  f.logits = logits.data();
  f.targets = targets.data();
  f.loss = loss.data();
  f.lse = lse.data();
  f.rows = rows;
  f.vocab = vocab;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaSuccess);
  // logits and int64 targets in; float loss and lse per row out.
  EXPECT_TRAFFIC(rows * vocab * 2 + rows * 8, 2 * rows * 4, 1);

  float total = 0, count = 0;
  int64_t bad = 0;
  math::CrossEntropyReduceParams<bf16, int64_t> r;
  r.row_loss = loss.data();
  r.targets = targets.data();
  r.loss = &total;
  r.count = &count;
  r.bad_row = &bad;
  r.rows = rows;
  r.vocab = vocab;
  r.reduction = math::CrossEntropyReduction::Mean;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(rows * (4 + 8), 4 + 8 + 4, 1);  // row losses and targets; count, bad_row, loss
  r.reduction = math::CrossEntropyReduction::None;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(rows * (4 + 8), 4 + 8, 1);

  auto dlogits = filled<bf16>(rows * vocab);
  const float dloss = 1.0f, divisor = 3.0f;
  math::CrossEntropyBackwardParams<bf16, int64_t> b;
  b.logits = logits.data();
  b.targets = targets.data();
  b.lse = lse.data();
  b.dloss = &dloss;
  b.divisor = &divisor;
  b.dlogits = dlogits.data();
  b.rows = rows;
  b.vocab = vocab;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
  // logits, targets, lse, one shared dloss and the divisor in; dlogits out.
  EXPECT_TRAFFIC(rows * vocab * 2 + rows * 8 + rows * 4 + 4 + 4, rows * vocab * 2, 1);

  const std::vector<float> dloss_rows(rows, 1.0f);
  b.dloss = dloss_rows.data();
  b.dloss_stride = 1;
  b.divisor = nullptr;
  b.accumulate = true;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * rows * vocab * 2 + rows * 8 + rows * 4 + rows * 4, rows * vocab * 2, 1);
}

// Padded rows (llm.c's layout): only the vocab columns are read; the backward writes whole rows (the padding gets
// 0), or only the vocab columns when accumulating.
TEST(TrafficEmu, CrossEntropyPaddedRows) {
  constexpr int64_t rows = 4, vocab = 50, stride = 64;
  const auto logits = filled<bf16>(rows * stride);
  const std::vector<int64_t> targets = {3, -100, 7, 49};
  std::vector<float> loss(rows), lse(rows);
  math::CrossEntropyForwardParams<bf16, int64_t> f;
  f.logits = logits.data();
  f.targets = targets.data();
  f.loss = loss.data();
  f.lse = lse.data();
  f.rows = rows;
  f.vocab = vocab;
  f.row_stride = stride;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(rows * vocab * 2 + rows * 8, 2 * rows * 4, 1);

  auto dlogits = filled<bf16>(rows * stride);
  const float dloss = 1.0f, divisor = 3.0f;
  math::CrossEntropyBackwardParams<bf16, int64_t> b;
  b.logits = logits.data();
  b.targets = targets.data();
  b.lse = lse.data();
  b.dloss = &dloss;
  b.divisor = &divisor;
  b.dlogits = dlogits.data();
  b.rows = rows;
  b.vocab = vocab;
  b.row_stride = stride;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(rows * vocab * 2 + rows * 8 + rows * 4 + 4 + 4, rows * stride * 2, 1);

  b.accumulate = true;
  emu::reset_counters();
  ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * rows * vocab * 2 + rows * 8 + rows * 4 + 4 + 4, rows * vocab * 2, 1);
}

TEST(TrafficEmu, CausalSoftmax) {
  constexpr int64_t bh = 2, t = 7, rows = bh * t;
  const auto x = filled<float>(rows * t), dy = filled<float>(rows * t);
  auto y = filled<float>(rows * t), dx = filled<float>(rows * t);
  std::vector<float> lse(rows);
  const uint64_t triangle = bh * (t * (t + 1) / 2);  // causal keys of each [t, t] block
  emu::reset_counters();
  ASSERT_EQ(cuda::causal_softmax_forward(x.data(), y.data(), lse.data(), rows, t, 0.5f, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(triangle * 4, rows * t * 4 + rows * 4, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::causal_softmax_forward(x.data(), y.data(), nullptr, rows, t, 0.5f, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(triangle * 4, rows * t * 4, 1);
  emu::reset_counters();
  ASSERT_EQ(cuda::causal_softmax_backward(dy.data(), y.data(), dx.data(), rows, t, 0.5f, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(2 * triangle * 4, rows * t * 4, 1);

  // Key padding (lengths on the device): the unpadded triangle is counted, plus one int32 length per sample.
  const int32_t lengths[bh] = {3, 7};
  emu::reset_counters();
  ASSERT_EQ(cuda::causal_softmax_backward(dy.data(), y.data(), dx.data(), rows, t, 0.5f, nullptr,
                                          math::KeyPadding{lengths, 1}),
            cudaSuccess);
  EXPECT_TRAFFIC(2 * triangle * 4 + bh * 4, rows * t * 4, 1);
}

// One table launch for the tensors, then the step-count launch.
TEST(TrafficEmu, AdamWStep) {
  constexpr int64_t n1 = 1000, n2 = 3000;
  auto p1 = filled<float>(n1), p2 = filled<float>(n2), m1 = filled<float>(n1, 0), m2 = filled<float>(n2, 0),
       v1 = filled<float>(n1, 0), v2 = filled<float>(n2, 0);
  const auto g1 = filled<bf16>(n1), g2 = filled<bf16>(n2);
  int64_t step2 = 0;
  const std::vector<math::AdamWTensor<float, bf16, float>> ts = {
      {p1.data(), g1.data(), m1.data(), v1.data(), nullptr, nullptr, n1},
      {p2.data(), g2.data(), m2.data(), v2.data(), nullptr, nullptr, n2, &step2}};
  const math::AdamWHyper h{1e-3, 0.9, 0.999, 1e-8, 0.1};
  const float inv_scale = 0.5f, found_inf = 0.0f;
  emu::reset_counters();
  ASSERT_EQ(cuda::adamw_step(ts.data(), 2, h, 1, {&inv_scale, &found_inf}, nullptr), cudaSuccess);
  const uint64_t n = n1 + n2;
  // Step: grad (bf16), param, m, v read (+ tensor 2's step count, inv_scale, found_inf); param, m, v written.
  // Then the step counts: step2 read and written (+ found_inf read).
  EXPECT_TRAFFIC((n * (2 + 4 + 4 + 4) + 8 + 4 + 4) + (8 + 4), n * (4 + 4 + 4) + 8, 2);
  EXPECT_EQ(step2, 1);

  // Device-resident lr/wd: two more doubles; no guards, no step counts: one launch.
  const double lr_wd[2] = {1e-3, 0.1};
  math::AdamWHyper hd = h;
  hd.lr_wd = lr_wd;
  const std::vector<math::AdamWTensor<float, bf16, float>> one = {
      {p1.data(), g1.data(), m1.data(), v1.data(), nullptr, nullptr, n1}};
  emu::reset_counters();
  ASSERT_EQ(cuda::adamw_step(one.data(), 1, hd, 2, {}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n1 * (2 + 4 + 4 + 4) + 16, n1 * (4 + 4 + 4), 1);

  // bf16 moments.
  auto mb = filled<bf16>(n1, 0), vb = filled<bf16>(n1, 0);
  const std::vector<math::AdamWTensor<float, float, bf16>> half = {
      {p1.data(), p2.data(), mb.data(), vb.data(), nullptr, nullptr, n1}};
  emu::reset_counters();
  ASSERT_EQ(cuda::adamw_step(half.data(), 1, h, 1, {}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n1 * (4 + 4 + 2 + 2), n1 * (4 + 2 + 2), 1);
}

TEST(TrafficEmu, AdamW8bitSgdUnscaleScaler) {
  constexpr int64_t n = 300;  // two 256-element absmax blocks
  auto p = filled<float>(n);
  const auto g = filled<float>(n);
  std::vector<uint8_t> m(n, 0), v(n, 0);
  std::vector<float> am(2, 0.0f), av(2, 0.0f);
  const std::vector<math::AdamWTensor<float, float, uint8_t>> q = {
      {p.data(), g.data(), m.data(), v.data(), am.data(), av.data(), n}};
  emu::reset_counters();
  ASSERT_EQ(cuda::adamw_step(q.data(), 1, {1e-3, 0.9, 0.999, 1e-8, 0.0}, 1, {}, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * (4 + 4 + 1 + 1) + 2 * 2 * 4, n * (4 + 1 + 1) + 2 * 2 * 4, 1);

  auto buf = filled<float>(n);
  const std::vector<math::SgdTensor<float, float>> s = {{p.data(), g.data(), buf.data(), n},
                                                        {p.data(), g.data(), nullptr, n - 100}};
  const math::SgdCoefficients<double> c{0.1, 0.9, 1.0, 0.0, false, false};
  emu::reset_counters();
  ASSERT_EQ(cuda::sgd_step(s.data(), 2, c, {}, nullptr), cudaSuccess);
  // grad and param (+ the momentum buffer, read and written, for the first tensor); param written.
  EXPECT_TRAFFIC(n * (4 + 4 + 4) + (n - 100) * (4 + 4), n * (4 + 4) + (n - 100) * 4, 1);

  auto gb = filled<bf16>(n);
  bf16* grads[2] = {gb.data(), gb.data()};
  const int64_t sizes[2] = {n, 100};
  const float inv = 0.25f;
  float found = 0.0f;
  emu::reset_counters();
  ASSERT_EQ(cuda::unscale_check(grads, sizes, 2, &inv, &found, nullptr), cudaSuccess);
  EXPECT_TRAFFIC((n + 100) * 2 + 4, (n + 100) * 2, 1);  // grads read and rewritten, inv_scale read

  auto gs = filled<bf16>(n);
  bf16* dst[2] = {gb.data(), gb.data() + n / 2};
  const bf16* src[2] = {gs.data(), gs.data()};
  const int64_t halves[2] = {n / 2, 100};
  emu::reset_counters();
  ASSERT_EQ(cuda::add_multi(dst, src, halves, 2, nullptr), cudaSuccess);
  EXPECT_TRAFFIC((n / 2 + 100) * 2 * 2, (n / 2 + 100) * 2, 1);  // both read, dst written

  float scale = 1024.0f, scale_inv = 1.0f / 1024;
  int32_t trackers[3] = {0, 1, 0};
  const float* flags[2] = {&found, &found};
  emu::reset_counters();
  ASSERT_EQ(cuda::grad_scaler_update({2.0, 0.5, 0.0, 2000, 1}, flags, 2, &scale, &scale_inv, trackers, nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(2 * 4 + 4 + 3 * 4, 4 + 4 + 3 * 4, 1);  // flags, scale, trackers; scale, inv, trackers
}

TEST(TrafficEmu, EmbeddingForwardBucketsBackward) {
  constexpr int64_t n = 5, vocab = 10, C = 16;
  const std::vector<int32_t> ids = {1, 3, 3, 9, 0};
  const auto table = filled<float>(vocab * C);
  auto out = filled<float>(n * C);
  emu::reset_counters();
  ASSERT_EQ(cuda::embedding_forward(ids.data(), table.data(), out.data(), cuda::EmbeddingShape{n, vocab, C}, {},
                                    nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(n * 4 + n * C * 4, n * C * 4, 1);  // ids and the n gathered rows, not the whole table

  const cuda::BucketPlan plan = cuda::embedding_bucket_plan(n, vocab);
  ASSERT_EQ(plan.chunks, 1);
  std::vector<int32_t> histogram(static_cast<size_t>(plan.chunks * vocab));
  std::vector<int64_t> starts(vocab + 1), positions(n);
  const cuda::BucketArgs<int32_t> args{ids.data(), plan, histogram.data(), starts.data(), positions.data(), {}};
  emu::reset_counters();
  ASSERT_EQ(cuda::embedding_buckets(args, nullptr), cudaSuccess);
  const uint64_t counters = 1 * vocab;  // chunks * vocab
  const uint64_t touched = n;           // at most one counter (and start) per position: min(n, counters), min(n, vocab)
  const uint64_t zero_w = counters * 4;
  const uint64_t count_r = n * 4 + touched * 4, count_w = touched * 4;
  const uint64_t column_r = counters * 4, column_w = counters * 4 + vocab * 8;
  const uint64_t scan_r = vocab * 8, scan_w = (vocab + 1) * 8;
  const uint64_t scatter_r = n * 4 + touched * 8 + touched * 4, scatter_w = n * 8 + touched * 4;
  EXPECT_TRAFFIC(count_r + column_r + scan_r + scatter_r, zero_w + count_w + column_w + scan_w + scatter_w, 5);

  const auto dout = filled<float>(n * C);
  auto dtable = filled<float>(vocab * C);
  emu::reset_counters();
  ASSERT_EQ(cuda::embedding_backward(cuda::DeviceBuckets{starts.data(), positions.data(), vocab}, dout.data(),
                                     dtable.data(), C, nullptr),
            cudaSuccess);
  // Without the count the buckets' contents are unknown: starts plus the whole table (a bound).
  EXPECT_TRAFFIC((vocab + 1) * 8 + vocab * C * 4, vocab * C * 4, 1);
  // With it: starts, every position and its dout row, and at most min(n, vocab) table rows read and written.
  emu::reset_counters();
  ASSERT_EQ(cuda::embedding_backward(cuda::DeviceBuckets{starts.data(), positions.data(), vocab, n}, dout.data(),
                                     dtable.data(), C, nullptr),
            cudaSuccess);
  const int64_t rows_touched = n < vocab ? n : vocab;
  EXPECT_TRAFFIC((vocab + 1) * 8 + n * (8 + C * 4) + rows_touched * C * 4, rows_touched * C * 4, 1);
}

TEST(TrafficEmu, CastsCopiesFills) {
  constexpr int64_t n = 1000;
  const auto x = filled<float>(n);
  auto xb = filled<bf16>(n);
  std::vector<f8e4m3> q(n);
  emu::reset_counters();
  ASSERT_EQ((cuda::convert<bf16, float>(x.data(), xb.data(), n, Fp8Saturation::Saturate, nullptr)), cudaSuccess);
  EXPECT_TRAFFIC(n * 4, n * 2, 1);
  emu::reset_counters();
  ASSERT_EQ((cuda::convert<f8e4m3, bf16>(xb.data() + 1, q.data(), n - 1, Fp8Saturation::Saturate, nullptr)),
            cudaSuccess);
  EXPECT_TRAFFIC((n - 1) * 2, (n - 1) * 1, 1);

  const std::vector<int64_t> ids(n, 3);
  auto xf = filled<float>(n);
  emu::reset_counters();
  ASSERT_EQ((cuda::convert_with_integers<float, int64_t>(ids.data(), xf.data(), n, Fp8Saturation::Saturate, nullptr)),
            cudaSuccess);
  EXPECT_TRAFFIC(n * 8, n * 4, 1);

  // A 40 x 48 transpose (tiled kernel): every element read and written once.
  constexpr int64_t R = 40, Cc = 48;
  const auto src = filled<float>(R * Cc);
  auto dst = filled<float>(R * Cc);
  const int64_t shape[2] = {R, Cc}, dst_strides[2] = {Cc, 1}, src_strides[2] = {1, R};
  emu::reset_counters();
  ASSERT_EQ(cuda::strided_copy(dst.data(), dst_strides, src.data(), src_strides, shape, 2, 4, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(R * Cc * 4, R * Cc * 4, 1);

  // A row broadcast (source stride 0): the source row is read once.
  const int64_t bshape[2] = {4, 16}, bdst[2] = {16, 1}, bsrc[2] = {0, 1};
  emu::reset_counters();
  ASSERT_EQ(cuda::strided_copy(dst.data(), bdst, src.data(), bsrc, bshape, 2, 4, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(16 * 4, 4 * 16 * 4, 1);

  // A strided bf16 fill of every other element of 10 rows of 8: writes only.
  const int64_t fshape[2] = {10, 4}, fstrides[2] = {8, 2};
  const bf16 one = static_cast<bf16>(1.0f);
  emu::reset_counters();
  ASSERT_EQ(cuda::strided_fill(xb.data(), fstrides, fshape, 2, &one, 2, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(0, 40 * 2, 1);

  // Random fill: writes only.
  emu::reset_counters();
  ASSERT_EQ(cuda::fill_normal(xb.data(), n - 3, 1, 0, 0.0f, 1.0f, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(0, (n - 3) * 2, 1);
}

TEST(TrafficEmu, Reductions) {
  // Rows over 2048: two passes, 3 chunk partials per row into the workspace, then the bf16 output accumulated.
  constexpr int64_t outer = 3, len = 5000;
  const auto x = filled<bf16>(outer * len);
  auto out = filled<bf16>(outer);
  const math::ReduceShape s{outer, len, 1};
  std::vector<float> workspace(cuda::sum_axis_workspace(s));
  ASSERT_EQ(workspace.size(), 9u);
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_axis(x.data(), out.data(), s, 1.0f, true, workspace.data(), nullptr), cudaSuccess);
  const uint64_t chunks = 3;
  EXPECT_TRAFFIC(outer * len * 2 + (outer * chunks * 4 + outer * 2), outer * chunks * 4 + outer * 2, 2);

  // Columns, one pass: [2, 10, 7] float.
  const auto xc = filled<float>(2 * 10 * 7);
  std::vector<float> outc(14);
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_axis(xc.data(), outc.data(), {2, 10, 7}, 10.0f, false, nullptr, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(140 * 4, 14 * 4, 1);

  // An empty axis: the outputs are written (read too when accumulating).
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_axis(xc.data(), outc.data(), {2, 0, 7}, 1.0f, true, nullptr, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(14 * 4, 14 * 4, 1);

  float result = 0;
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_squares(xc.data(), 100, &result, nullptr, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(100 * 4, 4, 1);

  // The multi-tensor sum of squares: every element read once, a partial per 2048-element chunk written.
  const auto xm = filled<float>(5000);
  const float* xs[2] = {xm.data(), xm.data() + 3000};
  const int64_t sizes[2] = {3000, 2000};
  std::vector<float> chunk_partials(3);
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_squares_multi(xs, sizes, 2, chunk_partials.data(), nullptr), cudaSuccess);
  EXPECT_TRAFFIC(5000 * 4, 3 * 4, 1);

  const std::vector<float> partials = {1, 2, 3, 4};
  float norm = 0, coef = 0;
  emu::reset_counters();
  ASSERT_EQ(cuda::sqrt_of_sum(partials.data(), 4, &norm, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::clip_coefficient(&norm, 1.0f, &coef, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(4 * 4 + 4, 4 + 4, 2);

  uint8_t flag = 1;
  emu::reset_counters();
  ASSERT_EQ(cuda::check_finite(x.data(), 1000, &flag, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(1000 * 2, 0, 1);  // the flag is written only for a non-finite element

  float total = 0;
  const auto xr = filled<float>(1000);
  emu::reset_counters();
  ASSERT_EQ(cuda::sum_accumulate(xr.data(), 1000, &total, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(1000 * 4 + 4, 4, 1);  // x; the total read and written by the atomic adds
}

TEST(TrafficEmu, Fp8QuantizeAndScales) {
  constexpr int64_t n = 1000;
  const auto x = filled<float>(n);
  std::vector<f8e4m3> q(n), qt(n);
  const float scale = 2.0f;
  float scale_inv = 0, amax = 0;
  emu::reset_counters();
  ASSERT_EQ((cuda::quantize<f8e4m3, float>(x.data(), q.data(), n, {&scale, &scale_inv, &amax, Fp8Saturation::Saturate},
                                           nullptr)),
            cudaSuccess);
  // Zeroing the amax, then x, scale and the amax (atomicMax) read; q, scale_inv and the amax written.
  EXPECT_TRAFFIC(n * 4 + 4 + 4, 4 + (n * 1 + 4 + 4), 2);

  emu::reset_counters();
  ASSERT_EQ((cuda::quantize_transpose<f8e4m3, float>(x.data(), q.data(), qt.data(), {40, 25},
                                                     {&scale, nullptr, nullptr, Fp8Saturation::Saturate}, nullptr)),
            cudaSuccess);
  EXPECT_TRAFFIC(n * 4 + 4, 2 * n * 1, 1);

  const auto xb = filled<bf16>(n);
  emu::reset_counters();
  ASSERT_EQ(cuda::amax(xb.data(), n, &amax, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(n * 2 + 4, 4 + 4, 2);

  auto y = filled<bf16>(n);
  emu::reset_counters();
  ASSERT_EQ((cuda::dequantize<bf16, f8e4m3>(q.data(), y.data(), n, &scale_inv, nullptr)), cudaSuccess);
  EXPECT_TRAFFIC(n * 1 + 4, n * 2, 1);

  // 1x128 blocks of a [4, 250] matrix: 4 x 2 scales.
  const math::BlockScaleLayout layout{4, 250, 1};
  std::vector<float> block_inv(8);
  emu::reset_counters();
  ASSERT_EQ((cuda::quantize_blockwise<f8e4m3, float>(x.data(), q.data(), block_inv.data(), layout, {}, nullptr)),
            cudaSuccess);
  EXPECT_TRAFFIC(n * 4, n * 1 + 8 * 4, 1);
  emu::reset_counters();
  ASSERT_EQ((cuda::dequantize_blockwise<bf16, f8e4m3>(q.data(), y.data(), block_inv.data(), layout, nullptr)),
            cudaSuccess);
  EXPECT_TRAFFIC(n * 1 + 8 * 4, n * 2, 1);

  float s = 0, si = 0, into = 1.0f;
  emu::reset_counters();
  ASSERT_EQ(cuda::scale_from_amax(&amax, &s, &si, {}, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::fold_amax(&amax, &into, nullptr), cudaSuccess);
  EXPECT_TRAFFIC(4 + 2 * 4, (4 + 4) + 4, 2);

  // Delayed scaling: two entries with a history of 4 (the second's amax is its history[0]).
  std::vector<float> h1 = {0, 1, 2, 3}, h2 = {5, 1, 2, 3};
  float a1 = 4.0f, s1 = 1, si1 = 1, s2 = 1, si2 = 1;
  const math::DelayedUpdate u{4, true, 0, 448.0f};
  const cuda::DelayedUpdateEntry entries[2] = {{h1.data(), &a1, &s1, &si1, u}, {h2.data(), h2.data(), &s2, &si2, u}};
  emu::reset_counters();
  ASSERT_EQ(cuda::delayed_scaling_update(entries, 2, nullptr), cudaSuccess);
  EXPECT_TRAFFIC((4 * 4 + 4) + 4 * 4, 2 * (4 * 4 + 4 + 4), 1);

  // cuBLASLt block-scale layout: [200 rows, k 300] in 128 x 128 tiles, 2 batch entries; Lt pads K blocks to 4.
  const int64_t row_tiles = 2, k_blocks = 3, padded = 4, batch = 2;
  std::vector<float> ours(row_tiles * k_blocks * batch, 1.0f), lt(row_tiles * padded * batch);
  emu::reset_counters();
  ASSERT_EQ(cuda::block_scales_to_lt(cuda::GemmScaleMode::Block128x128, ours.data(), lt.data(), 200, 300, batch,
                                     nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(row_tiles * k_blocks * batch * 4, row_tiles * padded * batch * 4, 1);
}

TEST(TrafficEmu, Rope) {
  // x (B=2, T=5, H=3, D=8) f16; the tables hold positions 0..T-1 (plus an offset row) of D / 2 floats.
  constexpr int64_t B = 2, T = 5, H = 3, D = 8, rows = B * T * H;
  const auto x = filled<f16>(rows * D);
  auto y = filled<f16>(rows * D);
  const auto cos = filled<float>((T + 1) * D / 2), sin = filled<float>((T + 1) * D / 2);
  emu::reset_counters();
  ASSERT_EQ(cuda::rope(x.data(), y.data(), cos.data(), sin.data(), {rows, T, H, D, D / 2, 1, false}, nullptr),
            cudaSuccess);
  EXPECT_TRAFFIC(rows * D * 2 + 2 * T * (D / 2) * 4, rows * D * 2, 1);
}
