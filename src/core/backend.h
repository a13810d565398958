// src/core/backend.h: the private interface between core and the CUDA backend (resources only, no math).
// Implemented by src/backend/cuda (against cudart) or src/backend/no_cuda (stubs that throw).
// No CUDA types appear here: streams and events travel as void* (cudaStream_t / cudaEvent_t).
#pragma once

#include <cstddef>

#include "mpt/core/device.h"
#include "mpt/core/memory.h"

namespace mpt::cuda_backend {

// Why a build has no CUDA backend: MPT_CUDA=OFF, or MPT_CUDA=AUTO found no nvcc when it was configured.
inline constexpr const char* kNotBuilt = "mptrain was built without CUDA (MPT_CUDA=OFF, or no nvcc at configure time)";

// Probes the driver and devices; called once by mpt::cuda_status(). Never throws.
CudaStatus probe();

// Stream-ordered allocation from the device's memory pool. nbytes > 0.
void* allocate(size_t nbytes, int device, void* stream);
// Returns memory to the pool, ordered on `stream`. Throws mpt::Error on a CUDA error.
void free(void* ptr, size_t nbytes, int device, void* stream);
MemoryStats memory_stats(int device);
// The pool's reserved high-water mark (cudaMemPoolAttrReservedMemHigh), reset by reset_peak_memory_stats.
int64_t reserved_peak_bytes(int device);
// The host-side block cache of legacy-stream tensors (allocator.cpp, detail::BlockCache): on by default, off under
// emulation (where fresh blocks let the cudart double catch reads of memory nothing wrote); MPT_CUDA_CACHING=0/1
// overrides. Turning it off returns its wholly free segments to the pool (the others as their last blocks are freed).
bool caching_enabled();
void set_caching(bool on);
void reset_peak_memory_stats(int device);
void empty_cache(int device);

// A private block pool for one stream (CUDA graph capture, src/core/cuda_graph.cpp): while it exists, the stream's
// frees keep their blocks for that stream's own later allocations, which are served from them first (no driver
// call). During a capture of the stream an allocation no kept block fits is an error naming the size: a captured
// step must find every block its warm-up run made. private_pool_end gives the kept blocks back to the pool; blocks
// still in use go back when they are freed.
void private_pool_begin(int device, void* stream);
void private_pool_end(int device, void* stream);

// CUDA graph capture (global mode) and replay on a stream of `device`.
bool stream_capturing(void* stream);
void capture_begin(int device, void* stream);
void* capture_end(int device, void* stream);  // the instantiated graph (cudaGraphExec_t); throws on a failed capture
void graph_launch(int device, void* exec, void* stream);
void graph_destroy(void* exec) noexcept;

// Page-locked host memory (cudaMallocHost): device-to-host copies into it are asynchronous. nbytes > 0.
void* host_alloc_pinned(size_t nbytes);
void host_free_pinned(void* ptr) noexcept;

// Asynchronous copy on `stream` (a stream of CUDA device `stream_device`); at least one side is CUDA.
void memcpy(void* dst, Device dst_device, const void* src, Device src_device, size_t nbytes, int stream_device,
            void* stream);

// Stream and event calls take the device they belong to: cudaStreamLegacy means "the legacy stream of the
// current device", so the backend makes `device` current around each call.
void* legacy_stream();                 // cudaStreamLegacy
void make_current(int device);         // cudaSetDevice unless it already is the calling thread's device
void* stream_create(int device);       // non-blocking stream
void stream_destroy(void* stream) noexcept;
void stream_synchronize(int device, void* stream);

void* event_create(int device, bool timing);
void event_destroy(void* event) noexcept;
void event_record(int device, void* event, void* stream);
void stream_wait_event(int device, void* stream, void* event);
void event_synchronize(void* event);
bool event_query(void* event);
float event_elapsed_ms(void* start, void* end);

}  // namespace mpt::cuda_backend
