// tests/support/cuda_emu/cudart_graph.cpp: the cudart double's stream capture (work recorded, not run) and graph replay on a launch stream.
#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "cudart_state.h"

namespace mpt::cuda_emu {

using namespace detail;

namespace {

thread_local std::string t_capture_failure;
uint64_t g_next_capture_id = 1;  // under State::mutex
std::atomic<int> g_active_captures{0};

struct Graph {
  int device = 0;
  std::shared_ptr<const std::vector<GraphOp>> ops;
  bool destroyed = false;
};

struct GraphExec {
  std::shared_ptr<const std::vector<GraphOp>> ops;  // a snapshot: the graph may be destroyed after instantiation
  bool destroyed = false;
};

// Graphs and executable graphs ever made (handles stay recognisable after destruction); under State::mutex.
std::vector<std::unique_ptr<Graph>>& graphs() {
  static auto* g = new std::vector<std::unique_ptr<Graph>>();
  return *g;
}
std::vector<std::unique_ptr<GraphExec>>& execs() {
  static auto* e = new std::vector<std::unique_ptr<GraphExec>>();
  return *e;
}

template <class T, class H>
T* find_live(std::vector<std::unique_ptr<T>>& all, H handle) {
  for (const auto& x : all)
    if (reinterpret_cast<H>(x.get()) == handle) return x->destroyed ? nullptr : x.get();
  return nullptr;
}

void invalidate(Capture& c, cudaError_t e, const std::string& why) {
  if (c.invalidated == cudaSuccess) c.invalidated = e;
  t_capture_failure = why;
}

// The capture a legacy stream's work would implicitly synchronise with: a blocking stream of its device capturing.
Capture* implicit_capture(State& s, const StreamState& st) {
  if (!st.legacy) return nullptr;
  for (const auto& o : s.streams)
    if (!o->destroyed && !o->legacy && o->blocking && o->device == st.device && o->capture) return o->capture.get();
  return nullptr;
}

void end_capture(Capture& c) {
  c.active = false;
  --g_active_captures;
  for (StreamState* m : c.members) {
    m->capture.reset();
    m->capture_ops = 0;
    m->capture_unjoined = false;
  }
}

}  // namespace

namespace detail {

bool capturing_anywhere() { return g_active_captures.load() > 0; }

bool captured(State& s, StreamState& st, std::string what, Replay replay, cudaError_t* status, bool counts_as_work) {
  if (st.capture) {
    Capture& c = *st.capture;
    if (c.invalidated != cudaSuccess) {
      *status = fail(cudaErrorStreamCaptureInvalidated);
      return true;
    }
    c.ops.push_back(GraphOp{std::move(what), std::move(replay)});
    if (counts_as_work) {
      ++st.capture_ops;
      if (&st != c.origin) st.capture_unjoined = true;
    }
    *status = cudaSuccess;
    return true;
  }
  if (Capture* c = implicit_capture(s, st)) {
    invalidate(*c, cudaErrorStreamCaptureImplicit,
               what + " on the legacy default stream while a blocking stream of cuda:" + std::to_string(st.device) +
                   " captures: the implicit synchronisation invalidates the capture");
    *status = fail(cudaErrorStreamCaptureImplicit);
    return true;
  }
  return false;
}

bool captured(cudaStream_t stream, std::string what, Replay replay, cudaError_t* status) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return false;  // the caller reports it
  StreamState* st = resolve(s, stream);
  return st != nullptr && captured(s, *st, std::move(what), std::move(replay), status);
}

cudaError_t refuse_in_capture(State& s, StreamState* st, cudaError_t code, const std::string& why) {
  if (st == nullptr) return cudaSuccess;
  Capture* c = st->capture.get();
  if (c == nullptr) {
    c = implicit_capture(s, *st);
    code = cudaErrorStreamCaptureImplicit;
  }
  if (c == nullptr) return cudaSuccess;
  invalidate(*c, code, why);
  return fail(code);
}

cudaError_t refuse_unsafe(State& s, const char* api) {
  bool refused = false;
  for (const auto& o : s.streams) {
    Capture* c = o->capture.get();
    if (c == nullptr || c->origin != o.get()) continue;
    if (c->mode == cudaStreamCaptureModeGlobal ||
        (c->mode == cudaStreamCaptureModeThreadLocal && c->thread == std::this_thread::get_id())) {
      invalidate(*c, cudaErrorStreamCaptureUnsupported,
                 std::string(api) + " is not allowed while a stream captures in Global (any thread) or ThreadLocal "
                                    "(this thread) mode");
      refused = true;
    }
  }
  return refused ? fail(cudaErrorStreamCaptureUnsupported) : cudaSuccess;
}

cudaError_t refuse_synchronous(State& s, StreamState* st, const char* api) {
  if (const cudaError_t e = refuse_in_capture(s, st, cudaErrorStreamCaptureUnsupported,
                                              std::string(api) + " synchronises with a capturing stream");
      e != cudaSuccess) {
    return e;
  }
  return refuse_unsafe(s, api);
}

}  // namespace detail

std::string capture_failure() { return t_capture_failure; }

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal &&
      mode != cudaStreamCaptureModeRelaxed)
    return fail(cudaErrorInvalidValue);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (st->legacy) {  // the per-thread default stream is the legacy stream in the double
    t_capture_failure = "cudaStreamBeginCapture: the legacy default stream cannot be captured; use a created stream";
    return fail(cudaErrorStreamCaptureUnsupported);
  }
  if (st->capture) return fail(cudaErrorIllegalState);
  auto c = std::make_shared<Capture>();
  c->id = g_next_capture_id++;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = st;
  c->members.push_back(st);
  st->capture = std::move(c);
  ++g_active_captures;
  st->capture_ops = 0;
  st->capture_unjoined = false;
  return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  if (graph == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (!st->capture || st->capture->origin != st) return fail(cudaErrorIllegalState);
  const std::shared_ptr<Capture> c = st->capture;
  if (c->mode != cudaStreamCaptureModeRelaxed && c->thread != std::this_thread::get_id())
    return fail(cudaErrorStreamCaptureWrongThread);
  *graph = nullptr;
  const StreamState* unjoined = nullptr;
  for (const StreamState* m : c->members)
    if (m->capture_unjoined && unjoined == nullptr) unjoined = m;
  end_capture(*c);
  if (c->invalidated != cudaSuccess) return fail(cudaErrorStreamCaptureInvalidated);
  if (unjoined != nullptr) {
    t_capture_failure = "cudaStreamEndCapture: " + unjoined->name() +
                        " joined the capture but its last work was never waited for by the origin stream (record an "
                        "event on it and cudaStreamWaitEvent on the origin)";
    return fail(cudaErrorStreamCaptureUnjoined);
  }
  auto g = std::make_unique<Graph>();
  g->device = st->device;
  g->ops = std::make_shared<const std::vector<GraphOp>>(std::move(c->ops));
  *graph = reinterpret_cast<cudaGraph_t>(g.get());
  graphs().push_back(std::move(g));
  return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  return cudaStreamGetCaptureInfo(stream, status);
}

cudaError_t cudaStreamGetCaptureInfo(cudaStream_t stream, cudaStreamCaptureStatus* status, unsigned long long* id,
                                     cudaGraph_t* graph, const cudaGraphNode_t** dependencies,
                                     const cudaGraphEdgeData** edge_data, size_t* num_dependencies) {
  if (status == nullptr) return fail(cudaErrorInvalidValue);
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  StreamState* st = resolve(s, stream);
  if (st == nullptr) return fail(cudaErrorInvalidResourceHandle);
  if (implicit_capture(s, *st) != nullptr) return fail(cudaErrorStreamCaptureImplicit);
  const Capture* c = st->capture.get();
  *status = c == nullptr                          ? cudaStreamCaptureStatusNone
            : c->invalidated != cudaSuccess ? cudaStreamCaptureStatusInvalidated
                                            : cudaStreamCaptureStatusActive;
  if (id != nullptr && c != nullptr) *id = c->id;
  if (graph != nullptr) *graph = nullptr;  // the graph being built is not exposed
  if (dependencies != nullptr) *dependencies = nullptr;
  if (edge_data != nullptr) *edge_data = nullptr;
  if (num_dependencies != nullptr) *num_dependencies = 0;
  return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long flags) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  if (s.sticky != cudaSuccess) return fail(s.sticky);
  const Graph* g = find_live(graphs(), graph);
  if (exec == nullptr || g == nullptr || (flags & ~0xFULL) != 0) return fail(cudaErrorInvalidValue);
  auto e = std::make_unique<GraphExec>();
  e->ops = g->ops;
  *exec = reinterpret_cast<cudaGraphExec_t>(e.get());
  execs().push_back(std::move(e));
  return cudaSuccess;
}

// Replays the recorded operations in capture order on `stream` (eagerly, through the same entry points, so every
// check, ordering rule and counter applies as when issued); the first error stops the replay and is returned.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  std::shared_ptr<const std::vector<GraphOp>> ops;
  {
    State& s = state();
    std::lock_guard lock(s.mutex);
    if (s.sticky != cudaSuccess) return fail(s.sticky);
    const GraphExec* e = find_live(execs(), exec);
    StreamState* st = resolve(s, stream);
    if (e == nullptr || st == nullptr) return fail(cudaErrorInvalidResourceHandle);
    if (const cudaError_t r = refuse_in_capture(
            s, st, cudaErrorStreamCaptureUnsupported,
            "cudaGraphLaunch into a capturing stream (a child graph node) is not emulated");
        r != cudaSuccess)
      return r;
    ops = e->ops;
  }
  count(&Counters::graph_launches);
  for (const GraphOp& op : *ops)
    if (const cudaError_t r = op.replay(stream); r != cudaSuccess) return r;
  return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  GraphExec* e = find_live(execs(), exec);
  if (e == nullptr) return fail(cudaErrorInvalidValue);
  e->destroyed = true;
  e->ops.reset();
  return sticky_or(s, cudaSuccess);
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  State& s = state();
  std::lock_guard lock(s.mutex);
  Graph* g = find_live(graphs(), graph);
  if (g == nullptr) return fail(cudaErrorInvalidValue);
  g->destroyed = true;
  g->ops.reset();
  return sticky_or(s, cudaSuccess);
}

}  // namespace mpt::cuda_emu
