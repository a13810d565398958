// tests/emu/test_gemm_scales_emu.cpp: the FP8 block-scale conversion kernel for cuBLASLt under the emulation
// harness equals the host reference bit for bit, and reproduces vendor-semantics E4.2's layout.
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/gemm_scales.h"
#include "kernels/cuda/lib/gemm_layout.h"

namespace {

namespace kc = mpt::kernels::cuda;

// Launches are synchronous under the emulation harness, so results are read right after the call.
TEST(GemmScalesEmu, MatchesTheHostReference) {
  struct Case {
    kc::GemmScaleMode mode;
    int64_t rows, k, batch;
  };
  // Ragged rows and K (padding, partial tiles), several batch entries, more than one block of threads.
  const Case cases[] = {{kc::GemmScaleMode::Block1x128, 16, 256, 1},  {kc::GemmScaleMode::Block1x128, 300, 700, 2},
                        {kc::GemmScaleMode::Block128x128, 256, 384, 1}, {kc::GemmScaleMode::Block128x128, 1000, 1300, 3},
                        {kc::GemmScaleMode::Block1x128, 1, 1, 1}};
  for (const Case& c : cases) {
    const int64_t n_ours = kc::our_scale_count(c.mode, c.rows, c.k) * c.batch;
    const int64_t n_lt = kc::lt_scale_count(c.mode, c.rows, c.k) * c.batch;
    std::vector<float> ours(n_ours), want(n_lt, -1.0f), got(n_lt, -2.0f);
    for (int64_t i = 0; i < n_ours; ++i) ours[i] = 0.25f * float(i % 1021) + 1.0f;
    kc::block_scales_to_lt_host(c.mode, ours.data(), want.data(), c.rows, c.k, c.batch);
    ASSERT_EQ(kc::block_scales_to_lt(c.mode, ours.data(), got.data(), c.rows, c.k, c.batch, nullptr), cudaSuccess);
    EXPECT_EQ(got, want) << "rows " << c.rows << " k " << c.k << " batch " << c.batch;
  }
}

// A block-scaled GEMM's two operands converted in one launch: each as its own conversion would be.
TEST(GemmScalesEmu, BothOperandsInOneLaunch) {
  const kc::BlockScaleConversion shape[2] = {{kc::GemmScaleMode::Block1x128, nullptr, nullptr, 300, 700, 2},
                                             {kc::GemmScaleMode::Block128x128, nullptr, nullptr, 1000, 700, 2}};
  std::vector<float> ours[2], want[2], got[2];
  kc::BlockScaleConversion conv[2];
  for (int i = 0; i < 2; ++i) {
    const kc::BlockScaleConversion& c = shape[i];
    ours[i].resize(kc::our_scale_count(c.mode, c.rows, c.k) * c.batch);
    for (size_t j = 0; j < ours[i].size(); ++j) ours[i][j] = 0.5f * float(j % 997) + float(i + 1);
    want[i].assign(kc::lt_scale_count(c.mode, c.rows, c.k) * c.batch, -1.0f);
    got[i].assign(want[i].size(), -2.0f);
    kc::block_scales_to_lt_host(c.mode, ours[i].data(), want[i].data(), c.rows, c.k, c.batch);
    conv[i] = {c.mode, ours[i].data(), got[i].data(), c.rows, c.k, c.batch};
  }
  ASSERT_EQ(kc::block_scales_to_lt(conv[0], conv[1], nullptr), cudaSuccess);
  EXPECT_EQ(got[0], want[0]);
  EXPECT_EQ(got[1], want[1]);
  conv[1].ours = nullptr;
  EXPECT_EQ(kc::block_scales_to_lt(conv[0], conv[1], nullptr), cudaErrorInvalidValue);
}

TEST(GemmScalesEmu, E4_2_TileScalesGainPadding) {
  const std::vector<float> ours{1, 2, 4, 8, 16, 32};  // [2 tiles, KB = 3] for M = 256, K = 384
  std::vector<float> lt(8, -1.0f);
  ASSERT_EQ(kc::block_scales_to_lt(kc::GemmScaleMode::Block128x128, ours.data(), lt.data(), 256, 384, 1, nullptr),
            cudaSuccess);
  EXPECT_EQ(lt, (std::vector<float>{1, 2, 4, 0, 8, 16, 32, 0}));
}

TEST(GemmScalesEmu, RefusesPerTensorAndNullPointers) {
  float x = 1.0f, y = 0.0f;
  EXPECT_EQ(kc::block_scales_to_lt(kc::GemmScaleMode::PerTensor, &x, &y, 1, 1, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(kc::block_scales_to_lt(kc::GemmScaleMode::Block1x128, nullptr, &y, 1, 1, 1, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(kc::block_scales_to_lt(kc::GemmScaleMode::Block1x128, nullptr, nullptr, 0, 128, 1, nullptr), cudaSuccess);
  EXPECT_EQ(y, 0.0f);
}

}  // namespace
