// src/core/stream_resources.h: what upper layers cache per CUDA stream, given back when the stream's owner retires it.
#pragma once

namespace mpt::detail {

// A function that drops what a cache keeps for (device, stream), e.g. the cuBLASLt workspace of ops/lt_workspace.cpp.
using StreamRelease = void (*)(int device, void* stream);

// Registers `release` (once per cache; registering the same function again does nothing).
void on_stream_release(StreamRelease release);
// Calls every registered release for (device, stream): the stream's owner (a CudaGraph) calls it once the stream's
// work is done and before the stream's memory pool ends, so what the caches allocated on the stream goes back with it.
void release_stream_resources(int device, void* stream);

}  // namespace mpt::detail
