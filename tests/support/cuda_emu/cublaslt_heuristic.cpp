// tests/support/cuda_emu/cublaslt_heuristic.cpp: the cuBLASLt double's heuristic (R6.2) and its algo encoding: a signature of the problem, the workspace and the alignments it assumes.
#include <algorithm>
#include <bit>
#include <cstring>
#include <vector>

#include "cublaslt_internal.h"

namespace mpt::cuda_emu {
namespace {

constexpr uint64_t kAlgoMagic = 0x4D50544C54414C47ull;  // "MPTLTALG"

struct Fnv {
  uint64_t h = 1469598103934665603ull;
  void add(uint64_t v) { h = (h ^ v) * 1099511628211ull; }
  void add(const LayoutState& l) {
    for (uint64_t v : {uint64_t(l.type), uint64_t(l.order), l.rows, uint64_t(l.cols), uint64_t(l.ld),
                       uint64_t(l.batch_count), uint64_t(l.batch_stride), uint64_t(l.plane_offset), uint64_t(l.batch_mode)})
      add(v);
  }
};

uint8_t log2_capped(uint32_t align) {
  const uint32_t a = std::clamp<uint32_t>(align, 1, 16);  // real kernels need at most 16-byte vector accesses
  return static_cast<uint8_t>(std::bit_width(a) - 1);
}

uint64_t checksum(const cublasLtMatmulAlgo_t& a) {
  Fnv f;
  for (int i = 0; i < 5; ++i) f.add(a.data[i]);
  return f.h;
}

cublasStatus_t refuse(const std::string& why, int* count) {
  *count = 0;
  switch (cublaslt_switches().refusal) {
    case LtRefusal::NotSupported: return fail(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic: " + why);
    case LtRefusal::InvalidValue: return fail(CUBLAS_STATUS_INVALID_VALUE, "cublasLtMatmulAlgoGetHeuristic: " + why);
    case LtRefusal::SuccessNoResults: break;
  }
  set_failure("cublasLtMatmulAlgoGetHeuristic (0 results): " + why);
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

int current_compute_capability() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = 0;
  return compute_capability(device);
}

Problem make_problem(cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                     cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d) {
  Problem p;
  p.desc = snapshot(desc);
  p.a = snapshot(a);
  p.b = snapshot(b);
  p.d = snapshot(d);
  p.c = c != nullptr ? snapshot(c) : p.d;
  p.cc = current_compute_capability();
  return p;
}

uint32_t pointer_alignment(const void* p, int64_t stride_bytes) {
  const uint64_t bits = reinterpret_cast<uintptr_t>(p) | static_cast<uint64_t>(stride_bytes) | 256u;
  return static_cast<uint32_t>(bits & (~bits + 1));
}

uint64_t problem_signature(const Problem& p) {
  const DescState& d = p.desc;
  Fnv f;
  for (int64_t v : {int64_t(d.compute), int64_t(d.scale_type), int64_t(d.pointer_mode), int64_t(d.trans_a),
                    int64_t(d.trans_b), int64_t(d.trans_c), int64_t(d.epilogue), d.bias_batch_stride, d.aux_ld,
                    d.aux_batch_stride, int64_t(d.aux_type), int64_t(d.fast_accum), int64_t(d.bias_type),
                    int64_t(d.scale_mode_a), int64_t(d.scale_mode_b), int64_t(d.scale_mode_c), int64_t(d.scale_mode_d),
                    int64_t(d.scale_mode_aux), int64_t(p.cc)})
    f.add(static_cast<uint64_t>(v));
  f.add(p.a);
  f.add(p.b);
  f.add(p.c);
  f.add(p.d);
  return f.h;
}

AlgoInfo make_algo(const Problem& p, const Alignments& align, uint64_t workspace, uint32_t variant) {
  AlgoInfo info;
  info.signature = problem_signature(p);
  info.workspace = workspace;
  for (int i = 0; i < 4; ++i) info.align_log2[i] = log2_capped(align.abcd[i]);
  // The heuristic reads the bias and aux pointer values for their alignment (R5): a null pointer looks perfectly
  // aligned, so an algo chosen before they were set assumes 16 bytes.
  info.align_log2[4] = log2_capped(pointer_alignment(p.desc.bias, 0));
  info.align_log2[5] = log2_capped(pointer_alignment(p.desc.aux, 0));
  info.variant = variant;
  return info;
}

cublasLtMatmulAlgo_t encode_algo(const AlgoInfo& info) {
  cublasLtMatmulAlgo_t a{};
  a.data[0] = kAlgoMagic;
  a.data[1] = info.signature;
  a.data[2] = info.workspace;
  for (int i = 0; i < 6; ++i) a.data[3] |= uint64_t{info.align_log2[i]} << (8 * i);
  a.data[4] = info.variant;
  a.data[5] = checksum(a);
  return a;
}

bool decode_algo(const cublasLtMatmulAlgo_t& a, AlgoInfo* info) {
  if (a.data[0] != kAlgoMagic || a.data[5] != checksum(a)) return false;
  info->signature = a.data[1];
  info->workspace = a.data[2];
  for (int i = 0; i < 6; ++i) info->align_log2[i] = static_cast<uint8_t>(a.data[3] >> (8 * i));
  info->variant = static_cast<uint32_t>(a.data[4]);
  return true;
}

namespace {
thread_local uint32_t t_reduction_mask = CUBLASLT_REDUCTION_SCHEME_MASK;
}  // namespace

uint32_t cublaslt_last_reduction_mask() { return t_reduction_mask; }

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  constexpr const char* kApi = "cublasLtMatmulAlgoGetHeuristic";
  if (handle == nullptr) return fail(CUBLAS_STATUS_NOT_INITIALIZED, std::string(kApi) + ": null handle");
  require_live(handle, LtObject::Handle, kApi, "handle");
  if (desc == nullptr || Adesc == nullptr || Bdesc == nullptr || Ddesc == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": null descriptor");
  require_live(desc, LtObject::Desc, kApi, "operationDesc");
  require_live(Adesc, LtObject::Layout, kApi, "Adesc");
  require_live(Bdesc, LtObject::Layout, kApi, "Bdesc");
  if (Cdesc != nullptr) require_live(Cdesc, LtObject::Layout, kApi, "Cdesc");
  require_live(Ddesc, LtObject::Layout, kApi, "Ddesc");
  if (preference != nullptr) require_live(preference, LtObject::Pref, kApi, "preference");
  if (requestedAlgoCount <= 0)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": requestedAlgoCount must be > 0");
  if (heuristicResultsArray == nullptr || returnAlgoCount == nullptr)
    return fail(CUBLAS_STATUS_INVALID_VALUE, std::string(kApi) + ": null results array or count");

  Problem p = make_problem(desc, Adesc, Bdesc, Cdesc, Ddesc);
  const PrefState pref = preference != nullptr ? snapshot(preference) : PrefState{};
  Alignments align;
  std::copy(std::begin(pref.min_align), std::end(pref.min_align), align.abcd);
  if (Check c = validate(p, align); c.verdict != Verdict::Ok) return refuse(c.why, returnAlgoCount);

  // Fastest first: an algorithm with workspace (when the switch asks for one, it fits and the preference allows a
  // split-K reduction scheme), then one without.
  t_reduction_mask = pref.reduction_mask;
  std::vector<uint64_t> workspaces;
  const uint64_t want = cublaslt_switches().algo_workspace_bytes;
  if (want > 0 && want <= pref.max_workspace && (pref.reduction_mask & CUBLASLT_REDUCTION_SCHEME_MASK) != 0)
    workspaces.push_back(want);
  workspaces.push_back(0);
  const int count = std::min<int>(requestedAlgoCount, static_cast<int>(workspaces.size()));
  for (int i = 0; i < count; ++i) {
    cublasLtMatmulHeuristicResult_t r{};
    r.algo = encode_algo(make_algo(p, align, workspaces[i], static_cast<uint32_t>(i)));
    r.workspaceSize = workspaces[i];
    r.state = CUBLAS_STATUS_SUCCESS;
    r.wavesCount = 1.0f;
    heuristicResultsArray[i] = r;
  }
  *returnAlgoCount = count;
  set_failure("");
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace mpt::cuda_emu
