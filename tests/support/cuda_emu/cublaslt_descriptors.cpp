// tests/support/cuda_emu/cublaslt_descriptors.cpp: the cuBLASLt double's handles, status strings, switches and descriptor attributes (sizes checked like the library).
#include <cstring>
#include <unordered_map>

#include "cublaslt_internal.h"

namespace mpt::cuda_emu {

struct cublasLtContext {
  int unused = 0;
};
struct cublasLtMatrixLayoutOpaque_t {
  std::mutex mutex;
  LayoutState s;
};
struct cublasLtMatmulDescOpaque_t {
  std::mutex mutex;
  DescState s;
};
struct cublasLtMatmulPreferenceOpaque_t {
  std::mutex mutex;
  PrefState s;
};

namespace {

std::mutex g_mutex;  // guards the registry and the switches
std::unordered_map<const void*, LtObject>& registry() {
  static auto* r = new std::unordered_map<const void*, LtObject>();
  return *r;
}
CublasLtSwitches& switches_ref() {
  static CublasLtSwitches s;
  return s;
}
thread_local std::string t_failure;

const char* kind_name(LtObject k) {
  switch (k) {
    case LtObject::Handle: return "cublasLtHandle_t";
    case LtObject::Layout: return "cublasLtMatrixLayout_t";
    case LtObject::Desc: return "cublasLtMatmulDesc_t";
    case LtObject::Pref: return "cublasLtMatmulPreference_t";
  }
  return "?";
}

// An attribute's storage in a descriptor; size 0 means the attribute does not exist.
struct Field {
  void* ptr = nullptr;
  size_t size = 0;
};
template <class T>
Field field(T& v) {
  return Field{&v, sizeof(T)};
}

cublasStatus_t set_field(Field f, const void* buf, size_t size, const char* api, int attr) {
  if (f.size == 0) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": unknown attribute " + std::to_string(attr));
  if (buf == nullptr || size != f.size)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": attribute " + std::to_string(attr) + " takes " +
                                                 std::to_string(f.size) + " bytes, got " + std::to_string(size) +
                                                 (buf == nullptr ? " and a null buffer" : ""));
  std::memcpy(f.ptr, buf, size);
  set_failure("");
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t get_field(Field f, void* buf, size_t size, size_t* written, const char* api, int attr) {
  if (f.size == 0) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": unknown attribute " + std::to_string(attr));
  if (size == 0) {
    if (written == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": sizeInBytes 0 needs sizeWritten");
    *written = f.size;
    return CUBLAS_STATUS_SUCCESS;
  }
  if (buf == nullptr || size != f.size)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": attribute " + std::to_string(attr) + " has " +
                                                 std::to_string(f.size) + " bytes, buffer is " + std::to_string(size));
  std::memcpy(buf, f.ptr, size);
  if (written != nullptr) *written = size;
  set_failure("");
  return CUBLAS_STATUS_SUCCESS;
}

Field layout_field(LayoutState& s, int attr) {
  switch (attr) {
    case CUBLASLT_MATRIX_LAYOUT_TYPE: return field(s.type);
    case CUBLASLT_MATRIX_LAYOUT_ORDER: return field(s.order);
    case CUBLASLT_MATRIX_LAYOUT_ROWS: return field(s.rows);
    case CUBLASLT_MATRIX_LAYOUT_COLS: return field(s.cols);
    case CUBLASLT_MATRIX_LAYOUT_LD: return field(s.ld);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT: return field(s.batch_count);
    case CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET: return field(s.batch_stride);
    case CUBLASLT_MATRIX_LAYOUT_PLANE_OFFSET: return field(s.plane_offset);
    case CUBLASLT_MATRIX_LAYOUT_BATCH_MODE: return field(s.batch_mode);
    default: return {};
  }
}

Field desc_field(DescState& s, int attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_COMPUTE_TYPE: return field(s.compute);
    case CUBLASLT_MATMUL_DESC_SCALE_TYPE: return field(s.scale_type);
    case CUBLASLT_MATMUL_DESC_POINTER_MODE: return field(s.pointer_mode);
    case CUBLASLT_MATMUL_DESC_TRANSA: return field(s.trans_a);
    case CUBLASLT_MATMUL_DESC_TRANSB: return field(s.trans_b);
    case CUBLASLT_MATMUL_DESC_TRANSC: return field(s.trans_c);
    case CUBLASLT_MATMUL_DESC_FILL_MODE: return field(s.fill_mode);
    case CUBLASLT_MATMUL_DESC_EPILOGUE: return field(s.epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER: return field(s.bias);
    case CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE: return field(s.bias_batch_stride);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER: return field(s.aux);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD: return field(s.aux_ld);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_BATCH_STRIDE: return field(s.aux_batch_stride);
    case CUBLASLT_MATMUL_DESC_ALPHA_VECTOR_BATCH_STRIDE: return field(s.alpha_vector_batch_stride);
    case CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET: return field(s.sm_count_target);
    case CUBLASLT_MATMUL_DESC_A_SCALE_POINTER: return field(s.scale_a);
    case CUBLASLT_MATMUL_DESC_B_SCALE_POINTER: return field(s.scale_b);
    case CUBLASLT_MATMUL_DESC_C_SCALE_POINTER: return field(s.scale_c);
    case CUBLASLT_MATMUL_DESC_D_SCALE_POINTER: return field(s.scale_d);
    case CUBLASLT_MATMUL_DESC_AMAX_D_POINTER: return field(s.amax_d);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE: return field(s.aux_type);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_POINTER: return field(s.aux_scale);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_AMAX_POINTER: return field(s.aux_amax);
    case CUBLASLT_MATMUL_DESC_FAST_ACCUM: return field(s.fast_accum);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE: return field(s.bias_type);
    case CUBLASLT_MATMUL_DESC_A_SCALE_MODE: return field(s.scale_mode_a);
    case CUBLASLT_MATMUL_DESC_B_SCALE_MODE: return field(s.scale_mode_b);
    case CUBLASLT_MATMUL_DESC_C_SCALE_MODE: return field(s.scale_mode_c);
    case CUBLASLT_MATMUL_DESC_D_SCALE_MODE: return field(s.scale_mode_d);
    case CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_SCALE_MODE: return field(s.scale_mode_aux);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_POINTER: return field(s.d_out_scale);
    case CUBLASLT_MATMUL_DESC_D_OUT_SCALE_MODE: return field(s.d_out_scale_mode);
    case CUBLASLT_MATMUL_DESC_EMULATION_DESCRIPTOR: return field(s.emulation_desc);
    default: return {};
  }
}

Field pref_field(PrefState& s, int attr) {
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE: return field(s.search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES: return field(s.max_workspace);
    case CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK: return field(s.reduction_mask);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES: return field(s.min_align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES: return field(s.min_align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES: return field(s.min_align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES: return field(s.min_align[3]);
    case CUBLASLT_MATMUL_PREF_MAX_WAVES_COUNT: return field(s.max_waves);
    case CUBLASLT_MATMUL_PREF_IMPL_MASK: return field(s.impl_mask);
    default: return {};
  }
}

// Create / Destroy / Set / Get share their shape for the three descriptor kinds.
template <class Obj>
cublasStatus_t create_object(Obj** out, LtObject kind, const char* api) {
  if (out == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": null output pointer");
  auto* o = new Obj();
  register_object(o, kind);
  *out = o;
  set_failure("");
  return CUBLAS_STATUS_SUCCESS;
}
template <class Obj>
cublasStatus_t destroy_object(Obj* o, LtObject kind, const char* api) {
  if (o == nullptr) return CUBLAS_STATUS_SUCCESS;
  unregister_object(o, kind, api);
  delete o;
  return CUBLAS_STATUS_SUCCESS;
}
template <class Obj, class FieldOf>
cublasStatus_t set_attr(Obj* o, LtObject kind, int attr, const void* buf, size_t size, const char* api, FieldOf f) {
  if (o == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": null descriptor");
  require_live(o, kind, api, "descriptor");
  std::lock_guard<std::mutex> lock(o->mutex);
  return set_field(f(o->s, attr), buf, size, api, attr);
}
template <class Obj, class FieldOf>
cublasStatus_t get_attr(Obj* o, LtObject kind, int attr, void* buf, size_t size, size_t* written, const char* api,
                        FieldOf f) {
  if (o == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(api) + ": null descriptor");
  require_live(o, kind, api, "descriptor");
  std::lock_guard<std::mutex> lock(o->mutex);
  return get_field(f(o->s, attr), buf, size, written, api, attr);
}

}  // namespace

void register_object(const void* p, LtObject kind) {
  std::lock_guard<std::mutex> lock(g_mutex);
  registry()[p] = kind;
}

void unregister_object(const void* p, LtObject kind, const char* api) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = registry().find(p);
  if (it == registry().end() || it->second != kind)
    throw MisuseError(std::string(api) + ": " + kind_name(kind) +
                      " was never created or is already destroyed (a double destroy crashes real cuBLASLt)");
  registry().erase(it);
}

void require_live(const void* p, LtObject kind, const char* api, const char* what) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const auto it = registry().find(p);
  if (it == registry().end() || it->second != kind)
    throw MisuseError(std::string(api) + ": " + what + " is not a live " + kind_name(kind) +
                      " (destroyed, never created, or another kind of object): undefined behaviour in cuBLASLt");
}

LayoutState snapshot(cublasLtMatrixLayout_t l) {
  std::lock_guard<std::mutex> lock(l->mutex);
  return l->s;
}
DescState snapshot(cublasLtMatmulDesc_t d) {
  std::lock_guard<std::mutex> lock(d->mutex);
  return d->s;
}
PrefState snapshot(cublasLtMatmulPreference_t p) {
  std::lock_guard<std::mutex> lock(p->mutex);
  return p->s;
}

void set_failure(std::string text) { t_failure = std::move(text); }
cublasStatus_t fail(cublasStatus_t status, std::string text) {
  t_failure = std::move(text);
  return status;
}
const char* cublaslt_last_failure() { return t_failure.c_str(); }

CublasLtSwitches cublaslt_switches() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return switches_ref();
}
void set_cublaslt_switches(const CublasLtSwitches& switches) {
  std::lock_guard<std::mutex> lock(g_mutex);
  switches_ref() = switches;
}

cublasStatus_t cublasLtCreate(cublasLtHandle_t* handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtCreate: null output pointer");
  const cublasStatus_t status = cublaslt_switches().create_status;
  if (status != CUBLAS_STATUS_SUCCESS) return fail(status, "cublasLtCreate: failure injected by CublasLtSwitches");
  return create_object(handle, LtObject::Handle, "cublasLtCreate");
}
cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, "cublasLtDestroy: null handle");
  return destroy_object(handle, LtObject::Handle, "cublasLtDestroy");
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* cublasLtGetStatusString(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED: return "the resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "an absent device architectural feature is required";
    case CUBLAS_STATUS_MAPPING_ERROR: return "an access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "error detected trying to check the license";
  }
  return "unknown error";
}

size_t cublasLtGetVersion() { return 130100; }
size_t cublasLtGetCudartVersion() { return 13000; }

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* layout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  const cublasStatus_t st = create_object(layout, LtObject::Layout, "cublasLtMatrixLayoutCreate");
  if (st == CUBLAS_STATUS_SUCCESS) {
    (*layout)->s.type = type;
    (*layout)->s.rows = rows;
    (*layout)->s.cols = cols;
    (*layout)->s.ld = ld;
  }
  return st;
}
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
  return destroy_object(layout, LtObject::Layout, "cublasLtMatrixLayoutDestroy");
}
cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                const void* buf, size_t sizeInBytes) {
  return set_attr(layout, LtObject::Layout, attr, buf, sizeInBytes, "cublasLtMatrixLayoutSetAttribute", layout_field);
}
cublasStatus_t cublasLtMatrixLayoutGetAttribute(cublasLtMatrixLayout_t layout, cublasLtMatrixLayoutAttribute_t attr,
                                                void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  return get_attr(layout, LtObject::Layout, attr, buf, sizeInBytes, sizeWritten, "cublasLtMatrixLayoutGetAttribute",
                  layout_field);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* desc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  const cublasStatus_t st = create_object(desc, LtObject::Desc, "cublasLtMatmulDescCreate");
  if (st == CUBLAS_STATUS_SUCCESS) {
    (*desc)->s.compute = computeType;
    (*desc)->s.scale_type = scaleType;
  }
  return st;
}
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) {
  return destroy_object(desc, LtObject::Desc, "cublasLtMatmulDescDestroy");
}
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  return set_attr(desc, LtObject::Desc, attr, buf, sizeInBytes, "cublasLtMatmulDescSetAttribute", desc_field);
}
cublasStatus_t cublasLtMatmulDescGetAttribute(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr,
                                              void* buf, size_t sizeInBytes, size_t* sizeWritten) {
  return get_attr(desc, LtObject::Desc, attr, buf, sizeInBytes, sizeWritten, "cublasLtMatmulDescGetAttribute",
                  desc_field);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  return create_object(pref, LtObject::Pref, "cublasLtMatmulPreferenceCreate");
}
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  return destroy_object(pref, LtObject::Pref, "cublasLtMatmulPreferenceDestroy");
}
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  return set_attr(pref, LtObject::Pref, attr, buf, sizeInBytes, "cublasLtMatmulPreferenceSetAttribute", pref_field);
}
cublasStatus_t cublasLtMatmulPreferenceGetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, void* buf,
                                                    size_t sizeInBytes, size_t* sizeWritten) {
  return get_attr(pref, LtObject::Pref, attr, buf, sizeInBytes, sizeWritten, "cublasLtMatmulPreferenceGetAttribute",
                  pref_field);
}

}  // namespace mpt::cuda_emu
