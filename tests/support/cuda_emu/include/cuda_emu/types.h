// tests/support/cuda_emu/include/cuda_emu/types.h: CUDA qualifiers, runtime types and vector types for emulated (host C++) kernels.
#pragma once

#if defined(__CUDACC__)
#error "cuda_emu stands in for the CUDA toolkit in host C++: never compile it with nvcc"
#endif
#if defined(__CUDA_RUNTIME_H__) || defined(__CUDA_RUNTIME_API_H__) || defined(__VECTOR_TYPES_H__) || \
    defined(__DRIVER_TYPES_H__)
#error "an NVIDIA CUDA header was included in an emulated translation unit: include the cuda_emu headers only"
#endif

#include <cstddef>
#include <cstdint>

// Qualifiers. `__restrict__` is already a GCC keyword. `__noinline__` is not defined on purpose:
// libstdc++ uses __attribute__((__noinline__)). `__constant__` and `__managed__` are not emulated,
// so kernels that use them fail to compile. `extern __shared__` fails too: use MPT_DYNAMIC_SHARED.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __align__(n) __attribute__((aligned(n)))
#define __launch_bounds__(...)
// Each OS worker runs the fibers of one block at a time, so a thread_local is exactly block-shared.
#define __shared__ static thread_local

// Everything lives in mpt::cuda_emu (so no mangled name collides with the real runtime's when both
// are linked into one program) and is brought into the global namespace, where CUDA code expects it.
namespace mpt::cuda_emu {

// The values are CUDA's, so codes read the same in logs.
enum cudaError : int {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInitializationError = 3,
  cudaErrorCudartUnloading = 4,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevicePointer = 17,
  cudaErrorInvalidMemcpyDirection = 21,
  cudaErrorStubLibrary = 34,
  cudaErrorInsufficientDriver = 35,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidDevice = 101,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorIllegalState = 401,
  cudaErrorNotReady = 600,
  cudaErrorIllegalAddress = 700,
  cudaErrorLaunchFailure = 719,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureUnjoined = 904,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorStreamCaptureWrongThread = 908,
};
using cudaError_t = cudaError;

struct CUstream_st;
using cudaStream_t = CUstream_st*;

const char* cudaGetErrorString(cudaError_t error);
const char* cudaGetErrorName(cudaError_t error);
// The last launch-configuration error of this host thread (kernel failures throw instead).
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();

// Vector types with CUDA's sizes and alignments (16 bytes for the 4-wide 32-bit types).
struct uint3 {
  unsigned int x, y, z;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return {x, y, z}; }
};
struct alignas(8) float2 {
  float x, y;
};
struct float3 {
  float x, y, z;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct int3 {
  int x, y, z;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
struct alignas(8) uint2 {
  unsigned int x, y;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct alignas(16) double2 {
  double x, y;
};
static_assert(sizeof(float4) == 16 && alignof(float4) == 16 && alignof(uint4) == 16 && alignof(int4) == 16);
static_assert(sizeof(float2) == 8 && alignof(float2) == 8 && alignof(uint2) == 8 && sizeof(uint3) == 12);

constexpr float2 make_float2(float x, float y) { return {x, y}; }
constexpr float3 make_float3(float x, float y, float z) { return {x, y, z}; }
constexpr float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
constexpr int2 make_int2(int x, int y) { return {x, y}; }
constexpr int3 make_int3(int x, int y, int z) { return {x, y, z}; }
constexpr int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }
constexpr uint2 make_uint2(unsigned int x, unsigned int y) { return {x, y}; }
constexpr uint3 make_uint3(unsigned int x, unsigned int y, unsigned int z) { return {x, y, z}; }
constexpr uint4 make_uint4(unsigned int x, unsigned int y, unsigned int z, unsigned int w) { return {x, y, z, w}; }
constexpr double2 make_double2(double x, double y) { return {x, y}; }

}  // namespace mpt::cuda_emu

using mpt::cuda_emu::cudaError;
using mpt::cuda_emu::cudaError_t;
using mpt::cuda_emu::cudaErrorCudartUnloading;
using mpt::cuda_emu::cudaErrorIllegalAddress;
using mpt::cuda_emu::cudaErrorIllegalState;
using mpt::cuda_emu::cudaErrorInitializationError;
using mpt::cuda_emu::cudaErrorInsufficientDriver;
using mpt::cuda_emu::cudaErrorInvalidConfiguration;
using mpt::cuda_emu::cudaErrorInvalidDevice;
using mpt::cuda_emu::cudaErrorInvalidDevicePointer;
using mpt::cuda_emu::cudaErrorInvalidMemcpyDirection;
using mpt::cuda_emu::cudaErrorInvalidResourceHandle;
using mpt::cuda_emu::cudaErrorInvalidValue;
using mpt::cuda_emu::cudaErrorLaunchFailure;
using mpt::cuda_emu::cudaErrorMemoryAllocation;
using mpt::cuda_emu::cudaErrorNoDevice;
using mpt::cuda_emu::cudaErrorNotReady;
using mpt::cuda_emu::cudaErrorNotSupported;
using mpt::cuda_emu::cudaErrorStreamCaptureImplicit;
using mpt::cuda_emu::cudaErrorStreamCaptureInvalidated;
using mpt::cuda_emu::cudaErrorStreamCaptureUnjoined;
using mpt::cuda_emu::cudaErrorStreamCaptureUnsupported;
using mpt::cuda_emu::cudaErrorStreamCaptureWrongThread;
using mpt::cuda_emu::cudaErrorStubLibrary;
using mpt::cuda_emu::cudaGetErrorName;
using mpt::cuda_emu::cudaGetErrorString;
using mpt::cuda_emu::cudaGetLastError;
using mpt::cuda_emu::cudaPeekAtLastError;
using mpt::cuda_emu::cudaStream_t;
using mpt::cuda_emu::cudaSuccess;
using mpt::cuda_emu::CUstream_st;
using mpt::cuda_emu::dim3;
using mpt::cuda_emu::double2;
using mpt::cuda_emu::float2;
using mpt::cuda_emu::float3;
using mpt::cuda_emu::float4;
using mpt::cuda_emu::int2;
using mpt::cuda_emu::int3;
using mpt::cuda_emu::int4;
using mpt::cuda_emu::make_double2;
using mpt::cuda_emu::make_float2;
using mpt::cuda_emu::make_float3;
using mpt::cuda_emu::make_float4;
using mpt::cuda_emu::make_int2;
using mpt::cuda_emu::make_int3;
using mpt::cuda_emu::make_int4;
using mpt::cuda_emu::make_uint2;
using mpt::cuda_emu::make_uint3;
using mpt::cuda_emu::make_uint4;
using mpt::cuda_emu::uint2;
using mpt::cuda_emu::uint3;
using mpt::cuda_emu::uint4;
