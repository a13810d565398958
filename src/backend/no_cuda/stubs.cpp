// src/backend/no_cuda/stubs.cpp: the CUDA backend interface in a build without CUDA: every entry throws.
#include <string>

#include "core/backend.h"
#include "mpt/core/error.h"

namespace mpt::cuda_backend {
namespace {

[[noreturn]] void not_built() { MPT_THROW("[cuda] {}", kNotBuilt); }

}  // namespace

CudaStatus probe() {
  CudaStatus s;
  s.reason = std::string(kNotBuilt) + "; using the CPU";
  return s;
}

void* allocate(size_t, int, void*) { not_built(); }
void free(void*, size_t, int, void*) { not_built(); }
MemoryStats memory_stats(int) { not_built(); }
int64_t reserved_peak_bytes(int) { not_built(); }
bool caching_enabled() { return false; }
void set_caching(bool) {}
void reset_peak_memory_stats(int) { not_built(); }
void empty_cache(int) { not_built(); }
void private_pool_begin(int, void*) { not_built(); }
void private_pool_end(int, void*) {}
bool stream_capturing(void*) { return false; }
void capture_begin(int, void*) { not_built(); }
void* capture_end(int, void*) { not_built(); }
void graph_launch(int, void*, void*) { not_built(); }
void graph_destroy(void*) noexcept {}
void* host_alloc_pinned(size_t) { not_built(); }
void host_free_pinned(void*) noexcept {}
void memcpy(void*, Device, const void*, Device, size_t, int, void*) { not_built(); }
void* legacy_stream() { not_built(); }
void make_current(int) { not_built(); }
void* stream_create(int) { not_built(); }
void stream_destroy(void*) noexcept {}
void stream_synchronize(int, void*) { not_built(); }
void* event_create(int, bool) { not_built(); }
void event_destroy(void*) noexcept {}
void event_record(int, void*, void*) { not_built(); }
void stream_wait_event(int, void*, void*) { not_built(); }
void event_synchronize(void*) { not_built(); }
bool event_query(void*) { not_built(); }
float event_elapsed_ms(void*, void*) { not_built(); }

}  // namespace mpt::cuda_backend
