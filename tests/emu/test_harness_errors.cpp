// tests/emu/test_harness_errors.cpp: what the CUDA emulation harness must refuse loudly: divergence, bad masks, bad launches, kernel exceptions.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/launch.cuh"

namespace {

using mpt::cuda_emu::KernelError;
using mpt::kernels::cuda::launch;
using mpt::kernels::cuda::LaunchConfig;

// Runs the launch and returns the KernelError's message ("" if it did not throw one).
template <class... Params, class... Args>
std::string kernel_error(void (*kernel)(Params...), const LaunchConfig& config, Args&&... args) {
  try {
    launch(kernel, config, std::forward<Args>(args)...);
  } catch (const KernelError& e) {
    return e.what();
  }
  return "";
}

#define EXPECT_CONTAINS(text, part) EXPECT_NE(std::string(text).find(part), std::string::npos) << (text)

__global__ void early_return_kernel(int* out) {
  if (threadIdx.x < 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmuErrors, SyncthreadsAfterSomeThreadsReturnedIsAnErrorNotAHang) {
  std::vector<int> out(64);
  const std::string what = kernel_error(early_return_kernel, LaunchConfig{dim3(2), dim3(64)}, out.data());
  EXPECT_CONTAINS(what, "divergent __syncthreads");
  EXPECT_CONTAINS(what, "block (0,0,0)");
}

__global__ void late_return_kernel(int* out) {
  if (threadIdx.x >= 16) __syncthreads();
  out[threadIdx.x] = 1;
}

TEST(CudaEmuErrors, ThreadsExitingWhileOthersWaitAtSyncthreadsIsAnError) {
  std::vector<int> out(64);
  EXPECT_CONTAINS(kernel_error(late_return_kernel, LaunchConfig{dim3(1), dim3(64)}, out.data()),
                  "divergent __syncthreads");
}

__global__ void two_barriers_kernel(int* out) {
  if (threadIdx.x % 2 == 0) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

TEST(CudaEmuErrors, ThreadsAtDifferentSyncthreadsCallsAreDivergent) {
  std::vector<int> out(32);
  const std::string what = kernel_error(two_barriers_kernel, LaunchConfig{dim3(1), dim3(32)}, out.data());
  EXPECT_CONTAINS(what, "different barriers");
  EXPECT_CONTAINS(what, "test_harness_errors.cpp");
}

__global__ void full_mask_in_partial_warp_kernel(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.0f, 1);
}

TEST(CudaEmuErrors, MaskNamingLanesAbsentFromAPartialWarpIsAnError) {
  std::vector<float> out(40);
  const std::string what = kernel_error(full_mask_in_partial_warp_kernel, LaunchConfig{dim3(1), dim3(40)}, out.data());
  EXPECT_CONTAINS(what, "do not exist");
  EXPECT_CONTAINS(what, "warp 1");
}

__global__ void caller_outside_mask_kernel(int* out) { out[threadIdx.x] = __shfl_sync(0x0000ffffu, 1, 0); }

TEST(CudaEmuErrors, CallerOutsideItsOwnMaskIsAnError) {
  std::vector<int> out(32);
  EXPECT_CONTAINS(kernel_error(caller_outside_mask_kernel, LaunchConfig{dim3(1), dim3(32)}, out.data()),
                  "not in its mask");
}

__global__ void source_outside_mask_kernel(int* out) {
  if (threadIdx.x < 16) out[threadIdx.x] = __shfl_xor_sync(0x0000ffffu, 1, 16);
}

TEST(CudaEmuErrors, ShuffleReadingALaneOutsideTheMaskIsAnError) {
  std::vector<int> out(32);
  EXPECT_CONTAINS(kernel_error(source_outside_mask_kernel, LaunchConfig{dim3(1), dim3(32)}, out.data()),
                  "which is not in the mask");
}

__global__ void exited_lane_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_down_sync(0xffffffffu, 1, 1);
}

TEST(CudaEmuErrors, LaneExitedBeforeAWarpCallNamingItIsAnError) {
  std::vector<int> out(32);
  for (const dim3 block : {dim3(32), dim3(64)}) {
    const std::string what = kernel_error(exited_lane_kernel, LaunchConfig{dim3(1), block}, out.data());
    EXPECT_TRUE(what.find("has exited") != std::string::npos || what.find("never complete") != std::string::npos)
        << what;
  }
}

__global__ void mismatched_warp_calls_kernel(unsigned* out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = __ballot_sync(0xffffffffu, 1);
  } else {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1u, 0);
  }
}

TEST(CudaEmuErrors, DifferentWarpIntrinsicsUnderOneMaskAreAnError) {
  std::vector<unsigned> out(32);
  EXPECT_CONTAINS(kernel_error(mismatched_warp_calls_kernel, LaunchConfig{dim3(1), dim3(32)}, out.data()),
                  "must make the same call");
}

__global__ void deadlock_kernel(int* out) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (warp == 1 && lane < 16) out[threadIdx.x] = __shfl_sync(0xffffffffu, lane, 0);
  __syncthreads();
}

TEST(CudaEmuErrors, WaitsThatCanNeverCompleteAreReportedAsDeadlock) {
  std::vector<int> out(64);
  const std::string what = kernel_error(deadlock_kernel, LaunchConfig{dim3(1), dim3(64)}, out.data());
  EXPECT_CONTAINS(what, "deadlock");
  EXPECT_CONTAINS(what, "__shfl_sync(mask=0xffffffff) in warp 1");
  EXPECT_CONTAINS(what, "__syncthreads");
}

__global__ void bad_width_kernel(int* out) { out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0, 12); }

TEST(CudaEmuErrors, ShuffleWidthMustBeAPowerOfTwo) {
  std::vector<int> out(32);
  EXPECT_CONTAINS(kernel_error(bad_width_kernel, LaunchConfig{dim3(1), dim3(32)}, out.data()), "power of two");
}

__global__ void throwing_kernel(int* out) {
  if (blockIdx.x == 2 && threadIdx.x == 5) throw std::runtime_error("boom from device code");
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}

TEST(CudaEmuErrors, ExceptionInsideAKernelSurfacesAtLaunchWithBlockAndThread) {
  std::vector<int> out(4 * 32);
  const std::string what = kernel_error(throwing_kernel, LaunchConfig{dim3(4), dim3(32)}, out.data());
  EXPECT_CONTAINS(what, "boom from device code");
  EXPECT_CONTAINS(what, "block (2,0,0)");
  EXPECT_CONTAINS(what, "thread (5,0,0)");
}

__global__ void misaligned_load_kernel(const float* p, float* out) {
  out[0] = mpt::kernels::cuda::load16(p + 1).v[0];
}

TEST(CudaEmuErrors, MisalignedSixteenByteLoadIsAnError) {
  alignas(16) float data[8] = {};
  float out = 0;
  EXPECT_CONTAINS(kernel_error(misaligned_load_kernel, LaunchConfig{dim3(1), dim3(1)}, data, &out),
                  "not 16-byte aligned");
}

__global__ void ok_kernel(int* out) { out[blockIdx.x * blockDim.x + threadIdx.x] = 1; }

TEST(CudaEmuErrors, InvalidLaunchConfigurationsReturnAnErrorCodeAndRunNothing) {
  int out[4] = {0, 0, 0, 0};
  const struct {
    LaunchConfig config;
    cudaError_t expected;
  } cases[] = {
      {{dim3(1), dim3(1025)}, cudaErrorInvalidConfiguration},
      {{dim3(1), dim3(32, 32, 2)}, cudaErrorInvalidConfiguration},
      {{dim3(1), dim3(1, 1, 65)}, cudaErrorInvalidConfiguration},
      {{dim3(1), dim3(0)}, cudaErrorInvalidConfiguration},
      {{dim3(0), dim3(1)}, cudaErrorInvalidConfiguration},
      {{dim3(1, 65536), dim3(1)}, cudaErrorInvalidConfiguration},
      {{dim3(1, 1, 65536), dim3(1)}, cudaErrorInvalidConfiguration},
      {{dim3(1), dim3(1), 227 * 1024 + 1}, cudaErrorInvalidValue},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(launch(ok_kernel, c.config, out), c.expected);
    EXPECT_EQ(cudaGetLastError(), c.expected);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  }
  EXPECT_EQ(out[0], 0);
  EXPECT_EQ(launch(ok_kernel, LaunchConfig{dim3(2), dim3(2), 227 * 1024}, out), cudaSuccess);
  EXPECT_EQ(out[0] + out[1] + out[2] + out[3], 4);
}

TEST(CudaEmuErrors, DeviceIntrinsicsOutsideAKernelThrow) {
  EXPECT_THROW(__syncthreads(), KernelError);
  EXPECT_THROW(__shfl_sync(0xffffffffu, 1, 0), KernelError);
}

TEST(CudaEmuErrors, TheHarnessKeepsWorkingAfterAFailedKernel) {
  std::vector<int> out(64);
  EXPECT_FALSE(kernel_error(deadlock_kernel, LaunchConfig{dim3(3), dim3(64)}, out.data()).empty());
  std::vector<int> ok(3 * 64, 0);
  ASSERT_EQ(launch(ok_kernel, LaunchConfig{dim3(3), dim3(64)}, ok.data()), cudaSuccess);
  for (int v : ok) EXPECT_EQ(v, 1);
}

}  // namespace
