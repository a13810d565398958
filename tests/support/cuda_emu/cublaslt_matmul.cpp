// tests/support/cuda_emu/cublaslt_matmul.cpp: the cuBLASLt double's cublasLtMatmul: re-validation, algo and workspace checks, the device accesses, and the run on the stream.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <vector>

#include "cublaslt_internal.h"
#include "cuda_emu/counters.h"
#include "kernels/math/numerics.h"

namespace mpt::cuda_emu {
namespace {

std::atomic<uint64_t> g_fast_accum_matmuls{0};

constexpr const char* kApi = "cublasLtMatmul";

std::string hex(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

bool overlaps(const void* p, uint64_t pn, const void* q, uint64_t qn) {
  if (p == nullptr || q == nullptr || pn == 0 || qn == 0) return false;
  const auto a = reinterpret_cast<uintptr_t>(p), b = reinterpret_cast<uintptr_t>(q);
  return a < b + qn && b < a + pn;
}

double host_scalar(const void* p, int32_t scale_type, const char* what) {
  if (pointer_device(p) >= 0)
    throw MisuseError(std::string(kApi) + ": " + what + " is a device pointer but POINTER_MODE is HOST (the host would "
                      "dereference device memory); set CUBLASLT_POINTER_MODE_DEVICE or pass a host pointer");
  if (scale_type == CUDA_R_16F) {
    uint16_t bits = 0;
    std::memcpy(&bits, p, 2);
    return f16_bits_to_float(bits);
  }
  if (scale_type == CUDA_R_32I) {  // the int8 row: int32 alpha/beta (exact in a double)
    int32_t v = 0;
    std::memcpy(&v, p, 4);
    return v;
  }
  float v = 0;
  std::memcpy(&v, p, 4);
  return v;
}

// A pointer (and its batch entries) less aligned than the algo assumes: a GPU may fault or return an error.
cublasStatus_t misaligned(const char* what, const void* ptr, uint32_t have, uint32_t need) {
  const std::string msg = std::string(kApi) + ": " + what + " " + hex(ptr) + " (with its batch stride) is " +
                          std::to_string(have) + "-byte aligned but the algo was chosen for " + std::to_string(need) +
                          " bytes (pass the real alignments in MIN_ALIGNMENT_*_BYTES, and set BIAS/AUX pointers "
                          "before cublasLtMatmulAlgoGetHeuristic)";
  if (cublaslt_switches().misaligned_pointer_throws) throw MisuseError(msg);
  return fail(CUBLAS_STATUS_INVALID_VALUE, msg);
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, const void* alpha, const void* A,
                              cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, std::string(kApi) + ": null handle");
  require_live(handle, LtObject::Handle, kApi, "handle");
  if (desc == nullptr || Adesc == nullptr || Bdesc == nullptr || Ddesc == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": null descriptor");
  require_live(desc, LtObject::Desc, kApi, "computeDesc");
  require_live(Adesc, LtObject::Layout, kApi, "Adesc");
  require_live(Bdesc, LtObject::Layout, kApi, "Bdesc");
  if (Cdesc != nullptr) require_live(Cdesc, LtObject::Layout, kApi, "Cdesc");
  require_live(Ddesc, LtObject::Layout, kApi, "Ddesc");
  if (alpha == nullptr || beta == nullptr) return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": null alpha or beta");

  Problem p = make_problem(desc, Adesc, Bdesc, Cdesc, Ddesc);
  const CublasLtSwitches sw = cublaslt_switches();
  AlgoInfo info;
  if (algo != nullptr) {
    if (!decode_algo(*algo, &info))
      return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": algo was not produced by cublasLtMatmulAlgoGetHeuristic");
    if (info.signature != problem_signature(p))
      return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": algo was chosen for a different problem (descriptors, "
                                               "layouts or device changed since the heuristic ran)");
  }

  // Alignments of the actual pointers over every batch entry (the implicit heuristic uses them).
  const int64_t batch_steps = p.d.batch_count > 1 ? 1 : 0;
  const LayoutState* layouts[4] = {&p.a, &p.b, &p.c, &p.d};
  const void* ptrs[4] = {A, B, C, D};
  Alignments actual;
  for (int i = 0; i < 4; ++i)
    actual.abcd[i] = pointer_alignment(ptrs[i], batch_steps * layouts[i]->batch_stride * std::max<int64_t>(dtype_size(layouts[i]->type), 1));
  Alignments assumed = actual;
  if (algo != nullptr)
    for (int i = 0; i < 4; ++i) assumed.abcd[i] = 1u << info.align_log2[i];
  if (Check c = validate(p, assumed); c.verdict != Verdict::Ok)
    return fail(CUBLAS_STATUS_NOT_SUPPORTED, std::string(kApi) + ": " + c.why);
  if (Check c = validate_at_run(p); c.verdict != Verdict::Ok)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": " + c.why);

  const bool host_mode = p.desc.pointer_mode == CUBLASLT_POINTER_MODE_HOST;
  MatmulArgs args{1.0, 0.0, nullptr, nullptr, A, B, C, D};
  if (host_mode) {
    args.alpha = host_scalar(alpha, p.desc.scale_type, "alpha");
    args.beta = host_scalar(beta, p.desc.scale_type, "beta");
  } else {
    args.alpha_dev = alpha;
    args.beta_dev = beta;
  }
  const bool reads_c = host_mode ? args.beta != 0.0 : C != nullptr;
  if (host_mode && args.beta != 0.0 && C == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": beta != 0 but C is null");
  if (!reads_c) args.c = nullptr;
  if (C != nullptr && C == D && !(p.c == p.d))
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": in-place C == D needs Cdesc equal to Ddesc (R1.3)");

  // Workspace (R6.3).
  const uint64_t need_ws = algo != nullptr ? info.workspace
                           : (sw.algo_workspace_bytes > 0 && sw.algo_workspace_bytes <= workspaceSizeInBytes ? sw.algo_workspace_bytes : 0);
  if (workspaceSizeInBytes > 0 && workspace == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": workspaceSizeInBytes > 0 with a null workspace");
  if (reinterpret_cast<uintptr_t>(workspace) % 256 != 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": the workspace must be 256-byte aligned");
  if (workspaceSizeInBytes < need_ws)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": the algo needs " + std::to_string(need_ws) +
                                                 " workspace bytes, got " + std::to_string(workspaceSizeInBytes));

  if (algo != nullptr) {  // pointers must be as aligned as the algo was chosen for
    const char* names[4] = {"A", "B", "C", "D"};
    for (int i = 0; i < 4; ++i) {
      if (i == 2 && !reads_c) continue;
      const uint32_t need = 1u << info.align_log2[i];
      if (actual.abcd[i] < need) return misaligned(names[i], ptrs[i], actual.abcd[i], need);
    }
    const uint32_t bias_align = pointer_alignment(p.desc.bias, 0), aux_align = pointer_alignment(p.desc.aux, 0);
    if (p.desc.bias && bias_align < (1u << info.align_log2[4]))
      return misaligned("BIAS_POINTER", p.desc.bias, bias_align, 1u << info.align_log2[4]);
    if (p.desc.aux && aux_align < (1u << info.align_log2[5]))
      return misaligned("EPILOGUE_AUX_POINTER", p.desc.aux, aux_align, 1u << info.align_log2[5]);
  }

  // Every device buffer the GEMM touches, with its exact extent.
  const DescState& d = p.desc;
  const uint32_t e = d.epilogue;
  const bool uses_bias = (e & (4u | 16u | 256u | 512u)) != 0;
  const bool writes_bias = (e & (16u | 256u | 512u)) != 0;
  const bool writes_aux = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const uint64_t a_bytes = layout_bytes(p.a, p.batch), b_bytes = layout_bytes(p.b, p.batch);
  const uint64_t c_bytes = layout_bytes(p.c, p.batch), d_bytes = layout_bytes(p.d, p.batch);
  const int64_t scale_size = dtype_size(static_cast<cudaDataType_t>(d.scale_type)) > 0 ? dtype_size(static_cast<cudaDataType_t>(d.scale_type)) : 4;
  std::vector<Access> acc = {{A, a_bytes, false, "A"}, {B, b_bytes, false, "B"}, {D, d_bytes, true, "D"}};
  if (reads_c) acc.push_back({C, c_bytes, false, "C"});
  if (!host_mode) {
    acc.push_back({alpha, static_cast<size_t>(scale_size), false, "alpha"});
    acc.push_back({beta, static_cast<size_t>(scale_size), false, "beta"});
  }
  acc.push_back({d.scale_a, scale_bytes(d.scale_mode_a, p.m, p.k), false, "A_SCALE_POINTER"});
  acc.push_back({d.scale_b, scale_bytes(d.scale_mode_b, p.n, p.k), false, "B_SCALE_POINTER"});
  acc.push_back({d.scale_c, 4, false, "C_SCALE_POINTER"});
  acc.push_back({d.scale_d, 4, false, "D_SCALE_POINTER"});
  acc.push_back({d.amax_d, 4, true, "AMAX_D_POINTER"});
  if (uses_bias) acc.push_back({d.bias, bias_bytes(p), writes_bias, "BIAS_POINTER"});
  if ((e & 128u) != 0) {
    acc.push_back({d.aux, aux_bytes(p), writes_aux, "EPILOGUE_AUX_POINTER"});
    acc.push_back({d.aux_scale, 4, false, "EPILOGUE_AUX_SCALE_POINTER"});
    acc.push_back({d.aux_amax, 4, true, "EPILOGUE_AUX_AMAX_POINTER"});
  }
  if (workspace != nullptr) acc.push_back({workspace, static_cast<size_t>(need_ws), true, "workspace"});
  if (overlaps(D, d_bytes, A, a_bytes) || overlaps(D, d_bytes, B, b_bytes))
    throw MisuseError(std::string(kApi) + ": D overlaps A or B (undefined: the kernel reads them while writing D)");
  if (reads_c && C != D && overlaps(D, d_bytes, C, c_bytes))
    throw MisuseError(std::string(kApi) + ": C and D overlap without being the same matrix (in place needs C == D)");

  // By value: a capturing stream keeps the work for replay (counted when it runs, not when it is recorded).
  const uint64_t flops = 2 * static_cast<uint64_t>(p.m) * static_cast<uint64_t>(p.n) * static_cast<uint64_t>(p.k) *
                         static_cast<uint64_t>(std::max<int64_t>(p.batch, 1));
  // A, B, D (and C when read), plus what the epilogue reads or writes: the bias (or its gradient) and the aux matrix
  // (GELU_AUX writes the m x n pre-activation, DGELU reads it).
  const uint64_t traffic = layout_traffic_bytes(p.a, p.batch) + layout_traffic_bytes(p.b, p.batch) +
                           layout_traffic_bytes(p.d, p.batch) + (reads_c ? layout_traffic_bytes(p.c, p.batch) : 0) +
                           (uses_bias ? bias_bytes(p) : 0) +
                           ((e & 128u) != 0 ? aux_bytes(p) : 0);
  const bool fast_accum = d.fast_accum != 0;
  const cudaError_t err = run_on_stream(stream, kApi, acc, [p, args, workspace, need_ws, flops, traffic, fast_accum] {
    if (!record_only()) {
      if (need_ws > 0) std::memset(workspace, 0xA5, need_ws);  // scratch: nothing may rely on its contents
      compute_matmul(p, args);
    }
    detail::count(&Counters::matmuls);
    detail::count(&Counters::matmul_flops, flops);
    detail::count(&Counters::matmul_bytes, traffic);
    if (fast_accum) g_fast_accum_matmuls.fetch_add(1, std::memory_order_relaxed);
  });
  if (err != cudaSuccess)
    return fail(CUBLAS_STATUS_EXECUTION_FAILED, std::string(kApi) + ": the stream reported " + cudaGetErrorName(err));
  set_failure("");
  return CUBLAS_STATUS_SUCCESS;
}

uint64_t cublaslt_fast_accum_matmuls() { return g_fast_accum_matmuls.load(std::memory_order_relaxed); }

}  // namespace mpt::cuda_emu
