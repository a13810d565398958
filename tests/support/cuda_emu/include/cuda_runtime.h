// tests/support/cuda_emu/include/cuda_runtime.h: in emulated builds, <cuda_runtime.h> resolves here and gives the cuda_emu harness.
#pragma once

#include "cuda_emu/cuda_emu.h"
