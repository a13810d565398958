// tests/support/cuda_emu/include/cudnn_graph.h: emulation builds: the cuDNN names mptrain uses, with cuDNN 9's values; cuDNN itself is not emulated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cuda_emu/runtime_api.h"

#define CUDNN_MAJOR 9
#define CUDNN_MINOR 19
#define CUDNN_PATCHLEVEL 0
#define CUDNN_VERSION (CUDNN_MAJOR * 10000 + CUDNN_MINOR * 100 + CUDNN_PATCHLEVEL)

namespace mpt::cuda_emu {

enum cudnnStatus_t : int {
  CUDNN_STATUS_SUCCESS = 0,
  CUDNN_STATUS_NOT_INITIALIZED = 1001,
  CUDNN_STATUS_BAD_PARAM = 2000,
  CUDNN_STATUS_NOT_SUPPORTED = 3000,
  CUDNN_STATUS_EXECUTION_FAILED_CUDART = 5003,
};
enum cudnnDataType_t : int {
  CUDNN_DATA_FLOAT = 0,
  CUDNN_DATA_HALF = 2,
  CUDNN_DATA_INT32 = 4,
  CUDNN_DATA_BFLOAT16 = 9,
  CUDNN_DATA_BOOLEAN = 11,
};
enum cudnnReduceTensorOp_t : int {
  CUDNN_REDUCE_TENSOR_ADD = 0,
  CUDNN_REDUCE_TENSOR_MAX = 3,
};
enum cudnnPointwiseMode_t : int {
  CUDNN_POINTWISE_ADD = 0,
  CUDNN_POINTWISE_DIV = 6,
  CUDNN_POINTWISE_MUL = 1,
  CUDNN_POINTWISE_SUB = 9,
  CUDNN_POINTWISE_EXP = 13,
  CUDNN_POINTWISE_LOG = 15,
  CUDNN_POINTWISE_IDENTITY = 21,
  CUDNN_POINTWISE_CMP_GE = 303,
  CUDNN_POINTWISE_CMP_LT = 304,
  CUDNN_POINTWISE_LOGICAL_AND = 400,
  CUDNN_POINTWISE_GEN_INDEX = 501,
  CUDNN_POINTWISE_BINARY_SELECT = 601,
};
enum cudnnBackendAttributeName_t : int {
  CUDNN_ATTR_POINTWISE_MODE = 0,
  CUDNN_ATTR_POINTWISE_MATH_PREC = 1,
  CUDNN_ATTR_POINTWISE_AXIS = 9,
  CUDNN_ATTR_ENGINEHEUR_MODE = 200,
  CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
  CUDNN_ATTR_ENGINEHEUR_RESULTS = 202,
  CUDNN_ATTR_ENGINEHEUR_DEVICEPROP = 204,
  CUDNN_ATTR_EXECUTION_PLAN_HANDLE = 400,
  CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
  CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
  CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP = 407,
  CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750,
  CUDNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
  CUDNN_ATTR_OPERATION_POINTWISE_BDESC = 752,
  CUDNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
  CUDNN_ATTR_OPERATION_POINTWISE_TDESC = 758,
  CUDNN_ATTR_OPERATIONGRAPH_HANDLE = 800,
  CUDNN_ATTR_OPERATIONGRAPH_OPS = 801,
  CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900,
  CUDNN_ATTR_TENSOR_DATA_TYPE = 901,
  CUDNN_ATTR_TENSOR_DIMENSIONS = 902,
  CUDNN_ATTR_TENSOR_STRIDES = 903,
  CUDNN_ATTR_TENSOR_UNIQUE_ID = 906,
  CUDNN_ATTR_TENSOR_IS_VIRTUAL = 907,
  CUDNN_ATTR_TENSOR_IS_BY_VALUE = 908,
  CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000,
  CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
  CUDNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
  CUDNN_ATTR_MATMUL_COMP_TYPE = 1500,
  CUDNN_ATTR_OPERATION_MATMUL_ADESC = 1520,
  CUDNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
  CUDNN_ATTR_OPERATION_MATMUL_CDESC = 1522,
  CUDNN_ATTR_OPERATION_MATMUL_DESC = 1523,
  CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC = 1525,
  CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC = 1526,
  CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC = 1527,
  CUDNN_ATTR_REDUCTION_OPERATOR = 1600,
  CUDNN_ATTR_REDUCTION_COMP_TYPE = 1601,
  CUDNN_ATTR_OPERATION_REDUCTION_XDESC = 1610,
  CUDNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
  CUDNN_ATTR_OPERATION_REDUCTION_DESC = 1612,
  CUDNN_ATTR_OPERATION_RESHAPE_XDESC = 2200,
  CUDNN_ATTR_OPERATION_RESHAPE_YDESC = 2201,
  CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION = 2702,
};
enum cudnnBackendAttributeType_t : int {
  CUDNN_TYPE_HANDLE = 0,
  CUDNN_TYPE_DATA_TYPE = 1,
  CUDNN_TYPE_BOOLEAN = 2,
  CUDNN_TYPE_INT64 = 3,
  CUDNN_TYPE_VOID_PTR = 6,
  CUDNN_TYPE_HEUR_MODE = 8,
  CUDNN_TYPE_POINTWISE_MODE = 14,
  CUDNN_TYPE_BACKEND_DESCRIPTOR = 15,
  CUDNN_TYPE_REDUCTION_OPERATOR_TYPE = 18,
  CUDNN_TYPE_CHAR = 24,
};
enum cudnnBackendDescriptorType_t : int {
  CUDNN_BACKEND_POINTWISE_DESCRIPTOR = 0,
  CUDNN_BACKEND_ENGINECFG_DESCRIPTOR = 3,
  CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR = 4,
  CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR = 5,
  CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR = 13,
  CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR = 15,
  CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR = 16,
  CUDNN_BACKEND_TENSOR_DESCRIPTOR = 17,
  CUDNN_BACKEND_MATMUL_DESCRIPTOR = 18,
  CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR = 19,
  CUDNN_BACKEND_REDUCTION_DESCRIPTOR = 21,
  CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR = 22,
  CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR = 31,
  CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR = 38,
};
enum cudnnBackendHeurMode_t : int {
  CUDNN_HEUR_MODE_FALLBACK = 2,
  CUDNN_HEUR_MODE_A = 3,
};
struct cudnnContext;
using cudnnHandle_t = cudnnContext*;
using cudnnBackendDescriptor_t = void*;

// Every call but the version and error-string queries returns CUDNN_STATUS_NOT_SUPPORTED (cudnnCreate included), so
// the library's attention selection takes its cuBLASLt fallback and MPT_ATTENTION=cudnn fails with the reason.
size_t cudnnGetVersion();
const char* cudnnGetErrorString(cudnnStatus_t status);
void cudnnGetLastErrorString(char* message, size_t max_size);
cudnnStatus_t cudnnCreate(cudnnHandle_t* handle);
cudnnStatus_t cudnnDestroy(cudnnHandle_t handle);
cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t stream);
cudnnStatus_t cudnnGetStream(cudnnHandle_t handle, cudaStream_t* stream);
cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* descriptor);
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t descriptor);
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* elements);
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* elements);
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan,
                                  cudnnBackendDescriptor_t variant_pack);

}  // namespace mpt::cuda_emu

using mpt::cuda_emu::CUDNN_STATUS_SUCCESS;
using mpt::cuda_emu::CUDNN_STATUS_NOT_INITIALIZED;
using mpt::cuda_emu::CUDNN_STATUS_BAD_PARAM;
using mpt::cuda_emu::CUDNN_STATUS_NOT_SUPPORTED;
using mpt::cuda_emu::CUDNN_STATUS_EXECUTION_FAILED_CUDART;
using mpt::cuda_emu::CUDNN_DATA_FLOAT;
using mpt::cuda_emu::CUDNN_DATA_HALF;
using mpt::cuda_emu::CUDNN_DATA_INT32;
using mpt::cuda_emu::CUDNN_DATA_BFLOAT16;
using mpt::cuda_emu::CUDNN_DATA_BOOLEAN;
using mpt::cuda_emu::CUDNN_REDUCE_TENSOR_ADD;
using mpt::cuda_emu::CUDNN_REDUCE_TENSOR_MAX;
using mpt::cuda_emu::CUDNN_POINTWISE_ADD;
using mpt::cuda_emu::CUDNN_POINTWISE_DIV;
using mpt::cuda_emu::CUDNN_POINTWISE_MUL;
using mpt::cuda_emu::CUDNN_POINTWISE_SUB;
using mpt::cuda_emu::CUDNN_POINTWISE_EXP;
using mpt::cuda_emu::CUDNN_POINTWISE_LOG;
using mpt::cuda_emu::CUDNN_POINTWISE_IDENTITY;
using mpt::cuda_emu::CUDNN_POINTWISE_CMP_GE;
using mpt::cuda_emu::CUDNN_POINTWISE_CMP_LT;
using mpt::cuda_emu::CUDNN_POINTWISE_LOGICAL_AND;
using mpt::cuda_emu::CUDNN_POINTWISE_GEN_INDEX;
using mpt::cuda_emu::CUDNN_POINTWISE_BINARY_SELECT;
using mpt::cuda_emu::CUDNN_ATTR_POINTWISE_MODE;
using mpt::cuda_emu::CUDNN_ATTR_POINTWISE_MATH_PREC;
using mpt::cuda_emu::CUDNN_ATTR_POINTWISE_AXIS;
using mpt::cuda_emu::CUDNN_ATTR_ENGINEHEUR_MODE;
using mpt::cuda_emu::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH;
using mpt::cuda_emu::CUDNN_ATTR_ENGINEHEUR_RESULTS;
using mpt::cuda_emu::CUDNN_ATTR_ENGINEHEUR_DEVICEPROP;
using mpt::cuda_emu::CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
using mpt::cuda_emu::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG;
using mpt::cuda_emu::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE;
using mpt::cuda_emu::CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_POINTWISE_XDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_POINTWISE_BDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_POINTWISE_YDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_POINTWISE_TDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
using mpt::cuda_emu::CUDNN_ATTR_OPERATIONGRAPH_OPS;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_DATA_TYPE;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_DIMENSIONS;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_STRIDES;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_UNIQUE_ID;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_IS_VIRTUAL;
using mpt::cuda_emu::CUDNN_ATTR_TENSOR_IS_BY_VALUE;
using mpt::cuda_emu::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS;
using mpt::cuda_emu::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS;
using mpt::cuda_emu::CUDNN_ATTR_VARIANT_PACK_WORKSPACE;
using mpt::cuda_emu::CUDNN_ATTR_MATMUL_COMP_TYPE;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_ADESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_BDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_CDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_DESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC;
using mpt::cuda_emu::CUDNN_ATTR_REDUCTION_OPERATOR;
using mpt::cuda_emu::CUDNN_ATTR_REDUCTION_COMP_TYPE;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_REDUCTION_XDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_REDUCTION_YDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_REDUCTION_DESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_RESHAPE_XDESC;
using mpt::cuda_emu::CUDNN_ATTR_OPERATION_RESHAPE_YDESC;
using mpt::cuda_emu::CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION;
using mpt::cuda_emu::CUDNN_TYPE_HANDLE;
using mpt::cuda_emu::CUDNN_TYPE_DATA_TYPE;
using mpt::cuda_emu::CUDNN_TYPE_BOOLEAN;
using mpt::cuda_emu::CUDNN_TYPE_INT64;
using mpt::cuda_emu::CUDNN_TYPE_VOID_PTR;
using mpt::cuda_emu::CUDNN_TYPE_HEUR_MODE;
using mpt::cuda_emu::CUDNN_TYPE_POINTWISE_MODE;
using mpt::cuda_emu::CUDNN_TYPE_BACKEND_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_TYPE_REDUCTION_OPERATOR_TYPE;
using mpt::cuda_emu::CUDNN_TYPE_CHAR;
using mpt::cuda_emu::CUDNN_BACKEND_POINTWISE_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_TENSOR_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_MATMUL_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_REDUCTION_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR;
using mpt::cuda_emu::CUDNN_HEUR_MODE_FALLBACK;
using mpt::cuda_emu::CUDNN_HEUR_MODE_A;
using mpt::cuda_emu::cudnnStatus_t;
using mpt::cuda_emu::cudnnDataType_t;
using mpt::cuda_emu::cudnnReduceTensorOp_t;
using mpt::cuda_emu::cudnnPointwiseMode_t;
using mpt::cuda_emu::cudnnBackendAttributeName_t;
using mpt::cuda_emu::cudnnBackendAttributeType_t;
using mpt::cuda_emu::cudnnBackendDescriptorType_t;
using mpt::cuda_emu::cudnnBackendHeurMode_t;
using mpt::cuda_emu::cudnnHandle_t;
using mpt::cuda_emu::cudnnContext;
using mpt::cuda_emu::cudnnBackendDescriptor_t;
using mpt::cuda_emu::cudnnGetVersion;
using mpt::cuda_emu::cudnnGetErrorString;
using mpt::cuda_emu::cudnnGetLastErrorString;
using mpt::cuda_emu::cudnnCreate;
using mpt::cuda_emu::cudnnDestroy;
using mpt::cuda_emu::cudnnSetStream;
using mpt::cuda_emu::cudnnGetStream;
using mpt::cuda_emu::cudnnBackendCreateDescriptor;
using mpt::cuda_emu::cudnnBackendDestroyDescriptor;
using mpt::cuda_emu::cudnnBackendFinalize;
using mpt::cuda_emu::cudnnBackendSetAttribute;
using mpt::cuda_emu::cudnnBackendGetAttribute;
using mpt::cuda_emu::cudnnBackendExecute;
