// src/ops/attention_cudnn.cpp: causal attention on cuDNN's fused flash attention: handles, plans, lengths, workspace.
#include "ops/attention_internal.h"

#if defined(MPT_WITH_CUDA)
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

#include "backend/cuda/device_guard.h"
#include "core/stream_resources.h"
#include "kernels/cuda/lib/attention_cudnn.h"
#include "mpt/core/determinism.h"
#include "mpt/core/stream.h"
#include "mpt/ops/elementwise.h"
#include "ops/attention_select.h"
#include "ops/dispatch.h"

namespace mpt::ops::detail {
namespace {

namespace kcu = kernels::cuda;


// cuDNN handles: one per (device, stream) that runs attention, bound to that stream, and one per device that builds
// the plans (key: a null stream), created on first use. Plans are cached per shape and executed with any stream's
// handle (as PyTorch executes its cached plans with each thread's handle), so building them with a handle no stream
// owns lets a retired stream's handle go (a user's Stream at its end, a CudaGraph's: drop_handle, through
// core/stream_resources.h) without leaving a plan tied to a destroyed handle. A failed creation (no driver:
// CUDNN_STATUS_NOT_INITIALIZED) is remembered and returns null with the reason in `why`.
struct HandleEntry {
  cudnnHandle_t handle = nullptr;
  std::string error;
};
using Handles = std::map<std::pair<int, void*>, HandleEntry>;

std::mutex& handles_mutex() {
  static std::mutex mutex;
  return mutex;
}

Handles& handles() {
  static auto* table = new Handles();  // never destroyed (used until exit)
  return *table;
}

// A retired stream's handle destroyed (cudnnDestroy synchronises the device, so the stream's work is done).
void drop_handle(int device, void* stream) {
  cudnnHandle_t h = nullptr;
  {
    const std::lock_guard<std::mutex> lock(handles_mutex());
    const auto it = handles().find({device, stream});
    if (it == handles().end() || stream == nullptr) return;
    h = it->second.handle;
    handles().erase(it);
  }
  if (h != nullptr) {
    cuda_backend::DeviceGuard guard(device);
    (void)cudnnDestroy(h);  // nothing to do about a failure while a stream retires
  }
}

cudnnHandle_t cudnn_handle(int device, void* stream, std::string* why) {
  static const bool registered = (mpt::detail::on_stream_release(&drop_handle), true);
  (void)registered;
  const std::lock_guard<std::mutex> lock(handles_mutex());
  const auto [it, fresh] = handles().try_emplace({device, stream});
  HandleEntry& e = it->second;
  if (fresh) {
    cudnnHandle_t h = nullptr;
    cudnnStatus_t st = cudnnCreate(&h);
    if (st == CUDNN_STATUS_SUCCESS && stream != nullptr) {
      st = cudnnSetStream(h, static_cast<cudaStream_t>(stream));
      if (st != CUDNN_STATUS_SUCCESS) (void)cudnnDestroy(h);
    }
    if (st == CUDNN_STATUS_SUCCESS) e.handle = h;
    else e.error = "cuDNN handle: " + cuda_backend::cudnn_failure_text(st);
  }
  *why = e.error;
  return e.handle;
}

kcu::CudnnAttentionProblem cudnn_problem(const Tensor& q, const Tensor& k, const kernels::cpu::AttentionShape& s,
                                         AttentionLayout layout) {
  return {q.size(0),
          q.size(1),
          q.size(2),
          q.size(3),
          q.dtype() == DType::BF16,
          static_cast<float>(s.scale),
          s.padding.lengths != nullptr,
          layout == AttentionLayout::Packed,
          k.size(1),
          layout == AttentionLayout::TokenMajor};
}

// A padded call's lengths as cuDNN's padding mask reads them (none unpadded): seq_len_kv the device key lengths,
// seq_len_q every sample's T (no query row is padding: a padding query attends its sample's real keys). The Tensor
// keeps seq_len_q's device allocation (256-byte aligned, stream-ordered) alive until the call is enqueued.
struct CudnnLengths {
  Tensor q_lengths;
  kcu::CudnnSeqLens seq_lens;
};

CudnnLengths cudnn_lengths(const Tensor& q, const kernels::cpu::AttentionShape& s) {
  if (s.padding.lengths == nullptr) return {};
  CudnnLengths l{Tensor::full({q.size(0)}, static_cast<double>(q.size(2)), DType::I32, q.device()), {}};
  l.seq_lens = {l.q_lengths.data<int32_t>(), s.padding.lengths};
  return l;
}

// The cached cuDNN plan when the selection picks cuDNN and its plan builds, else null (the GEMM path runs). Under
// MPT_ATTENTION=cudnn every refusal, the plan's included, throws instead.
std::shared_ptr<const kcu::CudnnAttentionPlan> cudnn_plan(const Tensor& q, const Tensor& k,
                                                          const kernels::cpu::AttentionShape& s, bool backward,
                                                          AttentionLayout layout, cudnnHandle_t* handle,
                                                          const char* op) {
  const detail::AttentionMode mode = detail::attention_mode_from_env(op);
  if (mode == detail::AttentionMode::Gemm) return nullptr;
  const int device = q.device().index();
  const CudaDeviceInfo& info = cuda_status().devices.at(device);
  detail::AttentionQuery query{q.dtype(), q.size(0), q.size(1), q.size(2), q.size(3), s.scale, info.major,
                               info.minor, backward, {}, deterministic(), s.padding.lengths != nullptr};
  cuda_backend::DeviceGuard guard(device);
  cudnnHandle_t builder = nullptr;
  if (detail::cudnn_attention_rejection(query).empty()) {
    *handle = cudnn_handle(device, Stream::current(q.device()).native(), &query.cudnn_unavailable);
    if (*handle != nullptr) builder = cudnn_handle(device, nullptr, &query.cudnn_unavailable);
  }
  if (detail::select_attention_path(mode, query, op) == detail::AttentionPath::Gemm) {
    // Once per process: an old cuDNN costs a lot of speed without any error to say so.
    if (const std::string note = detail::old_cudnn_note(mode, query, static_cast<int64_t>(cudnnGetVersion()));
        !note.empty()) {
      static std::once_flag noted;
      std::call_once(noted, [&] { std::fprintf(stderr, "%s\n", note.c_str()); });
    }
    return nullptr;
  }
  const auto pass = backward ? kcu::AttentionPass::Backward : kcu::AttentionPass::Forward;
  try {
    return kcu::cudnn_attention_plan(device, builder, cudnn_problem(q, k, s, layout), pass);
  } catch (const kcu::CudnnError& e) {
    MPT_CHECK(mode != detail::AttentionMode::Cudnn, "[{}] MPT_ATTENTION=cudnn, but cuDNN built no plan for {}: {}",
              op, q.meta_str(), e.what());
    return nullptr;  // auto: the static rules passed but this cuDNN has no engine; the failure is cached
  }
}

// Device scratch for one cuDNN call (stream-ordered pool allocation, 256-byte aligned).
Tensor cudnn_workspace(const kcu::CudnnAttentionPlan& plan, Device device) {
  return Tensor::empty({static_cast<int64_t>(plan.workspace_bytes())}, DType::U8, device);
}

template <class F>
void run_cudnn(const char* op, F&& call) {
  try {
    call();
  } catch (const kcu::CudnnError& e) {
    MPT_THROW("[{}] cuDNN attention failed: {}", op, e.what());
  }
}

}  // namespace

bool cudnn_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const kernels::cpu::AttentionShape& s,
                             AttentionResult& r, AttentionLayout layout, const char* op) {
  cudnnHandle_t handle = nullptr;
  const auto plan = cudnn_plan(q, k, s, false, layout, &handle, op);
  if (!plan) return false;
  cuda_backend::DeviceGuard guard(q.device().index());
  const Tensor ws = cudnn_workspace(*plan, q.device());
  const CudnnLengths lengths = cudnn_lengths(q, s);
  run_cudnn(op, [&] {
    plan->forward(handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), r.out.data_ptr(), r.lse.data<float>(),
                  ws.data_ptr(), lengths.seq_lens);
  });
  return true;
}

// cuDNN writes fresh gradients, so accumulation goes through temporaries that are added (+=, rounded once from f32)
// into the given dq, dk, dv.
bool cudnn_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                              const Tensor& dout, const Tensor& lse, const kernels::cpu::AttentionShape& s,
                              AttentionGrads& g, bool accumulate, AttentionLayout layout, const char* op) {
  MPT_CHECK(!(accumulate && layout == AttentionLayout::Packed), "[{}] packed attention writes fresh gradients only",
            op);
  cudnnHandle_t handle = nullptr;
  const auto plan = cudnn_plan(q, k, s, true, layout, &handle, op);
  if (!plan) return false;
  cuda_backend::DeviceGuard guard(q.device().index());
  const auto fresh = [&](const Tensor& grad) {
    return accumulate ? attention_empty(grad.shape(), q.dtype(), q.device(), layout) : grad;
  };
  const Tensor dq = fresh(g.dq), dk = fresh(g.dk), dv = fresh(g.dv);
  const Tensor ws = cudnn_workspace(*plan, q.device());
  const CudnnLengths lengths = cudnn_lengths(q, s);
  run_cudnn(op, [&] {
    plan->backward(handle, q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(), dout.data_ptr(),
                   lse.data<float>(), dq.data_ptr(), dk.data_ptr(), dv.data_ptr(), ws.data_ptr(), lengths.seq_lens);
  });
  if (accumulate) {
    add_(g.dq, dq);
    add_(g.dk, dk);
    add_(g.dv, dv);
  }
  return true;
}

}  // namespace mpt::ops::detail

#else

namespace mpt::ops::detail {

bool cudnn_attention_forward(const Tensor&, const Tensor&, const Tensor&, const kernels::cpu::AttentionShape&,
                             AttentionResult&, AttentionLayout, const char*) {
  return false;
}
bool cudnn_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const Tensor&, const kernels::cpu::AttentionShape&, AttentionGrads&, bool,
                              AttentionLayout, const char*) {
  return false;
}

}  // namespace mpt::ops::detail

#endif
