// tests/support/cuda_emu/include/nccl.h: in emulation builds, <nccl.h> resolves here: NCCL 2.28.9's API (names and values) served by a CPU double.
#pragma once

#include <climits>
#include <cstddef>

#include "cuda_emu/runtime_api.h"

// Values are NCCL 2.28.9's (nccl.h), so codes and version numbers read the same in logs.
#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX ""
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))
#define NCCL_COMM_NULL nullptr
#define NCCL_UNIQUE_ID_BYTES 128
#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_CONFIG_UNDEF_PTR nullptr

namespace mpt::cuda_emu {

struct ncclComm;
using ncclComm_t = ncclComm*;

struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8,
};

enum ncclRedOp_t : int {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,  // user operations (ncclRedOpCreatePreMulSum) start here
  ncclMaxRedOp = 0x7fffffff,
};

enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12,
};

enum ncclScalarResidence_t : int {
  ncclScalarDevice = 0,         // read from device memory when the collective runs
  ncclScalarHostImmediate = 1,  // read from host memory before ncclRedOpCreatePreMulSum returns
};

// The layout of ncclConfig_v22800; the double reads magic, version and blocking.
struct ncclConfig_t {
  size_t size;
  unsigned int magic;
  unsigned int version;
  int blocking;
  int cgaClusterSize;
  int minCTAs;
  int maxCTAs;
  const char* netName;
  int splitShare;
  int trafficClass;
  const char* commName;
  int collnetEnable;
  int CTAPolicy;
  int shrinkShare;
  int nvlsCTAs;
  int nChannelsPerNetPeer;
  int nvlinkCentricSched;
};

#define NCCL_CONFIG_INITIALIZER                                                                                   \
  {sizeof(ncclConfig_t), 0xcafebeef, NCCL_VERSION(NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH), NCCL_CONFIG_UNDEF_INT,     \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR,                    \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_PTR, NCCL_CONFIG_UNDEF_INT,                    \
   NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT, NCCL_CONFIG_UNDEF_INT,                    \
   NCCL_CONFIG_UNDEF_INT}

ncclResult_t ncclGetVersion(int* version);
ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank,
                                    ncclConfig_t* config);
ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist);
ncclResult_t ncclCommFinalize(ncclComm_t comm);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);
ncclResult_t ncclCommCount(const ncclComm_t comm, int* count);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank);
const char* ncclGetErrorString(ncclResult_t result);
const char* ncclGetLastError(ncclComm_t comm);

ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t datatype,
                                      ncclScalarResidence_t residence, ncclComm_t comm);
ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm);

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream);

ncclResult_t ncclGroupStart();
ncclResult_t ncclGroupEnd();

// ---- Controls of the double (tests only; not NCCL API). Defaults are the most likely real behaviour. ----

// How f16/bf16/FP8 reductions round [U]. StepRounded (default): like NCCL's ring/tree kernels, each step of the
// rank-order reduction rounds to the data type (FP8 steps go through half: fp8(half(a) op half(b))).
// FloatAccumulate: accumulate in float and round once at the end (what NVLS reductions with .acc::f32 do).
enum class NcclLowPrecisionSum { StepRounded, FloatAccumulate };
void nccl_set_low_precision_sum(NcclLowPrecisionSum mode);
// FP8 results beyond the format's range [U]: Saturate (default, __nv_fp8_e4m3(half) is SATFINITE) to +-max, or
// NoSaturate: NaN for E4M3, +-Inf for E5M2.
enum class NcclFp8Overflow { Saturate, NoSaturate };
void nccl_set_fp8_overflow(NcclFp8Overflow mode);
// The part of an in-place ReduceScatter's buffer outside this rank's block [U]: Keep (default) or Poison (0xFF).
enum class NcclInPlaceRest { Keep, Poison };
void nccl_set_reduce_scatter_in_place_rest(NcclInPlaceRest mode);
// Whether the peers of a rank that called ncclCommAbort see ncclRemoteError from ncclCommGetAsyncError [U]
// (default true, as NCCL's proxy reports a closed connection; false: they only hang, as over plain P2P).
void nccl_set_report_peer_abort(bool report);
// Whether calls on a non-blocking communicator (config.blocking = 0) return ncclInProgress, with
// ncclCommGetAsyncError reporting ncclInProgress once before ncclSuccess (default true: "any call may").
void nccl_set_nonblocking_in_progress(bool in_progress);
// The next collective `comm` issues fails asynchronously: it returns ncclSuccess, its receive buffer is poisoned,
// ncclCommGetAsyncError(comm) returns `error` and the peers never see this rank arrive (they hang until aborted).
void nccl_inject_failure(ncclComm_t comm, ncclResult_t error);
// Back to the defaults above.
void nccl_reset_controls();

}  // namespace mpt::cuda_emu

using mpt::cuda_emu::ncclComm;
using mpt::cuda_emu::ncclComm_t;
using mpt::cuda_emu::ncclConfig_t;
using mpt::cuda_emu::ncclDataType_t;
using mpt::cuda_emu::ncclRedOp_t;
using mpt::cuda_emu::ncclResult_t;
using mpt::cuda_emu::ncclScalarResidence_t;
using mpt::cuda_emu::ncclUniqueId;

using mpt::cuda_emu::ncclInProgress;
using mpt::cuda_emu::ncclInternalError;
using mpt::cuda_emu::ncclInvalidArgument;
using mpt::cuda_emu::ncclInvalidUsage;
using mpt::cuda_emu::ncclNumResults;
using mpt::cuda_emu::ncclRemoteError;
using mpt::cuda_emu::ncclSuccess;
using mpt::cuda_emu::ncclSystemError;
using mpt::cuda_emu::ncclUnhandledCudaError;

using mpt::cuda_emu::ncclAvg;
using mpt::cuda_emu::ncclMax;
using mpt::cuda_emu::ncclMaxRedOp;
using mpt::cuda_emu::ncclMin;
using mpt::cuda_emu::ncclNumOps;
using mpt::cuda_emu::ncclProd;
using mpt::cuda_emu::ncclSum;

using mpt::cuda_emu::ncclBfloat16;
using mpt::cuda_emu::ncclChar;
using mpt::cuda_emu::ncclDouble;
using mpt::cuda_emu::ncclFloat;
using mpt::cuda_emu::ncclFloat16;
using mpt::cuda_emu::ncclFloat32;
using mpt::cuda_emu::ncclFloat64;
using mpt::cuda_emu::ncclFloat8e4m3;
using mpt::cuda_emu::ncclFloat8e5m2;
using mpt::cuda_emu::ncclHalf;
using mpt::cuda_emu::ncclInt;
using mpt::cuda_emu::ncclInt32;
using mpt::cuda_emu::ncclInt64;
using mpt::cuda_emu::ncclInt8;
using mpt::cuda_emu::ncclNumTypes;
using mpt::cuda_emu::ncclUint32;
using mpt::cuda_emu::ncclUint64;
using mpt::cuda_emu::ncclUint8;

using mpt::cuda_emu::ncclScalarDevice;
using mpt::cuda_emu::ncclScalarHostImmediate;

using mpt::cuda_emu::ncclAllGather;
using mpt::cuda_emu::ncclAllReduce;
using mpt::cuda_emu::ncclBroadcast;
using mpt::cuda_emu::ncclCommAbort;
using mpt::cuda_emu::ncclCommCount;
using mpt::cuda_emu::ncclCommCuDevice;
using mpt::cuda_emu::ncclCommDestroy;
using mpt::cuda_emu::ncclCommFinalize;
using mpt::cuda_emu::ncclCommGetAsyncError;
using mpt::cuda_emu::ncclCommInitAll;
using mpt::cuda_emu::ncclCommInitRank;
using mpt::cuda_emu::ncclCommInitRankConfig;
using mpt::cuda_emu::ncclCommUserRank;
using mpt::cuda_emu::ncclGetErrorString;
using mpt::cuda_emu::ncclGetLastError;
using mpt::cuda_emu::ncclGetUniqueId;
using mpt::cuda_emu::ncclGetVersion;
using mpt::cuda_emu::ncclGroupEnd;
using mpt::cuda_emu::ncclGroupStart;
using mpt::cuda_emu::ncclRedOpCreatePreMulSum;
using mpt::cuda_emu::ncclRedOpDestroy;
using mpt::cuda_emu::ncclReduce;
using mpt::cuda_emu::ncclReduceScatter;
