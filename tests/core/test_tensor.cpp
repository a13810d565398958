// tests/core/test_tensor.cpp: Tensor views, copies, conversions, fills, factories, printing and errors.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "mpt/mpt.h"
#include "test_util.h"

using namespace mpt;

namespace {

// Reads element `index` (row-major over the view's shape) through shape/strides/offset by hand.
template <class T>
T at(const Tensor& t, const std::vector<int64_t>& index) {
  int64_t off = t.offset();
  for (size_t d = 0; d < index.size(); ++d) off += index[d] * t.strides()[d];
  return static_cast<const T*>(t.storage()->data())[off];
}

Tensor iota(const Shape& shape) { return Tensor::arange(0.0, static_cast<double>(numel(shape)), 1.0).view(shape); }

}  // namespace

TEST(Tensor, FactoryMetadata) {
  Tensor t = Tensor::empty({2, 3, 4}, DType::BF16);
  EXPECT_EQ(t.shape(), (Shape{2, 3, 4}));
  EXPECT_EQ(t.strides(), (Strides{12, 4, 1}));
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 48u);
  EXPECT_EQ(t.dtype(), DType::BF16);
  EXPECT_TRUE(t.device().is_cpu());
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % 64, 0u);
  EXPECT_EQ(t.size(-1), 4);
  EXPECT_MPT_ERROR(t.size(3), "[size] dimension 3 out of range");
  Tensor s = Tensor::full({}, 2.5);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<float>(), 2.5f);
  EXPECT_EQ(Tensor::zeros({0, 5}).numel(), 0);
  EXPECT_MPT_ERROR(Tensor::empty({2, -3}), "[shape] negative size -3");
  EXPECT_MPT_ERROR((void)Tensor().device(), "undefined tensor");
}

TEST(Tensor, ArangeFullOnes) {
  EXPECT_EQ(Tensor::arange(5).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(Tensor::arange(1.0, 2.0, 0.25).to_vector<double>(), (std::vector<double>{1.0, 1.25, 1.5, 1.75}));
  EXPECT_EQ(Tensor::arange(3.0, 0.0, -1.0, DType::I32).to_vector<int32_t>(), (std::vector<int32_t>{3, 2, 1}));
  EXPECT_EQ(Tensor::arange(0.0, 0.0).numel(), 0);
  EXPECT_MPT_ERROR(Tensor::arange(0.0, 1.0, 0.0), "[arange] step must be non-zero");
  EXPECT_MPT_ERROR(Tensor::arange(0.0, 5.0, -1.0), "wrong sign");
  for (DType dt : kAllDTypes) {
    const auto v = Tensor::ones({3, 2}, dt).to_vector<double>();
    EXPECT_EQ(v, std::vector<double>(6, 1.0)) << dtype_name(dt);
  }
  // 0.1 is not representable: each dtype stores its own rounding of it.
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::BF16).to_vector<double>()[0], 0.10009765625);
  EXPECT_EQ(Tensor::full({2}, 0.1, DType::F16).to_vector<double>()[0], 0.0999755859375);
  EXPECT_EQ(Tensor::full({1}, 1000.0, DType::F8E4M3).item<float>(), 448.0f);  // saturates
}

TEST(Tensor, ViewsShareStorageAndIndexCorrectly) {
  const Tensor base = iota({2, 3, 4});
  const Tensor tr = base.transpose(0, 2);  // (4,3,2)
  EXPECT_TRUE(tr.shares_storage(base));
  EXPECT_FALSE(tr.is_contiguous());
  EXPECT_EQ(tr.shape(), (Shape{4, 3, 2}));
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 2; ++k) EXPECT_EQ(at<float>(tr, {i, j, k}), static_cast<float>(k * 12 + j * 4 + i));
  const Tensor p = base.permute({1, 2, 0});  // (3,4,2)
  EXPECT_EQ(at<float>(p, {2, 1, 1}), 12.f + 2 * 4 + 1);
  const Tensor sl = base.slice(2, 1, 4, 2);  // (2,3,2): columns 1,3
  EXPECT_EQ(sl.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(sl.to_vector<float>(), (std::vector<float>{1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23}));
  EXPECT_EQ(base.slice(1, -2, 100).shape(), (Shape{2, 2, 4}));  // python-style bounds, clamped
  EXPECT_EQ(base.slice(1, 2, 1).numel(), 0);
  const Tensor sel = base.select(1, -1);  // (2,4)
  EXPECT_EQ(sel.to_vector<float>(), (std::vector<float>{8, 9, 10, 11, 20, 21, 22, 23}));
  EXPECT_EQ(base.unsqueeze(1).shape(), (Shape{2, 1, 3, 4}));
  EXPECT_EQ(base.unsqueeze(-1).shape(), (Shape{2, 3, 4, 1}));
  EXPECT_EQ(base.unsqueeze(0).squeeze(0).shape(), base.shape());
  // Writing through a view changes the base.
  Tensor w = iota({2, 3});
  w.t().select(0, 1).fill_(-1);  // column 1 of w
  EXPECT_EQ(w.to_vector<float>(), (std::vector<float>{0, -1, 2, 3, -1, 5}));
}

TEST(Tensor, ViewAndReshape) {
  const Tensor base = iota({2, 3, 4});
  EXPECT_EQ(base.view({6, -1}).shape(), (Shape{6, 4}));
  EXPECT_TRUE(base.view({4, 6}).shares_storage(base));
  // A transposed tensor can be viewed when merged dims stay contiguous ...
  const Tensor tr = base.transpose(0, 1);  // (3,2,4), strides (4,12,1)
  EXPECT_EQ(tr.view({3, 2, 2, 2}).shape(), (Shape{3, 2, 2, 2}));
  // ... but not flattened: view refuses, reshape copies.
  EXPECT_MPT_ERROR(tr.view({-1}), "without a copy; use reshape()");
  const Tensor flat = tr.reshape({-1});
  EXPECT_FALSE(flat.shares_storage(base));
  std::vector<float> expected;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) expected.push_back(static_cast<float>(i * 12 + j * 4 + k));
  EXPECT_EQ(flat.to_vector<float>(), expected);
  EXPECT_MPT_ERROR(base.view({5, -1}), "cannot infer -1");
  EXPECT_MPT_ERROR(base.view({-1, -1}), "only one dimension can be -1");
  EXPECT_MPT_ERROR(base.view({25}), "invalid for 24 elements");
  EXPECT_EQ(Tensor::full({}, 3.0).view({1, 1}).shape(), (Shape{1, 1}));
}

TEST(Tensor, ExpandBroadcastsWithZeroStride) {
  const Tensor row = iota({1, 3});
  const Tensor e = row.expand({4, -1});
  EXPECT_EQ(e.strides(), (Strides{0, 1}));
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{0, 1, 2, 0, 1, 2, 0, 1, 2, 0, 1, 2}));
  EXPECT_EQ(iota({3}).expand({2, 3}).shape(), (Shape{2, 3}));
  EXPECT_MPT_ERROR(iota({2, 3}).expand({4, 3}), "only size-1 dimensions broadcast");
  EXPECT_MPT_ERROR(iota({2, 3}).expand({3}), "fewer dimensions");
  // copy_ broadcasts its source.
  Tensor dst = Tensor::zeros({2, 3}, DType::I32);
  dst.copy_(Tensor::from_vector<float>({7, 8, 9}, {3}));
  EXPECT_EQ(dst.to_vector<int32_t>(), (std::vector<int32_t>{7, 8, 9, 7, 8, 9}));
  EXPECT_MPT_ERROR(dst.copy_(iota({2, 2})), "cannot be broadcast");
  EXPECT_MPT_ERROR(Tensor::zeros({3}).copy_(iota({2, 3})), "does not broadcast to destination");
}

TEST(Tensor, ViewErrors) {
  const Tensor t = iota({2, 3});
  EXPECT_MPT_ERROR(t.select(0, 2), "[select] index 2 out of range for dimension 0 of size 2");
  EXPECT_MPT_ERROR(t.slice(0, 0, 1, 0), "[slice] step must be positive");
  EXPECT_MPT_ERROR(t.transpose(0, 2), "[transpose] dimension 2 out of range");
  EXPECT_MPT_ERROR(t.permute({0, 0}), "[permute] dimension 0 repeated");
  EXPECT_MPT_ERROR(t.permute({0}), "[permute] order [0] has 1 entries");
  EXPECT_MPT_ERROR(t.squeeze(0), "[squeeze] dimension 0 of f32[2, 3] cpu has size 2");
  EXPECT_MPT_ERROR(iota({3}).t(), "[t] expects a 2-d tensor");
  EXPECT_MPT_ERROR(t.data<bf16>(), "[data] requested bf16 pointer of a f32[2, 3] cpu tensor");
  EXPECT_MPT_ERROR(t.item<float>(), "[item] expects a tensor with one element");
  EXPECT_MPT_ERROR(Tensor::from_vector<float>({1, 2, 3}, {2, 2}), "[from_vector] 3 values for shape [2, 2]");
  EXPECT_MPT_ERROR(Tensor(t.storage(), {4, 4}, {4, 1}, 0, DType::F32), "exceeds its storage");
  EXPECT_MPT_ERROR(Tensor(t.storage(), {2}, {1, 1}, 0, DType::F32), "differ in rank");
}

TEST(Tensor, CopyConvertsEveryDtypePair) {
  // Small integers are exact in every dtype, so every pair round-trips exactly.
  const std::vector<double> values = {0, 1, 2, 3, 4, 6, 12, 14};  // exact even in e5m2 (2 mantissa bits)
  for (DType src : kAllDTypes) {
    const Tensor s = Tensor::from_vector(values, {2, 4}).to(src);
    for (DType dst : kAllDTypes) {
      const Tensor d = s.to(dst);
      EXPECT_EQ(d.dtype(), dst);
      EXPECT_EQ(d.to_vector<double>(), values) << dtype_name(src) << " -> " << dtype_name(dst);
      // The same through a transposed (strided) source and destination.
      Tensor strided_dst = Tensor::zeros({4, 2}, dst).t();
      strided_dst.copy_(s);
      EXPECT_EQ(strided_dst.to_vector<double>(), values) << "strided " << dtype_name(src) << " -> " << dtype_name(dst);
    }
  }
}

TEST(Tensor, ConversionRoundsToNearestEven) {
  // 1 + 2^-8 is halfway between two bf16 neighbours 1 and 1 + 2^-7: ties go to even (1).
  const Tensor t = Tensor::from_vector<float>({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 464.f, -1e6f}, {4});
  EXPECT_EQ(t.to(DType::BF16).to_vector<float>(), (std::vector<float>{1.0f, 1.0f + 0x1p-6f, 464.f, -999424.f}));
  const auto e4m3 = t.to(DType::F8E4M3).to_vector<float>();
  EXPECT_EQ(e4m3[2], 448.f);   // tie between 448 and 480 rounds to even
  EXPECT_EQ(e4m3[3], -448.f);  // saturates
  const auto nosat = t.to(DType::F8E4M3, Fp8Saturation::NoSaturate).to_vector<float>();
  EXPECT_TRUE(std::isnan(nosat[3]));
  EXPECT_EQ(Tensor::from_vector<float>({70000.f}, {1}).to(DType::F16).item<float>(), INFINITY);
}

TEST(Tensor, OverlappingCopyReadsBeforeWriting) {
  Tensor t = iota({6});
  t.slice(0, 1, 6).copy_(t.slice(0, 0, 5));  // shift right by one within one storage
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 0, 1, 2, 3, 4}));
}

TEST(Tensor, ContiguousCloneAndTo) {
  const Tensor base = iota({3, 4});
  EXPECT_TRUE(base.contiguous().shares_storage(base));
  const Tensor c = base.t().contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.shares_storage(base));
  EXPECT_EQ(c.to_vector<float>(), base.t().to_vector<float>());
  EXPECT_FALSE(base.clone().shares_storage(base));
  EXPECT_TRUE(base.to(DType::F32).shares_storage(base));  // no-op conversion returns the same tensor
  EXPECT_TRUE(base.to(Device::cpu()).shares_storage(base));
}

TEST(Tensor, RandomIsDeterministicPerSeedAndOffset) {
  Generator g1(42), g2(42);
  const Tensor a = Tensor::normal({1000}, 0, 1, DType::F32, Device::cpu(), g1);
  const Tensor b = Tensor::normal({1000}, 0, 1, DType::F32, Device::cpu(), g2);
  EXPECT_EQ(a.to_vector<float>(), b.to_vector<float>());
  EXPECT_EQ(g1.offset(), 250u);  // 4 numbers per Philox counter
  const Tensor next = Tensor::normal({1000}, 0, 1, DType::F32, Device::cpu(), g1);
  EXPECT_NE(next.to_vector<float>(), a.to_vector<float>());
  // Replaying the state reproduces the draw, whatever the dtype or layout of the destination.
  Generator g3(42, 0);
  Tensor strided = Tensor::zeros({1000, 2}).select(1, 0);
  strided.normal_(0, 1, g3);
  EXPECT_EQ(strided.to_vector<float>(), a.to_vector<float>());
  Generator g4(42, 0);
  const Tensor bf = Tensor::normal({1000}, 0, 1, DType::BF16, Device::cpu(), g4);
  EXPECT_EQ(bf.to_vector<float>(), a.to(DType::BF16).to_vector<float>());
  // Moments of a uniform draw.
  Generator g5(7);
  const auto u = Tensor::uniform({100000}, -2, 6, DType::F64, Device::cpu(), g5).to_vector<double>();
  double mean = 0;
  for (double v : u) {
    ASSERT_GE(v, -2.0);
    ASSERT_LE(v, 6.0);
    mean += v / static_cast<double>(u.size());
  }
  EXPECT_NEAR(mean, 2.0, 5 * 8 / std::sqrt(12.0 * 100000));
  EXPECT_MPT_ERROR(Tensor::zeros({3}, DType::I32).uniform_(), "[uniform_] expected a floating dtype");
  EXPECT_MPT_ERROR(Tensor::zeros({3}).normal_(0, -1), "[normal_] std must be >= 0");
}

TEST(Tensor, Printing) {
  EXPECT_EQ(iota({2, 3}).str(), "tensor([[0.0000, 1.0000, 2.0000],\n        [3.0000, 4.0000, 5.0000]], shape=[2, 3], "
                                "dtype=f32, device=cpu)");
  EXPECT_EQ(Tensor::arange(3).str(), "tensor([0, 1, 2], shape=[3], dtype=i64, device=cpu)");
  EXPECT_EQ(Tensor::full({}, 1e6).str(), "tensor(1.0000e+06, shape=[], dtype=f32, device=cpu)");
  const std::string big = Tensor::arange(2000).str();
  EXPECT_EQ(big, "tensor([0, 1, 2, ..., 1997, 1998, 1999], shape=[2000], dtype=i64, device=cpu)");
  EXPECT_EQ(Tensor().str(), "tensor(undefined)");
  EXPECT_EQ(fmt::format("{}", Tensor::from_vector<float>({NAN, -INFINITY}, {2})),
            "tensor([nan, -inf], shape=[2], dtype=f32, device=cpu)");
}

TEST(Tensor, CudaWithoutGpuIsAClearError) {
  if (cuda_status().usable) GTEST_SKIP() << "a GPU is present; this test covers machines without one";
  EXPECT_MPT_ERROR(Tensor::empty({2}, DType::F32, Device::cuda(0)), "[cuda]");
  EXPECT_MPT_ERROR(iota({2}).to(Device::cuda(0)), "[cuda]");
}

TEST(Tensor, EmptyTensorsAreContiguousWhateverTheirStrides) {
  EXPECT_TRUE(Tensor::empty({3, 0, 2}).is_contiguous());
  EXPECT_TRUE(Tensor::empty({0}).is_contiguous());
  EXPECT_TRUE(Tensor::empty({4, 0}).t().is_contiguous());
  EXPECT_FALSE(Tensor::empty({4, 3}).t().is_contiguous());  // control: a real transpose is not
}
