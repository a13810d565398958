// tests/emu/test_strided_emu.cpp: the CUDA strided copy, fill and integer conversions under emulation against the
// CPU's strided copy and conversions, bit for bit (the bytes outside each view must stay untouched too).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/strided.h"
#include "kernels/cuda/strided.h"
#include "kernels/math/numerics.h"

namespace {

namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;

// A view of a buffer: shape, element strides and the offset of its first element.
struct View {
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;

  int64_t span() const {  // elements of the buffer the view reaches (non-negative strides)
    int64_t last = offset;
    for (size_t d = 0; d < shape.size(); ++d) last += (shape[d] - 1) * strides[d];
    return last + 1;
  }
};

std::vector<int64_t> contiguous(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

// The view of `shape` that reads a contiguous array of the transposed shape, last two dims swapped (x.t()).
View transposed(const std::vector<int64_t>& shape, int64_t offset = 0) {
  std::vector<int64_t> stored = shape;
  std::swap(stored[stored.size() - 1], stored[stored.size() - 2]);
  std::vector<int64_t> strides = contiguous(stored);
  std::swap(strides[strides.size() - 1], strides[strides.size() - 2]);
  return {shape, strides, offset};
}

View dense(const std::vector<int64_t>& shape, int64_t offset = 0) { return {shape, contiguous(shape), offset}; }

std::vector<unsigned char> random_bytes(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> out(static_cast<size_t>(n));
  for (auto& b : out) b = static_cast<unsigned char>(gen());
  return out;
}

// Copies src into dst with both kernels over the same random background (16 spare bytes ahead so an offset can
// misalign a view) and compares every byte of the destination buffers.
void check_copy(const View& dst, const View& src, size_t es, const std::string& what) {
  SCOPED_TRACE(what + " element_size=" + std::to_string(es));
  ASSERT_EQ(dst.shape, src.shape);
  const auto in = random_bytes(src.span() * static_cast<int64_t>(es) + 16, 1);
  const auto background = random_bytes(dst.span() * static_cast<int64_t>(es) + 16, 2);
  auto want = background, got = background;
  const int nd = static_cast<int>(dst.shape.size());
  const auto at = [es](auto& buf, int64_t offset) { return buf.data() + offset * static_cast<int64_t>(es); };
  cpu::strided_copy(at(want, dst.offset), dst.strides.data(), at(in, src.offset), src.strides.data(), dst.shape.data(),
                    nd, es);
  ASSERT_EQ(cuda::strided_copy(at(got, dst.offset), dst.strides.data(), at(in, src.offset), src.strides.data(),
                               dst.shape.data(), nd, es, nullptr),
            cudaSuccess);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size()), 0);
}

void check_fill(const View& dst, size_t es, const std::string& what) {
  SCOPED_TRACE(what + " element_size=" + std::to_string(es));
  const auto value = random_bytes(static_cast<int64_t>(es), 3);
  const auto background = random_bytes(dst.span() * static_cast<int64_t>(es) + 16, 4);
  auto want = background, got = background;
  const int nd = static_cast<int>(dst.shape.size());
  const std::vector<int64_t> zeros(dst.shape.size(), 0);
  unsigned char* w = want.data() + dst.offset * static_cast<int64_t>(es);
  cpu::strided_copy(w, dst.strides.data(), value.data(), zeros.data(), dst.shape.data(), nd, es);
  unsigned char* g = got.data() + dst.offset * static_cast<int64_t>(es);
  ASSERT_EQ(cuda::strided_fill(g, dst.strides.data(), dst.shape.data(), nd, value.data(), es, nullptr), cudaSuccess);
  EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size()), 0);
}

constexpr size_t kSizes[] = {1, 2, 4, 8};

TEST(StridedEmu, DenseCopiesOfOddSizesAndOffsets) {
  for (size_t es : kSizes) {
    for (int64_t n : {1, 2, 7, 33, 1000}) {
      for (int64_t offset : {0, 1, 3}) {  // a misaligned view takes narrower words
        check_copy(dense({n}, offset), dense({n}, (offset * 2) % 5), es, "dense n=" + std::to_string(n));
      }
    }
    check_copy(dense({3, 5, 7}), dense({3, 5, 7}, 1), es, "dense 3-d");
  }
}

TEST(StridedEmu, ZeroDimAndOneElement) {
  for (size_t es : kSizes) {
    check_copy(dense({}), dense({}, 2), es, "0-d");
    check_copy(View{{1, 1, 1}, {5, 9, 1}, 1}, View{{1, 1, 1}, {0, 0, 0}, 3}, es, "1 element");
    check_fill(dense({}, 1), es, "0-d fill");
    check_fill(View{{1, 1}, {7, 3}, 2}, es, "1 element fill");
  }
  int64_t unused = 0;
  EXPECT_EQ(cuda::strided_copy(&unused, nullptr, &unused, nullptr, nullptr, 0, 3, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(cuda::strided_copy(nullptr, nullptr, nullptr, nullptr, std::vector<int64_t>{0}.data(), 1, 4, nullptr),
            cudaSuccess);  // nothing to copy
}

TEST(StridedEmu, TransposesTiledAndElementwise) {
  for (size_t es : kSizes) {
    check_copy(dense({40, 37}), transposed({40, 37}), es, "2-d transpose 40x37 (tiles)");
    check_copy(dense({64, 16}), transposed({64, 16}), es, "2-d transpose 64x16 (tiles)");
    // Bytes (FP8 codes): the vectorised 64 x 64 kernel (rows % 8, cols % 16, aligned), with partial tiles both ways,
    // and the 32 x 32 one where the source is misaligned.
    check_copy(dense({72, 48}), transposed({72, 48}), es, "2-d transpose 72x48");
    check_copy(dense({128, 80}), transposed({128, 80}), es, "2-d transpose 128x80");
    check_copy(dense({72, 48}), transposed({72, 48}, 1), es, "2-d transpose 72x48 from a misaligned source");
    check_copy(dense({5, 3}), transposed({5, 3}), es, "2-d transpose 5x3 (element-wise)");
    check_copy(dense({3, 33, 17}), transposed({3, 33, 17}), es, "batched transpose");
    check_copy(transposed({20, 18}), dense({20, 18}), es, "into a transposed destination");
    // Attention's head split: (B,T,H,D) read as (B,H,T,D), the rows of D contiguous in both.
    check_copy(dense({2, 3, 5, 8}), View{{2, 3, 5, 8}, {5 * 3 * 8, 8, 3 * 8, 1}, 0}, es, "head transpose");
  }
}

TEST(StridedEmu, SlicesWithStepsAndBroadcasts) {
  for (size_t es : kSizes) {
    check_copy(dense({4, 5}), View{{4, 5}, {2 * 17, 3}, 2}, es, "stepped slice source");
    check_copy(View{{4, 5}, {2 * 17, 3}, 1}, dense({4, 5}), es, "stepped slice destination");
    check_copy(View{{6, 10}, {16, 1}, 3}, View{{6, 10}, {12, 1}, 1}, es, "row slices");
    check_copy(dense({7, 9}), View{{7, 9}, {0, 1}, 1}, es, "broadcast row");
    check_copy(dense({6, 8}), View{{6, 8}, {0, 1}, 0}, es, "broadcast row (aligned, widened)");
    check_copy(dense({9, 7}), View{{9, 7}, {1, 0}, 2}, es, "broadcast column");
    check_copy(dense({3, 4, 5}), View{{3, 4, 5}, {0, 0, 0}, 1}, es, "broadcast scalar");
    check_copy(View{{5, 4}, {1, 5}, 0}, View{{5, 4}, {0, 1}, 0}, es, "broadcast into a transposed view");
    // Eight dimensions that cannot merge (every other one reversed in the source).
    const std::vector<int64_t> shape8(8, 2);
    std::vector<int64_t> src8 = contiguous(shape8);
    std::swap(src8[0], src8[1]);
    std::swap(src8[2], src8[3]);
    std::swap(src8[4], src8[5]);
    std::swap(src8[6], src8[7]);
    check_copy(dense(shape8), View{shape8, src8, 0}, es, "8 dims");
  }
  std::vector<int64_t> shape9(9, 2), dst9 = contiguous(shape9), src9(9);
  for (int d = 0; d < 9; ++d) src9[d] = int64_t{1} << d;  // reversed: no two dims merge
  std::vector<float> a(512), b(512);
  EXPECT_EQ(cuda::strided_copy(b.data(), dst9.data(), a.data(), src9.data(), shape9.data(), 9, 4, nullptr),
            cudaErrorInvalidValue);
}

TEST(StridedEmu, FillsOfEveryElementSizeAndLayout) {
  for (size_t es : kSizes) {
    for (int64_t n : {1, 3, 16, 257}) {
      check_fill(dense({n}), es, "dense n=" + std::to_string(n));
      check_fill(dense({n}, 1), es, "misaligned n=" + std::to_string(n));
    }
    check_fill(View{{4, 5}, {2 * 17, 3}, 2}, es, "stepped slice");
    check_fill(transposed({33, 20}), es, "transposed");
    check_fill(View{{6, 10}, {16, 1}, 3}, es, "row slices");
  }
}

template <class Dst, class Src>
void check_convert(const std::vector<Src>& src, const char* what) {
  SCOPED_TRACE(what);
  const auto n = static_cast<int64_t>(src.size());
  std::vector<Dst> want(src.size()), got(src.size());
  for (auto sat : {mpt::Fp8Saturation::Saturate, mpt::Fp8Saturation::NoSaturate}) {
    cpu::convert<Dst, Src>(src.data(), want.data(), src.size(), sat);
    std::memset(got.data(), 0xFF, got.size() * sizeof(Dst));
    ASSERT_EQ((cuda::convert_with_integers<Dst, Src>(src.data(), got.data(), n, sat, nullptr)), cudaSuccess);
    EXPECT_EQ(std::memcmp(want.data(), got.data(), got.size() * sizeof(Dst)), 0);
  }
}

TEST(StridedEmu, ConversionsWithAnIntegerSideMatchTheCpu) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> floats{0.0f, -0.0f, 1.5f, -1.5f, 2.5f, 255.9f, 256.0f, -3e9f, 3e9f, 7e4f, inf, -inf, nan};
  check_convert<uint8_t, float>(floats, "f32 -> u8");
  check_convert<int32_t, float>(floats, "f32 -> i32");
  check_convert<int64_t, float>(floats, "f32 -> i64");
  std::vector<mpt::f16> halves;
  for (float f : floats) halves.push_back(mpt::f16(f));
  check_convert<uint16_t, mpt::f16>(halves, "f16 -> u16");
  const std::vector<int64_t> big{0, 1, -1, 255, 256, 65535, 65536, -70000, (int64_t{1} << 53) + 1,
                                 std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
  check_convert<float, int64_t>(big, "i64 -> f32");
  check_convert<mpt::bf16, int64_t>(big, "i64 -> bf16");
  check_convert<mpt::f16, int64_t>(big, "i64 -> f16");
  check_convert<mpt::f8e4m3, int64_t>(big, "i64 -> e4m3");
  check_convert<mpt::f8e5m2, int64_t>(big, "i64 -> e5m2");
  check_convert<int32_t, int64_t>(big, "i64 -> i32");
  check_convert<uint8_t, int64_t>(big, "i64 -> u8");
  check_convert<int64_t, uint16_t>({0, 1, 300, 65535}, "u16 -> i64");
  check_convert<mpt::f16, int32_t>({0, 1, -7, 2049, 65504, 65520, 100000}, "i32 -> f16");
}

}  // namespace
