// tests/gpu/test_optim_gpu.cpp: the fused optimizer ops (AdamW with f32/bf16/8-bit moments, SGD, unscale + found_inf,
// the multi-tensor add and backward's batched leaf adds) on cuda:0 against the CPU (bit-exact under emulation; skipped
// without a GPU).
#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"
#include "op_test.h"

namespace mpt {
namespace {

using testing::Match;
using testing::expect_match;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

// Both backends run kernels/math/optim.h's functions in the same order (the bitsandbytes block quantization too), so
// under emulation every parameter, moment, code and absmax must keep the CPU's bits. On a GPU the updates may round
// differently in the last place (tolerance(f32) x 4) and an 8-bit code may then land one step over (atol 1 code).
const Match kParam = Match::exact(DType::F32, 4);
const Match kCode = Match::exact(testing::Tolerance{0, 1});

const std::vector<int64_t> kSizes = {1, 255, 257, 1000, 3 * 77};

Match moment_match(ops::MomentStorage s) {
  return s == ops::MomentStorage::Int8 ? kCode : s == ops::MomentStorage::BF16 ? Match::exact(DType::BF16) : kParam;
}

void expect_state(const ops::AdamWState& got, const ops::AdamWState& want, ops::MomentStorage s,
                  const std::string& what) {
  expect_match(got.exp_avg, want.exp_avg, moment_match(s), what + " exp_avg");
  expect_match(got.exp_avg_sq, want.exp_avg_sq, moment_match(s), what + " exp_avg_sq");
  if (s == ops::MomentStorage::Int8) {
    expect_match(got.exp_avg_absmax, want.exp_avg_absmax, kParam, what + " exp_avg absmax");
    expect_match(got.exp_avg_sq_absmax, want.exp_avg_sq_absmax, kParam, what + " exp_avg_sq absmax");
  }
}

TEST(GpuOptimOps, AdamWEveryMomentStorageAndGradientDtypeMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    for (DType gdt : {DType::F32, DType::BF16, DType::F16}) {
      const std::string n = "AdamW moments " + std::to_string(static_cast<int>(storage)) + " grads " +
                            std::string(dtype_name(gdt));
      std::vector<ops::AdamWSlot> cs, gs;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const Tensor p = random_tensor({kSizes[i]}, DType::F32, 100 + i);
        cs.push_back({p.clone(), Tensor(), ops::adamw_state(p, storage)});
        gs.push_back({to_gpu(p), Tensor(), ops::adamw_state(to_gpu(p), storage)});
        expect_state(gs.back().state, cs.back().state, storage, n + " initial state");
      }
      for (int64_t step = 1; step <= 3; ++step) {
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const Tensor g = random_tensor({kSizes[i]}, gdt, 200 + i + 10 * static_cast<uint64_t>(step), 0.1);
          cs[i].grad = g;
          gs[i].grad = to_gpu(g);
        }
        const ops::AdamWParams hp{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1,
                                  .step = step};
        ops::adamw_step(cs, hp);
        ops::adamw_step(gs, hp);
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const std::string s = n + " step " + std::to_string(step) + " tensor " + std::to_string(i);
          expect_match(gs[i].param, cs[i].param, kParam, s + " param");
          expect_state(gs[i].state, cs[i].state, storage, s);
        }
      }
    }
  }
}

// A GradScaler's inputs: every gradient times grad_scale_inv; found_inf != 0 leaves everything as it was. With Int8
// moments an inf gradient element zeroes its moments and keeps its parameter (bitsandbytes' rule).
TEST(GpuOptimOps, AdamWWithGradScalingAndNonFiniteGradientsMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const float inf = std::numeric_limits<float>::infinity();
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::Int8}) {
    for (float found : {0.0f, 1.0f}) {
      const std::string n = "AdamW scaled, moments " + std::to_string(static_cast<int>(storage)) + " found_inf " +
                            std::to_string(found);
      const Tensor p = random_tensor({700}, DType::F32, 300);
      Tensor g = random_tensor({700}, DType::F16, 301, 1024.0);
      if (storage == ops::MomentStorage::Int8) g.view({-1}).slice(0, 5, 6).fill_(inf);
      std::vector<ops::AdamWSlot> cs = {{p.clone(), g, ops::adamw_state(p, storage)}};
      std::vector<ops::AdamWSlot> gs = {{to_gpu(p), to_gpu(g), ops::adamw_state(to_gpu(p), storage)}};
      const Tensor inv = Tensor::full({}, 1.0 / 1024, DType::F32), fi = Tensor::full({}, found, DType::F32);
      for (int64_t step = 1; step <= 2; ++step) {
        const ops::AdamWParams hp{.lr = 1e-3, .step = step};
        ops::adamw_step(cs, hp, {inv, fi});
        ops::adamw_step(gs, hp, {to_gpu(inv), to_gpu(fi)});
      }
      expect_match(gs[0].param, cs[0].param, kParam, n + " param");
      expect_state(gs[0].state, cs[0].state, storage, n);
      if (found != 0.0f) {
        EXPECT_TRUE(testing::same_bits(gs[0].param, to_gpu(p))) << n << ": a skipped step changed p";
      }
    }
  }
}

// AdamW writing FP8 weight codes (AdamWSlot::fp8) as it updates the parameters, on steps taken and skipped: codes,
// amax and scale_inv as the CPU writes them (exact under emulation; on a GPU a parameter an ulp apart may land one
// E4M3 step over).
TEST(GpuOptimOps, AdamWFp8CodesMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const Match code_match = Match::exact(testing::Tolerance{0.125, 0});
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    for (float found : {0.0f, 1.0f}) {
      const std::string n = "AdamW FP8 codes, moments " + std::to_string(static_cast<int>(storage)) + " found_inf " +
                            std::to_string(found);
      std::vector<ops::AdamWSlot> cs, gs;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const Tensor p = random_tensor({kSizes[i] * 11}, DType::F32, 800 + i, 0.05);
        const Tensor g = random_tensor({kSizes[i] * 11}, DType::BF16, 900 + i, 0.1);
        const ops::AdamWSlot::Fp8Codes f{Tensor::zeros({p.numel()}, DType::F8E4M3),
                                         Tensor::full({}, 2048.0, DType::F32),
                                         Tensor::full({1}, i == 0 ? 1.0 : 0.0, DType::F32),
                                         Tensor::zeros({}, DType::F32)};
        cs.push_back({p.clone(), g, ops::adamw_state(p, storage), {}, {}, f});
        gs.push_back({to_gpu(p), to_gpu(g), ops::adamw_state(to_gpu(p), storage), {}, {},
                      {to_gpu(f.codes), to_gpu(f.scale), to_gpu(f.amax), to_gpu(f.scale_inv)}});
      }
      const Tensor fi = Tensor::full({}, found, DType::F32);
      for (int64_t step = 1; step <= 2; ++step) {
        const ops::AdamWParams hp{.lr = 1e-2, .step = step};
        ops::adamw_step(cs, hp, {Tensor(), fi});
        ops::adamw_step(gs, hp, {Tensor(), to_gpu(fi)});
      }
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const std::string s = n + " tensor " + std::to_string(i);
        expect_match(gs[i].param, cs[i].param, kParam, s + " param");
        expect_match(gs[i].fp8.codes.to(DType::F32), cs[i].fp8.codes.to(DType::F32), code_match, s + " codes");
        expect_match(gs[i].fp8.amax, cs[i].fp8.amax, kParam, s + " amax");
        EXPECT_TRUE(testing::same_bits(to_cpu(gs[i].fp8.scale_inv), cs[i].fp8.scale_inv)) << s;
      }
    }
  }
}

TEST(GpuOptimOps, SgdVariantsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  struct Variant {
    const char* name;
    ops::SgdParams p;
  };
  const std::vector<Variant> variants = {
      {"plain", {.lr = 0.1}},
      {"momentum", {.lr = 0.1, .momentum = 0.9}},
      {"momentum dampening decay", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3, .weight_decay = 1e-2}},
      {"nesterov", {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3, .nesterov = true}}};
  for (const Variant& v : variants) {
    for (DType gdt : {DType::F32, DType::BF16, DType::F16}) {
      const std::string n = std::string("SGD ") + v.name + " grads " + std::string(dtype_name(gdt));
      std::vector<ops::SgdSlot> cs, gs;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        const Tensor p = random_tensor({kSizes[i]}, DType::F32, 400 + i);
        cs.push_back({p.clone(), Tensor(), Tensor::zeros({kSizes[i]})});
        gs.push_back({to_gpu(p), Tensor(), Tensor::zeros({kSizes[i]}, DType::F32, Device::cuda(0))});
      }
      for (int step = 0; step < 3; ++step) {
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const Tensor g = random_tensor({kSizes[i]}, gdt, 500 + i + 10 * static_cast<uint64_t>(step));
          cs[i].grad = g;
          gs[i].grad = to_gpu(g);
        }
        ops::SgdParams hp = v.p;
        hp.first_step = step == 0;
        const Tensor inv = Tensor::full({}, step == 2 ? 0.5 : 1.0, DType::F32);
        ops::sgd_step(cs, hp, {inv, Tensor()});
        ops::sgd_step(gs, hp, {to_gpu(inv), Tensor()});
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const std::string s = n + " step " + std::to_string(step) + " tensor " + std::to_string(i);
          expect_match(gs[i].param, cs[i].param, kParam, s + " param");
          if (v.p.momentum != 0) expect_match(gs[i].momentum_buffer, cs[i].momentum_buffer, kParam, s + " buffer");
        }
      }
    }
  }
}

TEST(GpuOptimOps, NonFiniteCheckAndUnscaleMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (DType gdt : {DType::F32, DType::BF16, DType::F16}) {
    for (double inv_scale : {1.0, 1.0 / 65536}) {
      for (int bad = -1; bad < 3; ++bad) {  // -1: all finite; else an inf / -inf / nan in the second tensor
        const std::string n = std::string("unscale ") + std::string(dtype_name(gdt)) + " inv " +
                              std::to_string(inv_scale) + " bad " + std::to_string(bad);
        std::vector<Tensor> cg, gg;
        for (size_t i = 0; i < kSizes.size(); ++i) {
          Tensor g = random_tensor({kSizes[i]}, gdt, 600 + i, 1000.0);
          if (bad >= 0 && i == 1) g.view({-1}).slice(0, 100, 101).fill_(bad == 0 ? inf : bad == 1 ? -inf : nan);
          cg.push_back(g);
          gg.push_back(to_gpu(g));
        }
        const Tensor inv = Tensor::full({}, inv_scale, DType::F32);
        Tensor fc = Tensor::zeros({}, DType::F32), fg = to_gpu(fc);
        ops::non_finite_check_and_unscale_(cg, fc, inv);
        ops::non_finite_check_and_unscale_(gg, fg, to_gpu(inv));
        EXPECT_EQ(fg.item<float>(), bad >= 0 ? 1.0f : 0.0f) << n;
        expect_match(fg, fc, Match::exact(testing::Tolerance{0, 0}), n + " found_inf");
        for (size_t i = 0; i < kSizes.size(); ++i)
          expect_match(gg[i], cg[i], Match::exact(testing::Tolerance{0, 0}), n + " grad " + std::to_string(i));
        // found_inf is set, never cleared: a later clean call keeps it.
        if (bad >= 0) {
          const std::vector<Tensor> clean = {gg[0]};
          ops::non_finite_check_and_unscale_(clean, fg, to_gpu(inv));
          EXPECT_EQ(fg.item<float>(), 1.0f) << n;
        }
      }
    }
  }
}

// The multi-tensor add is ops::add_ pair by pair, bit for bit on both backends (one f32 add, rounded once to the
// storage dtype), dtypes mixed in one list; and the element-wise add on the CPU is the reference.
TEST(GpuOptimOps, MultiTensorAddIsTheElementwiseAddOfEveryPair) {
  MPT_REQUIRE_GPU(8);
  std::vector<Tensor> dst_cpu, src_cpu, dst_gpu, src_gpu, want;
  const std::vector<DType> dtypes = {DType::F32, DType::BF16, DType::F16, DType::BF16, DType::F32};
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const Tensor d = random_tensor({kSizes[i]}, dtypes[i], 700 + i, 3.0);
    const Tensor x = random_tensor({kSizes[i]}, dtypes[i], 800 + i, 3.0);
    want.push_back(ops::add(d, x));
    dst_cpu.push_back(d.clone()), src_cpu.push_back(x);
    dst_gpu.push_back(to_gpu(d)), src_gpu.push_back(to_gpu(x));
  }
  ops::add_(dst_cpu, src_cpu);
  ops::add_(dst_gpu, src_gpu);
  for (size_t i = 0; i < kSizes.size(); ++i) {
    const std::string n = "pair " + std::to_string(i) + " " + std::string(dtype_name(dtypes[i]));
    expect_match(dst_cpu[i], want[i], Match::exact(testing::Tolerance{0, 0}), n + " cpu");
    expect_match(dst_gpu[i], want[i], Match::exact(testing::Tolerance{0, 0}), n + " cuda");
  }
  // Bad lists are refused with the slot and what was expected.
  const std::vector<Tensor> one = {dst_gpu[0]};
  EXPECT_THROW(ops::add_(one, std::vector<Tensor>{}), Error);
  EXPECT_THROW(ops::add_(one, std::vector<Tensor>{src_gpu[1]}), Error);               // another shape and dtype
  EXPECT_THROW(ops::add_(one, std::vector<Tensor>{src_cpu[0]}), Error);               // another device
  EXPECT_THROW(ops::add_(one, std::vector<Tensor>{src_gpu[0].to(DType::BF16)}), Error);  // another dtype
  EXPECT_THROW(ops::add_(one, one), Error);                                           // the same memory
  // Pairs run at once: a dst that another pair writes or reads is refused, disjoint views of one buffer (gradients
  // as views of a data-parallel bucket) are not, and a source may serve several pairs.
  for (const Device dev : {Device::cpu(), Device::cuda(0)}) {
    const std::string n = dev.str();
    const Tensor x = random_tensor({10}, DType::F32, 950, 2.0).to(dev);
    const Tensor y = random_tensor({5}, DType::F32, 951, 2.0).to(dev);
    Tensor flat = random_tensor({10}, DType::F32, 952, 2.0).to(dev);
    const Tensor before = flat.clone();
    ops::add_(std::vector<Tensor>{flat.slice(0, 0, 5), flat.slice(0, 5, 10)}, std::vector<Tensor>{y, y});
    expect_match(flat.slice(0, 0, 5), ops::add(before.slice(0, 0, 5), y), Match::exact(testing::Tolerance{0, 0}), n);
    expect_match(flat.slice(0, 5, 10), ops::add(before.slice(0, 5, 10), y), Match::exact(testing::Tolerance{0, 0}), n);
    try {
      ops::add_(std::vector<Tensor>{flat.slice(0, 0, 5), flat.slice(0, 3, 8)}, std::vector<Tensor>{y, y});
      ADD_FAILURE() << n << ": overlapping destinations were accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("overlaps slot"), std::string::npos) << e.what();
    }
    EXPECT_THROW(ops::add_(std::vector<Tensor>{flat.slice(0, 0, 5), x.slice(0, 0, 5)},
                           std::vector<Tensor>{y, flat.slice(0, 2, 7)}),
                 Error) << n << ": a source read while another pair writes it";
  }
  try {
    ops::add_(std::vector<Tensor>{dst_gpu[0], dst_gpu[1]}, std::vector<Tensor>{src_gpu[0], src_gpu[0]});
    ADD_FAILURE() << "a mismatched second pair was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("slot 1"), std::string::npos) << e.what();
  }
}

// A second backward into existing CUDA gradients: the small ones (norm-like vectors here) are added at the end of the
// pass in one multi-tensor launch, and the sums are those of the CPU, where every add is made at once. A leaf with a
// post-accumulate hook is added into before its hook runs (the hook sees the sum); nothing is deferred past the pass.
TEST(GpuOptimOps, BackwardsSmallLeafAddsMatchTheCpusAndPrecedeHooks) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::BF16}) {
    const std::string n = std::string(dtype_name(dt));
    auto leaves = [&](Device dev) {
      std::vector<Tensor> out;
      for (int64_t i = 0; i < 4; ++i) {
        Tensor t = random_tensor({96 + 32 * i}, dt, 900 + i, 1.0).to(dev);
        t.requires_grad_();
        out.push_back(t);
      }
      return out;
    };
    std::vector<Tensor> cpu = leaves(Device::cpu()), gpu = leaves(Device::cuda(0));
    std::vector<Tensor> hook_saw;
    gpu[3].register_post_accumulate_grad_hook([&](const Tensor& leaf) { hook_saw.push_back(to_cpu(leaf.grad())); });
    auto pass = [&](const std::vector<Tensor>& ls, int k) {
      Tensor loss;
      for (size_t i = 0; i < ls.size(); ++i) {
        const Tensor w = random_tensor(ls[i].shape(), dt, 1000 + 10 * k + static_cast<int64_t>(i), 1.0)
                             .to(ls[i].device());
        const Tensor term = ops::sum(ops::mul(ls[i], w));
        loss = loss.defined() ? ops::add(loss, term) : term;
      }
      loss.backward();
    };
    for (int k = 0; k < 3; ++k) pass(cpu, k), pass(gpu, k);
    for (size_t i = 0; i < cpu.size(); ++i) {
      expect_match(gpu[i].grad(), cpu[i].grad(), Match::exact(testing::Tolerance{0, 0}),
                   n + " leaf " + std::to_string(i));
    }
    ASSERT_EQ(hook_saw.size(), 3u) << n;
    expect_match(hook_saw.back(), cpu[3].grad(), Match::exact(testing::Tolerance{0, 0}), n + " the hook's view");
  }
}

// Past LeafAdds::kFlushBytes of pending adds (20 leaves of 1 MiB here) the adds are made mid-pass; under
// autograd::HooksMayWait each leaf's hooks still run exactly once per pass, after its add (they see the sum).
TEST(GpuOptimOps, HooksThatMayWaitRunOncePerPassPastTheFlushLimit) {
  MPT_REQUIRE_GPU(8);
  constexpr int kLeaves = 20;
  constexpr int64_t kN = 1 << 18;  // 1 MiB of f32: the largest add that waits
  std::vector<Tensor> cpu, gpu;
  std::vector<int> calls(kLeaves, 0);
  std::vector<Tensor> seen(kLeaves);
  for (int i = 0; i < kLeaves; ++i) {
    Tensor c = random_tensor({kN}, DType::F32, 1200 + i, 1.0);
    Tensor g = to_gpu(c);
    c.requires_grad_();
    g.requires_grad_();
    g.register_post_accumulate_grad_hook([&calls, &seen, i](const Tensor& leaf) {
      ++calls[static_cast<size_t>(i)];
      seen[static_cast<size_t>(i)] = to_cpu(leaf.grad());
    });
    cpu.push_back(c);
    gpu.push_back(g);
  }
  auto pass = [&](const std::vector<Tensor>& ls, int k) {
    Tensor loss;
    for (int i = 0; i < kLeaves; ++i) {
      const Tensor w = random_tensor({kN}, DType::F32, 1300 + 40 * k + i, 1.0).to(ls[0].device());
      const Tensor term = ops::sum(ops::mul(ls[static_cast<size_t>(i)], w));
      loss = loss.defined() ? ops::add(loss, term) : term;
    }
    loss.backward();
  };
  for (int k = 0; k < 3; ++k) {
    pass(cpu, k);
    if (k == 0) {
      pass(gpu, k);  // the first pass has nothing to add into
    } else {
      autograd::HooksMayWait wait;
      pass(gpu, k);
    }
    for (int i = 0; i < kLeaves; ++i) {
      const auto u = static_cast<size_t>(i);
      EXPECT_EQ(calls[u], k + 1) << "leaf " << i << " pass " << k;
      expect_match(seen[u], cpu[u].grad(), Match::exact(testing::Tolerance{0, 0}),
                   "leaf " + std::to_string(i) + " pass " + std::to_string(k) + ": the hook's view");
    }
  }
}

}  // namespace
}  // namespace mpt
