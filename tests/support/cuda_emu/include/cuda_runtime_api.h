// tests/support/cuda_emu/include/cuda_runtime_api.h: in emulated builds, <cuda_runtime_api.h> resolves here and gives the cuda_emu runtime types.
#pragma once

#include "cuda_emu/launch.h"
#include "cuda_emu/runtime_api.h"
#include "cuda_emu/types.h"
