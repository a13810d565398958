// tests/gpu/test_kernel_trace_gpu.cpp: profile::KernelTrace on cuda:0: the kernels and copies of a traced region, each with its device time; under the emulation a clear refusal.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "device_test.h"
#include "mpt/core/kernel_trace.h"
#include "mpt/mpt.h"
#include "test_util.h"

namespace mpt {
namespace {

using testing::random_tensor;
using testing::to_gpu;

TEST(GpuKernelTrace, RecordsTheRegionsKernelsAndCopiesWithTheirDeviceTimes) {
  MPT_REQUIRE_GPU(8);
  if (testing::cuda_is_emulated()) {
    // No device time to trace: the trace refuses with the reason rather than returning an empty table.
    EXPECT_NE(profile::kernel_trace_unavailable_reason().find("emulation"), std::string::npos);
    EXPECT_NE(testing::error_message([] { profile::KernelTrace trace; }).find("emulation build"), std::string::npos);
    return;
  }
  const Tensor a = to_gpu(random_tensor({1024, 1024}, DType::F32, 1)), b = to_gpu(random_tensor({1024, 1024}, DType::F32, 2));
  Tensor warm = ops::add(a, b);  // first-use costs (module loading) outside the trace
  std::vector<profile::KernelTime> rows;
  {
    profile::KernelTrace trace;
    for (int i = 0; i < 3; ++i) warm = ops::add(warm, b);
    [[maybe_unused]] const Tensor host = warm.to(Device::cpu());  // a device-to-host copy
    rows = trace.stop();
    EXPECT_THROW(trace.stop(), Error);
  }
  uint64_t kernel_calls = 0, copied = 0;
  for (const profile::KernelTime& r : rows) {
    EXPECT_GT(r.total_ms, 0.0) << r.name;
    EXPECT_GE(r.total_ms, r.max_ms) << r.name;
    if (r.kind == "kernel") kernel_calls += r.calls;
    if (r.name == "memcpy DtoH") copied += r.bytes;
  }
  EXPECT_GE(kernel_calls, 3u);                       // the three additions (at least)
  EXPECT_GE(copied, uint64_t(1024 * 1024 * 4));     // the result copied to the host
  // Nothing leaks into the next trace, and a second trace while one runs is refused.
  profile::KernelTrace again;
  EXPECT_NE(testing::error_message([] { profile::KernelTrace nested; }).find("one at a time"), std::string::npos);
  EXPECT_TRUE(again.stop().empty());
}

}  // namespace
}  // namespace mpt
