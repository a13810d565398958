// kernels/cuda/lib/attention_cudnn.cpp: cuDNN causal attention: support rules, heuristics, execution plans, the
// plan cache and execution through variant packs (the graphs: attention_cudnn_graph.cpp).
#include "kernels/cuda/lib/attention_cudnn.h"

#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/lib/attention_cudnn_detail.h"

namespace mpt::kernels::cuda {

namespace {

using namespace cudnn_detail;

int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

}  // namespace

const char* cudnn_attention_unsupported(const CudnnAttentionProblem& p, AttentionPass pass, int sm_major,
                                        int sm_minor) {
  if (sm_major < 8) return "cuDNN's fused attention needs compute capability 8.0 or newer";
  if (p.b < 1 || p.h < 1 || p.t < 1 || p.d < 1) return "every size must be at least 1";
  if (!std::isfinite(p.scale)) return "the scale must be finite";
  if (p.d % 8 != 0) return "the head dimension must be a multiple of 8";
  if (p.kv_heads() < 1 || p.h % p.kv_heads() != 0) return "the kv heads must divide the query heads";
  if (p.packed && p.token_major) return "the packed layout is not token-major";
  if (cudnnGetVersion() < 91600) return "needs cuDNN 9.16 or newer (older versions need graph workarounds)";
  const bool backward = pass == AttentionPass::Backward;
  if (sm_major == 8 && sm_minor != 0 && p.d > 128) return "the head dimension must be <= 128 on sm_86/sm_89";
  if (sm_major == 8 && backward && p.d > 128) return "the head dimension must be <= 128 for backward on sm_80";
  if (sm_major >= 10 && p.d > 128) return "the head dimension must be <= 128 on sm_100 and newer";
  if (p.d > 256) return "the head dimension must be <= 256";
  return "";
}

std::vector<CudnnDescriptor> cudnn_engine_configs(const CudnnAttentionGraph& g, const CudnnTarget& target) {
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    CudnnDescriptor heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    const Desc graph = g.graph.get();
    MPT_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
    MPT_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (target.device_prop)
      MPT_CUDNN_SET(heur, CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device_prop);
    finalize(heur);
    int64_t count = 0;
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                   &count, nullptr),
          "cudnnBackendGetAttribute", heur, "CUDNN_ATTR_ENGINEHEUR_RESULTS (count)");
    if (count == 0) continue;
    std::vector<CudnnDescriptor> configs;
    std::vector<Desc> raw;
    for (int64_t i = 0; i < count; ++i) {
      configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
      raw.push_back(configs.back().get());
    }
    check(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                   &count, raw.data()),
          "cudnnBackendGetAttribute", heur, "CUDNN_ATTR_ENGINEHEUR_RESULTS");
    configs.resize(size_t(count));
    return configs;
  }
  return {};
}

cudnnStatus_t try_cudnn_plan(const CudnnDescriptor& engine_config, const CudnnTarget& target, CudnnDescriptor* plan,
                             std::string* detail) {
  CudnnDescriptor p(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "plan");
  const Desc cfg = engine_config.get();
  MPT_CUDNN_SET(p, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg);
  if (target.handle) MPT_CUDNN_SET(p, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &target.handle);
  if (target.device_prop)
    MPT_CUDNN_SET(p, CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &target.device_prop);
  const cudnnStatus_t status = cudnnBackendFinalize(p.get());
  if (status != CUDNN_STATUS_SUCCESS) {
    if (detail) {
      char text[1024] = {};
      cudnnGetLastErrorString(text, sizeof(text));
      *detail = text;
    }
    return status;
  }
  *plan = std::move(p);
  return status;
}

CudnnAttentionPlan::CudnnAttentionPlan(const CudnnAttentionProblem& p, AttentionPass pass, const CudnnTarget& target)
    : problem_(p), pass_(pass), scale_(p.scale), mask_value_(std::numeric_limits<float>::lowest()) {
  graph_ = build_cudnn_attention_graph(p, pass, target);
  const std::vector<CudnnDescriptor> configs = cudnn_engine_configs(*graph_, target);
  configs_ = int64_t(configs.size());
  if (configs.empty())
    fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnn heuristics (modes A and FALLBACK) found no engine config for the graph");
  cudnnStatus_t last = CUDNN_STATUS_SUCCESS;
  std::string detail;
  for (const CudnnDescriptor& cfg : configs) {
    last = try_cudnn_plan(cfg, target, &plan_, &detail);
    if (last == CUDNN_STATUS_SUCCESS) break;
  }
  if (last != CUDNN_STATUS_SUCCESS)
    throw CudnnError(last, "cudnnBackendFinalize(EXECUTION_PLAN) failed for all " + std::to_string(configs_) +
                               " engine configs; the last: " + cudnnGetErrorString(last) + ": " + detail);
  int64_t bytes = 0;
  int64_t n = 0;
  check(cudnnBackendGetAttribute(plan_.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                 &bytes),
        "cudnnBackendGetAttribute", plan_, "CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE");
  cudnn_workspace_ = size_t(bytes);
  workspace_bytes_ = cudnn_workspace_;
  if (pass == AttentionPass::Backward)
    workspace_bytes_ += size_t(round_up(p.b * p.h * p.t * p.d * 4, 256) + round_up(p.b * p.h * p.t * 4, 256));
}

void CudnnAttentionPlan::execute(cudnnHandle_t handle, const int64_t* uids, void* const* ptrs, int n,
                                 void* workspace) const {
  CudnnDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, "variant pack");
  MPT_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids);
  MPT_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs);
  MPT_CUDNN_SET(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  finalize(pack);
  check(cudnnBackendExecute(handle, plan_.get(), pack.get()), "cudnnBackendExecute", plan_);
}

void CudnnAttentionPlan::check_packed(const void* q, const void* k, const void* v, const char* what) const {
  if (!problem_.packed) return;
  // q's and k's heads per (b, t) row, in bytes (f16 or bf16): k follows q, v follows k.
  const int64_t q_block = problem_.h * problem_.d * 2, kv_block = problem_.kv_heads() * problem_.d * 2;
  const char* base = static_cast<const char*>(q);
  if (k != base + q_block || v != base + q_block + kv_block)
    throw CudnnError(CUDNN_STATUS_BAD_PARAM, std::string("CudnnAttentionPlan: a packed plan's ") + what +
                                                 " must be the three column blocks of one (B, T, H + 2 H_kv, D) buffer");
}

int CudnnAttentionPlan::add_seq_lens(CudnnSeqLens seq_lens, int64_t* uids, void** ptrs, int n) const {
  const auto refuse = [](const char* why) {
    throw CudnnError(CUDNN_STATUS_BAD_PARAM, std::string("CudnnAttentionPlan: ") + why);
  };
  if (!problem_.padded) {
    if (seq_lens.q != nullptr || seq_lens.kv != nullptr) refuse("seq_lens given to a plan built without padding");
    return n;
  }
  for (const int32_t* p : {seq_lens.q, seq_lens.kv}) {
    if (p == nullptr) refuse("a padded plan needs seq_lens.q and seq_lens.kv");
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) refuse("seq_lens must be 16-byte aligned (the graph declares so)");
  }
  uids[n] = kSeqLenQ;
  ptrs[n++] = const_cast<int32_t*>(seq_lens.q);
  uids[n] = kSeqLenKv;
  ptrs[n++] = const_cast<int32_t*>(seq_lens.kv);
  uids[n] = kPaddingMaskValue;
  ptrs[n++] = const_cast<float*>(&mask_value_);
  return n;
}

void CudnnAttentionPlan::forward(cudnnHandle_t handle, const void* q, const void* k, const void* v, void* o,
                                 float* stats, void* workspace, CudnnSeqLens seq_lens) const {
  check_packed(q, k, v, "q, k, v");
  int64_t uids[10] = {kQ, kK, kV, kO, kStats, kScale, kMaskValue};
  void* ptrs[10] = {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, stats,
                    const_cast<float*>(&scale_), const_cast<float*>(&mask_value_)};
  execute(handle, uids, ptrs, add_seq_lens(seq_lens, uids, ptrs, 7), workspace);
}

void CudnnAttentionPlan::backward(cudnnHandle_t handle, const void* q, const void* k, const void* v, const void* o,
                                  const void* dout, const float* stats, void* dq, void* dk, void* dv,
                                  void* workspace, CudnnSeqLens seq_lens) const {
  const CudnnAttentionProblem& p = problem_;
  char* base = static_cast<char*>(workspace);
  const int64_t accum_bytes = round_up(p.b * p.h * p.t * p.d * 4, 256);
  void* dq_accum = base;
  void* softmax_sum = base + accum_bytes;
  void* cudnn_ws = base + accum_bytes + round_up(p.b * p.h * p.t * 4, 256);
  int64_t uids[17] = {kQ, kK, kV, kO, kDout, kStats, kDq, kDk, kDv, kSoftmaxSum, kDqAccum, kScale, kMaskValue, kOne};
  void* ptrs[17] = {const_cast<void*>(q),
                    const_cast<void*>(k),
                    const_cast<void*>(v),
                    const_cast<void*>(o),
                    const_cast<void*>(dout),
                    const_cast<float*>(stats),
                    dq,
                    dk,
                    dv,
                    softmax_sum,
                    dq_accum,
                    const_cast<float*>(&scale_),
                    const_cast<float*>(&mask_value_),
                    const_cast<float*>(&one_)};
  check_packed(q, k, v, "q, k, v");
  check_packed(dq, dk, dv, "dq, dk, dv");
  const int n = add_seq_lens(seq_lens, uids, ptrs, 14);
  // Zeroing first: before 9.6 the engine accumulates into dQ_accum; padded, the key rows past seq_len_kv are outside
  // the dK and dV GEMMs' M extent (cudnn-frontend's m_override), and whether the engine writes them is undocumented.
  const auto zero = [&](void* ptr, int64_t bytes, const char* what) {
    cudaStream_t stream = nullptr;
    check(cudnnGetStream(handle, &stream), "cudnnGetStream", plan_);
    if (cudaMemsetAsync(ptr, 0, size_t(bytes), stream) != cudaSuccess)
      fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, std::string("cudaMemsetAsync(") + what + ")");
  };
  if (cudnnGetVersion() < 90600) zero(dq_accum, p.b * p.h * p.t * p.d * 4, "dQ_accum");
  if (p.padded) {
    const int64_t grad_bytes = p.b * p.h * p.t * p.d * 2;  // f16 or bf16
    if (p.packed) {
      // dk and dv interleave with dq; dq's rows are all rewritten
      zero(dq, grad_bytes / p.h * (p.h + 2 * p.kv_heads()), "dQKV");
    } else {
      const int64_t kv_bytes = grad_bytes / p.h * p.kv_heads();  // dk and dv: contiguous in either layout
      zero(dk, kv_bytes, "dK");
      zero(dv, kv_bytes, "dV");
    }
  }
  execute(handle, uids, ptrs, n, cudnn_ws);
}

std::shared_ptr<const CudnnAttentionPlan> cudnn_attention_plan(int device, cudnnHandle_t handle,
                                                               const CudnnAttentionProblem& p, AttentionPass pass) {
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int64_t, bool, uint32_t, bool, bool, int64_t, bool, int>;
  struct Entry {
    std::shared_ptr<const CudnnAttentionPlan> plan;
    std::shared_ptr<const CudnnError> error;  // a build that failed fails again at once, without rebuilding
  };
  static std::mutex mutex;
  static auto* cache = new std::map<Key, Entry>();  // never destroyed: plans must not outlive cuDNN at exit
  uint32_t scale_bits = 0;
  std::memcpy(&scale_bits, &p.scale, sizeof(scale_bits));
  const Key key{device, p.b, p.h, p.t, p.d, p.bf16, scale_bits, p.padded, p.packed, p.kv_heads(), p.token_major,
                int(pass)};
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (const auto it = cache->find(key); it != cache->end()) {
      if (it->second.error) throw *it->second.error;
      return it->second.plan;
    }
  }
  Entry entry;
  try {  // built outside the lock: seconds of NVRTC compilation must not block other shapes
    entry.plan = std::make_shared<const CudnnAttentionPlan>(p, pass, CudnnTarget{handle, nullptr});
  } catch (const CudnnError& e) {
    entry.error = std::make_shared<const CudnnError>(e);
  }
  std::lock_guard<std::mutex> lock(mutex);
  const Entry& cached = cache->emplace(key, std::move(entry)).first->second;  // another thread's entry wins a race
  if (cached.error) throw *cached.error;
  return cached.plan;
}

}  // namespace mpt::kernels::cuda
