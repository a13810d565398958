// tests/emu/test_activation_emu.cpp: the CUDA GELU kernels under the emulation harness against the CPU kernels.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kernels/cpu/activation.h"
#include "kernels/cuda/activation.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"
#include "test_util.h"

namespace {

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, 3.0).template to_vector<T>();
}

using mpt::testing::same_bits;

// Same functor, same arithmetic order, so emulated CUDA and CPU agree bit for bit (on a real GPU, tanhf may
// differ from glibc's tanh by an ulp: there the comparison is the dtype tolerance).
template <class T>
void check_gelu(int64_t n, int64_t misalign) {
  const auto x_all = random_values<T>(n + misalign, 1000 + n);
  const auto dy_all = random_values<T>(n + misalign, 2000 + n);
  const T* x = x_all.data() + misalign;
  const T* dy = dy_all.data() + misalign;
  std::vector<T> y_cpu(n), y_emu(n + 1, T::from_bits(0x7F)), dx_cpu(n), dx_emu(n);
  mpt::kernels::cpu::gelu_forward(x, y_cpu.data(), n);
  ASSERT_EQ(mpt::kernels::cuda::gelu_forward(x, y_emu.data(), n, nullptr), cudaSuccess);
  EXPECT_EQ(y_emu[n].bits, T::from_bits(0x7F).bits) << "wrote past the end";
  y_emu.resize(n);
  EXPECT_TRUE(same_bits(y_cpu, y_emu)) << "forward n=" << n << " misalign=" << misalign;
  // Backward, both overwriting and accumulating.
  for (bool accumulate : {false, true}) {
    auto base = random_values<T>(n, 3000 + n);
    dx_cpu = base;
    dx_emu = base;
    mpt::kernels::cpu::gelu_backward(dy, x, dx_cpu.data(), n, accumulate);
    ASSERT_EQ(mpt::kernels::cuda::gelu_backward(dy, x, dx_emu.data(), n, accumulate, nullptr), cudaSuccess);
    EXPECT_TRUE(same_bits(dx_cpu, dx_emu)) << "backward n=" << n << " accumulate=" << accumulate;
  }
}

template <>
void check_gelu<float>(int64_t n, int64_t misalign) {
  const auto x_all = random_values<float>(n + misalign, 1000 + n);
  const float* x = x_all.data() + misalign;
  std::vector<float> y_cpu(n), y_emu(n);
  mpt::kernels::cpu::gelu_forward(x, y_cpu.data(), n);
  ASSERT_EQ(mpt::kernels::cuda::gelu_forward(x, y_emu.data(), n, nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(y_cpu, y_emu)) << "forward f32 n=" << n << " misalign=" << misalign;
}

}  // namespace

TEST(GeluEmu, MatchesCpuBitForBit) {
  for (int64_t n : {1, 8, 13, 256, 1000, 2051}) {
    for (int64_t misalign : {0, 1}) {  // 1 element off: forces the scalar kernel
      check_gelu<float>(n, misalign);
      check_gelu<mpt::bf16>(n, misalign);
      check_gelu<mpt::f16>(n, misalign);
    }
  }
}

TEST(GeluEmu, RejectsInvalidArguments) {
  float x = 1;
  EXPECT_EQ(mpt::kernels::cuda::gelu_forward<float>(&x, nullptr, 1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::gelu_forward<float>(&x, &x, -1, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mpt::kernels::cuda::gelu_forward<float>(nullptr, nullptr, 0, nullptr), cudaSuccess);
}
