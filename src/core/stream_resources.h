// src/core/stream_resources.h: what upper layers cache per CUDA stream, given back when the stream's owner retires it.
#pragma once

#include "mpt/core/stream.h"

namespace mpt::detail {

// A function that drops what a cache keeps for (device, stream), e.g. the cuBLASLt workspace of ops/lt_workspace.cpp.
using StreamRelease = void (*)(int device, void* stream);

// Registers `release` (once per cache; registering the same function again does nothing).
void on_stream_release(StreamRelease release);
// Calls every registered release for (device, stream): a Stream's last owner does when it lets go (before the stream
// is destroyed), and a CudaGraph once its stream's work is done and before the stream's memory pool ends, so what the
// caches allocated on the stream goes back with it. A cache must therefore not own the stream: it allocates on
// detail::unowned_stream(stream) (mpt/core/stream.h), else the stream never dies and neither does what it holds.
void release_stream_resources(int device, void* stream);

}  // namespace mpt::detail
