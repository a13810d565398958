// tests/support/cuda_emu/cudnn_sdpa.cpp: emulation builds' cuDNN: missing by default, or mptrain's attention graphs.
//
// By default every call reports cuDNN as missing, so attention takes its cuBLASLt fallback. With set_cudnn_sdpa(true)
// (or MPT_EMU_CUDNN=sdpa at start-up) handles are made and the backend API keeps descriptors and their attributes,
// so mptrain's host code for cuDNN (kernels/cuda/lib/attention_cudnn*.cpp, src/ops/attention_cudnn.cpp) runs: graph,
// heuristics (one engine config), plan, variant pack, execution. Execution recognises the forward and backward
// attention graphs attention_cudnn_graph.cpp builds, by their tensors' unique ids and operation count, reads every
// operand's dims and strides from the graph and computes the attention naively in f32 at those strides, with P and
// dS rounded to the I/O dtype before their GEMMs as the graph says. It checks what the graph declares against what
// the program binds, not what cuDNN's engines do with it (that needs a GPU; tests/cudnn_aot checks that the graphs
// have engines).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <cudnn_graph.h>

#include "cuda_emu/counters.h"
#include "cuda_emu/cudnn.h"
#include "cuda_emu/device_work.h"
#include "kernels/cuda/lib/attention_cudnn_detail.h"
#include "kernels/math/numerics.h"

namespace mpt::cuda_emu {
namespace {

namespace ids = kernels::cuda::cudnn_detail;

std::atomic<bool> g_enabled{[] {
  const char* v = std::getenv("MPT_EMU_CUDNN");
  return v != nullptr && std::string(v) == "sdpa";
}()};
std::atomic<uint64_t> g_executions{0};
thread_local std::string t_last_error;

constexpr const char* kMissing = "cuDNN is not emulated here: the CUDA emulation build has no cuDNN unless a test asks "
                                 "for its SDPA double (cuda_emu::set_cudnn_sdpa)";

cudnnStatus_t fail(cudnnStatus_t status, const std::string& why) {
  t_last_error = why;
  return status;
}

struct Attr {
  cudnnBackendAttributeType_t type{};
  std::vector<unsigned char> bytes;
  int64_t count = 0;
};

struct Desc {
  cudnnBackendDescriptorType_t type{};
  std::map<cudnnBackendAttributeName_t, Attr> attrs;
  bool finalized = false;
  Desc* graph = nullptr;  // an engine config's or a plan's operation graph
};

struct Handle {
  cudaStream_t stream = nullptr;
};

// The handles alive: a destroyed one (or one never made) is refused where cuDNN's would be undefined behaviour, at
// execution and as the handle a plan was built with.
std::mutex g_handles_mutex;
std::set<const void*> g_live_handles;  // under g_handles_mutex

bool live(const void* h) {
  std::lock_guard lock(g_handles_mutex);
  return g_live_handles.count(h) != 0;
}

size_t element_size(cudnnBackendAttributeType_t t) {
  switch (t) {
    case CUDNN_TYPE_HANDLE: return sizeof(cudnnHandle_t);
    case CUDNN_TYPE_DATA_TYPE: return sizeof(cudnnDataType_t);
    case CUDNN_TYPE_BOOLEAN: return sizeof(bool);
    case CUDNN_TYPE_INT64: return sizeof(int64_t);
    case CUDNN_TYPE_VOID_PTR: return sizeof(void*);
    case CUDNN_TYPE_BACKEND_DESCRIPTOR: return sizeof(cudnnBackendDescriptor_t);
    case CUDNN_TYPE_HEUR_MODE: return sizeof(cudnnBackendHeurMode_t);
    case CUDNN_TYPE_POINTWISE_MODE: return sizeof(cudnnPointwiseMode_t);
    case CUDNN_TYPE_REDUCTION_OPERATOR_TYPE: return sizeof(cudnnReduceTensorOp_t);
    case CUDNN_TYPE_CHAR: return 1;
    default: return 0;
  }
}

template <class T>
std::vector<T> values(const Desc& d, cudnnBackendAttributeName_t name) {
  const auto it = d.attrs.find(name);
  if (it == d.attrs.end()) return {};
  std::vector<T> v(static_cast<size_t>(it->second.count));
  std::memcpy(v.data(), it->second.bytes.data(), v.size() * sizeof(T));
  return v;
}

// One non-virtual tensor of the graph: what the variant pack binds by its uid.
struct Operand {
  int64_t uid = 0;
  std::vector<int64_t> dims, strides;
  cudnnDataType_t type{};
  bool by_value = false;
};

std::map<int64_t, Operand> operands_of(const Desc& graph, int64_t* op_count) {
  std::map<int64_t, Operand> out;
  const std::vector<Desc*> ops = values<Desc*>(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS);
  *op_count = static_cast<int64_t>(ops.size());
  for (const Desc* op : ops) {
    for (const auto& [name, a] : op->attrs) {
      if (a.type != CUDNN_TYPE_BACKEND_DESCRIPTOR) continue;
      for (const Desc* t : values<Desc*>(*op, name)) {
        if (t == nullptr || t->type != CUDNN_BACKEND_TENSOR_DESCRIPTOR) continue;
        const std::vector<uint8_t> virt = values<uint8_t>(*t, CUDNN_ATTR_TENSOR_IS_VIRTUAL);  // bool
        if (!virt.empty() && virt[0] != 0) continue;
        Operand o;
        o.uid = values<int64_t>(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID).at(0);
        o.dims = values<int64_t>(*t, CUDNN_ATTR_TENSOR_DIMENSIONS);
        o.strides = values<int64_t>(*t, CUDNN_ATTR_TENSOR_STRIDES);
        o.type = values<cudnnDataType_t>(*t, CUDNN_ATTR_TENSOR_DATA_TYPE).at(0);
        const std::vector<uint8_t> bv = values<uint8_t>(*t, CUDNN_ATTR_TENSOR_IS_BY_VALUE);
        o.by_value = !bv.empty() && bv[0] != 0;
        out[o.uid] = o;
      }
    }
  }
  return out;
}

// Element (b, h, i, j) of a 4-d operand at its strides; the bytes from its first element to its last (what it may
// touch), and its elements' bytes (what an engine moves: q, k and v of a fused QKV buffer interleave).
int64_t at(const Operand& o, int64_t b, int64_t h, int64_t i, int64_t j) {
  return b * o.strides[0] + h * o.strides[1] + i * o.strides[2] + j * o.strides[3];
}
size_t element_bytes(const Operand& o) { return o.type == CUDNN_DATA_FLOAT || o.type == CUDNN_DATA_INT32 ? 4 : 2; }
size_t span_bytes(const Operand& o) {
  int64_t last = 0;
  for (size_t k = 0; k < o.dims.size(); ++k) last += (o.dims[k] - 1) * o.strides[k];
  return static_cast<size_t>(last + 1) * element_bytes(o);
}
size_t data_bytes(const Operand& o) {
  size_t n = 1;
  for (int64_t d : o.dims) n *= static_cast<size_t>(d);
  return n * element_bytes(o);
}

// The I/O dtype's values as float, and rounding to it.
struct Io {
  bool bf16 = true;
  float load(const void* p, int64_t i) const {
    const uint16_t b = static_cast<const uint16_t*>(p)[i];
    return bf16 ? bf16_bits_to_float(b) : f16_bits_to_float(b);
  }
  void store(void* p, int64_t i, float v) const {
    static_cast<uint16_t*>(p)[i] = bf16 ? float_to_bf16_bits(v) : float_to_f16_bits(v);
  }
  float round(float v) const {
    return bf16 ? bf16_bits_to_float(float_to_bf16_bits(v)) : f16_bits_to_float(float_to_f16_bits(v));
  }
};

// The attention of one execution: operands by uid, pointers by uid.
struct Sdpa {
  std::map<int64_t, Operand> ops;
  std::map<int64_t, void*> ptr;
  bool backward = false, padded = false;
  int64_t B = 0, H = 0, T = 0, D = 0, G = 1;  // G: query heads per kv head (K's and V's dims say H / G heads)
  Io io;
  float scale = 0;

  const Operand& op(int64_t uid) const { return ops.at(uid); }
  // Key j of sample b is attended by query i when j <= i and (padded) j < seq_len_kv[b], i < seq_len_q[b].
  bool keep(int64_t b, int64_t i, int64_t j) const {
    if (j > i) return false;
    if (!padded) return true;
    return j < static_cast<const int32_t*>(ptr.at(ids::kSeqLenKv))[b] &&
           i < static_cast<const int32_t*>(ptr.at(ids::kSeqLenQ))[b];
  }
  // K and V as the graph declares them where it reads them transposed (K^T (B,H_kv,D,T) in both passes, V^T in
  // backward): element (b, token, d) of either as query head h reads it (kv head h / G).
  float kv(int64_t uid, int64_t b, int64_t h, int64_t t, int64_t d) const {
    const bool transposed = uid == ids::kK || backward;
    const int64_t hk = h / G;
    return io.load(ptr.at(uid), transposed ? at(op(uid), b, hk, d, t) : at(op(uid), b, hk, t, d));
  }
  float x(int64_t uid, int64_t b, int64_t h, int64_t t, int64_t d) const {
    return io.load(ptr.at(uid), at(op(uid), b, h, t, d));
  }
  // P for one (b, h): row i's probabilities over keys j (0 where masked), and lse.
  void probs(int64_t b, int64_t h, std::vector<float>& p, std::vector<float>& lse) const {
    for (int64_t i = 0; i < T; ++i) {
      float m = -INFINITY;
      for (int64_t j = 0; j < T; ++j) {
        float s = 0;
        for (int64_t d = 0; d < D; ++d) s += x(ids::kQ, b, h, i, d) * kv(ids::kK, b, h, j, d);
        p[static_cast<size_t>(i * T + j)] = keep(b, i, j) ? s * scale : -INFINITY;
        m = std::max(m, p[static_cast<size_t>(i * T + j)]);
      }
      float sum = 0;
      float* row = p.data() + i * T;
      for (int64_t j = 0; j < T; ++j) sum += (row[j] = keep(b, i, j) ? std::exp(row[j] - m) : 0.f);
      for (int64_t j = 0; j < T; ++j) row[j] /= sum;
      lse[static_cast<size_t>(i)] = m + std::log(sum);
    }
  }
  void forward() const {
    std::vector<float> p(static_cast<size_t>(T * T)), lse(static_cast<size_t>(T));
    auto* stats = static_cast<float*>(ptr.at(ids::kStats));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        probs(b, h, p, lse);
        for (int64_t i = 0; i < T; ++i) {
          stats[at(op(ids::kStats), b, h, i, 0)] = lse[static_cast<size_t>(i)];
          for (int64_t d = 0; d < D; ++d) {
            float o = 0;
            for (int64_t j = 0; j < T; ++j) o += io.round(p[static_cast<size_t>(i * T + j)]) * kv(ids::kV, b, h, j, d);
            io.store(ptr.at(ids::kO), at(op(ids::kO), b, h, i, d), o);
          }
        }
      }
  }
  // Grouped (G > 1): each query head's dK and dV rounded to the I/O dtype (the graph's per-head tensors), summed over
  // the group in f32 (the reduction's compute type) in head order, and rounded once more into dK and dV.
  void backward_pass() const {
    std::vector<float> p(static_cast<size_t>(T * T)), lse(static_cast<size_t>(T)), ds(static_cast<size_t>(T * T));
    std::vector<float> dk_sum(static_cast<size_t>(G > 1 ? T * D : 0)), dv_sum(dk_sum.size());
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        if (G > 1 && h % G == 0) {
          std::fill(dk_sum.begin(), dk_sum.end(), 0.f);
          std::fill(dv_sum.begin(), dv_sum.end(), 0.f);
        }
        probs(b, h, p, lse);
        for (int64_t i = 0; i < T; ++i) {
          float delta = 0;  // rowsum(dO * O)
          for (int64_t d = 0; d < D; ++d) delta += x(ids::kDout, b, h, i, d) * x(ids::kO, b, h, i, d);
          for (int64_t j = 0; j < T; ++j) {
            float dp = 0;
            for (int64_t d = 0; d < D; ++d) dp += x(ids::kDout, b, h, i, d) * kv(ids::kV, b, h, j, d);
            ds[static_cast<size_t>(i * T + j)] = p[static_cast<size_t>(i * T + j)] * (dp - delta) * scale;
          }
        }
        for (int64_t t = 0; t < T; ++t)
          for (int64_t d = 0; d < D; ++d) {
            float dq = 0, dk = 0, dv = 0;
            for (int64_t u = 0; u < T; ++u) {
              dq += ds[static_cast<size_t>(t * T + u)] * kv(ids::kK, b, h, u, d);  // dS K (f32 dQ_accum)
              dk += io.round(ds[static_cast<size_t>(u * T + t)]) * x(ids::kQ, b, h, u, d);  // dS^T Q
              dv += io.round(p[static_cast<size_t>(u * T + t)]) * x(ids::kDout, b, h, u, d);  // P^T dO
            }
            io.store(ptr.at(ids::kDq), at(op(ids::kDq), b, h, t, d), dq);
            if (padded && t >= static_cast<const int32_t*>(ptr.at(ids::kSeqLenKv))[b]) continue;
            // Key rows past seq_len_kv lie outside the dK and dV GEMMs' extent: left as they were, as an engine may.
            if (G > 1) {
              dk_sum[static_cast<size_t>(t * D + d)] += io.round(dk);
              dv_sum[static_cast<size_t>(t * D + d)] += io.round(dv);
              if (h % G != G - 1) continue;
              dk = dk_sum[static_cast<size_t>(t * D + d)];
              dv = dv_sum[static_cast<size_t>(t * D + d)];
            }
            io.store(ptr.at(ids::kDk), at(op(ids::kDk), b, h / G, t, d), dk);
            io.store(ptr.at(ids::kDv), at(op(ids::kDv), b, h / G, t, d), dv);
          }
      }
  }
};

const char* uid_name(int64_t uid) {
  static const char* const names[] = {"",           "Q",        "K",   "V",         "O",          "Stats",
                                      "scale",      "mask value", "dO", "dQ",       "dK",         "dV",
                                      "softmax_sum", "dQ_accum", "one", "seq_len_q", "seq_len_kv", "padding mask value"};
  return uid >= 1 && uid <= ids::kPaddingMaskValue ? names[uid] : "tensor";
}

Desc* as_desc(cudnnBackendDescriptor_t d) { return static_cast<Desc*>(d); }

cudnnStatus_t execute(const Handle& handle, const Desc& plan, const Desc& pack) {
  if (!plan.finalized || plan.graph == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: the plan is not a finalized execution plan");
  Sdpa s;
  int64_t op_count = 0;
  s.ops = operands_of(*plan.graph, &op_count);
  s.backward = s.ops.count(ids::kDq) != 0;
  s.padded = s.ops.count(ids::kSeqLenKv) != 0;
  if (s.ops.count(ids::kQ) == 0 || s.ops.count(ids::kK) == 0 || s.op(ids::kQ).dims.size() != 4 ||
      s.op(ids::kK).dims.size() != 4)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the cuDNN double runs only mptrain's attention graphs (no 4-d Q, K)");
  const Operand& q = s.op(ids::kQ);
  const int64_t kv_heads = s.op(ids::kK).dims[1];
  const int64_t want = (s.backward ? 22 + (kv_heads != q.dims[1] ? 2 : 0) : 14) + (s.padded ? 6 : 0);
  if (op_count != want)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, "the cuDNN double runs only mptrain's causal attention graphs (" +
                                                std::to_string(op_count) + " operations, expected " +
                                                std::to_string(want) + ")");
  const std::vector<int64_t> uids = values<int64_t>(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS);
  const std::vector<void*> ptrs = values<void*>(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS);
  if (uids.size() != ptrs.size())
    return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: uids and pointers differ in count");
  for (size_t i = 0; i < uids.size(); ++i) s.ptr[uids[i]] = ptrs[i];
  std::vector<Access> acc;
  uint64_t read = 0, written = 0;
  for (const auto& [uid, o] : s.ops) {
    if (s.ptr.count(uid) == 0 || s.ptr[uid] == nullptr)
      return fail(CUDNN_STATUS_BAD_PARAM, "variant pack: no pointer for tensor uid " + std::to_string(uid));
    if (o.by_value) continue;  // host scalars
    const bool is_output = uid == ids::kO || uid == ids::kStats || uid == ids::kDq || uid == ids::kDk ||
                           uid == ids::kDv || uid == ids::kSoftmaxSum || uid == ids::kDqAccum;
    acc.push_back({s.ptr[uid], span_bytes(o), is_output, uid_name(uid)});
    (is_output ? written : read) += data_bytes(o);
  }
  s.B = q.dims[0], s.H = q.dims[1], s.T = q.dims[2], s.D = q.dims[3];
  if (kv_heads < 1 || s.H % kv_heads != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, "K's heads (" + std::to_string(kv_heads) + ") must divide Q's (" +
                                            std::to_string(s.H) + ")");
  s.G = s.H / kv_heads;
  s.io.bf16 = q.type == CUDNN_DATA_BFLOAT16;
  s.scale = *static_cast<const float*>(s.ptr.at(ids::kScale));
  const cudaError_t err = run_on_stream(handle.stream, "cudnnBackendExecute", acc, [s, read, written] {
    if (!record_only()) {
      if (s.backward) s.backward_pass();
      else s.forward();
    }
    detail::count(&Counters::kernel_launches);
    detail::count(&Counters::kernel_bytes_read, read);
    detail::count(&Counters::kernel_bytes_written, written);
    detail::count_site(s.backward ? "sdpa_backward" : "sdpa_forward", "cudnn", read, written, 0, 0);
    g_executions.fetch_add(1);
  });
  if (err != cudaSuccess) return fail(CUDNN_STATUS_EXECUTION_FAILED_CUDART, "cudnnBackendExecute: the stream failed");
  return CUDNN_STATUS_SUCCESS;
}

}  // namespace

void set_cudnn_sdpa(bool on) { g_enabled.store(on); }
size_t cudnn_live_handles() {
  std::lock_guard lock(g_handles_mutex);
  return g_live_handles.size();
}
uint64_t cudnn_sdpa_executions() { return g_executions.load(); }

size_t cudnnGetVersion() { return CUDNN_VERSION; }

const char* cudnnGetErrorString(cudnnStatus_t status) {
  switch (status) {
    case CUDNN_STATUS_SUCCESS: return "CUDNN_STATUS_SUCCESS";
    case CUDNN_STATUS_NOT_INITIALIZED: return "CUDNN_STATUS_NOT_INITIALIZED";
    case CUDNN_STATUS_BAD_PARAM: return "CUDNN_STATUS_BAD_PARAM";
    case CUDNN_STATUS_NOT_SUPPORTED: return "CUDNN_STATUS_NOT_SUPPORTED";
    case CUDNN_STATUS_EXECUTION_FAILED_CUDART: return "CUDNN_STATUS_EXECUTION_FAILED_CUDART";
    default: return "CUDNN_STATUS_UNKNOWN";
  }
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message != nullptr && max_size > 0)
    std::snprintf(message, max_size, "%s", t_last_error.empty() ? kMissing : t_last_error.c_str());
}

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: null handle");
  *handle = nullptr;
  if (!g_enabled.load()) return fail(CUDNN_STATUS_NOT_SUPPORTED, kMissing);
  *handle = reinterpret_cast<cudnnHandle_t>(new Handle());
  std::lock_guard lock(g_handles_mutex);
  g_live_handles.insert(*handle);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnDestroy(cudnnHandle_t h) {
  {
    std::lock_guard lock(g_handles_mutex);
    if (g_live_handles.erase(h) == 0) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: not a live handle");
  }
  delete reinterpret_cast<Handle*>(h);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnSetStream(cudnnHandle_t h, cudaStream_t stream) {
  if (h == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnSetStream: null handle");
  reinterpret_cast<Handle*>(h)->stream = stream;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnGetStream(cudnnHandle_t h, cudaStream_t* stream) {
  if (h == nullptr || stream == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnGetStream: null argument");
  *stream = reinterpret_cast<Handle*>(h)->stream;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnBackendCreateDescriptor(cudnnBackendDescriptorType_t type, cudnnBackendDescriptor_t* d) {
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendCreateDescriptor: null descriptor");
  *d = nullptr;
  if (!g_enabled.load()) return fail(CUDNN_STATUS_NOT_SUPPORTED, kMissing);
  *d = new Desc{type, {}, false, nullptr};
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendDestroyDescriptor(cudnnBackendDescriptor_t d) {
  delete as_desc(d);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendSetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t count, const void* values_in) {
  const size_t size = element_size(type);
  if (d == nullptr || count < 0 || (count > 0 && values_in == nullptr))
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendSetAttribute: bad arguments");
  if (size == 0) return fail(CUDNN_STATUS_NOT_SUPPORTED, "the cuDNN double does not know attribute type " +
                                                             std::to_string(static_cast<int>(type)));
  Desc* desc = as_desc(d);
  if (desc->finalized) return fail(CUDNN_STATUS_NOT_SUPPORTED, "cudnnBackendSetAttribute on a finalized descriptor");
  Attr a{type, std::vector<unsigned char>(size * static_cast<size_t>(count)), count};
  if (count > 0) std::memcpy(a.bytes.data(), values_in, a.bytes.size());
  desc->attrs[name] = std::move(a);
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendFinalize(cudnnBackendDescriptor_t d) {
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendFinalize: null descriptor");
  Desc* desc = as_desc(d);
  if (desc->type == CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) {
    const std::vector<Desc*> cfg = values<Desc*>(*desc, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG);
    if (cfg.empty() || cfg[0] == nullptr || cfg[0]->graph == nullptr)
      return fail(CUDNN_STATUS_BAD_PARAM, "execution plan: no engine config from the heuristics");
    desc->graph = cfg[0]->graph;  // a finalized plan outlives its engine config (the graph must stay alive)
  }
  desc->finalized = true;
  return CUDNN_STATUS_SUCCESS;
}
cudnnStatus_t cudnnBackendGetAttribute(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                                       cudnnBackendAttributeType_t type, int64_t requested, int64_t* count,
                                       void* out) {
  if (d == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendGetAttribute: null descriptor");
  Desc* desc = as_desc(d);
  if (name == CUDNN_ATTR_ENGINEHEUR_RESULTS && type == CUDNN_TYPE_BACKEND_DESCRIPTOR) {
    const std::vector<Desc*> graph = values<Desc*>(*desc, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH);
    if (graph.empty() || graph[0] == nullptr)
      return fail(CUDNN_STATUS_BAD_PARAM, "ENGINEHEUR_RESULTS: the heuristics descriptor has no operation graph");
    if (count != nullptr) *count = 1;  // one engine: this double
    if (requested >= 1 && out != nullptr) as_desc(static_cast<cudnnBackendDescriptor_t*>(out)[0])->graph = graph[0];
    return CUDNN_STATUS_SUCCESS;
  }
  if (name == CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE && type == CUDNN_TYPE_INT64) {
    if (count != nullptr) *count = 1;
    if (requested >= 1 && out != nullptr) *static_cast<int64_t*>(out) = 0;
    return CUDNN_STATUS_SUCCESS;
  }
  return fail(CUDNN_STATUS_NOT_SUPPORTED, "the cuDNN double answers only ENGINEHEUR_RESULTS and "
                                          "EXECUTION_PLAN_WORKSPACE_SIZE");
}
cudnnStatus_t cudnnBackendExecute(cudnnHandle_t handle, cudnnBackendDescriptor_t plan, cudnnBackendDescriptor_t pack) {
  if (handle == nullptr || plan == nullptr || pack == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: null argument");
  if (!live(handle)) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: the handle was destroyed");
  const std::vector<cudnnHandle_t> built = values<cudnnHandle_t>(*as_desc(plan), CUDNN_ATTR_EXECUTION_PLAN_HANDLE);
  if (!built.empty() && !live(built[0]))
    return fail(CUDNN_STATUS_BAD_PARAM, "cudnnBackendExecute: the handle the plan was built with was destroyed");
  return execute(*reinterpret_cast<Handle*>(handle), *as_desc(plan), *as_desc(pack));
}

}  // namespace mpt::cuda_emu
