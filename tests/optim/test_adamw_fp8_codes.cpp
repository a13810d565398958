// tests/optim/test_adamw_fp8_codes.cpp: ops::adamw_step writing a parameter's FP8 weight codes (AdamWSlot::fp8) as it
// updates it, against the independent E4M3 encoder of tests/support: every moment storage, skipped steps, the amax
// fold.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "mpt/mpt.h"
#include "numerics_reference.h"
#include "op_test.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::random_tensor;
using testing::same_bits;

// Sizes: one element, a partial block, one past the CPU's parallel threshold (2^15), a few blocks.
const std::vector<int64_t> kSizes = {1, 300, 40000, 1000};

struct Codes {
  ops::AdamWSlot::Fp8Codes fp8;
  float amax_before;
};

// Codes made with scale `scale` (some parameters saturate at 448), an amax that already holds `amax_before`, and a
// scale_inv that holds garbage.
Codes make_codes(int64_t n, float scale, float amax_before) {
  return {{Tensor::zeros({n}, DType::F8E4M3), Tensor::full({}, scale, DType::F32),
           Tensor::full({1}, amax_before, DType::F32), Tensor::full({}, 7.0, DType::F32)},
          amax_before};
}

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.contiguous();
  std::vector<float> v(static_cast<size_t>(c.numel()));
  std::memcpy(v.data(), c.data_ptr(), v.size() * sizeof(float));
  return v;
}

// Every code is the reference encoding of float(p * scale), saturating; the amax is the fold of max |p| (NaN
// ignored) into what it held; scale_inv is 1 / scale.
void expect_codes_of(const Tensor& param, const Codes& c, const std::string& what) {
  const float scale = c.fp8.scale.item<float>();
  const std::vector<float> p = floats(param);
  std::vector<uint8_t> got(p.size());
  std::memcpy(got.data(), c.fp8.codes.data_ptr(), got.size());
  double amax = c.amax_before;
  int64_t wrong = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const float product = p[i] * scale;
    const auto want = static_cast<uint8_t>(test::ref_encode(test::RefFormat::E4M3, product, true));
    if (got[i] != want && wrong++ < 5)
      ADD_FAILURE() << what << " code " << i << " of p " << p[i] << ": " << int(got[i]) << " want " << int(want);
    if (!std::isnan(p[i])) amax = std::max(amax, std::fabs(static_cast<double>(p[i])));
  }
  EXPECT_EQ(wrong, 0) << what;
  EXPECT_EQ(c.fp8.amax.item<float>(), static_cast<float>(amax)) << what;
  EXPECT_EQ(c.fp8.scale_inv.item<float>(), 1.0f / scale) << what;
}

// Each storage and gradient dtype, three steps: the parameters and moments keep the bits of the same step without
// codes, and after each step the codes are those of the updated parameters (one holds a NaN, which the amax skips).
TEST(AdamWFp8Codes, AreTheE4M3CodesOfTheUpdatedParameters) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::BF16, ops::MomentStorage::Int8}) {
    for (DType gdt : {DType::F32, DType::BF16}) {
      const std::string n =
          "moments " + std::to_string(static_cast<int>(storage)) + " grads " + std::string(dtype_name(gdt));
      std::vector<ops::AdamWSlot> with, without;
      std::vector<Codes> codes;
      for (size_t i = 0; i < kSizes.size(); ++i) {
        Tensor p = random_tensor({kSizes[i]}, DType::F32, 400 + i, 0.05);
        if (i == 1) p.slice(0, 17, 18).fill_(std::numeric_limits<double>::quiet_NaN());
        with.push_back({p.clone(), Tensor(), ops::adamw_state(p, storage)});
        without.push_back({p.clone(), Tensor(), ops::adamw_state(p, storage)});
        codes.push_back(make_codes(kSizes[i], 4096.0f, i == 3 ? 10.0f : 0.0f));  // tensor 3's amax stays 10
        with.back().fp8 = codes.back().fp8;
      }
      for (int64_t step = 1; step <= 3; ++step) {
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const Tensor g = random_tensor({kSizes[i]}, gdt, 500 + i + 10 * static_cast<uint64_t>(step), 0.1);
          with[i].grad = without[i].grad = g;
        }
        const ops::AdamWParams hp{.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.1,
                                  .step = step};
        ops::adamw_step(with, hp);
        ops::adamw_step(without, hp);
        for (size_t i = 0; i < kSizes.size(); ++i) {
          const std::string s = n + " step " + std::to_string(step) + " tensor " + std::to_string(i);
          EXPECT_TRUE(same_bits(with[i].param, without[i].param)) << s;
          EXPECT_TRUE(same_bits(with[i].state.exp_avg, without[i].state.exp_avg)) << s;
          expect_codes_of(with[i].param, codes[i], s);
          codes[i].amax_before = codes[i].fp8.amax.item<float>();  // the next step folds into it
        }
      }
    }
  }
}

// A step that found_inf skips changes no parameter or moment, but the codes are made all the same (from the
// unchanged parameters: their scale may have moved since they were last made).
TEST(AdamWFp8Codes, ASkippedStepStillWritesTheCodes) {
  for (auto storage : {ops::MomentStorage::F32, ops::MomentStorage::Int8}) {
    const Tensor p = random_tensor({3000}, DType::F32, 600, 0.05);
    std::vector<ops::AdamWSlot> slots = {
        {p.clone(), random_tensor({3000}, DType::F32, 601), ops::adamw_state(p, storage)},
        {p.clone(), random_tensor({3000}, DType::F32, 602), ops::adamw_state(p, storage)}};
    Codes c = make_codes(3000, 1000.0f, 0.0f);
    slots[1].fp8 = c.fp8;  // one with codes, one without
    ops::adamw_step(slots, {.lr = 1e-2, .step = 1},
                    {Tensor::full({}, 1.0, DType::F32), Tensor::full({}, 1.0, DType::F32)});
    for (const auto& s : slots) EXPECT_TRUE(same_bits(s.param, p));
    expect_codes_of(p, c, "skipped step, storage " + std::to_string(static_cast<int>(storage)));
  }
}

TEST(AdamWFp8Codes, RejectsCodesItCannotWrite) {
  const Tensor p = random_tensor({64}, DType::F32, 700);
  const auto slot = [&](ops::AdamWSlot::Fp8Codes f) {
    return std::vector<ops::AdamWSlot>{{p.clone(), random_tensor({64}, DType::F32, 701), ops::adamw_state(p), {}, {},
                                        f}};
  };
  const Codes ok = make_codes(64, 2.0f, 0.0f);
  ops::AdamWSlot::Fp8Codes f = ok.fp8;
  f.codes = Tensor::zeros({64}, DType::F8E5M2);
  EXPECT_MPT_ERROR(ops::adamw_step(slot(f), {}),
                   "FP8 codes must be a contiguous f8e4m3 tensor of the f32 parameter's 64");
  f = ok.fp8;
  f.codes = Tensor::zeros({63}, DType::F8E4M3);
  EXPECT_MPT_ERROR(ops::adamw_step(slot(f), {}), "got f8e4m3[63]");
  f = ok.fp8;
  f.amax = Tensor();
  EXPECT_MPT_ERROR(ops::adamw_step(slot(f), {}), "FP8 codes need their amax");
  f = ok.fp8;
  f.scale_inv = f.scale;
  EXPECT_MPT_ERROR(ops::adamw_step(slot(f), {}), "must be three different elements");
  f = ok.fp8;
  f.scale = Tensor::ones({2}, DType::F32);
  EXPECT_MPT_ERROR(ops::adamw_step(slot(f), {}), "scale must be an f32 tensor with one element");
  const Tensor p64 = p.to(DType::F64);
  std::vector<ops::AdamWSlot> d = {{p64.clone(), p64.clone(), ops::adamw_state(p64), {}, {}, ok.fp8}};
  EXPECT_MPT_ERROR(ops::adamw_step(d, {}), "FP8 codes must be");
  EXPECT_TRUE(same_bits(ok.fp8.scale_inv, Tensor::full({}, 7.0, DType::F32))) << "a refused step writes nothing";
}

}  // namespace
}  // namespace mpt
