// tests/emu/test_optim_emu.cpp: the CUDA optimizer and multi-tensor gradient kernels under the emulation harness
// against the CPU kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <vector>

#include "cuda_emu/counters.h"
#include "kernels/cpu/optim.h"
#include "kernels/cuda/optim.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"
#include "test_util.h"

// Both sides run the functions of kernels/math/optim.h in the same order, so they agree bit for bit here. The
// harness compiles the device code with g++, so this proves the order of operations, not nvcc's code: on a GPU
// the explicitly rounded intrinsics (no FMA contraction) are what should keep the bits equal.
namespace {

namespace km = mpt::kernels::math;
namespace emu = mpt::cuda_emu;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed, double scale = 1.0) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, scale).template to_vector<T>();
}

using mpt::testing::same_bits;

// The arrays of a list of AdamW tensors; `misalign` shifts every array by one element.
template <class G, class M>
struct AdamWList {
  std::vector<std::vector<float>> p, am, av;
  std::vector<std::vector<G>> g;
  std::vector<std::vector<M>> m, v;
  std::vector<int64_t> sizes;

  AdamWList(const std::vector<int64_t>& ns, uint64_t seed) : sizes(ns) {
    for (size_t k = 0; k < ns.size(); ++k) {
      const int64_t n = ns[k], blocks = (n + 255) / 256;
      p.push_back(random_values<float>(n + 1, seed + k));
      g.push_back(random_values<G>(n + 1, seed + 1000 + k));
      m.emplace_back(n + 1, M{});
      v.emplace_back(n + 1, M{});
      am.emplace_back(blocks, 0.0f);
      av.emplace_back(blocks, 0.0f);
    }
  }
  std::vector<km::AdamWTensor<float, G, M>> tensors(int misalign) {
    std::vector<km::AdamWTensor<float, G, M>> ts;
    const bool q = std::is_same_v<M, uint8_t>;
    for (size_t k = 0; k < sizes.size(); ++k) {
      ts.push_back({p[k].data() + misalign, g[k].data() + misalign, m[k].data() + misalign, v[k].data() + misalign,
                    q ? am[k].data() : nullptr, q ? av[k].data() : nullptr, sizes[k]});
    }
    return ts;
  }
  bool operator==(const AdamWList& o) const {
    for (size_t k = 0; k < sizes.size(); ++k) {
      if (!same_bits(p[k], o.p[k]) || !same_bits(m[k], o.m[k]) || !same_bits(v[k], o.v[k]) ||
          !same_bits(am[k], o.am[k]) || !same_bits(av[k], o.av[k])) {
        return false;
      }
    }
    return true;
  }
};

const km::AdamWHyper kHyper{1e-2, 0.9, 0.999, 1e-8, 0.1};

template <class G, class M>
void check_adamw(const std::vector<int64_t>& sizes, int misalign, km::StepGuards guards = {}) {
  AdamWList<G, M> cpu(sizes, 7), emu(sizes, 7);
  for (int64_t step = 1; step <= 3; ++step) {
    const auto tc = cpu.tensors(misalign), te = emu.tensors(misalign);
    mpt::kernels::cpu::adamw_step(tc.data(), int64_t(tc.size()), kHyper, step, guards);
    ASSERT_EQ(mpt::kernels::cuda::adamw_step(te.data(), int64_t(te.size()), kHyper, step, guards, nullptr),
              cudaSuccess);
    ASSERT_TRUE(cpu == emu) << "step " << step << " misalign " << misalign << " tensors " << sizes.size();
  }
}

}  // namespace

TEST(OptimEmu, AdamWMatchesCpuBitForBitForEveryStorage) {
  // Tiny tensors, odd sizes, one spanning several chunks, a partial 8-bit block; misaligned arrays too.
  const std::vector<int64_t> sizes{1, 3, 31, 257, 2049, 4100, 0, 5};
  for (int misalign : {0, 1}) {
    check_adamw<float, float>(sizes, misalign);
    check_adamw<mpt::bf16, float>(sizes, misalign);
    check_adamw<mpt::f16, mpt::bf16>(sizes, misalign);
    check_adamw<float, uint8_t>(sizes, misalign);
    check_adamw<mpt::bf16, uint8_t>(sizes, misalign);
  }
}

TEST(OptimEmu, AdamWListsLongerThanOneTableTakeSeveralLaunches) {
  std::vector<int64_t> sizes;
  for (int k = 0; k < 75; ++k) sizes.push_back(1 + k % 9);
  check_adamw<float, float>(sizes, 0);
  check_adamw<mpt::f16, uint8_t>(sizes, 0);
}

TEST(OptimEmu, AdamWGuards) {
  const float inv = 0.125f, clear = 0.0f, set = 1.0f;
  check_adamw<float, float>({100, 3000}, 0, {&inv, &clear});
  check_adamw<mpt::bf16, uint8_t>({100, 3000}, 0, {&inv, nullptr});
  // A set found_inf leaves everything untouched on the device too.
  AdamWList<float, uint8_t> before({300}, 3), after({300}, 3);
  const auto t = after.tensors(0);
  ASSERT_EQ(mpt::kernels::cuda::adamw_step(t.data(), 1, kHyper, 1, {nullptr, &set}, nullptr), cudaSuccess);
  EXPECT_TRUE(before == after);
}

// Device-resident step counts (the tensors' own, torch's capturable state_steps): each tensor takes its count + 1
// and the counts advance after the step, except when found_inf skips it; the same bits as the host step per tensor.
TEST(OptimEmu, AdamWStepCountsLiveWithTheTensors) {
  const std::vector<int64_t> sizes{5, 2049, 300};
  AdamWList<float, float> cpu(sizes, 5), emu(sizes, 5), ref(sizes, 5);
  std::vector<int64_t> cpu_steps{0, 4, 9}, emu_steps = cpu_steps;
  const float clear = 0.0f, set = 1.0f;
  for (int round = 0; round < 3; ++round) {
    const float* found = round == 1 ? &set : &clear;
    auto tc = cpu.tensors(0), te = emu.tensors(0);
    for (size_t k = 0; k < sizes.size(); ++k) tc[k].step = &cpu_steps[k], te[k].step = &emu_steps[k];
    mpt::kernels::cpu::adamw_step(tc.data(), int64_t(tc.size()), kHyper, 1, {nullptr, found});
    ASSERT_EQ(mpt::kernels::cuda::adamw_step(te.data(), int64_t(te.size()), kHyper, 1, {nullptr, found}, nullptr),
              cudaSuccess);
    EXPECT_TRUE(cpu == emu) << "round " << round;
    EXPECT_EQ(cpu_steps, emu_steps) << "round " << round;
    if (round == 1) continue;  // skipped: nothing moved, no count advanced
    auto tr = ref.tensors(0);
    for (size_t k = 0; k < sizes.size(); ++k) {  // the reference: one call per tensor with its host step
      mpt::kernels::cpu::adamw_step(&tr[k], 1, kHyper, cpu_steps[k], {});
    }
    EXPECT_TRUE(cpu == ref) << "round " << round;
  }
  EXPECT_EQ(cpu_steps, (std::vector<int64_t>{2, 6, 11}));
}

TEST(OptimEmu, AdamW8bitNonFiniteGradientsMatchCpu) {
  AdamWList<float, uint8_t> cpu({600}, 11), emu({600}, 11);
  for (auto* l : {&cpu, &emu}) {
    l->g[0][5] = std::numeric_limits<float>::quiet_NaN();
    l->g[0][599] = -std::numeric_limits<float>::infinity();
  }
  const km::AdamWHyper h{1e-3, 0.9, 0.999, 1e-8, 0.0};
  const auto tc = cpu.tensors(0), te = emu.tensors(0);
  mpt::kernels::cpu::adamw_step(tc.data(), 1, h, 1, {});
  ASSERT_EQ(mpt::kernels::cuda::adamw_step(te.data(), 1, h, 1, {}, nullptr), cudaSuccess);
  EXPECT_TRUE(cpu == emu);
}

TEST(OptimEmu, SgdMatchesCpuBitForBit) {
  const std::vector<int64_t> sizes{1, 17, 2048, 2049, 5001};
  for (bool nesterov : {false, true}) {
    for (bool first : {true, false}) {
      std::vector<std::vector<float>> pc, pe, bc, be;
      std::vector<std::vector<mpt::bf16>> g;
      std::vector<km::SgdTensor<float, mpt::bf16>> tc, te;
      for (size_t k = 0; k < sizes.size(); ++k) {
        pc.push_back(random_values<float>(sizes[k], 50 + k));
        bc.push_back(random_values<float>(sizes[k], 60 + k));
        g.push_back(random_values<mpt::bf16>(sizes[k], 70 + k));
      }
      pe = pc;
      be = bc;
      for (size_t k = 0; k < sizes.size(); ++k) {
        tc.push_back({pc[k].data(), g[k].data(), k == 1 ? nullptr : bc[k].data(), sizes[k]});
        te.push_back({pe[k].data(), g[k].data(), k == 1 ? nullptr : be[k].data(), sizes[k]});
      }
      const km::SgdCoefficients<double> c{0.05, 0.9, nesterov ? 1.0 : 0.7, 0.01, nesterov, first};
      mpt::kernels::cpu::sgd_step(tc.data(), int64_t(tc.size()), c, {});
      ASSERT_EQ(mpt::kernels::cuda::sgd_step(te.data(), int64_t(te.size()), c, {}, nullptr), cudaSuccess);
      for (size_t k = 0; k < sizes.size(); ++k) {
        EXPECT_TRUE(same_bits(pc[k], pe[k]) && same_bits(bc[k], be[k])) << "tensor " << k << " nesterov " << nesterov;
      }
    }
  }
}

template <class G>
void check_unscale(float inv) {
  const std::vector<int64_t> sizes{2, 33, 2048, 3001};
  std::vector<std::vector<G>> cpu, emu;
  for (size_t k = 0; k < sizes.size(); ++k) cpu.push_back(random_values<G>(sizes[k], 80 + k, 100.0));
  cpu[2][7] = G(std::numeric_limits<float>::infinity());
  emu = cpu;
  std::vector<G*> pc, pe;
  for (size_t k = 0; k < sizes.size(); ++k) pc.push_back(cpu[k].data()), pe.push_back(emu[k].data());
  float found_cpu = 0, found_emu = 0;
  mpt::kernels::cpu::unscale_check(pc.data(), sizes.data(), 2, &inv, &found_cpu);  // finite tensors only
  ASSERT_EQ(mpt::kernels::cuda::unscale_check(pe.data(), sizes.data(), 2, &inv, &found_emu, nullptr), cudaSuccess);
  EXPECT_EQ(found_cpu, 0.0f);
  EXPECT_EQ(found_emu, 0.0f);
  mpt::kernels::cpu::unscale_check(pc.data() + 2, sizes.data() + 2, 2, &inv, &found_cpu);
  ASSERT_EQ(mpt::kernels::cuda::unscale_check(pe.data() + 2, sizes.data() + 2, 2, &inv, &found_emu, nullptr),
            cudaSuccess);
  EXPECT_EQ(found_cpu, 1.0f);
  EXPECT_EQ(found_emu, 1.0f);
  for (size_t k = 0; k < sizes.size(); ++k) EXPECT_TRUE(same_bits(cpu[k], emu[k])) << "tensor " << k;
}

TEST(OptimEmu, UnscaleMatchesCpuBitForBit) {
  check_unscale<float>(float(1.0 / 3.0));
  check_unscale<float>(1.0f);
  check_unscale<mpt::bf16>(0.3f);
  check_unscale<mpt::f16>(0.7f);
}

template <class G>
void check_add_multi() {
  // Sizes across the 2048-element chunks, more pairs than one table holds (68): several launches, in order.
  std::vector<int64_t> sizes;
  for (int k = 0; k < 75; ++k) sizes.push_back(k % 5 == 0 ? 2049 + k : 3 + 37 * k);
  sizes[4] = 0;  // an empty pair is skipped
  std::vector<std::vector<G>> host, dev, src;
  for (size_t k = 0; k < sizes.size(); ++k) {
    host.push_back(random_values<G>(sizes[k], 300 + k, 50.0));
    src.push_back(random_values<G>(sizes[k], 500 + k, 50.0));
  }
  dev = host;
  std::vector<G*> pc, pe;
  std::vector<const G*> ps;
  for (size_t k = 0; k < sizes.size(); ++k) {
    pc.push_back(host[k].data()), pe.push_back(dev[k].data()), ps.push_back(src[k].data());
  }
  const auto count = static_cast<int64_t>(sizes.size());
  mpt::kernels::cpu::add_multi(pc.data(), ps.data(), sizes.data(), count);
  emu::reset_counters();
  ASSERT_EQ(mpt::kernels::cuda::add_multi(pe.data(), ps.data(), sizes.data(), count, nullptr), cudaSuccess);
  EXPECT_EQ(emu::counters().kernel_launches, 2u);
  for (size_t k = 0; k < sizes.size(); ++k) EXPECT_TRUE(same_bits(host[k], dev[k])) << "pair " << k;
  // And each sum is the f32 add rounded once to G (a float64 reference of two values that are exact in f32).
  const std::vector<G> before = random_values<G>(sizes[1], 301, 50.0);
  for (int64_t i = 0; i < sizes[1]; ++i) {
    const double want =
        static_cast<double>(static_cast<float>(before[i])) + static_cast<double>(static_cast<float>(src[1][i]));
    EXPECT_EQ(static_cast<float>(host[1][i]), static_cast<float>(G(static_cast<float>(want)))) << "element " << i;
  }
}

TEST(OptimEmu, MultiTensorAddMatchesCpuBitForBit) {
  check_add_multi<float>();
  check_add_multi<mpt::bf16>();
  check_add_multi<mpt::f16>();
  float x = 0;
  float* d[1] = {nullptr};
  const float* s[1] = {&x};
  const int64_t n[1] = {4};
  EXPECT_EQ(mpt::kernels::cuda::add_multi(d, s, n, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::add_multi<float>(nullptr, s, n, 1, nullptr), cudaErrorInvalidValue);
}

TEST(OptimEmu, RejectsInvalidArguments) {
  float x = 0;
  const km::AdamWTensor<float, float, float> bad{&x, &x, &x, &x, nullptr, nullptr, -1};
  const km::AdamWHyper h{1e-3, 0.9, 0.999, 1e-8, 0.0};
  EXPECT_EQ(mpt::kernels::cuda::adamw_step(&bad, 1, h, 1, {}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ((mpt::kernels::cuda::adamw_step<float, float>(nullptr, 2, h, 1, {}, nullptr)), cudaErrorInvalidValue);
  EXPECT_EQ((mpt::kernels::cuda::adamw_step<float, float>(nullptr, 0, h, 1, {}, nullptr)), cudaSuccess);
  float* grads[1] = {&x};
  const int64_t n[1] = {1};
  EXPECT_EQ(mpt::kernels::cuda::unscale_check<float>(grads, n, 1, nullptr, &x, nullptr), cudaErrorInvalidValue);
}
