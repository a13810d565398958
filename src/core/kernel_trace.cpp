// src/core/kernel_trace.cpp: KernelTrace over CUPTI's activity API, loaded with dlopen (no link dependency), and kernel-name shortening.
#include "mpt/core/kernel_trace.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <string_view>
#include <type_traits>
#include <utility>

#include "mpt/core/error.h"

// CUPTI's headers come with the CUDA toolkit (src/CMakeLists.txt finds them); the library is opened at run time, so a
// machine without it still runs everything else. The emulation build has no device to trace.
#if defined(MPT_WITH_CUDA) && !defined(MPT_CUDA_EMULATION) && defined(MPT_HAVE_CUPTI)
#include <cuda_runtime.h>
#include <cupti_activity.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <cstdlib>
#include <memory>
#define MPT_KERNEL_TRACE 1
#endif

namespace mpt::profile {

namespace detail {

std::string short_kernel_name(const std::string& demangled, size_t max_chars) {
  std::string s = demangled;
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  // The parameter list: the first '(' outside template arguments that does not open "(anonymous namespace)".
  constexpr std::string_view kAnon = "(anonymous namespace)";
  int depth = 0;
  size_t last_scope = std::string::npos;  // just past the last "::" outside template arguments
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    if (c == '>' && depth > 0) --depth;
    if (depth != 0) continue;
    if (c == '(') {
      if (std::string_view(s).substr(i, kAnon.size()) == kAnon) {
        i += kAnon.size() - 1;
        continue;
      }
      s.erase(i);
      break;
    }
    if (c == ':' && i + 1 < s.size() && s[i + 1] == ':') last_scope = i + 2, ++i;
  }
  if (last_scope != std::string::npos && last_scope < s.size()) s.erase(0, last_scope);
  // Inside the template arguments: the project's namespaces.
  for (std::string_view ns : {"(anonymous namespace)::", "mpt::kernels::cuda::", "mpt::kernels::math::",
                              "mpt::kernels::", "mpt::"}) {
    for (size_t at = s.find(ns); at != std::string::npos; at = s.find(ns, at)) s.erase(at, ns.size());
  }
  if (s.size() > max_chars && max_chars >= 3) s = s.substr(0, max_chars - 3) + "...";
  return s;
}

}  // namespace detail

#if defined(MPT_KERNEL_TRACE)
namespace {

// The CUPTI entry points KernelTrace uses, from libcupti (the toolkit's, or the nvidia-cuda-cupti wheel's).
struct Cupti {
  decltype(&cuptiActivityRegisterCallbacks) register_callbacks = nullptr;
  decltype(&cuptiActivityEnable) enable = nullptr;
  decltype(&cuptiActivityDisable) disable = nullptr;
  decltype(&cuptiActivityFlushAll) flush_all = nullptr;
  decltype(&cuptiActivityGetNextRecord) next_record = nullptr;
  decltype(&cuptiGetResultString) result_string = nullptr;
  std::string error;  // why it could not be loaded
};

const Cupti& cupti() {
  static const Cupti c = [] {
    Cupti r;
    void* lib = nullptr;
    for (const char* name : {"libcupti.so.13", "libcupti.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      const char* why = dlerror();
      r.error = std::string("libcupti.so.13 could not be loaded (") + (why ? why : "not found") +
                "): put CUDA's extras/CUPTI/lib64, or the nvidia-cuda-cupti wheel's lib folder, on LD_LIBRARY_PATH";
      return r;
    }
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr && r.error.empty()) r.error = std::string("libcupti has no ") + name;
    };
    sym(r.register_callbacks, "cuptiActivityRegisterCallbacks");
    sym(r.enable, "cuptiActivityEnable");
    sym(r.disable, "cuptiActivityDisable");
    sym(r.flush_all, "cuptiActivityFlushAll");
    sym(r.next_record, "cuptiActivityGetNextRecord");
    sym(r.result_string, "cuptiGetResultString");
    return r;
  }();
  return c;
}

std::string result_text(CUptiResult e) {
  const char* s = nullptr;
  if (cupti().result_string != nullptr) cupti().result_string(e, &s);
  return s != nullptr ? s : "CUPTI error " + std::to_string(static_cast<int>(e));
}

void check(CUptiResult e, const char* what) {
  MPT_CHECK(e == CUPTI_SUCCESS, "[KernelTrace] {} failed: {}", what, result_text(e));
}

// What the buffer callbacks gather, keyed by (kind, name).
std::mutex g_mutex;
std::map<std::pair<std::string, std::string>, KernelTime> g_totals;
std::map<const char*, std::string> g_names;  // CUPTI's name pointers (shared by a kernel's records) -> shortened
bool g_active = false;

std::string kernel_name(const char* raw) {
  if (raw == nullptr) return "(unnamed kernel)";
  const auto it = g_names.find(raw);
  if (it != g_names.end()) return it->second;
  int status = 0;
  std::unique_ptr<char, decltype(&std::free)> d(abi::__cxa_demangle(raw, nullptr, nullptr, &status), &std::free);
  std::string name = detail::short_kernel_name(status == 0 && d ? d.get() : raw);
  g_names.emplace(raw, name);
  return name;
}

void add(const std::string& kind, const std::string& name, uint64_t start, uint64_t end, uint64_t bytes) {
  KernelTime& t = g_totals[{kind, name}];
  t.kind = kind, t.name = name;
  const double ms = end > start ? static_cast<double>(end - start) * 1e-6 : 0.0;
  ++t.calls;
  t.total_ms += ms;
  t.max_ms = std::max(t.max_ms, ms);
  t.bytes += bytes;
}

const char* copy_direction(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy (other)";
  }
}

constexpr size_t kBufferBytes = 8 << 20;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer != nullptr ? kBufferBytes : 0;
  *max_records = 0;  // as many as fit
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    const std::lock_guard lock(g_mutex);
    CUpti_Activity* record = nullptr;
    while (g_active && cupti().next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
      switch (record->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
          add("kernel", kernel_name(k->name), k->start, k->end, 0);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
          add("memcpy", copy_direction(m->copyKind), m->start, m->end, m->bytes);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
          add("memset", "memset", m->start, m->end, m->bytes);
          break;
        }
        default: break;
      }
    }
  }
  std::free(buffer);
}

constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                         CUPTI_ACTIVITY_KIND_MEMSET};

}  // namespace

std::string kernel_trace_unavailable_reason() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    cudaGetLastError();
    return "no CUDA device is visible: kernel traces need a GPU";
  }
  return cupti().error;
}

KernelTrace::KernelTrace() {
  const std::string why = kernel_trace_unavailable_reason();
  MPT_CHECK(why.empty(), "[KernelTrace] unavailable: {}", why);
  {
    const std::lock_guard lock(g_mutex);
    MPT_CHECK(!g_active, "[KernelTrace] another trace is running in this process (one at a time)");
    g_totals.clear();
    g_active = true;
  }
  try {
    static const CUptiResult registered = cupti().register_callbacks(buffer_requested, buffer_completed);
    check(registered, "cuptiActivityRegisterCallbacks");
    const cudaError_t synced = cudaDeviceSynchronize();  // work queued before the trace stays out of it
    MPT_CHECK(synced == cudaSuccess, "[KernelTrace] cudaDeviceSynchronize failed: {}", cudaGetErrorString(synced));
    for (CUpti_ActivityKind k : kKinds) check(cupti().enable(k), "cuptiActivityEnable");
  } catch (...) {  // a trace that failed to start leaves nothing enabled and does not block the next one
    for (CUpti_ActivityKind k : kKinds) cupti().disable(k);
    const std::lock_guard lock(g_mutex);
    g_active = false;
    throw;
  }
  active_ = true;
}

KernelTrace::~KernelTrace() {
  if (!active_) return;
  try {
    stop();
  } catch (...) {  // a destructor does not throw; stop() reports its errors when called
  }
}

std::vector<KernelTime> KernelTrace::stop() {
  MPT_CHECK(active_, "[KernelTrace] stop() called twice");
  active_ = false;
  const cudaError_t synced = cudaDeviceSynchronize();
  for (CUpti_ActivityKind k : kKinds) cupti().disable(k);
  const CUptiResult flushed = cupti().flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::vector<KernelTime> out;
  {
    const std::lock_guard lock(g_mutex);
    g_active = false;
    for (auto& [key, t] : g_totals) out.push_back(std::move(t));
    g_totals.clear();
  }
  MPT_CHECK(synced == cudaSuccess, "[KernelTrace] cudaDeviceSynchronize failed: {}", cudaGetErrorString(synced));
  check(flushed, "cuptiActivityFlushAll");
  std::sort(out.begin(), out.end(), [](const KernelTime& a, const KernelTime& b) { return a.total_ms > b.total_ms; });
  return out;
}

#else

std::string kernel_trace_unavailable_reason() {
#if defined(MPT_CUDA_EMULATION)
  return "this is the CUDA emulation build: its kernels run on the CPU, there is no device time to trace";
#elif defined(MPT_WITH_CUDA)
  return "mptrain was built without CUPTI's headers (cupti_activity.h, from the CUDA toolkit's extras/CUPTI)";
#else
  return "mptrain was built without CUDA: there is no device to trace";
#endif
}

KernelTrace::KernelTrace() { MPT_CHECK(false, "[KernelTrace] unavailable: {}", kernel_trace_unavailable_reason()); }

KernelTrace::~KernelTrace() = default;

std::vector<KernelTime> KernelTrace::stop() {
  MPT_CHECK(false, "[KernelTrace] unavailable: {}", kernel_trace_unavailable_reason());
  return {};
}

#endif

}  // namespace mpt::profile
