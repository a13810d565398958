// tests/emu/test_layernorm_emu.cpp: the CUDA LayerNorm kernels under the emulation harness against the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/layernorm.h"
#include "kernels/cuda/layernorm.h"
#include "kernels/math/numerics.h"
#include "test_util.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

using mpt::bf16;
using mpt::f16;
using mpt::testing::to_double;
namespace math = mpt::kernels::math;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed, double scale = 1.0) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, scale).template to_vector<T>();
}

// One step of T relative to a value (float: a few float roundings, 8 ulp).
template <class T>
double relative_step() {
  return (std::is_same_v<T, float> ? 8 : 1) * mpt::testing::relative_ulp<T>();
}

// Both backends compute in float but sum rows in different orders (sequential/SIMD vs strided per thread and
// a tree): with inputs of magnitude <= ~8, the statistics agree to ~sqrt(C) float roundings, far inside 1e-5
// absolute; the outputs then round to T, where they may land one step of T apart.
template <class T>
void expect_near_all(const T* got, const T* want, int64_t n, double atol, const char* what) {
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    const double g = to_double(got[i]), w = to_double(want[i]);
    if (!(std::abs(g - w) <= atol + relative_step<T>() * std::abs(w))) {
      ADD_FAILURE() << what << " element " << i << ": emulated CUDA " << g << ", CPU " << w;
      ++bad;
    }
  }
}

template <class T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

// Forward (plain and fused with a residual add) and backward, emulated CUDA vs CPU. `misalign` shifts
// every row array by one element to force the scalar path; `rms` makes it RMSNorm (mean 0, no mean(g) term).
template <class T, class P>
void check_layer_norm(int64_t rows, int64_t cols, int64_t misalign, bool accumulate, bool rms = false) {
  SCOPED_TRACE(testing::Message() << "rows " << rows << " cols " << cols << " misalign " << misalign << " sizeof(T) "
                                  << sizeof(T) << " sizeof(P) " << sizeof(P) << " accumulate " << accumulate
                                  << " rms " << rms);
  const int64_t n = rows * cols, m = misalign;
  const auto x_all = random_values<T>(n + m, 1 + n, 2.0), r_all = random_values<T>(n + m, 2 + n, 2.0);
  const auto dy_all = random_values<T>(n + m, 3 + n), w = random_values<P>(cols, 4 + cols),
             b = random_values<P>(cols, 5 + cols);
  const T nan = static_cast<T>(NAN);
  for (bool fused : {false, true}) {
    std::vector<T> y_cpu(n, nan), y_emu(n + m + 1, nan), s_cpu(n, nan), s_emu(n + m, nan);
    std::vector<float> mean_cpu(rows, NAN), rstd_cpu(rows, NAN), mean_emu(rows, NAN), rstd_emu(rows, NAN);
    math::LayerNormForwardParams<T, P> p;
    p.x = x_all.data() + m;
    p.residual = fused ? r_all.data() + m : nullptr;
    p.weight = w.data();
    p.bias = b.data();
    p.rows = rows;
    p.cols = cols;
    p.rms = rms;
    p.sum = s_cpu.data();
    p.y = y_cpu.data();
    p.mean = mean_cpu.data();
    p.rstd = rstd_cpu.data();
    mpt::kernels::cpu::layer_norm_forward(p);
    p.sum = s_emu.data() + m;
    p.y = y_emu.data() + m;
    p.mean = mean_emu.data();
    p.rstd = rstd_emu.data();
    ASSERT_EQ(mpt::kernels::cuda::layer_norm_forward(p, nullptr), cudaSuccess);
    EXPECT_TRUE(std::isnan(to_double(y_emu[n + m]))) << "wrote past the end";
    if (fused) {
      EXPECT_TRUE(same_bits(s_emu.data() + m, s_cpu.data(), n)) << "x + residual is elementwise: same bits";
    }
    expect_near_all(mean_emu.data(), mean_cpu.data(), rows, 1e-5, "mean");
    expect_near_all(rstd_emu.data(), rstd_cpu.data(), rows, 1e-5, "rstd");
    expect_near_all(y_emu.data() + m, y_cpu.data(), n, 1e-5, fused ? "fused y" : "y");
  }
  // Backward from the CPU statistics, so both backends see identical inputs.
  std::vector<float> mean(rows), rstd(rows);
  std::vector<T> y(n);
  math::LayerNormForwardParams<T, P> f;
  f.x = x_all.data() + m;
  f.weight = w.data();
  f.bias = b.data();
  f.y = y.data();
  f.mean = mean.data();
  f.rstd = rstd.data();
  f.rows = rows;
  f.cols = cols;
  f.rms = rms;
  mpt::kernels::cpu::layer_norm_forward(f);
  const auto dx0 = random_values<T>(n + m, 6 + n), dw0 = random_values<P>(cols, 7), db0 = random_values<P>(cols, 8);
  std::vector<T> dx_cpu(dx0.begin() + m, dx0.end()), dx_emu = dx0;
  std::vector<P> dw_cpu = dw0, dw_emu = dw0, db_cpu = db0, db_emu = db0;
  math::LayerNormBackwardParams<T, P> p;
  p.dy = dy_all.data() + m;
  p.x = x_all.data() + m;
  p.weight = w.data();
  p.mean = mean.data();
  p.rstd = rstd.data();
  p.rows = rows;
  p.cols = cols;
  p.rms = rms;
  p.accumulate_dx = p.accumulate_dweight = p.accumulate_dbias = accumulate;
  p.dx = dx_cpu.data();
  p.dweight = dw_cpu.data();
  p.dbias = db_cpu.data();
  mpt::kernels::cpu::layer_norm_backward(p);
  std::vector<float> scratch(static_cast<size_t>(mpt::kernels::cuda::layer_norm_backward_scratch_floats(rows, cols)),
                             NAN);
  p.dx = dx_emu.data() + m;
  p.dweight = dw_emu.data();
  p.dbias = db_emu.data();
  ASSERT_EQ(mpt::kernels::cuda::layer_norm_backward(p, scratch.data(), nullptr), cudaSuccess);
  expect_near_all(dx_emu.data() + m, dx_cpu.data(), n, 1e-5, "dx");
  // Sums over `rows` terms of magnitude <= ~10 in different orders.
  expect_near_all(dw_emu.data(), dw_cpu.data(), cols, 1e-6 * static_cast<double>(rows), "dweight");
  expect_near_all(db_emu.data(), db_cpu.data(), cols, 1e-6 * static_cast<double>(rows), "dbias");
}

}  // namespace

TEST(LayerNormEmu, MatchesCpu) {
  for (int64_t cols : {1, 7, 64, 200, 1000}) {
    for (int64_t misalign : {0, 1}) {
      check_layer_norm<float, float>(3, cols, misalign, misalign == 1);
      check_layer_norm<bf16, bf16>(3, cols, misalign, misalign == 0);
      check_layer_norm<f16, float>(3, cols, misalign, misalign == 1);
    }
  }
  check_layer_norm<bf16, float>(2, 24, 0, true);
  check_layer_norm<f16, f16>(2, 24, 1, false);
}

// More rows than the backward's 512 blocks of 8 warps (a warp per row; blocks loop over groups of 8 rows, the last
// group partly empty), and rows too wide for the shared-memory partial sums (2 * 6200 floats beside the warps' two
// stages > 48 KiB: the block's slice of the scratch buffer is used instead).
TEST(LayerNormEmu, ManyRowsAndWideRows) {
  check_layer_norm<bf16, float>(530, 16, 0, false);
  check_layer_norm<bf16, float>(4100, 16, 0, true);
  check_layer_norm<float, float>(4099, 24, 1, false);  // misaligned: one element a lane
  check_layer_norm<float, float>(2, 6200, 0, true);
  check_layer_norm<float, float>(2, 6201, 0, false);
  // The widest f32 rows whose partials fit beside the two 16 KiB stages (4096 columns), and the next whole vector.
  check_layer_norm<float, float>(19, 4096, 0, true);
  check_layer_norm<float, float>(19, 4100, 0, false);
  // RMSNorm through the same kernels (a warp's mean and mean(g) terms skipped alike), over many groups of rows.
  check_layer_norm<bf16, float>(4100, 64, 0, true, true);
  check_layer_norm<float, float>(37, 200, 1, false, true);
}

TEST(LayerNormEmu, RejectsInvalidArguments) {
  float x[4] = {1, 2, 3, 4}, y[4], mean[1], rstd[1];
  math::LayerNormForwardParams<float, float> p;
  p.x = x;
  p.weight = x;
  p.y = y;
  p.mean = mean;
  p.rstd = rstd;
  p.rows = 1;
  p.cols = 0;
  EXPECT_EQ(mpt::kernels::cuda::layer_norm_forward(p, nullptr), cudaErrorInvalidValue);
  p.cols = 4;
  p.residual = x;  // no sum output
  EXPECT_EQ(mpt::kernels::cuda::layer_norm_forward(p, nullptr), cudaErrorInvalidValue);
  p.residual = nullptr;
  p.rows = int64_t{1} << 31;
  EXPECT_EQ(mpt::kernels::cuda::layer_norm_forward(p, nullptr), cudaErrorInvalidValue);
  p.rows = 0;
  EXPECT_EQ(mpt::kernels::cuda::layer_norm_forward(p, nullptr), cudaSuccess);
  math::LayerNormBackwardParams<float, float> g;
  g.dy = g.x = g.weight = x;
  g.mean = mean;
  g.rstd = rstd;
  g.dx = y;
  g.dweight = y;
  g.rows = 1;
  g.cols = 4;
  EXPECT_EQ(mpt::kernels::cuda::layer_norm_backward(g, nullptr, nullptr), cudaErrorInvalidValue);
}
