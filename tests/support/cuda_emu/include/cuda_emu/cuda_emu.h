// tests/support/cuda_emu/include/cuda_emu/cuda_emu.h: everything an emulated .cu translation unit sees instead of the CUDA toolkit.
#pragma once

#include "cuda_emu/counters.h"
#include "cuda_emu/device.h"
#include "cuda_emu/launch.h"
#include "cuda_emu/runtime_api.h"
#include "cuda_emu/types.h"
