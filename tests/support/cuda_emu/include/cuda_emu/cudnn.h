// tests/support/cuda_emu/include/cuda_emu/cudnn.h: the emulation build's cuDNN double: missing unless asked for.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mpt::cuda_emu {

// Off (the default): cuDNN reports itself missing (cudnnCreate fails), so attention takes the cuBLASLt fallback.
// On (or MPT_EMU_CUDNN=sdpa at start-up): handles and descriptors work and mptrain's causal attention graphs execute
// (naively, at the strides the graph declares; counted as one kernel launch with the operands' bytes, "cudnn
// sdpa_forward" / "sdpa_backward" in the per-site counts). mptrain caches one cuDNN handle per stream, a failed one
// too: switch it on before the stream's first attention, or use a new stream.
void set_cudnn_sdpa(bool on);
uint64_t cudnn_sdpa_executions();  // graphs executed since start-up
// Handles made and not destroyed. Executing with a destroyed handle, or a plan built with one, is refused
// (CUDNN_STATUS_BAD_PARAM), as is destroying one twice.
size_t cudnn_live_handles();

}  // namespace mpt::cuda_emu
