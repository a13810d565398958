// tests/core/test_device.cpp: Device parsing and selection, the CUDA probe, CPU features, streams and events.
#include <gtest/gtest.h>

#include "test_util.h"

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "mpt/core/device.h"
#include "mpt/core/error.h"
#include "mpt/core/memory.h"
#include "mpt/core/stream.h"
#include "mpt/core/tensor.h"

using mpt::Device;

namespace {

using mpt::testing::contains;
using mpt::testing::error_message;

// Sets an environment variable for one scope.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    ::setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      ::unsetenv(name_);
    } else {
      ::setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

#define SKIP_IF_GPU() \
  if (mpt::cuda_status().usable) GTEST_SKIP() << "a GPU is usable here; this checks the no-GPU behaviour"
#define SKIP_IF_NO_GPU() \
  if (!mpt::cuda_status().usable) GTEST_SKIP() << "no usable GPU: " << mpt::cuda_status().reason

TEST(Device, ParseValid) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  Device c = Device::parse("cuda");
  EXPECT_TRUE(c.is_cuda());
  EXPECT_EQ(c.index(), 0);
  Device c3 = Device::parse("cuda:3");  // only the syntax is checked
  EXPECT_TRUE(c3.is_cuda());
  EXPECT_EQ(c3.index(), 3);
  EXPECT_EQ(c3.str(), "cuda:3");
  EXPECT_EQ(Device::parse("cuda:12").index(), 12);
  EXPECT_EQ(Device::cpu().str(), "cpu");
  EXPECT_EQ(fmt::format("{}", Device::parse("cuda:1")), "cuda:1");
  EXPECT_NE(Device::parse("cuda:0"), Device::cpu());
  EXPECT_NE(Device::parse("cuda:0"), Device::parse("cuda:1"));
}

TEST(Device, ParseRejectsBadStrings) {
  for (const char* bad : {"gpu", "cuda:-1", "cuda:x", "", "cuda:", "CPU", "cuda:1x", "cuda:+1", " cpu", "cuda:99999999",
                          "cuda0", "cpu:0"}) {
    std::string msg = error_message([&] { Device::parse(bad); });
    EXPECT_TRUE(msg.starts_with("[device] cannot parse '" + std::string(bad) + "'")) << msg;
  }
}

TEST(Device, NegativeCudaIndexIsAnError) {
  std::string msg = error_message([] { Device::cuda(-1); });
  EXPECT_TRUE(msg.starts_with("[cuda] cuda:-1 was requested")) << msg;
}

TEST(CudaStatus, BuiltMatchesTheBuild) {
#if defined(MPT_WITH_CUDA)
  EXPECT_TRUE(mpt::cuda_status().built);
  EXPECT_GT(mpt::cuda_status().runtime_version, 0);
#else
  EXPECT_FALSE(mpt::cuda_status().built);
  EXPECT_EQ(mpt::cuda_status().reason,
            "mptrain was built without CUDA (MPT_CUDA=OFF, or no nvcc at configure time); using the CPU");
#endif
  EXPECT_EQ(&mpt::cuda_status(), &mpt::cuda_status());  // probed once, cached
}

TEST(CudaStatus, ProbeIsConsistent) {
  const mpt::CudaStatus& s = mpt::cuda_status();
  EXPECT_FALSE(s.reason.empty());
  EXPECT_EQ(s.devices.size(), static_cast<size_t>(s.device_count));
  EXPECT_EQ(s.usable, s.built && s.driver_version > 0 && s.device_count > 0);
  if (s.usable) {
    EXPECT_TRUE(s.reason.starts_with("using cuda:0 (")) << s.reason;
  } else {
    EXPECT_TRUE(s.reason.ends_with("; using the CPU")) << s.reason;
  }
}

TEST(CudaStatus, NoGpuBehaviour) {
  SKIP_IF_GPU();
  const mpt::CudaStatus& s = mpt::cuda_status();
  EXPECT_FALSE(s.usable);
  EXPECT_EQ(s.device_count, 0);
  EXPECT_EQ(Device::best(), Device::cpu());
  EXPECT_EQ(Device::best_reason(), s.reason);
#if defined(MPT_WITH_CUDA)
  // This machine type has the toolkit but no driver, or a driver without a device.
  const std::string no_driver = "no NVIDIA driver found (cudaDriverGetVersion returned 0); using the CPU";
  EXPECT_TRUE(s.driver_version == 0 ? s.reason == no_driver : contains(s.reason, "found but")) << s.reason;
#else
  EXPECT_TRUE(contains(s.reason, "built without CUDA")) << s.reason;
#endif
  for (int i : {0, 1}) {
    std::string msg = error_message([&] { Device::cuda(i); });
    EXPECT_TRUE(msg.starts_with(fmt::format("[cuda] cuda:{} was requested but CUDA is not available: ", i))) << msg;
    EXPECT_TRUE(contains(msg, s.reason)) << msg;
  }
}

TEST(CudaStatus, NoGpuStreamsAndEventsThrow) {
  SKIP_IF_GPU();
  const Device cuda0 = Device::parse("cuda:0");
  EXPECT_TRUE(contains(error_message([&] { mpt::Stream s(cuda0); }), mpt::cuda_status().reason));
  EXPECT_TRUE(contains(error_message([&] { mpt::Stream::current(cuda0); }), mpt::cuda_status().reason));
  EXPECT_TRUE(contains(error_message([&] { mpt::Event e(cuda0); }), mpt::cuda_status().reason));
}

TEST(Device, ForceCpuPicksTheCpu) {
  {
    ScopedEnv env("MPT_FORCE_CPU", "1");
    EXPECT_EQ(Device::best(), Device::cpu());
    EXPECT_TRUE(Device::best_reason().starts_with("MPT_FORCE_CPU is set; using the CPU")) << Device::best_reason();
  }
  {
    ScopedEnv env("MPT_FORCE_CPU", "0");
    EXPECT_EQ(Device::best().is_cuda(), mpt::cuda_status().usable);
  }
}

TEST(CudaStatus, GpuBehaviour) {
  SKIP_IF_NO_GPU();
  const mpt::CudaStatus& s = mpt::cuda_status();
  EXPECT_EQ(Device::best(), Device::parse("cuda:0"));
  EXPECT_EQ(Device::cuda(0).index(), 0);
  EXPECT_GT(s.devices[0].total_memory, 0u);
  EXPECT_GE(s.devices[0].major, 5);
  std::string msg = error_message([&] { Device::cuda(s.device_count); });
  EXPECT_TRUE(contains(msg, fmt::format("{} CUDA device(s) were found", s.device_count))) << msg;
}

#if defined(__x86_64__)
TEST(CpuFeatures, MatchCompilerRuntimeDetection) {
  __builtin_cpu_init();
  const mpt::CpuFeatures& f = mpt::cpu_features();
  EXPECT_EQ(f.avx2, __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(f.f16c, __builtin_cpu_supports("f16c") != 0);
  EXPECT_EQ(f.avx512f, __builtin_cpu_supports("avx512f") != 0);
  EXPECT_EQ(f.avx512bw, __builtin_cpu_supports("avx512bw") != 0);
  EXPECT_EQ(f.avx512vl, __builtin_cpu_supports("avx512vl") != 0);
  EXPECT_EQ(f.avx512_bf16, __builtin_cpu_supports("avx512bf16") != 0);
  EXPECT_EQ(f.avx512_fp16, __builtin_cpu_supports("avx512fp16") != 0);
  EXPECT_EQ(f.amx_bf16, __builtin_cpu_supports("amx-bf16") != 0);
  EXPECT_TRUE(f.vendor == "GenuineIntel" || f.vendor == "AuthenticAMD") << f.vendor;
}
#endif

TEST(CpuFeatures, Cores) {
  const mpt::CpuFeatures& f = mpt::cpu_features();
  EXPECT_EQ(f.logical_cores, static_cast<int>(std::thread::hardware_concurrency()));
  EXPECT_GE(f.omp_threads, 1);
}

TEST(DeviceReport, NamesStatusBestDeviceAndCpu) {
  std::string report = mpt::device_report();
  EXPECT_TRUE(contains(report, "CUDA status:  " + mpt::cuda_status().reason)) << report;
  EXPECT_TRUE(contains(report, "best device:  " + Device::best().str())) << report;
  EXPECT_TRUE(contains(report, fmt::format("avx512f {}", mpt::cpu_features().avx512f ? "yes" : "no"))) << report;
  EXPECT_TRUE(contains(report, fmt::format("{} logical cores", mpt::cpu_features().logical_cores))) << report;
}

TEST(Stream, CpuStreamIsAPlaceholder) {
  mpt::Stream s(Device::cpu());
  EXPECT_EQ(s.native(), nullptr);
  EXPECT_EQ(s.device(), Device::cpu());
  EXPECT_NO_THROW(s.synchronize());
  mpt::Stream cur = mpt::Stream::current(Device::cpu());
  EXPECT_EQ(cur.native(), nullptr);
  mpt::Stream moved = std::move(s);
  EXPECT_EQ(moved.device(), Device::cpu());
}

TEST(Event, CpuEventsMeasureWallClock) {
  mpt::Stream s(Device::cpu());
  mpt::Event start(Device::cpu(), /*timing=*/true), end(Device::cpu(), /*timing=*/true);
  start.record(s);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(s);
  EXPECT_TRUE(end.ready());
  const float ms = start.elapsed_ms(end);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 5000.0f);
  mpt::Event moved = std::move(end);
  EXPECT_FLOAT_EQ(start.elapsed_ms(moved), ms);
}

TEST(Event, ElapsedNeedsTimingAndRecording) {
  mpt::Stream s(Device::cpu());
  mpt::Event a(Device::cpu(), true), b(Device::cpu(), true), untimed(Device::cpu(), false);
  EXPECT_TRUE(contains(error_message([&] { a.elapsed_ms(b); }), "recorded"));
  a.record(s);
  untimed.record(s);
  EXPECT_TRUE(contains(error_message([&] { a.elapsed_ms(untimed); }), "timing=true"));
}

// StreamGuard makes a stream the device's current one on this thread (ops and allocations use it), nests, leaves
// other threads alone, and restores the previous one; on the CPU it does nothing.
TEST(Stream, GpuStreamGuardSetsTheCurrentStream) {
  SKIP_IF_NO_GPU();
  const Device gpu = Device::cuda(0);
  const void* legacy = mpt::Stream::current(gpu).native();
  mpt::Stream a(gpu), b(gpu);
  {
    const mpt::StreamGuard ga(a);
    EXPECT_EQ(mpt::Stream::current(gpu).native(), a.native());
    {
      const mpt::StreamGuard gb(b);
      EXPECT_EQ(mpt::Stream::current(gpu).native(), b.native());
      const void* other_thread = nullptr;
      std::thread([&] { other_thread = mpt::Stream::current(gpu).native(); }).join();
      EXPECT_EQ(other_thread, legacy);
      const mpt::Tensor t = mpt::Tensor::ones({4}, mpt::DType::F32, gpu);  // allocated and filled on b
      EXPECT_EQ(t.storage()->stream(), b.native());
      EXPECT_EQ(t.to_vector<float>(), std::vector<float>(4, 1.0f));
    }
    EXPECT_EQ(mpt::Stream::current(gpu).native(), a.native());
  }
  EXPECT_EQ(mpt::Stream::current(gpu).native(), legacy);
  const mpt::StreamGuard cpu_guard(mpt::Stream(Device::cpu()));
  EXPECT_EQ(mpt::Stream::current(gpu).native(), legacy);
}

TEST(Stream, GpuStreamsAndEventsOrderWork) {
  SKIP_IF_NO_GPU();
  const Device gpu = Device::cuda(0);
  mpt::Stream producer(gpu), consumer(gpu);
  EXPECT_NE(producer.native(), nullptr);
  EXPECT_NE(producer.native(), consumer.native());
  const size_t n = size_t{64} << 20;  // big enough that the copies take a while
  std::vector<uint8_t> host(n), back(n, 0);
  for (size_t i = 0; i < n; ++i) host[i] = static_cast<uint8_t>(i * 7 + 3);
  auto a = mpt::Storage::allocate(n, producer);
  auto b = mpt::Storage::allocate(n, producer);
  mpt::Event start(gpu, true), done(gpu, true);
  start.record(producer);
  mpt::copy_bytes(a->data(), gpu, host.data(), Device::cpu(), n, producer);
  mpt::copy_bytes(b->data(), gpu, a->data(), gpu, n, producer);
  done.record(producer);
  done.wait(consumer);  // the consumer's read of b waits for the producer's writes
  mpt::copy_bytes(back.data(), Device::cpu(), b->data(), gpu, n, consumer);
  consumer.synchronize();
  EXPECT_TRUE(done.ready());
  EXPECT_EQ(back, host);
  EXPECT_GT(start.elapsed_ms(done), 0.0f);
  producer.synchronize();
}

}  // namespace
