// tests/ops/test_optim.cpp: AdamW (f32 / bf16 moments), SGD and the AMP unscale check against float64 references
// written here, plus the multi-tensor and GradScaler invariants (8-bit states: test_optim_8bit.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "mpt/ops/optim.h"
#include "op_test.h"
#include "test_util.h"

using namespace mpt;
using mpt::testing::random_tensor;

namespace {

// ---- float64 references (from the PyTorch formulas, independent of kernels/math) ----

struct RefAdamW {
  std::vector<double> p, m, v;
};

// One torch.optim.AdamW step. round_moments: store m and v as bf16 after the step (the bf16-moment variant).
void ref_adamw_step(RefAdamW& s, const std::vector<double>& g, const ops::AdamWParams& hp, bool round_moments) {
  const double bc1 = 1 - std::pow(hp.beta1, double(hp.step)), bc2 = 1 - std::pow(hp.beta2, double(hp.step));
  for (size_t i = 0; i < g.size(); ++i) {
    double p = s.p[i] * (1 - hp.lr * hp.weight_decay);
    const double m = hp.beta1 * s.m[i] + (1 - hp.beta1) * g[i];
    const double v = hp.beta2 * s.v[i] + (1 - hp.beta2) * g[i] * g[i];
    p -= hp.lr / bc1 * m / (std::sqrt(v) / std::sqrt(bc2) + hp.eps);
    s.p[i] = double(float(p));  // f32 masters
    s.m[i] = round_moments ? double(float(bf16(m))) : m;
    s.v[i] = round_moments ? double(float(bf16(v))) : v;
  }
}

ops::AdamWParams adamw_hp(int64_t step) {
  return {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.1, .step = step};
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

template <class T>
std::vector<T> bits_of(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.nbytes() / sizeof(T)));
  std::memcpy(out.data(), t.contiguous().data_ptr(), t.nbytes());
  return out;
}

using mpt::testing::same_bits;

ops::AdamWSlot make_slot(int64_t n, DType grad_dtype, ops::MomentStorage storage, uint64_t seed,
                         DType param_dtype = DType::F32) {
  Tensor p = random_tensor({n}, param_dtype, seed);
  return {p, random_tensor({n}, grad_dtype, seed + 1), ops::adamw_state(p, storage)};
}

ops::AdamWSlot clone_slot(const ops::AdamWSlot& s) {
  auto c = [](const Tensor& t) { return t.defined() ? t.clone() : Tensor(); };
  return {c(s.param), c(s.grad),
          {c(s.state.exp_avg), c(s.state.exp_avg_sq), c(s.state.exp_avg_absmax), c(s.state.exp_avg_sq_absmax)}};
}

Tensor scalar(float v) { return Tensor::from_vector<float>({v}, {1}); }

}  // namespace

// ---------------------------------------------------------------------------------------------------------------
// AdamW with f32 and f64 moments

TEST(AdamW, F32MomentsTrackFloat64ReferenceOverSteps) {
  for (DType gdt : {DType::F32, DType::BF16, DType::F16}) {
    for (int64_t n : {1, 7, 257, 4099}) {
      ops::AdamWSlot s = make_slot(n, gdt, ops::MomentStorage::F32, 10 + n);
      RefAdamW ref{values(s.param), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
      for (int64_t step = 1; step <= 6; ++step) {
        s.grad = random_tensor({n}, gdt, 100 * step + n);  // fresh gradients each step, seen rounded by both sides
        ops::adamw_step({&s, 1}, adamw_hp(step));
        ref_adamw_step(ref, values(s.grad), adamw_hp(step), false);
      }
      // p is O(1) and re-rounded to f32 every step (<= 6e-8 relative each), the update (~1e-2) carries a few f32
      // ulps: 6 steps stay well inside rtol 1e-6 + atol 1e-7. m sums terms (1 - b1) g of size ~0.1-0.4 whose f32
      // roundings (<= 3e-8 each) survive cancellation, hence its absolute 1e-7; v's terms are all positive.
      const std::string what = fmt::format("adamw grad {} n={}", dtype_name(gdt), n);
      mpt::testing::expect_close(s.param, Tensor::from_vector(ref.p, {n}), {1e-6, 1e-7}, what + " param");
      mpt::testing::expect_close(s.state.exp_avg, Tensor::from_vector(ref.m, {n}), {1e-6, 1e-7}, what + " m");
      mpt::testing::expect_close(s.state.exp_avg_sq, Tensor::from_vector(ref.v, {n}), {1e-6, 1e-10}, what + " v");
    }
  }
}

TEST(AdamW, Float64PathMatchesReferenceTightly) {
  const int64_t n = 333;
  ops::AdamWSlot s = make_slot(n, DType::F64, ops::MomentStorage::F32, 5, DType::F64);
  EXPECT_EQ(s.state.exp_avg.dtype(), DType::F64);
  RefAdamW ref{values(s.param), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  for (int64_t step = 1; step <= 4; ++step) {
    s.grad = random_tensor({n}, DType::F64, 50 + step);
    ops::adamw_step({&s, 1}, adamw_hp(step));
    // Reference without the f32 rounding of masters: compare against an unrounded float64 run.
    const double bc1 = 1 - std::pow(0.9, double(step)), bc2 = 1 - std::pow(0.999, double(step));
    const auto g = values(s.grad);
    for (int64_t i = 0; i < n; ++i) {
      const double p = ref.p[i] * (1 - 1e-2 * 0.1);
      ref.m[i] = 0.9 * ref.m[i] + 0.1 * g[i];
      ref.v[i] = 0.999 * ref.v[i] + 0.001 * g[i] * g[i];
      ref.p[i] = p - 1e-2 / bc1 * ref.m[i] / (std::sqrt(ref.v[i]) / std::sqrt(bc2) + 1e-8);
    }
  }
  mpt::testing::expect_close(s.param, Tensor::from_vector(ref.p, {n}), {1e-13, 1e-15}, "f64 adamw param");
  mpt::testing::expect_close(s.state.exp_avg_sq, Tensor::from_vector(ref.v, {n}), {1e-13, 1e-18}, "f64 adamw v");
}

TEST(AdamW, Bf16MomentsMatchReferenceThatRoundsMomentsEachStep) {
  const int64_t n = 1031;
  ops::AdamWSlot s = make_slot(n, DType::BF16, ops::MomentStorage::BF16, 77);
  EXPECT_EQ(s.state.exp_avg.dtype(), DType::BF16);
  RefAdamW ref{values(s.param), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  const int steps = 5;
  for (int64_t step = 1; step <= steps; ++step) {
    s.grad = random_tensor({n}, DType::BF16, 300 + step);
    ops::adamw_step({&s, 1}, adamw_hp(step));
    ref_adamw_step(ref, values(s.grad), adamw_hp(step), true);
  }
  // The kernel computes the new moments in f32 and rounds them to bf16; the reference rounds the float64 values.
  // They agree unless the f32 value sits within an f32 ulp of a bf16 rounding boundary; then a moment differs by
  // one bf16 ulp of its value at that step (m: |m| <= 0.4, ulp <= 2^-10; v: v <= 0.02, ulp <= 2^-13), a
  // difference later steps carry on (times beta^k) while m itself may shrink by cancellation: hence the absolute
  // bounds. Each later update then moves by at most lr * 2^-7 (m/sqrt(v) within ~2 bf16 ulps relative): the
  // parameter bound is steps * lr * 2^-7 on top of the f32 tolerance.
  mpt::testing::expect_close(s.state.exp_avg, Tensor::from_vector(ref.m, {n}), {1.0 / 256, 1.0 / 1024}, "bf16 m");
  mpt::testing::expect_close(s.state.exp_avg_sq, Tensor::from_vector(ref.v, {n}), {1.0 / 256, 1.0 / 8192}, "bf16 v");
  mpt::testing::expect_close(s.param, Tensor::from_vector(ref.p, {n}), {1e-6, steps * 1e-2 / 128}, "bf16 param");
  // Most moments agree exactly with the reference's rounding (a formula slip would break nearly all of them).
  const auto m = values(s.state.exp_avg);
  int exact = 0;
  for (int64_t i = 0; i < n; ++i) exact += m[i] == ref.m[i];
  EXPECT_GT(exact, n * 95 / 100);
}

TEST(AdamW, GradScaleInverseIsFusedIntoTheStep) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    ops::AdamWSlot plain = make_slot(600, DType::F32, storage, 31);
    ops::AdamWSlot scaled = clone_slot(plain);
    // Scaling by a power of two and back is exact, so the fused step must equal the unscaled one bit for bit.
    std::vector<double> gv = values(plain.grad);
    for (double& x : gv) x *= 1024;
    scaled.grad = Tensor::from_vector(gv, {600}).to(DType::F32);
    ops::adamw_step({&plain, 1}, adamw_hp(1));
    ops::adamw_step({&scaled, 1}, adamw_hp(1), {.grad_scale_inv = scalar(1.0f / 1024), .found_inf = {}});
    EXPECT_TRUE(same_bits(plain.param, scaled.param));
    EXPECT_TRUE(same_bits(plain.state.exp_avg, scaled.state.exp_avg));
    EXPECT_TRUE(same_bits(plain.state.exp_avg_sq, scaled.state.exp_avg_sq));
  }
}

TEST(AdamW, FoundInfSkipsTheWholeStep) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    std::vector<ops::AdamWSlot> slots{make_slot(300, DType::BF16, storage, 1), make_slot(5, DType::BF16, storage, 2)};
    ops::adamw_step(slots, adamw_hp(1));  // non-trivial state first
    std::vector<ops::AdamWSlot> before;
    for (const auto& s : slots) before.push_back(clone_slot(s));
    ops::adamw_step(slots, adamw_hp(2), {.grad_scale_inv = {}, .found_inf = scalar(1.0f)});
    for (size_t i = 0; i < slots.size(); ++i) {
      EXPECT_TRUE(same_bits(slots[i].param, before[i].param));
      EXPECT_TRUE(same_bits(slots[i].state.exp_avg, before[i].state.exp_avg));
      EXPECT_TRUE(same_bits(slots[i].state.exp_avg_sq, before[i].state.exp_avg_sq));
      if (storage == ops::MomentStorage::Int8) {
        EXPECT_TRUE(same_bits(slots[i].state.exp_avg_absmax, before[i].state.exp_avg_absmax));
      }
    }
    // A clear flag lets the step run.
    ops::adamw_step(slots, adamw_hp(2), {.grad_scale_inv = {}, .found_inf = scalar(0.0f)});
    EXPECT_FALSE(same_bits(slots[0].param, before[0].param));
  }
}

TEST(AdamW, OneCallOverManyTensorsEqualsPerTensorCallsBitForBit) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    std::vector<ops::AdamWSlot> together;
    for (int64_t k = 0; k < 40; ++k) together.push_back(make_slot(1 + 2 * k, DType::F16, storage, 1000 + k));
    together.push_back(make_slot(70001, DType::F16, storage, 7));
    std::vector<ops::AdamWSlot> separate;
    for (const auto& s : together) separate.push_back(clone_slot(s));
    for (int64_t step = 1; step <= 3; ++step) {
      ops::adamw_step(together, adamw_hp(step));
      for (auto& s : separate) ops::adamw_step({&s, 1}, adamw_hp(step));
    }
    for (size_t i = 0; i < together.size(); ++i) {
      ASSERT_TRUE(same_bits(together[i].param, separate[i].param)) << "tensor " << i;
      ASSERT_TRUE(same_bits(together[i].state.exp_avg, separate[i].state.exp_avg)) << "tensor " << i;
      ASSERT_TRUE(same_bits(together[i].state.exp_avg_sq, separate[i].state.exp_avg_sq)) << "tensor " << i;
    }
  }
}

// ---------------------------------------------------------------------------------------------------------------
// SGD

namespace {

void ref_sgd_step(std::vector<double>& p, std::vector<double>& buf, const std::vector<double>& g,
                  const ops::SgdParams& hp) {
  for (size_t i = 0; i < p.size(); ++i) {
    double d = g[i] + hp.weight_decay * p[i];
    if (hp.momentum != 0) {
      buf[i] = hp.first_step ? d : hp.momentum * buf[i] + (1 - hp.dampening) * d;
      d = hp.nesterov ? d + hp.momentum * buf[i] : buf[i];
    }
    p[i] = double(float(p[i] - hp.lr * d));
  }
}

}  // namespace

TEST(Sgd, MatchesFloat64ReferenceInEveryMode) {
  const ops::SgdParams modes[] = {
      {.lr = 0.1},
      {.lr = 0.1, .weight_decay = 0.01},
      {.lr = 0.05, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.3, .weight_decay = 0.02},
      {.lr = 0.05, .momentum = 0.9, .weight_decay = 0.02, .nesterov = true},
  };
  for (const auto& mode : modes) {
    for (DType gdt : {DType::F32, DType::BF16}) {
      const int64_t n = 777;
      Tensor p = random_tensor({n}, DType::F32, 1);
      ops::SgdSlot s{p, Tensor(), Tensor::zeros({n})};
      auto rp = values(p);
      std::vector<double> rbuf(n, 0.0);
      for (int step = 0; step < 4; ++step) {
        s.grad = random_tensor({n}, gdt, 40 + step);
        ops::SgdParams hp = mode;
        hp.first_step = step == 0;
        ops::sgd_step({&s, 1}, hp);
        ref_sgd_step(rp, rbuf, values(s.grad), hp);
      }
      const std::string what = fmt::format("sgd m={} d={} wd={} nesterov={} grad {}", mode.momentum, mode.dampening,
                                           mode.weight_decay, mode.nesterov, dtype_name(gdt));
      // The buffer sums O(1) terms (|g| <= ~4) with cancellation: a few f32 roundings of O(1) values per step.
      mpt::testing::expect_close(s.param, Tensor::from_vector(rp, {n}), {1e-6, 1e-6}, what);
      if (mode.momentum != 0) {
        mpt::testing::expect_close(s.momentum_buffer, Tensor::from_vector(rbuf, {n}), {1e-6, 1e-6}, what + " buf");
      }
    }
  }
}

TEST(Sgd, Float64PathAndMultiTensorAndFoundInf) {
  ops::SgdParams hp{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true, .first_step = true};
  std::vector<ops::SgdSlot> slots, single;
  for (int64_t k = 0; k < 30; ++k) {
    const int64_t n = k == 29 ? 50001 : 3 + k;
    slots.push_back({random_tensor({n}, DType::F32, k), random_tensor({n}, DType::F16, 99 + k), Tensor::zeros({n})});
    single.push_back({slots.back().param.clone(), slots.back().grad, Tensor::zeros({n})});
  }
  ops::sgd_step(slots, hp);
  for (auto& s : single) ops::sgd_step({&s, 1}, hp);
  for (size_t i = 0; i < slots.size(); ++i) {
    ASSERT_TRUE(same_bits(slots[i].param, single[i].param)) << i;
    ASSERT_TRUE(same_bits(slots[i].momentum_buffer, single[i].momentum_buffer)) << i;
  }
  const Tensor before = slots[3].param.clone();
  hp.first_step = false;
  ops::sgd_step(slots, hp, {.grad_scale_inv = {}, .found_inf = scalar(1.0f)});
  EXPECT_TRUE(same_bits(slots[3].param, before));
  // f64 parameters follow the float64 reference to rounding.
  Tensor p = random_tensor({64}, DType::F64, 5);
  ops::SgdSlot s{p, random_tensor({64}, DType::F64, 6), Tensor::zeros({64}, DType::F64)};
  auto rp = values(p);
  std::vector<double> rbuf(64, 0.0);
  ops::sgd_step({&s, 1}, {.lr = 0.1, .momentum = 0.5, .first_step = true});
  for (int i = 0; i < 64; ++i) rp[i] -= 0.1 * values(s.grad)[i];
  mpt::testing::expect_close(s.param, Tensor::from_vector(rp, {64}), {1e-15, 1e-15}, "f64 sgd");
}

// ---------------------------------------------------------------------------------------------------------------
// AMP unscale + inf/NaN check

TEST(Unscale, SpecCaseA3InfAndNaNAreFoundAndKept) {
  Tensor g = Tensor::from_vector<float>({65536.0f * 0.5f, std::numeric_limits<float>::infinity(),
                                         std::numeric_limits<float>::quiet_NaN()}, {3});
  Tensor found = Tensor::zeros({1});
  const float inv = float(1.0 / double(65536.0f));
  ops::non_finite_check_and_unscale_({&g, 1}, found, scalar(inv));
  const auto v = g.to_vector<float>();
  EXPECT_EQ(v[0], 0.5f);
  EXPECT_TRUE(std::isinf(v[1]) && v[1] > 0);
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(found.item<float>(), 1.0f);
}

TEST(Unscale, SpecCaseA7AndInverseOneKeepsBits) {
  const float inv = float(1.0 / 3.0);
  EXPECT_EQ(inv, 0.3333333432674408f);
  Tensor g = Tensor::from_vector<float>({3.0f, -6.0f}, {2});
  Tensor found = Tensor::zeros({1});
  ops::non_finite_check_and_unscale_({&g, 1}, found, scalar(inv));
  EXPECT_EQ(g.to_vector<float>()[0], 1.0f);
  EXPECT_EQ(g.to_vector<float>()[1], -2.0f);
  EXPECT_EQ(found.item<float>(), 0.0f);
  // inv_scale == 1: nothing is written, a NaN keeps its payload, -0 stays -0; the NaN is still found.
  std::vector<uint32_t> raw{0x7FC12345u, 0x80000000u, 0x3F800001u};
  Tensor h = Tensor::empty({3});
  std::memcpy(h.data_ptr(), raw.data(), 12);
  ops::non_finite_check_and_unscale_({&h, 1}, found, scalar(1.0f));
  EXPECT_EQ(bits_of<uint32_t>(h), raw);
  EXPECT_EQ(found.item<float>(), 1.0f);
}

TEST(Unscale, FoundInfIsSetNeverClearedOverManyTensorsAndDtypes) {
  for (DType dt : {DType::F32, DType::BF16, DType::F16, DType::F64}) {
    std::vector<Tensor> grads;
    for (int64_t k = 0; k < 12; ++k) grads.push_back(random_tensor({k == 11 ? 40000 : 1 + 3 * k}, dt, 60 + k, 100.0));
    std::vector<std::vector<double>> ref;
    for (const auto& g : grads) ref.push_back(values(g));
    Tensor found = Tensor::zeros({1});
    ops::non_finite_check_and_unscale_(grads, found, scalar(0.25f));
    EXPECT_EQ(found.item<float>(), 0.0f);
    for (size_t k = 0; k < grads.size(); ++k) {
      for (double& x : ref[k]) x *= 0.25;  // exact: a power of two
      mpt::testing::expect_close(grads[k], Tensor::from_vector(ref[k], grads[k].shape()), {0, 0},
                                 fmt::format("unscale {} tensor {}", dtype_name(dt), k));
    }
    found.fill_(1.0);
    ops::non_finite_check_and_unscale_(grads, found, scalar(0.5f));
    EXPECT_EQ(found.item<float>(), 1.0f) << "found_inf must never be cleared";
    found.fill_(0.0);
    Tensor bad = grads[11].to(DType::F64);
    auto bv = values(bad);
    bv[39999] = -std::numeric_limits<double>::infinity();
    grads[11] = Tensor::from_vector(bv, {40000}).to(dt);
    ops::non_finite_check_and_unscale_(grads, found, scalar(0.5f));
    EXPECT_EQ(found.item<float>(), 1.0f) << dtype_name(dt);
  }
}

// ---------------------------------------------------------------------------------------------------------------
// Errors

TEST(Optim, RejectsBadArguments) {
  ops::AdamWSlot s = make_slot(10, DType::F32, ops::MomentStorage::F32, 1);
  auto with = [&](auto edit) {
    ops::AdamWSlot t = clone_slot(s);
    edit(t);
    ops::adamw_step({&t, 1}, adamw_hp(1));
  };
  EXPECT_MPT_ERROR(with([](auto& t) { t.grad = Tensor::zeros({11}); }),
                   "[adamw_step] slot 0: grad must have shape [10]");
  EXPECT_MPT_ERROR(with([](auto& t) { t.param = Tensor::zeros({10}, DType::BF16); }), "parameters must be f32");
  EXPECT_MPT_ERROR(with([](auto& t) { t.grad = Tensor::zeros({10}, DType::I32); }),
                   "expected f32, bf16 or f16 gradients");
  EXPECT_MPT_ERROR(with([](auto& t) { t.state.exp_avg_sq = Tensor::zeros({9}); }), "exp_avg_sq must have shape [10]");
  EXPECT_MPT_ERROR(with([](auto& t) { t.param = Tensor::zeros({10, 2}).select(1, 0); }), "param must be contiguous");
  EXPECT_MPT_ERROR(ops::adamw_step({&s, 1}, {.step = 0}), "[adamw_step] step counts from 1, got 0");
  EXPECT_MPT_ERROR(ops::adamw_step({&s, 1}, {.beta2 = 1.0}), "[adamw_step] invalid beta2: 1");
  const ops::GradScaling f64_flag{.grad_scale_inv = {}, .found_inf = Tensor::zeros({1}, DType::F64)};
  EXPECT_MPT_ERROR(ops::adamw_step({&s, 1}, adamw_hp(1), f64_flag),
                   "found_inf must be an f32 tensor with one element");
  ops::AdamWSlot q = make_slot(300, DType::F32, ops::MomentStorage::Int8, 2);
  q.state.exp_avg_absmax = Tensor::zeros({1});
  EXPECT_MPT_ERROR(ops::adamw_step({&q, 1}, adamw_hp(1)), "exp_avg_absmax must have shape [2]");
  std::vector<ops::AdamWSlot> mixed{make_slot(4, DType::F32, ops::MomentStorage::F32, 3),
                                    make_slot(4, DType::F32, ops::MomentStorage::BF16, 4)};
  EXPECT_MPT_ERROR(ops::adamw_step(mixed, adamw_hp(1)), "slot 1: all slots must use the moment storage of slot 0");
  EXPECT_MPT_ERROR(ops::adamw_state(Tensor::zeros({3}, DType::F64), ops::MomentStorage::Int8),
                   "f64 parameters keep f64 moments");
  ops::SgdSlot sg{Tensor::zeros({4}), Tensor::zeros({4}), Tensor()};
  EXPECT_MPT_ERROR(ops::sgd_step({&sg, 1}, {.momentum = 0.9}), "slot 0: momentum_buffer is an undefined tensor");
  EXPECT_MPT_ERROR(ops::sgd_step({&sg, 1}, {.nesterov = true}), "nesterov momentum requires a momentum");
  Tensor g = Tensor::zeros({4});
  EXPECT_MPT_ERROR(ops::non_finite_check_and_unscale_({&g, 1}, Tensor::zeros({2}), scalar(1)),
                   "found_inf must be an f32 tensor with one element");
  Tensor strided = Tensor::zeros({4, 2}).t();
  EXPECT_MPT_ERROR(ops::non_finite_check_and_unscale_({&strided, 1}, Tensor::zeros({1}), scalar(1)),
                   "grad must be contiguous");
}
