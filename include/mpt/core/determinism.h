// mpt/core/determinism.h: the deterministic mode: repeated runs give the same bits on a GPU too.
#pragma once

namespace mpt {

// Off by default; MPT_DETERMINISTIC=1 in the environment turns it on at startup. When on:
//  - cuBLASLt GEMMs are planned without split-K (REDUCTION_SCHEME_MASK = NONE: one dot-product sequence per output),
//    and the plan cache pins one algorithm per problem;
//  - causal attention takes the cuBLASLt-GEMM path instead of cuDNN's fused flash attention, whose backward may
//    accumulate dQ in a run-dependent order (MPT_ATTENTION=cudnn is then refused);
// Everything else is deterministic in both modes: the custom kernels use no floating-point atomics (embedding and
// bias gradients, amax, found_inf and the block reductions combine in a fixed order or through integer atomics), and
// the CPU backend computes in a fixed order. Changing the mode affects GEMMs planned and attention calls made after.
void set_deterministic(bool on);
bool deterministic();

}  // namespace mpt
