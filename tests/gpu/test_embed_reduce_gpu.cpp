// tests/gpu/test_embed_reduce_gpu.cpp: embedding, dropout, reductions and random fills on cuda:0 against the CPU backend (bit-exact under emulation; skipped without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/mpt.h"
#include "op_test.h"
#if defined(MPT_CUDA_EMULATION)
#include "cuda_emu/counters.h"
#endif

namespace mpt {
namespace {

using testing::Match;
using testing::expect_match;
using testing::random_tensor;
using testing::to_cpu;
using testing::to_gpu;

const DType kFloat16s[] = {DType::F32, DType::F16, DType::BF16};
std::string tag(const std::string& what, DType dt) { return what + " " + std::string(dtype_name(dt)); }

// Gather and the deterministic scatter-add (positions summed per token in increasing order on both backends).
TEST(GpuEmbedding, ForwardAndBackwardMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (DType idt : {DType::I64, DType::I32}) {
      const std::string name = tag("embedding", dt) + " ids " + std::string(dtype_name(idt));
      const Tensor table = random_tensor({53, 37}, dt, 1);
      std::vector<int64_t> ids(3 * 17);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i * 7 + 3) % 53);  // repeats
      ids[5] = 52;
      const Tensor id = Tensor::from_vector(ids, {3, 17}).to(idt);
      expect_match(ops::embedding(to_gpu(id), to_gpu(table)), ops::embedding(id, table), Match::exact(dt), name);
      const Tensor dout = random_tensor({3, 17, 37}, dt, 2);
      const Tensor want = ops::embedding_backward(dout, id, 53);
      expect_match(ops::embedding_backward(to_gpu(dout), to_gpu(id), 53), want, Match::exact(dt, 4),
                   name + " backward (CUDA ids)");
      expect_match(ops::embedding_backward(to_gpu(dout), id, 53), want, Match::exact(dt, 4),
                   name + " backward (CPU ids)");
      const Tensor d0 = random_tensor({53, 37}, dt, 3);
      expect_match(ops::embedding_backward(to_gpu(dout), id, 53, to_gpu(d0)),
                   ops::embedding_backward(dout, id, 53, d0.clone()), Match::exact(dt, 4), name + " backward +=");
      if (dt == DType::F32) {  // an FP32 dout into a BF16 gradient of an FP32 table (autograd::set_grad_dtype)
        const Tensor h0 = d0.to(DType::BF16);
        expect_match(ops::embedding_backward(to_gpu(dout), id, 53, to_gpu(h0)),
                     ops::embedding_backward(dout, id, 53, h0.clone()), Match::exact(DType::BF16, 4),
                     name + " backward += into bf16");
      }
    }
  }
}

// More positions than one chunk of the device bucket builder (2048): the chunks' histograms, prefix sums and ordered
// scatter give the CPU's summation order, so the same bits; accumulating into an existing gradient too.
TEST(GpuEmbedding, BackwardOverSeveralChunksMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  const int64_t vocab = 301, positions = 2 * 2500;
  std::vector<int64_t> ids(static_cast<size_t>(positions));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * i * 13 + i / 7) % 97);  // 97 of 301 used
  ids[4000] = vocab - 1;
  for (DType dt : kFloat16s) {
    for (DType idt : {DType::I32, DType::I64}) {
      const std::string name = tag("embedding_backward", dt) + " ids " + std::string(dtype_name(idt));
      const Tensor id = Tensor::from_vector(ids, {2, 2500}).to(idt);
      const Tensor dout = random_tensor({2, 2500, 5}, dt, 6);
      expect_match(ops::embedding_backward(to_gpu(dout), to_gpu(id), vocab), ops::embedding_backward(dout, id, vocab),
                   Match::exact(dt, 64), name);
      const Tensor d0 = random_tensor({vocab, 5}, dt, 7);
      expect_match(ops::embedding_backward(to_gpu(dout), to_gpu(id), vocab, to_gpu(d0)),
                   ops::embedding_backward(dout, id, vocab, d0.clone()), Match::exact(dt, 64), name + " +=");
    }
  }
}

std::string error_text(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// A bad id on CUDA is not read back by the op (no host round trip): the kernel reports it in the device's error
// record, and the next synchronising read throws the CPU's kind of message; the record is then clear.
TEST(GpuEmbedding, OutOfRangeIdThrowsAtTheNextSynchronisingRead) {
  MPT_REQUIRE_GPU(8);
  const Tensor table = random_tensor({10, 8}, DType::F32, 4);
  const Tensor ids = Tensor::from_vector(std::vector<int64_t>{1, 10, 3, -4}, {4});
  EXPECT_THROW(ops::embedding(ids, table), Error);

  const Tensor out = ops::embedding(to_gpu(ids), to_gpu(table));  // no throw: nothing synchronised
  const std::string forward = error_text([&] { (void)out.to(Device::cpu()); });
  EXPECT_NE(forward.find("[embedding] token id 10 at position 1 is out of range [0, 10)"), std::string::npos)
      << forward;
  // Cleared: the same tensor reads back now, the bad rows NaN instead of an out-of-bounds read.
  const std::vector<float> got = out.to_vector<float>();
  const std::vector<float> row1 = table.select(0, 1).to_vector<float>();
  for (int c = 0; c < 8; ++c) {
    EXPECT_EQ(got[static_cast<size_t>(c)], row1[static_cast<size_t>(c)]) << c;
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(8 + c)])) << c;
    EXPECT_TRUE(std::isnan(got[static_cast<size_t>(24 + c)])) << c;
  }

  const Tensor dout = random_tensor({4, 8}, DType::F32, 5);
  for (const Tensor& bad_ids : {to_gpu(ids), ids}) {  // CUDA ids, and CPU ids with a CUDA gradient
    const Tensor dtable = ops::embedding_backward(to_gpu(dout), bad_ids, 10);
    const std::string backward = error_text([&] { (void)dtable.to(Device::cpu()); });
    EXPECT_NE(backward.find("[embedding_backward] token id 10 at position 1 is out of range [0, 10)"),
              std::string::npos)
        << backward;
  }

  // Stream::synchronize reports too (any synchronising copy does, uploads included, so the inputs go up first); of
  // two reporting launches the first one's error is kept.
  const Tensor gpu_dout = to_gpu(dout), gpu_ids = to_gpu(ids), gpu_table = to_gpu(table);
  const Tensor other_ids = to_gpu(Tensor::from_vector(std::vector<int64_t>{0, 1, 2, 11}, {4}));
  (void)ops::embedding_backward(gpu_dout, other_ids, 10);
  (void)ops::embedding(gpu_ids, gpu_table);
  const std::string sync = error_text([] { Stream::current(Device::cuda(0)).synchronize(); });
  EXPECT_NE(sync.find("[embedding_backward] token id 11 at position 3 is out of range [0, 10)"), std::string::npos)
      << sync;

  // The next call works and matches the CPU.
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{1, 9, 3, 1}, {4});
  expect_match(ops::embedding_backward(to_gpu(dout), to_gpu(good), 10), ops::embedding_backward(dout, good, 10),
               Match::exact(DType::F32, 4), "embedding_backward after an error");
  expect_match(ops::embedding(to_gpu(good), to_gpu(table)), ops::embedding(good, table), Match::exact(DType::F32),
               "embedding after an error");
}

// Same generator state -> the same Philox mask on both backends, the same generator advance, and the same replay.
TEST(GpuDropout, SameSeedAndOffsetGiveTheSameMask) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (float p : {0.0f, 0.1f, 0.5f, 1.0f}) {
      const std::string name = tag("dropout p=" + std::to_string(p), dt);
      const Tensor x = random_tensor({7, 333}, dt, 6);
      Generator gc(1234, 77), gg(1234, 77);
      ops::DropoutState sc, sg;
      const Tensor yc = ops::dropout(x, p, gc, &sc), yg = ops::dropout(to_gpu(x), p, gg, &sg);
      expect_match(yg, yc, Match::exact(dt), name);
      EXPECT_EQ(gg.offset(), gc.offset()) << name;
      EXPECT_EQ(sg.seed, sc.seed) << name;
      EXPECT_EQ(sg.offset, sc.offset) << name;
      EXPECT_EQ(sg.p, sc.p) << name;
      const Tensor dy = random_tensor({7, 333}, dt, 7), dx0 = random_tensor({7, 333}, dt, 8);
      expect_match(ops::dropout_backward(to_gpu(dy), sg), ops::dropout_backward(dy, sc), Match::exact(dt),
                   name + " backward");
      expect_match(ops::dropout_backward(to_gpu(dy), sg, to_gpu(dx0)), ops::dropout_backward(dy, sc, dx0.clone()),
                   Match::exact(dt), name + " backward +=");
    }
  }
  // A dropped Inf/NaN is exactly 0 on both.
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v(1000, 1.0f);
  for (size_t i = 0; i < v.size(); i += 3) v[i] = (i % 2) ? inf : nan;
  const Tensor x = Tensor::from_vector(v, {1000});
  Generator gc(9), gg(9);
  expect_match(ops::dropout(to_gpu(x), 0.5f, gg), ops::dropout(x, 0.5f, gc), Match::exact(DType::F32),
               "dropout of Inf/NaN");
}

// Fixed-order reductions (32 lanes, 2048-element chunks): the same bits on both backends by design.
TEST(GpuReduction, SumAndMeanOverEveryAxisMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    for (const Shape& shape : {Shape{3, 5, 77}, Shape{2, 4100}, Shape{4100, 3}, Shape{1, 1}}) {
      const Tensor x = random_tensor(shape, dt, 9), gx = to_gpu(x);
      for (int64_t d = -static_cast<int64_t>(shape.size()); d < static_cast<int64_t>(shape.size()); ++d) {
        const std::string name = tag("dim " + std::to_string(d) + " of " + shape_str(shape), dt);
        expect_match(ops::sum(gx, d), ops::sum(x, d), Match::exact(dt, 4), "sum " + name);
        expect_match(ops::sum(gx, d, true), ops::sum(x, d, true), Match::exact(dt, 4), "sum keepdim " + name);
        expect_match(ops::mean(gx, d), ops::mean(x, d), Match::exact(dt, 4), "mean " + name);
      }
      expect_match(ops::sum(gx), ops::sum(x), Match::exact(dt, 10), tag("sum all " + shape_str(shape), dt));
    }
  }
  // The mean of an empty axis is NaN, its sum 0, on both.
  const Tensor e = Tensor::zeros({3, 0});
  expect_match(ops::mean(to_gpu(e), 1), ops::mean(e, 1), Match::exact(DType::F32), "mean of an empty axis");
  expect_match(ops::sum(to_gpu(e), 1), ops::sum(e, 1), Match::exact(DType::F32), "sum of an empty axis");
}

TEST(GpuReduction, SumToShapeMatchesCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : kFloat16s) {
    const Tensor x = random_tensor({3, 5, 77}, dt, 10), gx = to_gpu(x);
    for (const Shape& shape : {Shape{77}, Shape{1, 77}, Shape{3, 1, 77}, Shape{5, 1}, Shape{3, 5, 77}, Shape{1, 1, 1}}) {
      const std::string name = tag("sum_to_shape " + shape_str(shape), dt);
      expect_match(ops::sum_to_shape(gx, shape), ops::sum_to_shape(x, shape), Match::exact(dt, 4), name);
      const Tensor out0 = random_tensor(shape, dt, 11);
      expect_match(ops::sum_to_shape(gx, shape, to_gpu(out0)), ops::sum_to_shape(x, shape, out0.clone()),
                   Match::exact(dt, 4), name + " +=");
    }
  }
}

TEST(GpuReduction, GlobalL2NormAndAllFiniteMatchCpu) {
  MPT_REQUIRE_GPU(8);
  const std::vector<Tensor> ts = {random_tensor({3, 77}, DType::F32, 12), random_tensor({5000}, DType::BF16, 13),
                                  random_tensor({1}, DType::F16, 14), random_tensor({129, 3}, DType::F32, 15)};
  std::vector<Tensor> gts;
  for (const Tensor& t : ts) gts.push_back(to_gpu(t));
  expect_match(ops::global_l2_norm(gts), ops::global_l2_norm(ts), Match::exact(DType::F32, 10), "global_l2_norm");
  EXPECT_TRUE(ops::all_finite(gts));
  EXPECT_EQ(ops::all_finite_flag(gts).to_vector<uint8_t>(), std::vector<uint8_t>{1});
  EXPECT_TRUE(ops::all_finite_flag(gts).device().is_cuda());
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (float bad : {inf, -inf, nan}) {
    for (size_t which = 0; which < ts.size(); ++which) {
      std::vector<Tensor> c, g;
      for (size_t i = 0; i < ts.size(); ++i) {
        Tensor t = ts[i].clone();
        if (i == which) t.view({-1}).slice(0, t.numel() - 1, t.numel()).fill_(bad);  // the last element
        c.push_back(t);
        g.push_back(to_gpu(t));
      }
      const std::string name = "all_finite with " + std::to_string(bad) + " in tensor " + std::to_string(which);
      EXPECT_FALSE(ops::all_finite(c)) << name;
      EXPECT_FALSE(ops::all_finite(g)) << name;
      EXPECT_EQ(ops::all_finite_flag(g).to_vector<uint8_t>(), std::vector<uint8_t>{0}) << name;
      expect_match(ops::global_l2_norm(g), ops::global_l2_norm(c), Match::exact(DType::F32, 10),
                   "global_l2_norm " + name);
    }
  }
  // Integer tensors are always finite; an empty list too.
  EXPECT_TRUE(ops::all_finite({to_gpu(Tensor::arange(10))}));
  EXPECT_TRUE(ops::all_finite({}));
}

// Random fills draw the Philox stream at the generator's offset: the same numbers on both devices, every dtype.
TEST(GpuRandom, UniformAndNormalFillsMatchCpu) {
  MPT_REQUIRE_GPU(8);
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F8E4M3, DType::F8E5M2}) {
    Generator gc(42, 5), gg(42, 5);
    const Tensor uc = Tensor::uniform({3, 101}, -2, 3, dt, Device::cpu(), gc);
    const Tensor ug = Tensor::uniform({3, 101}, -2, 3, dt, Device::cuda(0), gg);
    EXPECT_TRUE(ug.device().is_cuda());
    expect_match(ug, uc, Match::exact(testing::Tolerance{0, 0}), tag("uniform", dt));
    const Tensor nc = Tensor::normal({3, 101}, 1, 0.5, dt, Device::cpu(), gc);
#if defined(MPT_CUDA_EMULATION)
    cuda_emu::reset_counters();
#endif
    const Tensor ng = Tensor::normal({3, 101}, 1, 0.5, dt, Device::cuda(0), gg);
#if defined(MPT_CUDA_EMULATION)
    // Drawn by a kernel on the device (FP8: in f32, then converted there): nothing crosses to or from the host.
    const cuda_emu::Counters c = cuda_emu::counters();
    EXPECT_EQ(c.h2d + c.d2h + c.syncs, 0u) << cuda_emu::to_string(c);
    EXPECT_EQ(c.kernel_launches, dt == DType::F8E4M3 || dt == DType::F8E5M2 ? 2u : 1u) << cuda_emu::to_string(c);
#endif
    expect_match(ng, nc, Match::exact(testing::Tolerance{0, 0}), tag("normal", dt));
    EXPECT_EQ(gg.offset(), gc.offset());
    // In place into a strided CUDA view.
    Tensor base_c = Tensor::zeros({6, 101}, dt), base_g = Tensor::zeros({6, 101}, dt, Device::cuda(0));
    base_c.slice(0, 0, 6, 2).normal_(0, 1, gc);
    base_g.slice(0, 0, 6, 2).normal_(0, 1, gg);
    expect_match(base_g, base_c, Match::exact(testing::Tolerance{0, 0}), tag("normal_ into a strided view", dt));
  }
}

}  // namespace
}  // namespace mpt
