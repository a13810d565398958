// tests/emu_backend/test_nccl_collectives.cpp: the NCCL double's collectives against vendor-semantics.md §7 (E7.1-E7.7) and their definitions, every reduction and dtype, 2 and 4 ranks.
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"
#include "nccl_test_util.h"

namespace {

using namespace mpt::nccl_test;
using mpt::cuda_emu::MisuseError;
using mpt::cuda_emu::NcclInPlaceRest;
using namespace std::chrono_literals;

// ---- §7 worked examples ----
TEST_F(NcclDouble, E7_1_AllReduceSumThreeRanks) {
  auto out = collective<float>(3, {{1, 2}, {10, 20}, {100, 200}}, 2, [](float* s, float* d, ncclComm_t c, cudaStream_t st) {
    return ncclAllReduce(s, d, 2, ncclFloat32, ncclSum, c, st);
  });
  for (const auto& v : out) EXPECT_EQ(v, (std::vector<float>{111, 222}));
}

TEST_F(NcclDouble, E7_2_AvgTruncatesIntegersAndPremultipliesFloats) {
  auto ints = collective<int32_t>(2, {{-3, 5}, {0, 2}}, 2, [](int32_t* s, int32_t* d, ncclComm_t c, cudaStream_t st) {
    return ncclAllReduce(s, d, 2, ncclInt32, ncclAvg, c, st);
  });
  for (const auto& v : ints) EXPECT_EQ(v, (std::vector<int32_t>{-1, 3}));
  auto floats = collective<float>(2, {{1, 3}, {2, 5}}, 2, [](float* s, float* d, ncclComm_t c, cudaStream_t st) {
    return ncclAllReduce(s, d, 2, ncclFloat32, ncclAvg, c, st);
  });
  for (const auto& v : floats) EXPECT_EQ(v, (std::vector<float>{1.5f, 4.0f}));
}

TEST_F(NcclDouble, E7_3_ReduceScatterOutOfPlaceAndInPlace) {
  auto out = collective<float>(2, {{1, 2, 3, 4}, {10, 20, 30, 40}}, 2, [](float* s, float* d, ncclComm_t c, cudaStream_t st) {
    return ncclReduceScatter(s, d, 2, ncclFloat32, ncclSum, c, st);
  });
  EXPECT_EQ(out[0], (std::vector<float>{11, 22}));
  EXPECT_EQ(out[1], (std::vector<float>{33, 44}));
  // In place (recv = send + rank * recvcount); the rest of the buffer is unspecified [U]: both settings.
  for (NcclInPlaceRest rest : {NcclInPlaceRest::Keep, NcclInPlaceRest::Poison}) {
    mpt::cuda_emu::nccl_set_reduce_scatter_in_place_rest(rest);
    auto comms = init_ranks(2);
    std::vector<std::vector<float>> buffers(2);
    run_ranks(2, [&](int r) {
      float* buf = to_device(r == 0 ? std::vector<float>{1, 2, 3, 4} : std::vector<float>{10, 20, 30, 40});
      cudaStream_t st = new_stream();
      ASSERT_EQ(ncclReduceScatter(buf, buf + r * 2, 2, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
      buffers[r] = to_host(buf, 4);
    });
    EXPECT_EQ(buffers[0][0], 11);
    EXPECT_EQ(buffers[0][1], 22);
    EXPECT_EQ(buffers[1][2], 33);
    EXPECT_EQ(buffers[1][3], 44);
    if (rest == NcclInPlaceRest::Keep) {
      EXPECT_EQ(buffers[1][0], 10);
      EXPECT_EQ(buffers[0][3], 4);
    } else {
      EXPECT_TRUE(std::isnan(buffers[1][0]));  // 0xFFFFFFFF
      EXPECT_TRUE(std::isnan(buffers[0][3]));
    }
    destroy_all(comms);
  }
}

TEST_F(NcclDouble, E7_4_AllGatherThreeRanksAndInPlace) {
  auto out = collective<int32_t>(3, {{7}, {8}, {9}}, 3, [](int32_t* s, int32_t* d, ncclComm_t c, cudaStream_t st) {
    return ncclAllGather(s, d, 1, ncclInt32, c, st);
  });
  for (const auto& v : out) EXPECT_EQ(v, (std::vector<int32_t>{7, 8, 9}));
  // In place with 4 ranks: send == recv + rank * sendcount.
  auto comms = init_ranks(4);
  std::vector<std::vector<int32_t>> got(4);
  run_ranks(4, [&](int r) {
    std::vector<int32_t> init(8, -1);
    init[2 * r] = 10 * r;
    init[2 * r + 1] = 10 * r + 1;
    int32_t* buf = to_device(init);
    cudaStream_t st = new_stream();
    ASSERT_EQ(ncclAllGather(buf + 2 * r, buf, 2, ncclInt32, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    got[r] = to_host(buf, 8);
  });
  for (const auto& v : got) EXPECT_EQ(v, (std::vector<int32_t>{0, 1, 10, 11, 20, 21, 30, 31}));
  destroy_all(comms);
}

TEST_F(NcclDouble, E7_5_PreMulSumHostImmediateIsReadAtCreate) {
  auto comms = init_ranks(2);
  std::vector<std::vector<float>> got(2);
  run_ranks(2, [&](int r) {
    float scalar = 0.25f;
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate, comms[r]), ncclSuccess);
    EXPECT_GE(static_cast<int>(op), static_cast<int>(ncclNumOps));
    scalar = 100.0f;  // no effect
    float* s = to_device(r == 0 ? std::vector<float>{4, 8} : std::vector<float>{8, 16});
    float* d = to_device(std::vector<float>(2, 0));
    cudaStream_t st = new_stream();
    ASSERT_EQ(ncclAllReduce(s, d, 2, ncclFloat32, op, comms[r], st), ncclSuccess);
    EXPECT_EQ(ncclRedOpDestroy(op, comms[r]), ncclSuccess);  // allowed once the call returned
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    got[r] = to_host(d, 2);
  });
  for (const auto& v : got) EXPECT_EQ(v, (std::vector<float>{3, 6}));
  destroy_all(comms);
}

TEST_F(NcclDouble, PreMulSumDeviceScalarIsReadWhenTheCollectiveRuns) {
  auto comms = init_ranks(2);
  std::vector<std::vector<float>> got(2);
  run_ranks(2, [&](int r) {
    float* scalar = to_device(std::vector<float>{2.0f});
    ncclRedOp_t op;
    ASSERT_EQ(ncclRedOpCreatePreMulSum(&op, scalar, ncclFloat32, ncclScalarDevice, comms[r]), ncclSuccess);
    const float later = r == 0 ? 0.5f : 0.25f;  // each rank its own scalar
    ASSERT_EQ(cudaMemcpy(scalar, &later, sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    float* s = to_device(std::vector<float>{8, 16});
    float* d = to_device(std::vector<float>(2, 0));
    cudaStream_t st = new_stream();
    ASSERT_EQ(ncclAllReduce(s, d, 2, ncclFloat32, op, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    got[r] = to_host(d, 2);
    // An operation is valid only with its own datatype.
    int32_t* i = to_device(std::vector<int32_t>{1});
    EXPECT_EQ(ncclAllReduce(i, i, 1, ncclInt32, op, comms[r], st), ncclInvalidArgument);
  });
  for (const auto& v : got) EXPECT_EQ(v, (std::vector<float>{6, 12}));
  destroy_all(comms);
}

TEST_F(NcclDouble, E7_6_Fp8ReductionsNeedSm90OnEveryRankGathersDoNot) {
  mpt::cuda_emu::set_compute_capability(1, 80);
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    uint8_t* s = to_device(std::vector<uint8_t>{0x38, 0x40});
    uint8_t* d = to_device(std::vector<uint8_t>(4, 0));
    cudaStream_t st = new_stream();
    for (ncclDataType_t t : {ncclFloat8e4m3, ncclFloat8e5m2}) {
      EXPECT_EQ(ncclAllReduce(s, d, 2, t, ncclSum, comms[r], st), ncclInvalidArgument);
      EXPECT_EQ(ncclReduceScatter(d, s, 1, t, ncclSum, comms[r], st), ncclInvalidArgument);
      EXPECT_EQ(ncclReduce(s, d, 2, t, ncclMax, 0, comms[r], st), ncclInvalidArgument);
      EXPECT_EQ(ncclAllReduce(s, d, 0, t, ncclSum, comms[r], st), ncclSuccess);  // count 0 comes first
    }
    EXPECT_NE(std::string(ncclGetLastError(comms[r])).find("sm_80"), std::string::npos);
    ASSERT_EQ(ncclAllGather(s, d, 2, ncclFloat8e4m3, comms[r], st), ncclSuccess);
    ASSERT_EQ(ncclBroadcast(s, s, 2, ncclFloat8e5m2, 0, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(to_host(d, 4), (std::vector<uint8_t>{0x38, 0x40, 0x38, 0x40}));
  });
  destroy_all(comms);
}

TEST_F(NcclDouble, E7_7_BadRootTypeOrOpIsInvalidArgumentAtCallTime) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    float* b = to_device(std::vector<float>{1, 2});
    cudaStream_t st = new_stream();
    EXPECT_EQ(ncclBroadcast(b, b, 2, ncclFloat32, 2, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclBroadcast(b, b, 2, ncclFloat32, -1, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclReduce(b, b, 2, ncclFloat32, ncclSum, 2, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(b, b, 2, static_cast<ncclDataType_t>(12), ncclSum, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(b, b, 2, ncclFloat32, static_cast<ncclRedOp_t>(-1), comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(b, b, 2, ncclFloat32, static_cast<ncclRedOp_t>(7), comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclAllReduce(b, b, 2, ncclFloat32, ncclSum, nullptr, st), ncclInvalidArgument);
    EXPECT_EQ(ncclRedOpDestroy(ncclSum, comms[r]), ncclInvalidArgument);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);  // nothing was enqueued
  });
  destroy_all(comms);
}


// ---- AllReduce arithmetic per data type, against definitions computed here in float64 ----
size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclFloat32: return 4;
    default: return 8;
  }
}

double round_to(ncclDataType_t t, double x) {
  switch (t) {
    case ncclFloat32: return static_cast<float>(x);
    case ncclFloat16: return mpt::f16_bits_to_float(mpt::double_to_f16_bits(x));
    case ncclBfloat16: return mpt::bf16_bits_to_float(mpt::double_to_bf16_bits(x));
    default: return x;
  }
}

void encode(ncclDataType_t t, double v, std::byte* p) {
  auto put = [&](auto x) { std::memcpy(p, &x, sizeof(x)); };
  switch (t) {
    case ncclUint8: return put(static_cast<uint8_t>(static_cast<int64_t>(v)));
    case ncclInt32: return put(static_cast<int32_t>(v));
    case ncclInt64: return put(static_cast<int64_t>(v));
    case ncclFloat32: return put(static_cast<float>(v));
    case ncclFloat64: return put(v);
    case ncclFloat16: return put(mpt::double_to_f16_bits(v));
    default: return put(mpt::double_to_bf16_bits(v));
  }
}

double input(ncclDataType_t t, int r, int k) {
  if (t == ncclUint8) return (r * 97 + k * 31 + 50) % 256;
  const double small = (r * 7 + k * 3) % 11 - 5;
  if (t == ncclInt32 || t == ncclInt64) return small;
  return round_to(t, small * 0.3125 + 0.0137 * (k + 1) * (r + 1));
}

// The double's documented semantics: one reduction in rank order, each step rounded to the type (integers wrap;
// Avg: floats multiply each input by T(float(1/n)) first, integers divide the wrapped sum truncating toward zero).
double definition(ncclDataType_t t, ncclRedOp_t op, int n, int k) {
  const bool integer = t == ncclUint8 || t == ncclInt32 || t == ncclInt64;
  const double scale = op != ncclAvg || integer ? 1.0
                       : t == ncclFloat64       ? 1.0 / n
                                                : round_to(t, static_cast<float>(1.0 / n));
  double acc = 0;
  for (int r = 0; r < n; ++r) {
    const double x = op == ncclAvg && !integer ? round_to(t, input(t, r, k) * scale) : input(t, r, k);
    if (r == 0) {
      acc = x;
    } else if (op == ncclProd) {
      acc = integer ? acc * x : round_to(t, acc * x);
    } else if (op == ncclMax) {
      acc = std::max(acc, x);
    } else if (op == ncclMin) {
      acc = std::min(acc, x);
    } else {
      acc = integer ? acc + x : round_to(t, acc + x);
    }
  }
  if (t == ncclUint8) acc = static_cast<double>(static_cast<int64_t>(acc) & 0xFF);  // wraps
  if (integer && op == ncclAvg) acc = std::trunc(acc / n);
  return acc;
}

TEST_F(NcclDouble, AllReduceEveryOpAndTypeMatchesItsDefinitionBitIdenticallyOnEveryRank) {
  const ncclDataType_t types[] = {ncclFloat32, ncclFloat64, ncclInt32, ncclInt64, ncclUint8, ncclFloat16, ncclBfloat16};
  const ncclRedOp_t ops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
  constexpr int kCount = 16;
  for (int n : {2, 4}) {
    auto comms = init_ranks(n);
    // results[rank][type][op] = bytes
    std::vector<std::vector<std::vector<std::vector<std::byte>>>> results(n);
    run_ranks(n, [&](int r) {
      cudaStream_t st = new_stream();
      for (ncclDataType_t t : types) {
        std::vector<std::byte> host(kCount * type_size(t));
        for (int k = 0; k < kCount; ++k) encode(t, input(t, r, k), host.data() + k * type_size(t));
        auto* send = to_device(host);
        auto* recv = to_device(std::vector<std::byte>(host.size()));
        results[r].emplace_back();
        for (ncclRedOp_t op : ops) {
          ASSERT_EQ(ncclAllReduce(send, recv, kCount, t, op, comms[r], st), ncclSuccess);
          ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
          results[r].back().push_back(to_host(recv, host.size()));
        }
      }
    });
    for (size_t ti = 0; ti < std::size(types); ++ti) {
      for (size_t oi = 0; oi < std::size(ops); ++oi) {
        const ncclDataType_t t = types[ti];
        SCOPED_TRACE("n=" + std::to_string(n) + " type=" + std::to_string(t) + " op=" + std::to_string(ops[oi]));
        for (int r = 1; r < n; ++r) EXPECT_EQ(results[r][ti][oi], results[0][ti][oi]);  // bit-identical
        std::vector<std::byte> expected(kCount * type_size(t));
        for (int k = 0; k < kCount; ++k) encode(t, definition(t, ops[oi], n, k), expected.data() + k * type_size(t));
        EXPECT_EQ(results[0][ti][oi], expected);
      }
    }
    destroy_all(comms);
  }
}

// bf16 at 1: ulp 2^-7. 1 + 2^-8 ties to even (1) at every step; summed in float it is 1 + 3*2^-8, which rounds up.
TEST_F(NcclDouble, LowPrecisionSumRoundsEachStepByDefaultAndOnceUnderFloatAccumulate) {
  auto run = [&] {
    const float inputs[] = {1.0f, 0x1p-8f, 0x1p-8f, 0x1p-8f};
    auto out = collective<uint16_t>(4, {{mpt::float_to_bf16_bits(inputs[0])}, {mpt::float_to_bf16_bits(inputs[1])},
                                        {mpt::float_to_bf16_bits(inputs[2])}, {mpt::float_to_bf16_bits(inputs[3])}},
                                    1, [](uint16_t* s, uint16_t* d, ncclComm_t c, cudaStream_t st) {
                                      return ncclAllReduce(s, d, 1, ncclBfloat16, ncclSum, c, st);
                                    });
    for (const auto& v : out) EXPECT_EQ(v, out[0]);
    return mpt::bf16_bits_to_float(out[0][0]);
  };
  EXPECT_EQ(run(), 1.0f);
  mpt::cuda_emu::nccl_set_low_precision_sum(mpt::cuda_emu::NcclLowPrecisionSum::FloatAccumulate);
  EXPECT_EQ(run(), 1.015625f);
}

TEST_F(NcclDouble, Fp8SumGoesThroughHalfAndSaturatesByDefault) {
  auto e4m3 = [](float x) { return mpt::float_to_e4m3_bits(x, mpt::Fp8Saturation::Saturate); };
  auto run = [&](ncclDataType_t t, std::vector<std::vector<uint8_t>> in) {
    const size_t count = in[0].size();
    auto out = collective<uint8_t>(static_cast<int>(in.size()), in, count, [&](uint8_t* s, uint8_t* d, ncclComm_t c, cudaStream_t st) {
      return ncclAllReduce(s, d, count, t, ncclSum, c, st);
    });
    for (const auto& v : out) EXPECT_EQ(v, out[0]);
    return out[0];
  };
  auto sum = run(ncclFloat8e4m3, {{e4m3(1.5f), e4m3(2.0f)}, {e4m3(0.25f), e4m3(3.0f)}});
  EXPECT_EQ(mpt::e4m3_bits_to_float(sum[0]), 1.75f);
  EXPECT_EQ(mpt::e4m3_bits_to_float(sum[1]), 5.0f);
  // 256 * 4 overflows E4M3 (max 448): SATFINITE keeps 448; without saturation it is NaN [U].
  const std::vector<std::vector<uint8_t>> big(4, std::vector<uint8_t>{e4m3(256.0f)});
  EXPECT_EQ(mpt::e4m3_bits_to_float(run(ncclFloat8e4m3, big)[0]), 448.0f);
  mpt::cuda_emu::nccl_set_fp8_overflow(mpt::cuda_emu::NcclFp8Overflow::NoSaturate);
  EXPECT_TRUE(std::isnan(mpt::e4m3_bits_to_float(run(ncclFloat8e4m3, big)[0])));
  const uint8_t e5m2_max = mpt::float_to_e5m2_bits(57344.0f, mpt::Fp8Saturation::Saturate);
  EXPECT_TRUE(std::isinf(mpt::e5m2_bits_to_float(run(ncclFloat8e5m2, {{e5m2_max}, {e5m2_max}})[0])));
}

TEST_F(NcclDouble, BroadcastAndReduceFromEveryRoot) {
  auto comms = init_ranks(4);
  for (int root = 0; root < 4; ++root) {
    run_ranks(4, [&](int r) {
      cudaStream_t st = new_stream();
      int64_t* b = to_device(std::vector<int64_t>{100 * r + 1, 100 * r + 2, 100 * r + 3});
      int64_t* out = to_device(std::vector<int64_t>(3, 0));
      ASSERT_EQ(ncclBroadcast(b, out, 3, ncclInt64, root, comms[r], st), ncclSuccess);
      ASSERT_EQ(ncclBroadcast(b, b, 3, ncclInt64, root, comms[r], st), ncclSuccess);  // in place
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
      const std::vector<int64_t> want{100 * root + 1, 100 * root + 2, 100 * root + 3};
      EXPECT_EQ(to_host(out, 3), want);
      EXPECT_EQ(to_host(b, 3), want);
      // Reduce: root only; recvbuff may be NULL elsewhere.
      double* x = to_device(std::vector<double>{1.0 + r, 0.5 * r});
      double* y = r == root ? to_device(std::vector<double>{0, 0}) : nullptr;
      ASSERT_EQ(ncclReduce(x, y, 2, ncclFloat64, ncclMax, root, comms[r], st), ncclSuccess);
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
      if (r == root) {
        EXPECT_EQ(to_host(y, 2), (std::vector<double>{4.0, 1.5}));
      }
    });
  }
  destroy_all(comms);
}

TEST_F(NcclDouble, ReduceScatterAndAllGatherWithFourRanks) {
  auto out = collective<int32_t>(4, {{1, 2, 3, 4, 5, 6, 7, 8}, {10, 20, 30, 40, 50, 60, 70, 80}, {0, 0, 0, 0, 0, 0, 0, 1},
                                     {-1, -1, -1, -1, -1, -1, -1, -1}},
                                 2, [](int32_t* s, int32_t* d, ncclComm_t c, cudaStream_t st) {
                                   return ncclReduceScatter(s, d, 2, ncclInt32, ncclSum, c, st);
                                 });
  EXPECT_EQ(out[0], (std::vector<int32_t>{10, 21}));
  EXPECT_EQ(out[1], (std::vector<int32_t>{32, 43}));
  EXPECT_EQ(out[2], (std::vector<int32_t>{54, 65}));
  EXPECT_EQ(out[3], (std::vector<int32_t>{76, 88}));
  auto gathered = collective<int32_t>(4, {{1, 2}, {3, 4}, {5, 6}, {7, 8}}, 8, [](int32_t* s, int32_t* d, ncclComm_t c, cudaStream_t st) {
    return ncclAllGather(s, d, 2, ncclInt32, c, st);
  });
  for (const auto& v : gathered) EXPECT_EQ(v, (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 7, 8}));
}

}  // namespace
