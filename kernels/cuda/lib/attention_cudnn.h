// kernels/cuda/lib/attention_cudnn.h: causal flash attention through cuDNN's graph (backend) API: the composite
// SDPA graphs cuDNN replaces by its fused flash-attention engine, support rules, plans, plan cache and execution.
#pragma once

#include <cudnn_graph.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mpt::kernels::cuda {

// One attention call: q, o, do, dq are (B, H, T, D) and k, v, dk, dv (B, H_kv, T, D) in f16 or bf16 (grouped-query
// attention when H_kv < H: query head h reads kv head h / (H / H_kv)), contiguous (strides H*T*D, T*D, D, 1), or
// `token_major`, each one contiguous (B, T, heads, D) (strides T*H*D, D, H*D, 1; the projections' layout), or
// `packed`, where a fused QKV projection and the next GEMM keep them (llm.c's layout; Llama's with H_kv < H): q, k and
// v (and dq, dk, dv) the three column blocks of one (B, T, H + 2 H_kv, D) buffer (k = q + H*D elements, v = k +
// H_kv*D; strides T*W, D, W, 1 with W = (H + 2 H_kv) D) and o, do (B, T, H, D) (strides T*HD, D, HD, 1). stats is
// f32 (B, H, T) contiguous: each row's logsumexp of the scaled, causally masked scores (the op's lse). Compute is
// f32 throughout; the probabilities P enter the second GEMM in the I/O dtype (flash attention). With H_kv < H the
// backward graph
// computes each query head's dK and dV (in the I/O dtype, as cudnn-frontend declares them) and sums each group.
struct CudnnAttentionProblem {
  int64_t b = 0, h = 0, t = 0, d = 0;
  bool bf16 = true;  // false: f16
  float scale = 0;   // multiplies q . k (the op passes 1/sqrt(D) by default)
  // cuDNN's padding mask: score (i, j) of sample b is kept only when i < seq_len_q[b] and j < seq_len_kv[b], two
  // int32 (B) device arrays given at execution (CudnnSeqLens). mptrain passes seq_len_q = T (every query row is
  // real: a padding query still attends its sample's real keys) and seq_len_kv = the key lengths.
  bool padded = false;
  bool packed = false;
  int64_t h_kv = 0;  // k's and v's heads; 0 means h
  bool token_major = false;
  int64_t kv_heads() const { return h_kv > 0 ? h_kv : h; }
  bool operator==(const CudnnAttentionProblem&) const = default;
};

// A padded plan's per-sample lengths: int32 device arrays of B elements, 16-byte aligned (the graph declares the
// tensors so). A padded plan needs both, an unpadded one neither.
struct CudnnSeqLens {
  const int32_t* q = nullptr;
  const int32_t* kv = nullptr;
};

enum class AttentionPass : uint8_t { Forward, Backward };

// The static rules for cuDNN 9.19's fused engine (no GPU needed): "" when supported, else why not. sm_80+, head
// dim a multiple of 8; H_kv dividing H (packed: not token_major); forward d <= 256 on sm_8x/9x, backward d <= 256 on sm_90 and d <= 128 elsewhere (sm_80:
// d = 256 backward finds no engine); d <= 128 on sm_100+ (not checked offline, conservative). Key padding adds no
// rule (the padded graphs find engines wherever the unpadded ones do). f16/bf16 only: the problem type cannot
// express f32, which the op rejects before asking.
const char* cudnn_attention_unsupported(const CudnnAttentionProblem& p, AttentionPass pass, int sm_major,
                                        int sm_minor);
inline bool cudnn_attention_supported(const CudnnAttentionProblem& p, AttentionPass pass, int sm_major,
                                      int sm_minor) {
  return cudnn_attention_unsupported(p, pass, sm_major, sm_minor)[0] == '\0';
}
// Both passes (training).
inline bool cudnn_attention_supported(const CudnnAttentionProblem& p, int sm_major, int sm_minor) {
  return cudnn_attention_supported(p, AttentionPass::Forward, sm_major, sm_minor) &&
         cudnn_attention_supported(p, AttentionPass::Backward, sm_major, sm_minor);
}

// Every cuDNN failure: the call, the descriptor (type and our name) and attribute it concerned, cuDNN's status name
// and number and its last error text, e.g. "cudnnBackendSetAttribute(TENSOR 'K^T', CUDNN_ATTR_TENSOR_STRIDES)
// failed: CUDNN_STATUS_BAD_PARAM (2000): ...". The op layer rethrows it as mpt::Error with its "[op]" prefix.
class CudnnError : public std::runtime_error {
 public:
  CudnnError(cudnnStatus_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  cudnnStatus_t status() const { return status_; }

 private:
  cudnnStatus_t status_;
};

// Owns one backend descriptor (cudnnBackendDestroyDescriptor on destruction). Creation never needs a GPU.
class CudnnDescriptor {
 public:
  CudnnDescriptor() = default;
  CudnnDescriptor(cudnnBackendDescriptorType_t type, const char* name);  // name: a literal; throws CudnnError
  ~CudnnDescriptor();
  CudnnDescriptor(CudnnDescriptor&& o) noexcept : desc_(o.desc_), type_(o.type_), name_(o.name_) {
    o.desc_ = nullptr;
  }
  CudnnDescriptor& operator=(CudnnDescriptor&& o) noexcept;
  CudnnDescriptor(const CudnnDescriptor&) = delete;
  CudnnDescriptor& operator=(const CudnnDescriptor&) = delete;
  cudnnBackendDescriptor_t get() const { return desc_; }
  cudnnBackendDescriptorType_t type() const { return type_; }
  const char* name() const { return name_; }  // ours, for error messages ("Q", "S = Q K^T", ...)

 private:
  cudnnBackendDescriptor_t desc_ = nullptr;
  cudnnBackendDescriptorType_t type_ = CUDNN_BACKEND_TENSOR_DESCRIPTOR;
  const char* name_ = "";
};

// Where plans are built: a cuDNN handle (its device runs them), or a finalized CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR
// describing a device that need not be present ("deviceless ahead-of-time compilation", cuDNN >= 9.8: heuristics
// and plan finalize work; execution needs the real device).
struct CudnnTarget {
  cudnnHandle_t handle = nullptr;
  cudnnBackendDescriptor_t device_prop = nullptr;
};

// A device-properties descriptor from cuDNN's JSON serialisation (CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION).
CudnnDescriptor cudnn_device_properties(const std::string& json);

// Variations of the graph, for negative controls only: cuDNN must refuse them (0 engine configs).
struct CudnnGraphOptions {
  bool probs_f32 = false;           // forward only: P in f32 instead of the I/O dtype
  bool padding_compare_ge = false;  // padded only: the padding mask keeps i >= seq_len_q, j >= seq_len_kv (CMP_GE)
};

// A finalized operation graph with the tensors it references (forward: q, k, v -> o, stats; backward: q, k, v,
// o, do, stats -> dq, dk, dv, plus the caller-provided f32 buffers softmax_sum (B,H,T,1) and dq_accum (B,H,T,D)).
struct CudnnAttentionGraph {
  CudnnAttentionProblem problem;
  AttentionPass pass = AttentionPass::Forward;
  std::vector<CudnnDescriptor> parts;  // tensors and operations, kept alive for the graph
  CudnnDescriptor graph;
  int op_count = 0;
};
std::unique_ptr<CudnnAttentionGraph> build_cudnn_attention_graph(const CudnnAttentionProblem& p, AttentionPass pass,
                                                                 const CudnnTarget& target,
                                                                 const CudnnGraphOptions& options = {});

// Engine configs from heuristics: CUDNN_HEUR_MODE_A, else CUDNN_HEUR_MODE_FALLBACK when A returns none. An empty
// result means cuDNN has no engine for the graph on the target.
std::vector<CudnnDescriptor> cudnn_engine_configs(const CudnnAttentionGraph& g, const CudnnTarget& target);

// Finalizes an execution plan for one engine config; returns the status instead of throwing (deviceless targets
// compile the kernels and then fail to load them: the caller decides what that means). `detail` gets cuDNN's
// last error text on failure.
cudnnStatus_t try_cudnn_plan(const CudnnDescriptor& engine_config, const CudnnTarget& target, CudnnDescriptor* plan,
                             std::string* detail);

// A runnable plan: the first engine config (in heuristic order) whose plan finalizes.
class CudnnAttentionPlan {
 public:
  CudnnAttentionPlan(const CudnnAttentionProblem& p, AttentionPass pass, const CudnnTarget& target);  // throws

  // Device bytes the caller passes as `workspace` (256-byte aligned): cuDNN's own workspace plus, for backward,
  // the f32 softmax_sum and dq_accum buffers carved from it.
  size_t workspace_bytes() const { return workspace_bytes_; }
  int64_t engine_config_count() const { return configs_; }

  // Asynchronous on the handle's stream (cudnnSetStream). Throws CudnnError. `seq_lens`: a padded plan's lengths.
  void forward(cudnnHandle_t handle, const void* q, const void* k, const void* v, void* o, float* stats,
               void* workspace, CudnnSeqLens seq_lens = {}) const;
  // Writes fresh gradients (dq, dk, dv are overwritten, never accumulated into). Padded: dk and dv are zeroed first
  // (packed: the whole (B, T, 3, H, D) gradient buffer from dq on), so key rows at or past seq_len_kv[b] get exact
  // zeros whether or not the engine writes them. Packed plans check that k, v, dk, dv follow q and dq as the layout
  // says (CudnnError otherwise).
  void backward(cudnnHandle_t handle, const void* q, const void* k, const void* v, const void* o, const void* dout,
                const float* stats, void* dq, void* dk, void* dv, void* workspace, CudnnSeqLens seq_lens = {}) const;

 private:
  // Packed plans: throws CudnnError unless k and v are q's neighbouring column blocks.
  void check_packed(const void* q, const void* k, const void* v, const char* what) const;
  // Appends the padded plan's seq_len uids and pointers (checked) to the caller's first n entries; returns the count.
  int add_seq_lens(CudnnSeqLens seq_lens, int64_t* uids, void** ptrs, int n) const;
  void execute(cudnnHandle_t handle, const int64_t* uids, void* const* ptrs, int n, void* workspace) const;

  CudnnAttentionProblem problem_;
  AttentionPass pass_;
  std::unique_ptr<CudnnAttentionGraph> graph_;
  CudnnDescriptor plan_;
  int64_t configs_ = 0;
  size_t cudnn_workspace_ = 0, workspace_bytes_ = 0;
  float scale_ = 0, mask_value_ = 0, one_ = 1;  // by-value scalars: the variant pack points at them (the padding
                                                // mask's own scalar tensor too points at mask_value_)
};

// The cached plan for (device, problem, pass), built on first use with `handle` (building costs milliseconds to
// seconds: NVRTC compiles the engine). A failed build is cached too and rethrown (CudnnError) without rebuilding.
// Thread-safe; entries are never evicted (one per attention shape in a model).
std::shared_ptr<const CudnnAttentionPlan> cudnn_attention_plan(int device, cudnnHandle_t handle,
                                                               const CudnnAttentionProblem& p, AttentionPass pass);

}  // namespace mpt::kernels::cuda
