// kernels/cuda/byte_tile.cuh: a 64 x 64 tile of bytes (FP8 codes) staged in shared memory and written transposed, 16 bytes per thread (include only from .cu files).
#pragma once

#include <cstdint>

#include "kernels/cuda/launch.cuh"

namespace mpt::kernels::cuda {

// The tile and block shape of the vectorised transposes (TransformerEngine's cast_transpose does the same): 256
// threads read a 64 x 64 tile eight elements at a time (8 threads per tile row, 32 rows per pass, two passes),
// stage its bytes in shared memory, and each writes 16 bytes of one transposed row.
inline constexpr int kByteTile = 64;
inline constexpr int kByteTileThreads = 256;
inline constexpr int kByteTileLanesPerRow = kByteTile / 8;
inline constexpr int kByteTileRowsPerPass = kByteTileThreads / kByteTileLanesPerRow;
inline constexpr int kByteTilePitch = kByteTile + 8;  // 8-byte aligned staged rows

struct ByteTile {
  uint8_t b[kByteTile][kByteTilePitch];
};

// Eight staged bytes, tile row `row`, columns col ... col + 7 (col % 8 == 0).
MPT_DEVICE MPT_INLINE void stage8(ByteTile& tile, int row, int col, uint64_t bytes) {
  *reinterpret_cast<uint64_t*>(&tile.b[row][col]) = bytes;
}

// The staged tile transposed: output row c0 + k holds tile column k; this thread writes its 16 bytes from tile rows
// part * 16 ... + 15 (part = thread / 64) to out + (c0 + k) * out_pitch + r0 + part * 16, for the output rows below
// `rows_out` and the output columns below `cols_out` (cols_out % 16 == 0, out_pitch % 16 == 0, out 16-byte aligned).
// A warp reads 32 consecutive bytes of each staged row: no bank conflicts. Call after a barrier.
MPT_DEVICE MPT_INLINE void store_transposed16(const ByteTile& tile, uint8_t* out, int64_t out_pitch, int64_t rows_out,
                                              int64_t cols_out, int64_t r0, int64_t c0) {
  const int k = static_cast<int>(threadIdx.x) % kByteTile, part = static_cast<int>(threadIdx.x) / kByteTile;
  const int64_t qr = c0 + k, qc = r0 + part * 16;
  if (qr >= rows_out || qc >= cols_out) return;
  unsigned w[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const int r = part * 16 + j * 4;
    w[j] = unsigned{tile.b[r][k]} | unsigned{tile.b[r + 1][k]} << 8 | unsigned{tile.b[r + 2][k]} << 16 |
           unsigned{tile.b[r + 3][k]} << 24;  // little-endian: the first row's byte first
  }
  *reinterpret_cast<uint4*>(out + qr * out_pitch + qc) = make_uint4(w[0], w[1], w[2], w[3]);
}

}  // namespace mpt::kernels::cuda
