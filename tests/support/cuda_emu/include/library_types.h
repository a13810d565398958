// tests/support/cuda_emu/include/library_types.h: in emulation builds, CUDA's data-type enum (the toolkit's values).
#pragma once

namespace mpt::cuda_emu {
enum cudaDataType_t : int {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_R_8U = 8,
  CUDA_R_32I = 10,
  CUDA_R_32U = 12,
  CUDA_R_16BF = 14,
  CUDA_R_64I = 24,
  CUDA_R_64U = 26,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
  CUDA_R_8F_UE8M0 = 30,
};
using cudaDataType = cudaDataType_t;
}  // namespace mpt::cuda_emu

using mpt::cuda_emu::cudaDataType;
using mpt::cuda_emu::cudaDataType_t;
using mpt::cuda_emu::CUDA_R_16BF;
using mpt::cuda_emu::CUDA_R_16F;
using mpt::cuda_emu::CUDA_R_32F;
using mpt::cuda_emu::CUDA_R_32I;
using mpt::cuda_emu::CUDA_R_32U;
using mpt::cuda_emu::CUDA_R_64F;
using mpt::cuda_emu::CUDA_R_64I;
using mpt::cuda_emu::CUDA_R_64U;
using mpt::cuda_emu::CUDA_R_8F_E4M3;
using mpt::cuda_emu::CUDA_R_8F_E5M2;
using mpt::cuda_emu::CUDA_R_8F_UE8M0;
using mpt::cuda_emu::CUDA_R_8I;
using mpt::cuda_emu::CUDA_R_8U;
