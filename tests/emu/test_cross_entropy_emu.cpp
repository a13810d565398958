// tests/emu/test_cross_entropy_emu.cpp: the CUDA softmax + cross-entropy kernels under emulation vs the CPU kernels.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cuda/cross_entropy.h"
#include "kernels/math/numerics.h"
#include "mpt/core/tensor.h"
#include "op_test.h"

namespace {

using mpt::bf16;
using mpt::f16;
namespace math = mpt::kernels::math;
namespace cpu = mpt::kernels::cpu;
namespace cuda = mpt::kernels::cuda;

template <class T>
std::vector<T> random_values(int64_t n, uint64_t seed, double scale) {
  return mpt::testing::random_tensor({n}, mpt::dtype_of<T>(), seed, scale).template to_vector<T>();
}

template <class T>
bool same_bits(const T* a, const T* b, int64_t n) {
  return std::memcmp(a, b, static_cast<size_t>(n) * sizeof(T)) == 0;
}

// Targets: in range, except row 1 (ignore_index) and, when `bad_row` >= 0, that row (vocab: out of range).
std::vector<int64_t> make_targets(int64_t rows, int64_t vocab, int64_t bad_row) {
  std::vector<int64_t> t(rows);
  for (int64_t r = 0; r < rows; ++r) t[r] = r == 1 ? -100 : r == bad_row ? vocab : (r * 7919 + 3) % vocab;
  return t;
}

// The CUDA forward sums each thread's strided share of the row in float (online max), then a tree; the CPU
// sums in double. With |logits| <= ~15, lse and loss agree to (vocab / threads + 48) float roundings of
// |lse| + |loss| <= ~40, which the stated 2^-24 * 40 * (vocab / 1024 + 64) covers.
double forward_tolerance(int64_t vocab) { return 0x1p-24 * 40 * (static_cast<double>(vocab) / 1024 + 64); }

// Padding columns [vocab, stride) of a padded buffer: values the kernels must never read (+inf, NaN, huge).
template <class T>
void fill_padding(T* rows_start, int64_t rows, int64_t vocab, int64_t stride) {
  const float specials[] = {INFINITY, NAN, 1e30f, -INFINITY};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = vocab; c < stride; ++c) rows_start[r * stride + c] = static_cast<T>(specials[(r + c) % 4]);
}

// stride: elements from one row to the next (0: vocab, dense rows); the padding columns hold inf and NaN.
template <class T>
void check_cross_entropy(int64_t rows, int64_t vocab, int64_t misalign, int64_t bad_row, int64_t row_stride = 0) {
  const int64_t stride = row_stride == 0 ? vocab : row_stride;
  SCOPED_TRACE(testing::Message() << "rows " << rows << " vocab " << vocab << " stride " << stride << " misalign "
                                  << misalign << " sizeof(T) " << sizeof(T) << " bad row " << bad_row);
  const int64_t n = rows * stride;
  auto x_all = random_values<T>(n + misalign, 10 + n, 3.0);
  fill_padding(x_all.data() + misalign, rows, vocab, stride);
  const T* x = x_all.data() + misalign;
  const std::vector<int64_t> t = make_targets(rows, vocab, bad_row);
  std::vector<float> loss_cpu(rows, NAN), lse_cpu(rows, NAN), loss_emu(rows, NAN), lse_emu(rows, NAN);
  math::CrossEntropyForwardParams<T, int64_t> f;
  f.logits = x;
  f.targets = t.data();
  f.rows = rows;
  f.vocab = vocab;
  f.row_stride = row_stride;
  f.loss = loss_cpu.data();
  f.lse = lse_cpu.data();
  cpu::cross_entropy_forward(f);
  f.loss = loss_emu.data();
  f.lse = lse_emu.data();
  ASSERT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaSuccess);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_NEAR(lse_emu[r], lse_cpu[r], forward_tolerance(vocab)) << "lse row " << r;
    if (r == bad_row) {
      EXPECT_TRUE(std::isnan(loss_emu[r]) && std::isnan(loss_cpu[r])) << "an out-of-range target gives NaN";
    } else {
      EXPECT_NEAR(loss_emu[r], loss_cpu[r], forward_tolerance(vocab)) << "loss row " << r;
    }
  }
  EXPECT_EQ(loss_emu[1], 0.0f) << "ignored row";

  for (auto red :
       {math::CrossEntropyReduction::None, math::CrossEntropyReduction::Mean, math::CrossEntropyReduction::Sum}) {
    float total_cpu = NAN, total_emu = NAN, count_cpu = NAN, count_emu = NAN;
    int64_t bad_cpu = -7, bad_emu = -7;
    math::CrossEntropyReduceParams<T, int64_t> r;
    r.row_loss = loss_cpu.data();
    r.targets = t.data();
    r.rows = rows;
    r.vocab = vocab;
    r.reduction = red;
    r.loss = &total_cpu;
    r.count = &count_cpu;
    r.bad_row = &bad_cpu;
    cpu::cross_entropy_reduce(r);
    r.loss = &total_emu;
    r.count = &count_emu;
    r.bad_row = &bad_emu;
    ASSERT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaSuccess);
    EXPECT_EQ(count_emu, count_cpu);
    EXPECT_EQ(count_emu, static_cast<float>(rows - 1));
    EXPECT_EQ(bad_emu, bad_cpu);
    EXPECT_EQ(bad_emu, bad_row);
    if (red == math::CrossEntropyReduction::None) {
      EXPECT_TRUE(std::isnan(total_emu)) << "None writes no reduced loss";
    } else if (bad_row < 0) {
      EXPECT_NEAR(total_emu, total_cpu, 1e-6 * rows * 20) << "float vs double sums of <= 20-sized losses";
    }
  }

  // Backward from the same saved lse: elementwise with the same functor, so bit for bit. Plain, accumulating,
  // in place over a copy of the logits, and plain into dlogits one element off the logits' alignment (the
  // buffers are malloc'd, 16-byte aligned: their distance is then no multiple of 16 bytes and the launcher takes
  // the scalar kernel, where modes 0 and 1 take the vector one). The padding columns become 0, except when
  // accumulating (kept).
  const float dloss = 0.8f, count = static_cast<float>(rows - 1);
  for (int mode = 0; mode < 4; ++mode) {
    auto base = random_values<T>(n + misalign + 1, 20 + n, 1.0);
    fill_padding(base.data() + misalign, rows, vocab, stride);
    std::vector<T> d_cpu(base.begin() + misalign, base.begin() + misalign + n), d_emu = base;
    const int64_t d_offset = misalign + (mode == 3 ? 1 : 0);
    std::vector<T> x_copy(x_all);
    math::CrossEntropyBackwardParams<T, int64_t> b;
    b.targets = t.data();
    b.lse = lse_cpu.data();
    b.dloss = &dloss;
    b.divisor = &count;
    b.rows = rows;
    b.vocab = vocab;
    b.row_stride = row_stride;
    b.accumulate = mode == 1;
    b.dlogits = d_cpu.data();
    b.logits = x;
    cpu::cross_entropy_backward(b);
    b.logits = mode == 2 ? x_copy.data() + misalign : x;
    b.dlogits = mode == 2 ? x_copy.data() + misalign : d_emu.data() + d_offset;
    ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
    const T* got = b.dlogits;
    const T zero = static_cast<T>(0.0f);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t o = r * stride;
      for (int64_t c = vocab; c < stride; ++c) {
        const T& want = mode == 1 ? base[static_cast<size_t>(misalign + o + c)] : zero;
        EXPECT_TRUE(same_bits(got + o + c, &want, 1)) << "backward mode " << mode << " row " << r << " padding " << c;
        EXPECT_TRUE(same_bits(d_cpu.data() + o + c, &want, 1))
            << "CPU mode " << mode << " row " << r << " padding " << c;
      }
      if (r == bad_row) {
        EXPECT_TRUE(std::isnan(static_cast<float>(got[o]))) << "bad target row gradient";
        continue;
      }
      EXPECT_TRUE(same_bits(got + o, d_cpu.data() + o, vocab)) << "backward mode " << mode << " row " << r;
    }
  }

  // The count pass of the fused path (row_loss null): the count and the first bad row, nothing else.
  {
    float total = -7, counted = NAN;
    int64_t bad = -7;
    math::CrossEntropyReduceParams<T, int64_t> r;
    r.targets = t.data();
    r.rows = rows;
    r.vocab = vocab;
    r.reduction = math::CrossEntropyReduction::None;
    r.loss = &total;
    r.count = &counted;
    r.bad_row = &bad;
    ASSERT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaSuccess);
    EXPECT_EQ(counted, count);
    EXPECT_EQ(bad, bad_row);
    EXPECT_EQ(total, -7) << "no loss without row losses";
    r.reduction = math::CrossEntropyReduction::Mean;
    EXPECT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaErrorInvalidValue) << "a reduced loss needs row losses";
  }

  // The fused forward + backward (a known upstream gradient) against each side's own forward then backward: the
  // lse, the loss and the gradient bit for bit (the CPU's and the emulated GPU's lse differ in summation order, so
  // each side is compared with itself), into a fresh buffer (junk in it, padding included) and in place.
  for (bool emu : {false, true}) {
    for (bool mean : {true, false}) {
      for (bool in_place : {false, true}) {
        SCOPED_TRACE(testing::Message() << (emu ? "emulated" : "CPU") << (mean ? " mean" : " sum")
                                        << (in_place ? " in place" : " fresh"));
        const std::vector<float>& lse_side = emu ? lse_emu : lse_cpu;
        const std::vector<float>& loss_side = emu ? loss_emu : loss_cpu;
        std::vector<T> want(static_cast<size_t>(n), static_cast<T>(5.0f));
        math::CrossEntropyBackwardParams<T, int64_t> b;
        b.logits = x;
        b.targets = t.data();
        b.lse = lse_side.data();
        b.dloss = &dloss;
        b.divisor = mean ? &count : nullptr;
        b.dlogits = want.data();
        b.rows = rows;
        b.vocab = vocab;
        b.row_stride = row_stride;
        if (emu) {
          ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
        } else {
          cpu::cross_entropy_backward(b);
        }
        std::vector<T> x_copy(x_all), fresh(static_cast<size_t>(n), static_cast<T>(7.0f));
        std::vector<float> loss(rows, -3.0f), lse(rows, -3.0f);
        math::CrossEntropyFusedParams<T, int64_t> fb;
        fb.forward = f;
        fb.forward.logits = x_copy.data() + misalign;
        fb.forward.loss = loss.data();
        fb.forward.lse = lse.data();
        fb.dloss = &dloss;
        fb.divisor = mean ? &count : nullptr;
        fb.dlogits = in_place ? x_copy.data() + misalign : fresh.data();
        if (emu) {
          ASSERT_EQ(cuda::cross_entropy_forward_backward(fb, nullptr), cudaSuccess);
        } else {
          cpu::cross_entropy_forward_backward(fb);
        }
        EXPECT_TRUE(same_bits(lse.data(), lse_side.data(), rows)) << "lse";
        for (int64_t r = 0; r < rows; ++r) {
          if (r == bad_row) {
            EXPECT_TRUE(std::isnan(loss[r])) << "bad target row loss";
            EXPECT_TRUE(std::isnan(static_cast<float>(fb.dlogits[r * stride]))) << "bad target row gradient";
            continue;
          }
          EXPECT_TRUE(same_bits(&loss[r], &loss_side[r], 1)) << "loss row " << r;
          EXPECT_TRUE(same_bits(fb.dlogits + r * stride, want.data() + r * stride, stride)) << "gradient row " << r;
        }
      }
    }
  }
}

}  // namespace

TEST(CrossEntropyEmu, MatchesCpu) {
  for (int64_t vocab : {1, 7, 65, 1000}) {
    for (int64_t misalign : {0, 3}) {
      check_cross_entropy<float>(4, vocab, misalign, -1);
      check_cross_entropy<bf16>(4, vocab, misalign, -1);
    }
  }
  check_cross_entropy<f16>(3, 65, 1, -1);
  check_cross_entropy<float>(3, 4099, 1, -1);
}

// GPT-2's vocabulary: 50257 is odd, so every row starts at a different alignment: the scalar head and tail
// around the vector body move from row to row.
TEST(CrossEntropyEmu, Gpt2Vocabulary) {
  check_cross_entropy<bf16>(3, 50257, 0, -1);
  check_cross_entropy<float>(2, 50257, 1, -1);
}

// Padded rows (row_stride > vocab): only the vocab columns are read (the padding holds inf and NaN) and the
// backward zeroes the padding unless accumulating. Strides whose byte size is a multiple of 16 (every row starts
// at the same alignment) and strides that are not (bf16 V + 3, f32 V + 1: each row's scalar head and vector body
// move from row to row, as with the unpadded 50257), with and without a misaligned buffer; the backward runs both
// the vector and the scalar kernel (check_cross_entropy's mode 3).
TEST(CrossEntropyEmu, PaddedRowsMatchCpu) {
  for (int64_t misalign : {0, 3}) {
    check_cross_entropy<bf16>(4, 65, misalign, -1, 72);   // 144 bytes: a multiple of 16
    check_cross_entropy<bf16>(4, 65, misalign, -1, 68);   // V + 3: 136 bytes, not a multiple of 16
    check_cross_entropy<bf16>(3, 7, misalign, -1, 8);
    check_cross_entropy<bf16>(3, 7, misalign, -1, 10);
    check_cross_entropy<float>(4, 65, misalign, -1, 128);
    check_cross_entropy<float>(4, 65, misalign, -1, 66);  // 264 bytes
    check_cross_entropy<float>(3, 1000, misalign, -1, 1024);
  }
  check_cross_entropy<f16>(3, 65, 1, -1, 67);
  check_cross_entropy<bf16>(5, 33, 0, 3, 40);            // an out-of-range target in a padded row: still NaN
  check_cross_entropy<float>(5, 33, 1, 0, 35);
}

// llm.c's GPT-2 logits: 50257 classes in rows of 50304 (100608 bytes in bf16, a multiple of 16).
TEST(CrossEntropyEmu, Gpt2PaddedVocabulary) {
  check_cross_entropy<bf16>(2, 50257, 0, -1, 50304);
  check_cross_entropy<float>(2, 50257, 1, -1, 50304);
}

TEST(CrossEntropyEmu, OutOfRangeTargetGivesNaNAndIsReported) {
  check_cross_entropy<float>(5, 33, 0, 3);
  check_cross_entropy<bf16>(4, 100, 1, 0);
}

// An ignore_index inside [0, vocab) (3 here): its rows' gradient is (softmax - onehot) x 0, so the target column
// holds -0 where the others hold +0; the fused kernel, which writes the target column last from the saved logit,
// gives those bits too, on each side, in place.
TEST(CrossEntropyEmu, FusedKeepsTheBitsOfAnIgnoreIndexInRange) {
  const int64_t rows = 4, vocab = 65;
  const std::vector<float> x = random_values<float>(rows * vocab, 91, 3.0);
  const std::vector<int64_t> t = {3, 10, 3, 64};
  const float dloss = 0.5f, count = 2.0f;
  for (bool emu : {false, true}) {
    SCOPED_TRACE(emu ? "emulated" : "CPU");
    std::vector<float> loss(rows), lse(rows), want(x.size()), got(x);
    math::CrossEntropyForwardParams<float, int64_t> f;
    f.logits = x.data();
    f.targets = t.data();
    f.loss = loss.data();
    f.lse = lse.data();
    f.rows = rows;
    f.vocab = vocab;
    f.ignore_index = 3;
    math::CrossEntropyBackwardParams<float, int64_t> b;
    b.logits = x.data();
    b.targets = t.data();
    b.lse = lse.data();
    b.dloss = &dloss;
    b.divisor = &count;
    b.dlogits = want.data();
    b.rows = rows;
    b.vocab = vocab;
    b.ignore_index = 3;
    math::CrossEntropyFusedParams<float, int64_t> fb;
    fb.forward = f;
    fb.forward.logits = got.data();
    std::vector<float> loss2(rows), lse2(rows);
    fb.forward.loss = loss2.data();
    fb.forward.lse = lse2.data();
    fb.dloss = &dloss;
    fb.divisor = &count;
    fb.dlogits = got.data();
    if (emu) {
      ASSERT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaSuccess);
      ASSERT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaSuccess);
      ASSERT_EQ(cuda::cross_entropy_forward_backward(fb, nullptr), cudaSuccess);
    } else {
      cpu::cross_entropy_forward(f);
      cpu::cross_entropy_backward(b);
      cpu::cross_entropy_forward_backward(fb);
    }
    EXPECT_TRUE(std::signbit(want[3]) && want[3] == 0.0f) << "the unfused path's -0 at the ignored row's target";
    EXPECT_TRUE(same_bits(got.data(), want.data(), rows * vocab));
    EXPECT_TRUE(same_bits(loss2.data(), loss.data(), rows) && same_bits(lse2.data(), lse.data(), rows));
  }
}

// A row of masked (-inf) logits except a few finite ones: the online max must not turn -inf - -inf into NaN.
TEST(CrossEntropyEmu, MaskedLogits) {
  const int64_t vocab = 300;
  std::vector<float> x(2 * vocab, -INFINITY);
  x[5] = 1.0f;
  x[vocab + 290] = -2.0f;
  x[vocab + 7] = 3.0f;
  const std::vector<int64_t> t = {5, 290};
  std::vector<float> loss(2, NAN), lse(2, NAN);
  math::CrossEntropyForwardParams<float, int64_t> f;
  f.logits = x.data();
  f.targets = t.data();
  f.loss = loss.data();
  f.lse = lse.data();
  f.rows = 2;
  f.vocab = vocab;
  ASSERT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaSuccess);
  EXPECT_FLOAT_EQ(loss[0], 0.0f);
  EXPECT_NEAR(loss[1], std::log(std::exp(-2.0) + std::exp(3.0)) + 2.0, 1e-5);
}

TEST(CrossEntropyEmu, RejectsInvalidArguments) {
  float x[4] = {1, 2, 3, 4}, out[4];
  const int64_t t[1] = {0};
  math::CrossEntropyForwardParams<float, int64_t> f;
  f.logits = x;
  f.targets = t;
  f.loss = out;
  f.lse = out + 1;
  f.rows = 1;
  f.vocab = 0;
  EXPECT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaErrorInvalidValue);
  f.vocab = 4;
  f.rows = int64_t{1} << 31;
  EXPECT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaErrorInvalidValue);
  math::CrossEntropyBackwardParams<float, int64_t> b;
  b.logits = x;
  b.targets = t;
  b.lse = out;
  b.dloss = out;
  b.dlogits = x;
  b.rows = 1;
  b.vocab = 4;
  b.accumulate = true;  // accumulating into the logits it reads
  EXPECT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaErrorInvalidValue);
  // A row stride shorter than the rows (or negative): rows would overlap.
  b.accumulate = false;
  b.dlogits = out;
  b.vocab = 2;
  for (int64_t stride : {1, -2}) {
    b.row_stride = stride;
    EXPECT_EQ(cuda::cross_entropy_backward(b, nullptr), cudaErrorInvalidValue) << "stride " << stride;
    f.vocab = 2;
    f.rows = 1;
    f.row_stride = stride;
    EXPECT_EQ(cuda::cross_entropy_forward(f, nullptr), cudaErrorInvalidValue) << "stride " << stride;
  }
  math::CrossEntropyReduceParams<float, int64_t> r;
  r.row_loss = out;
  r.targets = t;
  r.rows = 1;
  r.vocab = 4;
  EXPECT_EQ(cuda::cross_entropy_reduce(r, nullptr), cudaErrorInvalidValue);
}
