// tests/support/cuda_emu/include/cuda_emu/runtime_api.h: the cudart subset the emulated CUDA backend implements (emulation builds only).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_emu/types.h"
#include "library_types.h"

namespace mpt::cuda_emu {

struct CUevent_st;
using cudaEvent_t = CUevent_st*;
struct CUmemPoolHandle_st;
using cudaMemPool_t = CUmemPoolHandle_st*;
struct CUgraph_st;
using cudaGraph_t = CUgraph_st*;
struct CUgraphExec_st;
using cudaGraphExec_t = CUgraphExec_st*;
struct CUgraphNode_st;
using cudaGraphNode_t = CUgraphNode_st*;
struct cudaGraphEdgeData;  // opaque here: the double reports no dependencies

enum cudaStreamCaptureMode : int {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus : int {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};

enum cudaMemcpyKind : int {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

enum cudaMemPoolAttr : int {
  cudaMemPoolReuseFollowEventDependencies = 0x1,
  cudaMemPoolReuseAllowOpportunistic = 0x2,
  cudaMemPoolReuseAllowInternalDependencies = 0x3,
  cudaMemPoolAttrReleaseThreshold = 0x4,
  cudaMemPoolAttrReservedMemCurrent = 0x5,
  cudaMemPoolAttrReservedMemHigh = 0x6,
  cudaMemPoolAttrUsedMemCurrent = 0x7,
  cudaMemPoolAttrUsedMemHigh = 0x8,
};
enum cudaMemAllocationType : int { cudaMemAllocationTypeInvalid = 0, cudaMemAllocationTypePinned = 1 };
enum cudaMemAllocationHandleType : int { cudaMemHandleTypeNone = 0 };
enum cudaMemLocationType : int { cudaMemLocationTypeInvalid = 0, cudaMemLocationTypeDevice = 1 };
struct cudaMemLocation {
  cudaMemLocationType type;
  int id;
};
struct cudaMemPoolProps {
  cudaMemAllocationType allocType;
  cudaMemAllocationHandleType handleTypes;
  cudaMemLocation location;
  void* win32SecurityAttributes;
  size_t maxSize;
  unsigned short usage;
  unsigned char reserved[54];
};

enum cudaFuncAttribute : int { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };

// The fields mptrain and its tests read (the real struct has many more).
struct cudaDeviceProp {
  char name[256];
  size_t totalGlobalMem;
  size_t sharedMemPerBlock;
  size_t sharedMemPerBlockOptin;
  size_t sharedMemPerMultiprocessor;
  int regsPerBlock;
  int warpSize;
  int maxThreadsPerBlock;
  int maxThreadsDim[3];
  int maxGridSize[3];
  int major;
  int minor;
  int multiProcessorCount;
  int maxThreadsPerMultiProcessor;
  int l2CacheSize;
  int memoryBusWidth;
  int unifiedAddressing;
  int pciBusID;
  int pciDeviceID;
};

inline constexpr unsigned cudaStreamDefault = 0x00;
inline constexpr unsigned cudaStreamNonBlocking = 0x01;
inline constexpr unsigned cudaEventDefault = 0x00;
inline constexpr unsigned cudaEventBlockingSync = 0x01;
inline constexpr unsigned cudaEventDisableTiming = 0x02;
inline constexpr unsigned cudaHostAllocDefault = 0x00;
inline constexpr unsigned cudaHostAllocPortable = 0x01;
inline constexpr unsigned cudaHostAllocMapped = 0x02;
inline constexpr unsigned cudaHostAllocWriteCombined = 0x04;
inline const cudaStream_t cudaStreamLegacy = reinterpret_cast<cudaStream_t>(0x1);
inline const cudaStream_t cudaStreamPerThread = reinterpret_cast<cudaStream_t>(0x2);

// Versions and devices.
cudaError_t cudaDriverGetVersion(int* version);
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value);

// Memory.
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMallocHost(void** ptr, size_t bytes);
cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags);
cudaError_t cudaFreeHost(void* ptr);
cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream);
cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t bytes, cudaMemPool_t pool, cudaStream_t stream);
cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream);
cudaError_t cudaMemPoolCreate(cudaMemPool_t* pool, const cudaMemPoolProps* props);
cudaError_t cudaMemPoolDestroy(cudaMemPool_t pool);
cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t pool, cudaMemPoolAttr attr, void* value);
cudaError_t cudaMemPoolTrimTo(cudaMemPool_t pool, size_t min_bytes_to_keep);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream);
cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t bytes);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t stream);
cudaError_t cudaMemset(void* dst, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream);

// Streams and events.
cudaError_t cudaStreamCreate(cudaStream_t* stream);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaStreamQuery(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t* event);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t event);
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaEventSynchronize(cudaEvent_t event);
cudaError_t cudaEventQuery(cudaEvent_t event);
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end);

// Stream capture and graphs (cudart_graph.cpp): work issued to a capturing stream is recorded, and cudaGraphLaunch
// replays it on the launch stream.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id = nullptr,
                                     cudaGraph_t* graph = nullptr, const cudaGraphNode_t** dependencies = nullptr,
                                     const cudaGraphEdgeData** edge_data = nullptr, size_t* num_dependencies = nullptr);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags = 0);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);

}  // namespace mpt::cuda_emu

using mpt::cuda_emu::CUevent_st;
using mpt::cuda_emu::cudaGraph_t;
using mpt::cuda_emu::cudaGraphDestroy;
using mpt::cuda_emu::cudaGraphEdgeData;
using mpt::cuda_emu::cudaGraphExec_t;
using mpt::cuda_emu::cudaGraphExecDestroy;
using mpt::cuda_emu::cudaGraphInstantiate;
using mpt::cuda_emu::cudaGraphLaunch;
using mpt::cuda_emu::cudaGraphNode_t;
using mpt::cuda_emu::cudaStreamBeginCapture;
using mpt::cuda_emu::cudaStreamCaptureMode;
using mpt::cuda_emu::cudaStreamCaptureModeGlobal;
using mpt::cuda_emu::cudaStreamCaptureModeRelaxed;
using mpt::cuda_emu::cudaStreamCaptureModeThreadLocal;
using mpt::cuda_emu::cudaStreamCaptureStatus;
using mpt::cuda_emu::cudaStreamCaptureStatusActive;
using mpt::cuda_emu::cudaStreamCaptureStatusInvalidated;
using mpt::cuda_emu::cudaStreamCaptureStatusNone;
using mpt::cuda_emu::cudaStreamEndCapture;
using mpt::cuda_emu::cudaStreamGetCaptureInfo;
using mpt::cuda_emu::cudaStreamIsCapturing;
using mpt::cuda_emu::cudaDeviceProp;
using mpt::cuda_emu::cudaEvent_t;
using mpt::cuda_emu::cudaFuncAttribute;
using mpt::cuda_emu::cudaFuncAttributeMaxDynamicSharedMemorySize;
using mpt::cuda_emu::cudaMemAllocationHandleType;
using mpt::cuda_emu::cudaMemAllocationType;
using mpt::cuda_emu::cudaMemAllocationTypePinned;
using mpt::cuda_emu::cudaMemcpyDefault;
using mpt::cuda_emu::cudaMemcpyDeviceToDevice;
using mpt::cuda_emu::cudaMemcpyDeviceToHost;
using mpt::cuda_emu::cudaMemcpyHostToDevice;
using mpt::cuda_emu::cudaMemcpyHostToHost;
using mpt::cuda_emu::cudaMemcpyKind;
using mpt::cuda_emu::cudaMemHandleTypeNone;
using mpt::cuda_emu::cudaMemLocation;
using mpt::cuda_emu::cudaMemLocationType;
using mpt::cuda_emu::cudaMemLocationTypeDevice;
using mpt::cuda_emu::cudaMemPool_t;
using mpt::cuda_emu::cudaMemPoolAttr;
using mpt::cuda_emu::cudaMemPoolAttrReleaseThreshold;
using mpt::cuda_emu::cudaMemPoolAttrReservedMemCurrent;
using mpt::cuda_emu::cudaMemPoolAttrReservedMemHigh;
using mpt::cuda_emu::cudaMemPoolAttrUsedMemCurrent;
using mpt::cuda_emu::cudaMemPoolAttrUsedMemHigh;
using mpt::cuda_emu::cudaMemPoolProps;
using mpt::cuda_emu::cudaEventBlockingSync;
using mpt::cuda_emu::cudaEventDefault;
using mpt::cuda_emu::cudaEventDisableTiming;
using mpt::cuda_emu::cudaHostAllocDefault;
using mpt::cuda_emu::cudaHostAllocMapped;
using mpt::cuda_emu::cudaHostAllocPortable;
using mpt::cuda_emu::cudaHostAllocWriteCombined;
using mpt::cuda_emu::cudaStreamDefault;
using mpt::cuda_emu::cudaStreamLegacy;
using mpt::cuda_emu::cudaStreamNonBlocking;
using mpt::cuda_emu::cudaStreamPerThread;
using mpt::cuda_emu::cudaDeviceSynchronize;
using mpt::cuda_emu::cudaDriverGetVersion;
using mpt::cuda_emu::cudaEventCreate;
using mpt::cuda_emu::cudaEventCreateWithFlags;
using mpt::cuda_emu::cudaEventDestroy;
using mpt::cuda_emu::cudaEventElapsedTime;
using mpt::cuda_emu::cudaEventQuery;
using mpt::cuda_emu::cudaEventRecord;
using mpt::cuda_emu::cudaEventSynchronize;
using mpt::cuda_emu::cudaFree;
using mpt::cuda_emu::cudaFreeAsync;
using mpt::cuda_emu::cudaFreeHost;
using mpt::cuda_emu::cudaFuncSetAttribute;
using mpt::cuda_emu::cudaGetDevice;
using mpt::cuda_emu::cudaGetDeviceCount;
using mpt::cuda_emu::cudaGetDeviceProperties;
using mpt::cuda_emu::cudaHostAlloc;
using mpt::cuda_emu::cudaMalloc;
using mpt::cuda_emu::cudaMallocAsync;
using mpt::cuda_emu::cudaMallocFromPoolAsync;
using mpt::cuda_emu::cudaMallocHost;
using mpt::cuda_emu::cudaMemcpy;
using mpt::cuda_emu::cudaMemcpyAsync;
using mpt::cuda_emu::cudaMemcpyPeer;
using mpt::cuda_emu::cudaMemcpyPeerAsync;
using mpt::cuda_emu::cudaMemPoolCreate;
using mpt::cuda_emu::cudaMemPoolDestroy;
using mpt::cuda_emu::cudaMemPoolGetAttribute;
using mpt::cuda_emu::cudaMemPoolSetAttribute;
using mpt::cuda_emu::cudaMemPoolTrimTo;
using mpt::cuda_emu::cudaMemset;
using mpt::cuda_emu::cudaMemsetAsync;
using mpt::cuda_emu::cudaRuntimeGetVersion;
using mpt::cuda_emu::cudaSetDevice;
using mpt::cuda_emu::cudaStreamCreate;
using mpt::cuda_emu::cudaStreamCreateWithFlags;
using mpt::cuda_emu::cudaStreamDestroy;
using mpt::cuda_emu::cudaStreamQuery;
using mpt::cuda_emu::cudaStreamSynchronize;
using mpt::cuda_emu::cudaStreamWaitEvent;
