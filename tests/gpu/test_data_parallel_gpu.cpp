// tests/gpu/test_data_parallel_gpu.cpp: DataParallel over the NCCL communicator on CUDA tensors: each rank (a thread
// with its own emulated device, or one per real GPU) trains on its rows of the batch; the averaged gradients and the
// parameters after ZeRO-1 SGD steps equal one CPU process on the whole batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <thread>
#include <vector>

#include "device_test.h"
#include "mpt/train/data_parallel.h"
#include "mpt/mpt.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

using testing::to_cpu;

nn::GPTConfig tiny(uint64_t seed, Device d) {
  nn::GPTConfig c;
  c.vocab_size = 32, c.block_size = 16, c.n_layer = 2, c.n_head = 2, c.n_embd = 32, c.seed = seed;
  c.where.device = d;
  return c;
}

std::pair<Tensor, Tensor> global_batch(int ranks, int step) {
  std::mt19937 rng(11 + static_cast<unsigned>(step));
  const int64_t B = 2 * ranks, T = 16;
  std::vector<int64_t> ids(static_cast<size_t>(B * (T + 1)));
  for (auto& v : ids) v = static_cast<int64_t>(rng() % 32);
  const Tensor all = Tensor::from_vector(ids, {B, T + 1});
  return {all.slice(1, 0, T).contiguous(), all.slice(1, 1, T + 1).contiguous()};
}

double normwise(const Tensor& a, const Tensor& b) {
  const std::vector<float> x = to_cpu(a).to_vector<float>(), y = to_cpu(b).to_vector<float>();
  double err = 0, scale = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err = std::max(err, std::abs(static_cast<double>(x[i]) - y[i]));
    scale = std::max(scale, std::abs(static_cast<double>(y[i])));
  }
  return err / std::max(scale, 1e-30);
}

// `steps` SGD steps (0: one backward, gradients only) on every rank; the worst normwise difference from one CPU
// process on the whole batch, of the gradients (steps 0) or the parameters.
double worst_against_one_process(const train::DataParallelOptions& options, int steps) {
  const int n = std::min(4, cuda_status().device_count);
  // The reference: one CPU process, the whole batch.
  nn::GPT ref(tiny(100, Device::cpu()));
  optim::SGD ref_opt(optim::weight_decay_groups(ref.named_parameters(), 0.0), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < std::max(steps, 1); ++s) {
    const auto [x, y] = global_batch(n, s);
    ref.loss(x, y).backward();
    if (steps == 0) break;
    ref_opt.step();
    ref_opt.zero_grad();
  }
  const dist::NcclId id = dist::nccl_unique_id();
  std::vector<double> worst(static_cast<size_t>(n), 0.0);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        const Device d = Device::cuda(r);
        const auto comm = dist::nccl_communicator(d, id, r, n);
        nn::GPT model(tiny(100 + static_cast<uint64_t>(r), d));  // rank 0's weights after the broadcast
        train::DataParallel dp(model, comm, options);
        optim::SGD opt(dp.shard(optim::weight_decay_groups(model.named_parameters(), 0.0)),
                       {.lr = 0.1, .momentum = 0.9});
        for (int s = 0; s < std::max(steps, 1); ++s) {
          const auto [x, y] = global_batch(n, s);
          model.loss(x.slice(0, 2 * r, 2 * r + 2).contiguous().to(d), y.slice(0, 2 * r, 2 * r + 2).contiguous().to(d))
              .backward();
          dp.finish();
          if (steps == 0) break;
          opt.step();
          dp.sync_parameters();
          opt.zero_grad();
          model.zero_grad();
        }
        const auto ours = model.named_parameters(), theirs = ref.named_parameters();
        for (size_t i = 0; i < ours.size(); ++i) {
          const Tensor a = steps == 0 ? ours[i].tensor.grad() : ours[i].tensor;
          const Tensor b = steps == 0 ? theirs[i].tensor.grad() : theirs[i].tensor;
          if (!a.defined()) {
            EXPECT_TRUE(options.zero1) << ours[i].name << ": no gradient on rank " << r;
            continue;
          }
          worst[static_cast<size_t>(r)] = std::max(worst[static_cast<size_t>(r)], normwise(a, b));
        }
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return *std::max_element(worst.begin(), worst.end());
}

TEST(GpuDataParallel, NcclGradientsAndZero1StepsMatchOneCpuProcess) {
  MPT_REQUIRE_GPU(8);
  // Different devices, kernels and summation orders: FP32 reduction-order differences only.
  const double grads = worst_against_one_process({.bucket_bytes = 16 << 10}, 0);
  const double zero1 = worst_against_one_process({.bucket_bytes = 16 << 10, .zero1 = true}, 3);
  std::printf("NCCL data parallel over %d ranks: worst normwise gradient difference %.3g; ZeRO-1 parameters after 3 "
              "SGD steps %.3g\n", std::min(4, cuda_status().device_count), grads, zero1);
  EXPECT_LT(grads, 1e-5);
  EXPECT_LT(zero1, 3e-5);
}

// Compressed on the wire through NCCL's own BF16 and FP8 sums (FP8 needs sm_90 on every rank): within the budgets of
// tests/dist (about n roundings of 2^-8 or 2^-4, times 2).
TEST(GpuDataParallel, NcclCompressedGradientsStayWithinTheirBudgets) {
  MPT_REQUIRE_GPU(9);
  const double n = std::min(4, cuda_status().device_count);
  const double bf16 = worst_against_one_process({.bucket_bytes = 16 << 10, .compression = train::GradCompression::BF16}, 0);
  const double fp8 = worst_against_one_process({.bucket_bytes = 16 << 10, .compression = train::GradCompression::FP8}, 0);
  std::printf("NCCL compressed gradients over %g ranks: worst normwise difference BF16 %.3g, FP8 %.3g\n", n, bf16, fp8);
  EXPECT_LE(bf16, 2 * n * 0x1p-8);
  EXPECT_LE(fp8, 2 * n * 0x1p-4);
  EXPECT_GT(fp8, 0.0) << "FP8 codes cannot carry these gradients exactly";
}

#if defined(MPT_CUDA_EMULATION)
// Parameters that train (one gradient each).
uint64_t trained_parameters(const nn::Module& m) { return m.named_parameters().size(); }
#endif

// One process on a GPU (train_gpt without mpirun): DataParallel over the single-process communicator, which takes
// device tensors (it refused them once, so train_gpt failed on every GPU). Its collectives change nothing, so the
// parameters after SGD steps have the bits of plain training on the device; ZeRO-1's one shard is every parameter.
TEST(GpuDataParallel, OneProcessOnTheDeviceIsPlainTraining) {
  MPT_REQUIRE_GPU(8);
  const Device d = Device::cuda(0);
  for (const bool zero1 : {false, true}) {
    nn::GPT plain(tiny(5, d)), wrapped(tiny(5, d));
    train::DataParallel dp(wrapped, dist::single_process(), {.bucket_bytes = 16 << 10, .zero1 = zero1});
    optim::SGD plain_opt(optim::weight_decay_groups(plain.named_parameters(), 0.0), {.lr = 0.1, .momentum = 0.9});
    optim::SGD opt(dp.shard(optim::weight_decay_groups(wrapped.named_parameters(), 0.0)), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < 2; ++s) {
      const auto [x, y] = global_batch(1, s);
      plain.loss(x.to(d), y.to(d)).backward();
      plain_opt.step();
      plain_opt.zero_grad();
      const Tensor loss = wrapped.loss(x.to(d), y.to(d));
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::reset_counters();
#endif
      loss.backward();
      dp.finish();
#if defined(MPT_CUDA_EMULATION)
      // Every parameter has a gradient, so finish() reads no used flags back (the first step uploads them); every
      // gradient is made in its bucket by backward (autograd::set_grad_destination: the GEMMs, the norms and the
      // tied table write there), so none is copied in or out: the copies are one of the used flags into each
      // bucket's meta vector (which the MAX all-reduce overwrites). It was one per gradient more before 2026-12-03.
      const cuda_emu::Counters c = cuda_emu::counters();
      if (s == 1) {
        EXPECT_EQ(c.d2h + c.syncs + c.event_syncs, 0u) << "zero1 " << zero1 << ": " << cuda_emu::to_string(c);
      }
      if (s == 1 && !zero1) {
        EXPECT_EQ(c.d2d, static_cast<uint64_t>(dp.num_buckets())) << cuda_emu::to_string(c);
        EXPECT_EQ(c.d2d_bytes, 4 * trained_parameters(wrapped)) << "an f32 flag per parameter, no gradient";
      }
      // Clipping's coefficient reads nothing back either, ZeRO-1's included (its squared norms all-reduced on the
      // device).
      cuda_emu::reset_counters();
      const optim::ClipCoefficient clip = dp.clip_coefficient(1e9);
      EXPECT_TRUE(clip.coefficient.defined());
      const cuda_emu::Counters cc = cuda_emu::counters();
      EXPECT_EQ(cc.d2h + cc.syncs + cc.event_syncs, 0u) << "zero1 " << zero1 << ": " << cuda_emu::to_string(cc);
#endif
      opt.step();
      dp.sync_parameters();
      opt.zero_grad();
    }
    const auto a = wrapped.named_parameters(), b = plain.named_parameters();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      EXPECT_TRUE(testing::same_bits(to_cpu(a[i].tensor), to_cpu(b[i].tensor))) << a[i].name << " zero1 " << zero1;
  }
  // The gathers copy on the device.
  auto comm = dist::single_process();
  Tensor in = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}).to(d), out = Tensor::zeros({3}, DType::F32, d);
  comm->all_gather(in, out)->wait();
  EXPECT_EQ(to_cpu(out).to_vector<float>(), (std::vector<float>{1, 2, 3}));
  Tensor cpu_out = Tensor::zeros({3}, DType::F32, Device::cpu());
  EXPECT_THROW(comm->all_gather(in, cpu_out), Error);
}

// Gradient accumulation under NoSync: the hooks having nothing to do, the small gradient adds of a later micro-batch
// are batched into one launch at the end of its pass (autograd::HooksMayWait), the hooks running after them; the
// synchronised last micro-batch adds at once, its hooks launching the buckets. The gradients after finish() and the
// parameters after two SGD steps keep the bits of plain training on the same three micro-batches.
TEST(GpuDataParallel, NoSyncMicroBatchesBatchTheirSmallGradientAdds) {
  MPT_REQUIRE_GPU(8);
  const Device d = Device::cuda(0);
  nn::GPT plain(tiny(7, d)), wrapped(tiny(7, d));
  train::DataParallel dp(wrapped, dist::single_process(), {.bucket_bytes = 16 << 10});
  optim::SGD plain_opt(optim::weight_decay_groups(plain.named_parameters(), 0.0), {.lr = 0.1, .momentum = 0.9});
  optim::SGD opt(dp.shard(optim::weight_decay_groups(wrapped.named_parameters(), 0.0)), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 2; ++s) {
    for (int m = 0; m < 3; ++m) {
      const auto [x, y] = global_batch(1, 3 * s + m);
      plain.loss(x.to(d), y.to(d)).backward();
      const Tensor loss = wrapped.loss(x.to(d), y.to(d));
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::set_kernel_sites(true);
      cuda_emu::reset_counters();
#endif
      if (m < 2) {
        train::DataParallel::NoSync no_sync(dp);
        loss.backward();
      } else {
        loss.backward();
      }
#if defined(MPT_CUDA_EMULATION)
      cuda_emu::set_kernel_sites(false);
      uint64_t batched = 0;
      for (const cuda_emu::KernelSite& k : cuda_emu::kernel_sites())
        if (k.name == "optim.cu add_multi") batched += k.launches;
      // The first micro-batch has nothing to add into; the second batches its adds; the synchronised third may not.
      EXPECT_EQ(batched, m == 1 ? 1u : 0u) << "step " << s << " micro-batch " << m;
#endif
    }
    dp.finish();
    const auto a = wrapped.named_parameters(), b = plain.named_parameters();
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(testing::same_bits(to_cpu(a[i].tensor.grad()), to_cpu(b[i].tensor.grad())))
          << a[i].name << " step " << s;
    }
    plain_opt.step();
    plain_opt.zero_grad();
    opt.step();
    dp.sync_parameters();
    opt.zero_grad();
  }
  const auto a = wrapped.named_parameters(), b = plain.named_parameters();
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(testing::same_bits(to_cpu(a[i].tensor), to_cpu(b[i].tensor))) << a[i].name;
}

// FP8 on the wire with one process: every gradient comes back as MS-AMP's quantization of plain training's gradient,
// written out here: amax, scale = 2^floor(log2(448 / amax)) (pre-scale 1 / sqrt(1)), E4M3 codes of g * scale, times
// float(1 / scale). The amaxes, the shared scales and the codes are made on the device: the buckets that leave from
// the gradient hooks read nothing back to the host. A NaN loss gives NaN gradients everywhere.
TEST(GpuDataParallel, OneProcessFp8WireIsMsAmpsQuantizationWithoutHostReads) {
  MPT_REQUIRE_GPU(8);
  const Device d = Device::cuda(0);
  nn::GPT plain(tiny(5, d)), wrapped(tiny(5, d));
  train::DataParallel dp(wrapped, dist::single_process(),
                         {.bucket_bytes = 16 << 10, .compression = train::GradCompression::FP8});
  const auto [x, y] = global_batch(1, 0);
  const Tensor xd = x.to(d), yd = y.to(d);
  const Tensor plain_loss = plain.loss(xd, yd);
#if defined(MPT_CUDA_EMULATION)
  cuda_emu::reset_counters();
#endif
  plain_loss.backward();
#if defined(MPT_CUDA_EMULATION)
  const uint64_t plain_launches = cuda_emu::counters().kernel_launches;
#endif
  for (int s = 0; s < 2; ++s) {  // the first step uploads each bucket's used flags; the second reads nothing back
    wrapped.zero_grad();
    const Tensor loss = wrapped.loss(xd, yd);
#if defined(MPT_CUDA_EMULATION)
    cuda_emu::reset_counters();
#endif
    loss.backward();
#if defined(MPT_CUDA_EMULATION)
    const cuda_emu::Counters c = cuda_emu::counters();
    if (s == 1) {
      EXPECT_EQ(c.d2h + c.syncs + c.event_syncs, 0u) << "FP8 buckets left the hooks with a host read: "
                                                      << cuda_emu::to_string(c);
      // Per bucket, not per parameter: the amaxes (zeroed, then one pass), their fix-up into scales and one
      // quantization pass over the bucket (the MAX all-reduce and the codes' SUM are collectives, not launches).
      EXPECT_LE(c.kernel_launches, plain_launches + 4 * static_cast<uint64_t>(dp.num_buckets()))
          << dp.num_buckets() << " buckets of " << wrapped.named_parameters().size() << " parameters";
    }
#endif
    if (s == 0) dp.finish();
  }
  dp.finish();
  const auto a = wrapped.named_parameters(), b = plain.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor g = to_cpu(b[i].tensor.grad());
    float amax = 0;
    for (float v : g.to_vector<float>()) amax = std::max(amax, std::abs(v));
    const float scale = amax > 0 ? static_cast<float>(std::exp2(std::floor(std::log2(448.0f / amax)))) : 1.0f;
    const ops::Quantized q = ops::quantize_fp8(g, DType::F8E4M3, {.scale = Tensor::full({}, scale, DType::F32)});
    const Tensor want = ops::dequantize({q.data, Tensor::full({}, static_cast<float>(1.0 / scale), DType::F32)});
    EXPECT_TRUE(testing::same_bits(to_cpu(a[i].tensor.grad()), want)) << a[i].name;
  }
  wrapped.zero_grad();
  (wrapped.loss(xd, yd) * std::numeric_limits<double>::quiet_NaN()).backward();
  dp.finish();
  for (const auto& p : wrapped.named_parameters()) {
    for (float v : to_cpu(p.tensor.grad()).to_vector<float>()) {
      ASSERT_TRUE(std::isnan(v)) << p.name;
    }
  }
}

}  // namespace
}  // namespace mpt
