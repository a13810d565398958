// tests/emu_backend/test_nccl_double.cpp: the NCCL double against vendor-semantics.md §7 (E7.1-E7.7), dtype arithmetic, groups, asynchronous completion, watchdog/abort and misuse.
#include <gtest/gtest.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <functional>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "cuda_emu/device_work.h"
#include "kernels/math/numerics.h"

namespace {

using mpt::cuda_emu::MisuseError;
using mpt::cuda_emu::NcclInPlaceRest;
using namespace std::chrono_literals;

// ---- harness: one std::thread per rank, each on its own device ----
template <class F>
void run_ranks(int n, F&& body) {
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        body(r);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

std::vector<ncclComm_t> init_ranks(int n) {
  ncclUniqueId id;
  EXPECT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(n);
  run_ranks(n, [&](int r) { ASSERT_EQ(ncclCommInitRank(&comms[r], n, id, r), ncclSuccess); });
  return comms;
}

void destroy_all(const std::vector<ncclComm_t>& comms) {
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommDestroy(c), ncclSuccess);
}

template <class T>
T* to_device(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(1, host.size() * sizeof(T))), cudaSuccess);
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  return static_cast<T*>(p);
}

template <class T>
std::vector<T> to_host(const T* dev, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), dev, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

cudaStream_t new_stream() {
  cudaStream_t s = nullptr;
  EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
  return s;
}

class NcclDouble : public ::testing::Test {
 protected:
  void SetUp() override { mpt::cuda_emu::nccl_reset_controls(); }
  void TearDown() override {
    mpt::cuda_emu::nccl_reset_controls();
    mpt::cuda_emu::set_wait_timeout(saved_timeout_);
    for (int d = 0; d < 4; ++d) mpt::cuda_emu::set_compute_capability(d, 90);
  }
  std::chrono::milliseconds saved_timeout_ = mpt::cuda_emu::wait_timeout();
};

// Runs one collective per rank (on a fresh stream) and returns each rank's receive buffer.
template <class T, class Call>
std::vector<std::vector<T>> collective(int n, const std::vector<std::vector<T>>& send, size_t recv_count, Call call) {
  auto comms = init_ranks(n);
  std::vector<std::vector<T>> out(n);
  run_ranks(n, [&](int r) {
    T* s = to_device(send[r]);
    T* d = to_device(std::vector<T>(recv_count, T{}));
    cudaStream_t st = new_stream();
    ASSERT_EQ(call(s, d, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    out[r] = to_host(d, recv_count);
  });
  destroy_all(comms);
  return out;
}

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

// ---- groups ----
TEST_F(NcclDouble, OneThreadDrivesFourRanksWithAGroup) {
  std::vector<ncclComm_t> comms(4);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 4, nullptr), ncclSuccess);
  std::vector<float*> send(4), recv(4);
  std::vector<cudaStream_t> streams(4);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    send[r] = to_device(std::vector<float>{1.0f * (r + 1), -1.0f});
    recv[r] = to_device(std::vector<float>(8, 0));
    streams[r] = new_stream();
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 4; ++r) {  // several collectives per rank in one group, issued at ncclGroupEnd
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclAllReduce(send[r], recv[r], 2, ncclFloat32, ncclSum, comms[r], streams[r]), ncclSuccess);
    ASSERT_EQ(ncclAllGather(send[r], recv[r] + 2, 1, ncclFloat32, comms[r], streams[r]), ncclSuccess);
  }
  EXPECT_EQ(cudaStreamQuery(streams[0]), cudaSuccess);  // nothing enqueued before ncclGroupEnd
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 4; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(streams[r]), cudaSuccess);
    EXPECT_EQ(to_host(recv[r], 6), (std::vector<float>{10, -4, 1, 2, 3, 4}));
  }
  for (int r = 0; r < 4; ++r) {
    int rank = -1, count = -1, device = -1;
    EXPECT_EQ(ncclCommUserRank(comms[r], &rank), ncclSuccess);
    EXPECT_EQ(ncclCommCount(comms[r], &count), ncclSuccess);
    EXPECT_EQ(ncclCommCuDevice(comms[r], &device), ncclSuccess);
    EXPECT_EQ(rank, r);
    EXPECT_EQ(count, 4);
    EXPECT_EQ(device, r);
  }
  destroy_all(comms);
}

TEST_F(NcclDouble, OneThreadInitialisesRanksInAGroupAndNestsGroups) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclCommInitRank(&comms[r], 2, id, r), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  std::vector<int32_t*> buf(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    buf[r] = to_device(std::vector<int32_t>{r + 1});
  }
  ASSERT_EQ(ncclGroupStart(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);  // nested: only the outermost end issues
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(ncclAllReduce(buf[r], buf[r], 1, ncclInt32, ncclProd, comms[r], nullptr), ncclSuccess);
    ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  }
  ASSERT_EQ(ncclGroupEnd(), ncclSuccess);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(to_host(buf[r], 1), (std::vector<int32_t>{2}));
  }
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);  // no group open
  destroy_all(comms);
}

TEST_F(NcclDouble, AFailedCallCancelsItsGroupAndInitCannotShareAGroupWithCollectives) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>{1});
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    EXPECT_EQ(ncclBroadcast(b, b, 1, ncclFloat32, 5, comms[r], st), ncclInvalidArgument);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);  // nothing was issued
    ncclUniqueId id;
    ncclGetUniqueId(&id);
    ncclComm_t extra = nullptr;
    ASSERT_EQ(ncclGroupStart(), ncclSuccess);
    EXPECT_EQ(ncclCommInitRank(&extra, 1, id, 0), ncclSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
    // Both ranks still agree on the sequence: a later collective works.
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<float>{2}));
  });
  destroy_all(comms);
}

TEST_F(NcclDouble, OneThreadDrivingTwoRanksWithoutAGroupIsMisuse) {
  std::vector<ncclComm_t> comms(2);
  ASSERT_EQ(ncclCommInitAll(comms.data(), 2, nullptr), ncclSuccess);
  std::vector<float*> b(2);
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
    b[r] = to_device(std::vector<float>{1});
  }
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  ASSERT_EQ(ncclAllReduce(b[0], b[0], 1, ncclFloat32, ncclSum, comms[0], nullptr), ncclSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  EXPECT_THROW(ncclAllReduce(b[1], b[1], 1, ncclFloat32, ncclSum, comms[1], nullptr), MisuseError);
  for (ncclComm_t c : comms) EXPECT_EQ(ncclCommAbort(c), ncclSuccess);
}

// ---- asynchronous completion, the watchdog pattern, injected failures ----
TEST_F(NcclDouble, ACollectiveCompletesOnlyWhenTheLastRankArrives) {
  auto comms = init_ranks(2);
  std::promise<void> rank0_checked;
  auto checked = rank0_checked.get_future().share();
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    float* b = to_device(std::vector<float>{1.0f + r});
    if (r == 1) checked.wait();  // rank 1 calls only after rank 0 saw its collective pending
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);  // returns at once
    ASSERT_EQ(cudaEventRecord(ev, st), cudaSuccess);
    if (r == 0) {
      EXPECT_EQ(cudaEventQuery(ev), cudaErrorNotReady);
      EXPECT_EQ(cudaStreamQuery(st), cudaErrorNotReady);
      ncclResult_t async = ncclInternalError;
      EXPECT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
      EXPECT_EQ(async, ncclSuccess);  // NCCL knows nothing is wrong: it just waits
      rank0_checked.set_value();
    }
    ASSERT_EQ(cudaEventSynchronize(ev), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<float>{3}));
  });
  destroy_all(comms);
}

// NCCL has no timeout: the application polls, gives up after its own deadline and aborts.
TEST_F(NcclDouble, WatchdogAbortsARankWhosePeerNeverArrives) {
  for (bool report_peer : {true, false}) {
    mpt::cuda_emu::nccl_set_report_peer_abort(report_peer);
    auto comms = init_ranks(2);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaStream_t st = new_stream();
    cudaEvent_t ev;
    ASSERT_EQ(cudaEventCreate(&ev), cudaSuccess);
    float* send = to_device(std::vector<float>{1, 2});
    float* recv = to_device(std::vector<float>{0, 0});
    ASSERT_EQ(ncclAllReduce(send, recv, 2, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);  // rank 1 never calls
    ASSERT_EQ(cudaEventRecord(ev, st), cudaSuccess);
    const auto deadline = std::chrono::steady_clock::now() + 50ms;
    bool gave_up = false;
    while (cudaEventQuery(ev) == cudaErrorNotReady) {
      ncclResult_t async = ncclSuccess;
      ASSERT_EQ(ncclCommGetAsyncError(comms[0], &async), ncclSuccess);
      ASSERT_EQ(async, ncclSuccess);
      if (std::chrono::steady_clock::now() > deadline) {
        gave_up = true;
        ASSERT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
      }
      std::this_thread::sleep_for(1ms);
    }
    EXPECT_TRUE(gave_up);
    EXPECT_EQ(cudaEventQuery(ev), cudaSuccess);  // abort completed the pending operation
    uint32_t bits[2];
    ASSERT_EQ(cudaMemcpy(bits, recv, sizeof(bits), cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(bits[0], 0xFFFFFFFFu);  // unspecified contents, poisoned
    EXPECT_EQ(bits[1], 0xFFFFFFFFu);
    ncclResult_t peer = ncclSuccess;
    ASSERT_EQ(ncclCommGetAsyncError(comms[1], &peer), ncclSuccess);
    EXPECT_EQ(peer, report_peer ? ncclRemoteError : ncclSuccess);
    if (report_peer) {
      EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("ncclCommAbort"), std::string::npos);
    }
    EXPECT_THROW(ncclCommGetAsyncError(comms[0], &peer), MisuseError);  // aborted handles are freed
    EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  }
}

TEST_F(NcclDouble, StreamSynchronisationOnACollectiveThatNeverCompletesTimesOut) {
  mpt::cuda_emu::set_wait_timeout(100ms);
  auto comms = init_ranks(2);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st = new_stream();
  float* b = to_device(std::vector<float>{1});
  ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);
  EXPECT_THROW(cudaStreamSynchronize(st), MisuseError);
  EXPECT_THROW(ncclCommDestroy(comms[0]), MisuseError);  // would hang: abort instead
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
}

TEST_F(NcclDouble, AnInjectedFailureIsReportedAsynchronouslyOnThatRank) {
  auto comms = init_ranks(2);
  mpt::cuda_emu::nccl_inject_failure(comms[1], ncclSystemError);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t st1 = new_stream();
  float* b1 = to_device(std::vector<float>{5});
  ASSERT_EQ(ncclAllReduce(b1, b1, 1, ncclFloat32, ncclSum, comms[1], st1), ncclSuccess);  // enqueued fine
  ASSERT_EQ(cudaStreamSynchronize(st1), cudaSuccess);
  ncclResult_t async = ncclSuccess;
  ASSERT_EQ(ncclCommGetAsyncError(comms[1], &async), ncclSuccess);
  EXPECT_EQ(async, ncclSystemError);
  EXPECT_NE(std::string(ncclGetLastError(comms[1])).find("nccl_inject_failure"), std::string::npos);
  uint32_t bits;
  ASSERT_EQ(cudaMemcpy(&bits, b1, 4, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(bits, 0xFFFFFFFFu);
  EXPECT_EQ(ncclAllReduce(b1, b1, 1, ncclFloat32, ncclSum, comms[1], st1), ncclSystemError);  // the error sticks
  // Rank 0 waits for a peer that dropped out, until its watchdog aborts.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st0 = new_stream();
  float* b0 = to_device(std::vector<float>{1});
  ASSERT_EQ(ncclAllReduce(b0, b0, 1, ncclFloat32, ncclSum, comms[0], st0), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st0), cudaErrorNotReady);
  EXPECT_EQ(ncclCommAbort(comms[0]), ncclSuccess);
  EXPECT_EQ(ncclCommAbort(comms[1]), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st0), cudaSuccess);
}

// ---- mismatched calls: ncclInvalidUsage on every rank, with the same message ----
TEST_F(NcclDouble, MismatchedCallsAreReportedOnEveryRank) {
  struct Case {
    const char* what;
    std::function<ncclResult_t(int r, float* b, ncclComm_t c, cudaStream_t st)> call;
  };
  const std::vector<Case> cases = {
      {"count", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, r == 0 ? 2 : 4, ncclFloat32, ncclSum, c, st); }},
      {"op", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, 2, ncclFloat32, r == 0 ? ncclSum : ncclMax, c, st); }},
      {"dtype", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclAllReduce(b, b, 2, r == 0 ? ncclFloat32 : ncclInt32, ncclSum, c, st); }},
      {"root", [](int r, float* b, ncclComm_t c, cudaStream_t st) { return ncclBroadcast(b, b, 2, ncclFloat32, r, c, st); }},
      {"collective", [](int r, float* b, ncclComm_t c, cudaStream_t st) {
         return r == 0 ? ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, c, st) : ncclAllGather(b, b + 1, 1, ncclFloat32, c, st);
       }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    auto comms = init_ranks(2);
    std::promise<void> first_called;
    auto first = first_called.get_future().share();
    std::vector<ncclResult_t> returned(2);
    run_ranks(2, [&](int r) {
      cudaStream_t st = new_stream();
      float* b = to_device(std::vector<float>{1, 2, 3, 4});
      if (r == 1) first.wait();  // rank 1 arrives last and detects the mismatch
      returned[r] = c.call(r, b, comms[r], st);
      if (r == 0) first_called.set_value();
      if (r == 0) return;
      for (int q = 0; q < 2; ++q) {
        ncclResult_t async = ncclSuccess;
        ASSERT_EQ(ncclCommGetAsyncError(comms[q], &async), ncclSuccess);
        EXPECT_EQ(async, ncclInvalidUsage);
        EXPECT_NE(std::string(ncclGetLastError(comms[q])).find("collective mismatch"), std::string::npos);
      }
      ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);  // no hang: completed with poisoned results
    });
    EXPECT_EQ(returned[0], ncclSuccess);
    EXPECT_EQ(returned[1], ncclInvalidUsage);
    for (ncclComm_t comm : comms) EXPECT_EQ(ncclCommAbort(comm), ncclSuccess);
  }
}

// ---- non-blocking communicators ----
TEST_F(NcclDouble, NonBlockingCommunicatorsReportProgressThroughGetAsyncError) {
  ncclUniqueId id;
  ASSERT_EQ(ncclGetUniqueId(&id), ncclSuccess);
  std::vector<ncclComm_t> comms(2);
  auto poll = [](ncclComm_t c) {
    ncclResult_t state = ncclInProgress;
    int polls = 0;
    while (state == ncclInProgress) {
      EXPECT_EQ(ncclCommGetAsyncError(c, &state), ncclSuccess);
      ++polls;
      std::this_thread::yield();
    }
    EXPECT_EQ(state, ncclSuccess);
    return polls;
  };
  run_ranks(2, [&](int r) {
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    ASSERT_EQ(ncclCommInitRankConfig(&comms[r], 2, id, r, &config), ncclInProgress);
    poll(comms[r]);
    cudaStream_t st = new_stream();
    double* b = to_device(std::vector<double>{0.5 * (r + 1)});
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat64, ncclSum, comms[r], st), ncclInProgress);
    EXPECT_GE(poll(comms[r]), 2);  // ncclInProgress at least once, then ncclSuccess (enqueued)
    ASSERT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    EXPECT_EQ(to_host(b, 1), (std::vector<double>{1.5}));
    ASSERT_EQ(ncclCommFinalize(comms[r]), ncclInProgress);
    poll(comms[r]);
  });
  destroy_all(comms);
  ncclConfig_t bad{};
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRankConfig(&c, 1, id, 0, &bad), ncclInvalidArgument);  // not NCCL_CONFIG_INITIALIZER
}

// ---- initialisation and misuse ----
TEST_F(NcclDouble, VersionUniqueIdsAndInitialisationRules) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version, 22809);
  ncclUniqueId a, b;
  ASSERT_EQ(ncclGetUniqueId(&a), ncclSuccess);
  ASSERT_EQ(ncclGetUniqueId(&b), ncclSuccess);
  EXPECT_NE(std::memcmp(a.internal, b.internal, sizeof(a.internal)), 0);
  static_assert(sizeof(ncclUniqueId) == 128);
  ncclComm_t c = nullptr;
  EXPECT_EQ(ncclCommInitRank(&c, 2, a, 2), ncclInvalidArgument);
  EXPECT_EQ(ncclCommInitRank(&c, 0, a, 0), ncclInvalidArgument);
  const int same[] = {1, 1};
  ncclComm_t pair[2];
  EXPECT_EQ(ncclCommInitAll(pair, 2, same), ncclInvalidUsage);
  EXPECT_EQ(ncclCommInitAll(pair, 2, std::vector<int>{0, 7}.data()), ncclInvalidArgument);
  // Two ranks of one communicator on the same device: both fail, like NCCL's "Duplicate GPU detected".
  std::vector<ncclResult_t> results(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      cudaSetDevice(0);
      ncclComm_t comm = nullptr;
      results[r] = ncclCommInitRank(&comm, 2, b, r);
      EXPECT_EQ(comm, nullptr);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(results, (std::vector<ncclResult_t>{ncclInvalidUsage, ncclInvalidUsage}));
  EXPECT_NE(std::string(ncclGetLastError(nullptr)).find("Duplicate GPU"), std::string::npos);
  EXPECT_STREQ(ncclGetErrorString(ncclInProgress), "NCCL operation in progress");
}

TEST_F(NcclDouble, CountZeroIsANoOpEvenWithoutPeers) {
  auto comms = init_ranks(2);
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t st = new_stream();
  EXPECT_EQ(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comms[0], st), ncclSuccess);
  EXPECT_EQ(ncclReduceScatter(nullptr, nullptr, 0, ncclBfloat16, ncclAvg, comms[0], st), ncclSuccess);
  EXPECT_EQ(ncclAllGather(nullptr, nullptr, 0, ncclInt8, comms[0], st), ncclSuccess);
  EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
  // Still in step with rank 1: the next real collective matches.
  run_ranks(2, [&](int r) {
    cudaStream_t s = new_stream();
    int32_t* x = to_device(std::vector<int32_t>{r + 1});
    ASSERT_EQ(ncclAllReduce(x, x, 1, ncclInt32, ncclMin, comms[r], s), ncclSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(to_host(x, 1), (std::vector<int32_t>{1}));
  });
  destroy_all(comms);
}

TEST_F(NcclDouble, OverlapsNullBuffersAndFreedCommunicatorsAreMisuse) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>(8, 1.0f));
    EXPECT_THROW(ncclAllReduce(b, b + 1, 4, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_THROW(ncclReduceScatter(b, b + (1 - r) * 2, 2, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_THROW(ncclAllGather(b + 1, b, 2, ncclFloat32, comms[r], st), MisuseError);
    EXPECT_THROW(ncclAllReduce(nullptr, b, 4, ncclFloat32, ncclSum, comms[r], st), MisuseError);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
  });
  destroy_all(comms);
  int count = 0;
  EXPECT_THROW(ncclCommCount(comms[0], &count), MisuseError);
  EXPECT_THROW(ncclAllReduce(nullptr, nullptr, 1, ncclFloat32, ncclSum, comms[1], nullptr), MisuseError);
}

TEST_F(NcclDouble, FinalizeWaitsForOutstandingWorkThenDestroy) {
  auto comms = init_ranks(2);
  run_ranks(2, [&](int r) {
    cudaStream_t st = new_stream();
    float* b = to_device(std::vector<float>{2});
    ASSERT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclSuccess);
    ASSERT_EQ(ncclCommFinalize(comms[r]), ncclSuccess);
    EXPECT_EQ(cudaStreamQuery(st), cudaSuccess);
    EXPECT_EQ(ncclAllReduce(b, b, 1, ncclFloat32, ncclSum, comms[r], st), ncclInvalidUsage);
  });
  destroy_all(comms);
}

}  // namespace
