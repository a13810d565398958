// tests/emu/test_quantize_emu.cpp: the CUDA cast and FP8 quantize kernels under the emulation harness against the CPU kernels, bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <type_traits>
#include <limits>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/quantize.h"
#include "kernels/cuda/quantize.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

using mpt::bf16;
using mpt::f16;
using mpt::f8e4m3;
using mpt::f8e5m2;
using mpt::Fp8Saturation;
namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;
namespace math = mpt::kernels::math;

template <class T>
bool same_bits(const T* a, const T* b, size_t n) {
  return std::memcmp(a, b, n * sizeof(T)) == 0;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

// n elements starting `misalign` elements after a 64-byte boundary (0: the vector kernels run; 1: the scalar ones).
template <class T>
struct Buffer {
  std::vector<T> storage;
  T* p;
  Buffer(int64_t n, int64_t misalign) : storage(static_cast<size_t>(n + misalign) + 64) {
    const auto address = reinterpret_cast<uintptr_t>(storage.data());
    p = storage.data() + ((64 - address % 64) % 64) / sizeof(T) + misalign;
  }
};

// Values over 2^-12 .. 2^12 (FP8 saturation and subnormals once scaled), plus NaN, +-Inf and -0 when `specials`.
template <class T>
Buffer<T> values(int64_t n, int64_t misalign, uint64_t seed, bool specials = true) {
  std::vector<float> v = mpt::testing::random_tensor({n}, mpt::DType::F32, seed).to_vector<float>();
  for (int64_t i = 0; i < n; ++i) v[i] *= std::ldexp(1.0f, static_cast<int>(i % 25) - 12);
  if (specials && n > 8) {
    v[3] = std::numeric_limits<float>::quiet_NaN();
    v[5] = std::numeric_limits<float>::infinity();
    v[6] = -std::numeric_limits<float>::infinity();
    v[7] = -0.0f;
  }
  Buffer<T> out(n, misalign);
  cpu::convert(v.data(), out.p, static_cast<size_t>(n));
  return out;
}

constexpr Fp8Saturation kModes[] = {Fp8Saturation::Saturate, Fp8Saturation::NoSaturate};

template <class Dst, class Src>
void check_convert(int64_t n, int64_t misalign) {
  const Buffer<Src> src = values<Src>(n, misalign, 500 + n);
  constexpr bool kFp8Dst = std::is_same_v<Dst, f8e4m3> || std::is_same_v<Dst, f8e5m2>;
  for (Fp8Saturation sat : kModes) {
    if (!kFp8Dst && sat == Fp8Saturation::NoSaturate) continue;  // the mode only matters for FP8 destinations
    std::vector<Dst> want(n);
    Buffer<Dst> got(n + 1, misalign);
    cpu::convert(src.p, want.data(), static_cast<size_t>(n), sat);
    std::memset(static_cast<void*>(got.p), 0x5A, (n + 1) * sizeof(Dst));
    const Dst guard = got.p[n];
    ASSERT_EQ((cuda::convert<Dst, Src>(src.p, got.p, n, sat, nullptr)), cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.p, n)) << "n=" << n << " misalign=" << misalign;
    EXPECT_TRUE(same_bits(&guard, got.p + n, 1)) << "wrote past the end";
  }
}

template <class Dst>
void check_convert_from_all(int64_t n, int64_t misalign) {
  check_convert<Dst, float>(n, misalign);
  check_convert<Dst, f16>(n, misalign);
  check_convert<Dst, bf16>(n, misalign);
  check_convert<Dst, f8e4m3>(n, misalign);
  check_convert<Dst, f8e5m2>(n, misalign);
}

template <class Q, class T>
void check_quantize(int64_t n, int64_t misalign) {
  const Buffer<T> x = values<T>(n, misalign, 600 + n);
  for (Fp8Saturation sat : kModes) {
    const float scale = 37.5f;
    float amax_cpu = -1, amax_emu = -1, scale_inv = -1;
    std::vector<Q> want(n);
    Buffer<Q> got(n, misalign);
    cpu::quantize(x.p, want.data(), n, cpu::QuantizeArgs{scale, sat, &amax_cpu});
    ASSERT_EQ(cuda::quantize(x.p, got.p, n, cuda::QuantizeArgs{&scale, &scale_inv, &amax_emu, sat}, nullptr),
              cudaSuccess);
    EXPECT_TRUE(same_bits(want.data(), got.p, n)) << "n=" << n << " misalign=" << misalign;
    EXPECT_EQ(bits_of(amax_emu), bits_of(amax_cpu)) << "n=" << n;
    EXPECT_EQ(scale_inv, 1.0f / scale);
    float plain_amax = -1;
    ASSERT_EQ(cuda::amax(x.p, n, &plain_amax, nullptr), cudaSuccess);
    EXPECT_EQ(bits_of(plain_amax), bits_of(cpu::amax(x.p, n))) << "n=" << n;
  }
}

template <class Q, class T>
void check_transpose(int64_t rows, int64_t cols) {
  const Buffer<T> xb = values<T>(rows * cols, 0, 700 + rows * cols);
  const T* x = xb.p;
  const float scale = 0.75f;
  float amax_cpu = -1, amax_emu = -1, scale_inv = -1;
  std::vector<Q> q_cpu(rows * cols), qt_cpu(rows * cols), q_emu(rows * cols), qt_emu(rows * cols);
  cpu::quantize_transpose(x, q_cpu.data(), qt_cpu.data(), {rows, cols}, {scale, Fp8Saturation::Saturate, &amax_cpu});
  ASSERT_EQ(cuda::quantize_transpose(x, q_emu.data(), qt_emu.data(), {rows, cols},
                                     {&scale, &scale_inv, &amax_emu, Fp8Saturation::Saturate}, nullptr),
            cudaSuccess);
  EXPECT_TRUE(same_bits(q_cpu.data(), q_emu.data(), q_cpu.size())) << rows << "x" << cols;
  EXPECT_TRUE(same_bits(qt_cpu.data(), qt_emu.data(), qt_cpu.size())) << rows << "x" << cols;
  EXPECT_EQ(bits_of(amax_emu), bits_of(amax_cpu));
  EXPECT_EQ(scale_inv, 1.0f / scale);
}

template <class Q, class T>
void check_blockwise(int64_t rows, int64_t cols, math::BlockScaling b) {
  const Buffer<T> xb = values<T>(rows * cols, 0, 800 + rows * cols, false);
  const T* x = xb.p;
  const math::BlockScaleLayout layout = math::BlockScaleLayout::make(rows, cols, b);
  const math::ScaleFromAmax scaling{math::fp8_max<Q>(), 0, rows % 2 == 1};
  const int64_t blocks = layout.scale_rows() * layout.scale_cols();
  std::vector<Q> q_cpu(rows * cols), q_emu(rows * cols);
  std::vector<float> s_cpu(blocks), s_emu(blocks);
  cpu::quantize_blockwise(x, q_cpu.data(), s_cpu.data(), layout, scaling);
  ASSERT_EQ(cuda::quantize_blockwise(x, q_emu.data(), s_emu.data(), layout, scaling, nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(q_cpu.data(), q_emu.data(), q_cpu.size())) << rows << "x" << cols;
  EXPECT_TRUE(same_bits(s_cpu.data(), s_emu.data(), s_cpu.size())) << rows << "x" << cols;
  // Dequantize (block and per tensor) into each output type.
  std::vector<T> d_cpu(rows * cols), d_emu(rows * cols);
  cpu::dequantize_blockwise(q_cpu.data(), d_cpu.data(), s_cpu.data(), layout);
  ASSERT_EQ(cuda::dequantize_blockwise(q_cpu.data(), d_emu.data(), s_cpu.data(), layout, nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(d_cpu.data(), d_emu.data(), d_cpu.size())) << "dequantize_blockwise " << rows << "x" << cols;
  cpu::dequantize(q_cpu.data() + 1, d_cpu.data(), rows * cols - 1, s_cpu[0]);  // +1: misaligned, scalar kernel
  ASSERT_EQ(cuda::dequantize(q_cpu.data() + 1, d_emu.data(), rows * cols - 1, s_cpu.data(), nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(d_cpu.data(), d_emu.data(), rows * cols - 1)) << "dequantize " << rows << "x" << cols;
  cpu::dequantize(q_cpu.data(), d_cpu.data(), rows * cols, s_cpu[0]);
  ASSERT_EQ(cuda::dequantize(q_cpu.data(), d_emu.data(), rows * cols, s_cpu.data(), nullptr), cudaSuccess);
  EXPECT_TRUE(same_bits(d_cpu.data(), d_emu.data(), rows * cols)) << "dequantize " << rows << "x" << cols;
}

}  // namespace

TEST(CastEmu, ConvertEveryPairMatchesCpu) {
  for (int64_t n : {13, 300}) {
    for (int64_t misalign : {0, 1}) {  // 1 element off: the scalar kernel
      check_convert_from_all<float>(n, misalign);
      check_convert_from_all<f16>(n, misalign);
      check_convert_from_all<bf16>(n, misalign);
      check_convert_from_all<f8e4m3>(n, misalign);
      check_convert_from_all<f8e5m2>(n, misalign);
    }
  }
}

TEST(QuantizeEmu, AmaxAndQuantizeMatchCpu) {
  for (int64_t n : {1, 13, 2100}) {
    for (int64_t misalign : {0, 1}) {
      check_quantize<f8e4m3, float>(n, misalign);
      check_quantize<f8e5m2, float>(n, misalign);
      check_quantize<f8e4m3, bf16>(n, misalign);
      check_quantize<f8e5m2, f16>(n, misalign);
    }
  }
}

TEST(QuantizeEmu, CurrentScalingMatchesCpu) {
  const Buffer<bf16> xb = values<bf16>(999, 0, 77, false);
  const bf16* x = xb.p;
  const math::ScaleFromAmax f{math::fp8_max<f8e4m3>(), 1, false};
  float amax = -1, scale = -1, scale_inv = -1;
  ASSERT_EQ(cuda::amax(x, 999, &amax, nullptr), cudaSuccess);
  ASSERT_EQ(cuda::scale_from_amax(&amax, &scale, &scale_inv, f, nullptr), cudaSuccess);
  EXPECT_EQ(scale, f(cpu::amax(x, 999)));
  EXPECT_EQ(scale_inv, 1.0f / scale);
  std::vector<f8e4m3> q_cpu(999), q_emu(999);
  cpu::quantize(x, q_cpu.data(), 999, {scale, Fp8Saturation::Saturate, nullptr});
  ASSERT_EQ(cuda::quantize(x, q_emu.data(), 999, {&scale, nullptr, nullptr, Fp8Saturation::Saturate}, nullptr),
            cudaSuccess);
  EXPECT_TRUE(same_bits(q_cpu.data(), q_emu.data(), 999));
}

TEST(QuantizeEmu, CastTransposeMatchesCpu) {
  // {64, 32}, {304, 72} and {128, 136} take the vectorised kernel (cols % 8, rows % 16), the last two with partial
  // 64 x 64 tiles; the others the scalar one.
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1}, {1, 70}, {33, 70}, {64, 32}, {127, 45}, {304, 72}, {128, 136}}) {
    check_transpose<f8e4m3, float>(rows, cols);
    check_transpose<f8e5m2, bf16>(rows, cols);
  }
  check_transpose<f8e4m3, f16>(40, 33);
}

TEST(QuantizeEmu, BlockwiseAndDequantizeMatchCpu) {
  for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 129}, {130, 140}}) {
    for (math::BlockScaling b : {math::BlockScaling::Block1x128, math::BlockScaling::Block128x128}) {
      check_blockwise<f8e4m3, float>(rows, cols, b);
      check_blockwise<f8e5m2, bf16>(rows, cols, b);
    }
  }
  check_blockwise<f8e4m3, f16>(5, 300, math::BlockScaling::Block1x128);
}

TEST(QuantizeEmu, RejectsInvalidArguments) {
  float x = 1, s = 1, a = 0;
  f8e4m3 q{};
  EXPECT_EQ((cuda::convert<f8e4m3, float>(&x, nullptr, 1, Fp8Saturation::Saturate, nullptr)), cudaErrorInvalidValue);
  EXPECT_EQ((cuda::convert<f8e4m3, float>(&x, &q, -1, Fp8Saturation::Saturate, nullptr)), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::amax(&x, 1, static_cast<float*>(nullptr), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantize(&x, &q, 1, cuda::QuantizeArgs{}, nullptr), cudaErrorInvalidValue);  // no scale
  EXPECT_EQ(cuda::quantize(&x, &q, -1, cuda::QuantizeArgs{&s}, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::quantize_blockwise(&x, &q, &a, math::BlockScaleLayout{1, 1, 2}, math::ScaleFromAmax{}, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::dequantize(&q, &x, 1, static_cast<const float*>(nullptr), nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::amax(&x, 0, &a, nullptr), cudaSuccess);
  EXPECT_EQ(a, 0.0f);
}
