// kernels/cuda/strided.cu: strided n-d copies (element-wise, 16-byte rows, 32 x 32 tiled transposes), fills and the
// conversions with an integer side on a CUDA stream.
#include "kernels/cuda/strided.h"

#include <cstring>

#include "kernels/cuda/byte_tile.cuh"
#include "kernels/cuda/pack.cuh"
#include "kernels/math/numerics_cast.h"

namespace mpt::kernels::cuda {
namespace {

using math::StridedDims;

struct alignas(16) Word16 {
  uint64_t lo, hi;
};

template <size_t Size>
struct WordOf;
template <>
struct WordOf<1> {
  using type = uint8_t;
};
template <>
struct WordOf<2> {
  using type = uint16_t;
};
template <>
struct WordOf<4> {
  using type = uint32_t;
};
template <>
struct WordOf<8> {
  using type = uint64_t;
};
template <>
struct WordOf<16> {
  using type = Word16;
};

// One element per step of a grid-stride loop; consecutive threads take consecutive indices, so accesses along the
// last dimension are coalesced in whichever array is contiguous there.
template <class T, class Index>
__global__ void __launch_bounds__(kPackThreads) copy_kernel(T* dst, const T* src, StridedDims d, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t doff = 0, soff = 0;
    math::strided_offsets<Index>(d, static_cast<Index>(i), doff, soff);
    dst[doff] = src[soff];
  }
}

template <class T, class Index>
__global__ void __launch_bounds__(kPackThreads) fill_kernel(T* dst, StridedDims d, T value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    int64_t doff = 0, soff = 0;
    math::strided_offsets<Index>(d, static_cast<Index>(i), doff, soff);
    dst[doff] = value;
  }
}

constexpr int kTile = 32;
constexpr int kTileRows = 8;

// The last two dimensions of a transposition: dst(i, j) = dst + i * dst_row_stride + j, src(i, j) = src + i +
// j * src_col_stride.
struct TileShape {
  int64_t rows, cols, dst_row_stride, src_col_stride;
};

// One 32 x 32 tile per step: read along i (contiguous in src) into shared memory, write along j (contiguous in
// dst). `outer` holds the leading dimensions; every thread of a block takes the same steps, so the barriers are
// reached by all.
template <class T>
__global__ void __launch_bounds__(kTile* kTileRows)
    transpose_kernel(T* dst, const T* src, StridedDims outer, TileShape t, int64_t tiles) {
  __shared__ T tile[kTile][kTile + 1];
  const int64_t row_tiles = (t.rows + kTile - 1) / kTile, col_tiles = (t.cols + kTile - 1) / kTile;
  const int64_t per_matrix = row_tiles * col_tiles;
  const int x = static_cast<int>(threadIdx.x), y = static_cast<int>(threadIdx.y);
  for (int64_t id = blockIdx.x; id < tiles; id += gridDim.x) {
    int64_t doff = 0, soff = 0;
    math::strided_offsets<int64_t>(outer, id / per_matrix, doff, soff);
    const int64_t within = id % per_matrix;
    const int64_t i0 = within / col_tiles * kTile, j0 = within % col_tiles * kTile;
    for (int k = y; k < kTile; k += kTileRows) {
      const int64_t i = i0 + x, j = j0 + k;
      if (i < t.rows && j < t.cols) tile[k][x] = src[soff + i + j * t.src_col_stride];
    }
    __syncthreads();
    for (int k = y; k < kTile; k += kTileRows) {
      const int64_t i = i0 + k, j = j0 + x;
      if (i < t.rows && j < t.cols) dst[doff + i * t.dst_row_stride + j] = tile[x][k];
    }
    __syncthreads();
  }
}

// A 2-d transpose of bytes (FP8 codes) in 64 x 64 tiles (byte_tile.cuh): a = [a_rows, a_cols] with row pitch
// a_pitch read eight bytes per thread, b = a^T with row pitch b_pitch written sixteen. The launcher checks
// a_cols % 8 == 0, a_rows % 16 == 0 and the alignments.
MPT_DEVICE MPT_INLINE void transpose_byte_tile(ByteTile& tile, uint8_t* b, const uint8_t* a, int64_t a_rows,
                                               int64_t a_cols, int64_t a_pitch, int64_t b_pitch, uint32_t tile_index,
                                               uint32_t col_tiles) {
  const int tid = static_cast<int>(threadIdx.x);
  const int64_t r0 = static_cast<int64_t>(tile_index / col_tiles) * kByteTile;  // a grid's tiles fit 32 bits
  const int64_t c0 = static_cast<int64_t>(tile_index % col_tiles) * kByteTile;
  const int tc = (tid % kByteTileLanesPerRow) * 8;
  for (int tr = tid / kByteTileLanesPerRow; tr < kByteTile; tr += kByteTileRowsPerPass) {
    const int64_t r = r0 + tr, c = c0 + tc;
    if (r < a_rows && c < a_cols) stage8(tile, tr, tc, *reinterpret_cast<const uint64_t*>(a + r * a_pitch + c));
  }
  __syncthreads();
  store_transposed16(tile, b, b_pitch, a_cols, a_rows, r0, c0);
}

__global__ void __launch_bounds__(kByteTileThreads)
    transpose_bytes_kernel(uint8_t* b, const uint8_t* a, int64_t a_rows, int64_t a_cols, int64_t a_pitch,
                           int64_t b_pitch, int64_t col_tiles) {
  __shared__ __align__(16) ByteTile tile;
  transpose_byte_tile(tile, b, a, a_rows, a_cols, a_pitch, b_pitch, blockIdx.x, static_cast<uint32_t>(col_tiles));
}

// Several matrices' tiles in one grid: matrix s owns the blocks [first_tile[s], first_tile[s + 1]).
struct ByteTransposeTable {
  static constexpr int kMax = 3584 / (sizeof(ByteTranspose) + sizeof(int32_t));
  ByteTranspose jobs[kMax];
  int32_t first_tile[kMax + 1];
  int32_t count;
};

int64_t byte_col_tiles(const ByteTranspose& t) { return (t.cols + kByteTile - 1) / kByteTile; }

__global__ void __launch_bounds__(kByteTileThreads) transpose_bytes_multi_kernel(const ByteTransposeTable table) {
  __shared__ __align__(16) ByteTile tile;
  int s = 0;
  while (static_cast<int32_t>(blockIdx.x) >= table.first_tile[s + 1]) ++s;
  const ByteTranspose t = table.jobs[s];
  transpose_byte_tile(tile, t.b, t.a, t.rows, t.cols, t.cols, t.rows, blockIdx.x - table.first_tile[s],
                      static_cast<uint32_t>((t.cols + kByteTile - 1) / kByteTile));
}

template <class Dst, class Src>
__global__ void __launch_bounds__(kPackThreads) convert_kernel(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = scalar_cast<Dst>(src[i], sat);
}

bool valid_element_size(size_t size) { return size == 1 || size == 2 || size == 4 || size == 8; }

// Doubles the element while the last dimension is contiguous in both arrays with an even size, every other stride is
// even and both addresses are aligned to the wider word, up to 16 bytes: dense rows then move as vector accesses.
size_t widen(StridedDims& d, size_t size, const void* dst, const void* src) {
  while (size < 16 && d.ndim > 0) {
    const int last = d.ndim - 1;
    if (d.dst[last] != 1 || d.src[last] != 1 || d.shape[last] % 2 != 0) break;
    if (reinterpret_cast<uintptr_t>(dst) % (2 * size) != 0 || reinterpret_cast<uintptr_t>(src) % (2 * size) != 0) break;
    bool even = true;
    for (int k = 0; k < last; ++k) even = even && d.dst[k] % 2 == 0 && d.src[k] % 2 == 0;
    if (!even) break;
    d.shape[last] /= 2;
    for (int k = 0; k < last; ++k) {
      d.dst[k] /= 2;
      d.src[k] /= 2;
    }
    size *= 2;
  }
  return size;
}

// As kernels/cpu/strided.cpp's: the transposed layout and both of its last dimensions long enough to fill tiles.
bool is_transpose(const StridedDims& d) {
  const int nd = d.ndim;
  return nd >= 2 && d.dst[nd - 1] == 1 && d.src[nd - 1] != 1 && d.src[nd - 2] == 1 && d.shape[nd - 1] >= 16 &&
         d.shape[nd - 2] >= 16;
}

LaunchConfig grid_stride_config(int64_t n, cudaStream_t stream, uint64_t read_bytes,
                                uint64_t written_bytes MPT_LAUNCH_SITE_PARAM) {
  LaunchConfig config{dim3(grid_stride_blocks(n)), dim3(kPackThreads), 0, stream, read_bytes, written_bytes};
  MPT_LAUNCH_SITE_SET(config);
  return config;
}

// Distinct source elements of a copy: a dimension the source broadcasts (stride 0) reads its elements once.
uint64_t distinct_source_elements(const StridedDims& d) {
  uint64_t n = 1;
  for (int k = 0; k < d.ndim; ++k) n *= d.src[k] != 0 ? static_cast<uint64_t>(d.shape[k]) : 1;
  return n;
}

template <class T>
cudaError_t launch_copy(void* dst, const void* src, const StridedDims& d, cudaStream_t stream) {
  auto* out = static_cast<T*>(dst);
  const auto* in = static_cast<const T*>(src);
  const uint64_t read_bytes = distinct_source_elements(d) * sizeof(T);
  const uint64_t written_bytes = static_cast<uint64_t>(math::strided_numel(d)) * sizeof(T);
  if constexpr (sizeof(T) <= 8) {
    if (is_transpose(d)) {
      const int nd = d.ndim;
      StridedDims outer = d;
      outer.ndim = nd - 2;
      const TileShape t{d.shape[nd - 2], d.shape[nd - 1], d.dst[nd - 2], d.src[nd - 1]};
      if constexpr (sizeof(T) == 1) {
        // One matrix of bytes (FP8 codes, a GEMM operand's other orientation): the vectorised kernel where its
        // shape and alignments allow. The source is a = [t.cols, t.rows] with pitch src_col_stride.
        if (nd == 2 && t.rows % 8 == 0 && t.cols % 16 == 0 && t.src_col_stride % 8 == 0 &&
            t.dst_row_stride % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 8 == 0 && is_aligned16(out)) {
          const int64_t col_tiles = (t.rows + kByteTile - 1) / kByteTile;
          const int64_t tiles = col_tiles * ((t.cols + kByteTile - 1) / kByteTile);
          if (tiles <= 2147483647) {
            return launch(transpose_bytes_kernel,
                          LaunchConfig{dim3(static_cast<unsigned>(tiles)), dim3(kByteTileThreads), 0, stream,
                                       read_bytes, written_bytes},
                          reinterpret_cast<uint8_t*>(out), reinterpret_cast<const uint8_t*>(in), t.cols, t.rows,
                          t.src_col_stride, t.dst_row_stride, col_tiles);
          }
        }
      }
      const int64_t tiles =
          math::strided_numel(outer) * ((t.rows + kTile - 1) / kTile) * ((t.cols + kTile - 1) / kTile);
      const int64_t blocks = tiles < (int64_t{1} << 20) ? tiles : (int64_t{1} << 20);
      return launch(transpose_kernel<T>,
                    LaunchConfig{dim3(static_cast<unsigned>(blocks)), dim3(kTile, kTileRows), 0, stream, read_bytes,
                                 written_bytes},
                    out, in, outer, t, tiles);
    }
  }
  const int64_t n = math::strided_numel(d);
  const LaunchConfig config = grid_stride_config(n, stream, read_bytes, written_bytes);
  return n <= int64_t{UINT32_MAX} ? launch(copy_kernel<T, uint32_t>, config, out, in, d, n)
                                  : launch(copy_kernel<T, int64_t>, config, out, in, d, n);
}

template <class T>
cudaError_t launch_fill(void* dst, const unsigned char* word, const StridedDims& d, cudaStream_t stream) {
  T value;
  std::memcpy(&value, word, sizeof(T));
  auto* out = static_cast<T*>(dst);
  const int64_t n = math::strided_numel(d);
  // Writes only: the value travels as a kernel argument.
  const LaunchConfig config = grid_stride_config(n, stream, 0, static_cast<uint64_t>(n) * sizeof(T));
  return n <= int64_t{UINT32_MAX} ? launch(fill_kernel<T, uint32_t>, config, out, d, value, n)
                                  : launch(fill_kernel<T, int64_t>, config, out, d, value, n);
}

bool has_zero_extent(const int64_t* shape, int ndim) {
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 0) return true;
  return false;
}

}  // namespace

cudaError_t byte_transposes(const ByteTranspose* list, int64_t count, cudaStream_t stream) {
  if (count < 0 || (count > 0 && list == nullptr)) return cudaErrorInvalidValue;
  for (int64_t k = 0; k < count; ++k) {
    if (!byte_transpose_vectorisable(list[k])) return cudaErrorInvalidValue;
  }
  ByteTransposeTable table;
  table.count = 0;
  int64_t tiles = 0;
  uint64_t bytes = 0;
  auto flush = [&]() -> cudaError_t {
    if (table.count == 0) return cudaSuccess;
    table.first_tile[table.count] = static_cast<int32_t>(tiles);
    // Each matrix read once and written once.
    const LaunchConfig config{dim3(static_cast<unsigned>(tiles)), dim3(kByteTileThreads), 0, stream, bytes, bytes};
    const cudaError_t e = launch(transpose_bytes_multi_kernel, config, table);
    table.count = 0, tiles = 0, bytes = 0;
    return e;
  };
  for (int64_t k = 0; k < count; ++k) {
    const ByteTranspose& t = list[k];
    const int64_t n = byte_col_tiles(t) * ((t.rows + kByteTile - 1) / kByteTile);
    if (n > 2147483647) return cudaErrorInvalidValue;
    if (table.count == ByteTransposeTable::kMax || tiles + n > 2147483647) {
      if (const cudaError_t e = flush(); e != cudaSuccess) return e;
    }
    table.jobs[table.count] = t;
    table.first_tile[table.count] = static_cast<int32_t>(tiles);
    ++table.count;
    tiles += n;
    bytes += static_cast<uint64_t>(t.rows * t.cols);
  }
  return flush();
}

cudaError_t strided_copy(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                         const int64_t* shape, int ndim, size_t element_size, cudaStream_t stream) {
  if (ndim < 0 || !valid_element_size(element_size) || (ndim > 0 && shape == nullptr)) return cudaErrorInvalidValue;
  if (has_zero_extent(shape, ndim)) return cudaSuccess;
  if (dst == nullptr || src == nullptr || (ndim > 0 && (dst_strides == nullptr || src_strides == nullptr)))
    return cudaErrorInvalidValue;
  StridedDims d;
  if (!math::coalesce_strided(shape, dst_strides, src_strides, ndim, d)) return cudaErrorInvalidValue;
  switch (widen(d, element_size, dst, src)) {
    case 1: return launch_copy<WordOf<1>::type>(dst, src, d, stream);
    case 2: return launch_copy<WordOf<2>::type>(dst, src, d, stream);
    case 4: return launch_copy<WordOf<4>::type>(dst, src, d, stream);
    case 8: return launch_copy<WordOf<8>::type>(dst, src, d, stream);
    default: return launch_copy<WordOf<16>::type>(dst, src, d, stream);
  }
}

cudaError_t strided_fill(void* dst, const int64_t* strides, const int64_t* shape, int ndim, const void* value,
                         size_t element_size, cudaStream_t stream) {
  if (ndim < 0 || !valid_element_size(element_size) || (ndim > 0 && shape == nullptr)) return cudaErrorInvalidValue;
  if (has_zero_extent(shape, ndim)) return cudaSuccess;
  if (dst == nullptr || value == nullptr || (ndim > 0 && strides == nullptr)) return cudaErrorInvalidValue;
  StridedDims d;
  if (!math::coalesce_strided(shape, strides, strides, ndim, d)) return cudaErrorInvalidValue;
  const size_t wide = widen(d, element_size, dst, dst);
  unsigned char word[16];  // the pattern repeated to the widened element
  for (size_t b = 0; b < wide; ++b) word[b] = static_cast<const unsigned char*>(value)[b % element_size];
  switch (wide) {
    case 1: return launch_fill<WordOf<1>::type>(dst, word, d, stream);
    case 2: return launch_fill<WordOf<2>::type>(dst, word, d, stream);
    case 4: return launch_fill<WordOf<4>::type>(dst, word, d, stream);
    case 8: return launch_fill<WordOf<8>::type>(dst, word, d, stream);
    default: return launch_fill<WordOf<16>::type>(dst, word, d, stream);
  }
}

template <class Dst, class Src>
cudaError_t convert_with_integers(const Src* src, Dst* dst, int64_t n, Fp8Saturation sat, cudaStream_t stream) {
  if (n < 0) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  if (src == nullptr || dst == nullptr) return cudaErrorInvalidValue;
  return launch(convert_kernel<Dst, Src>,
                grid_stride_config(n, stream, static_cast<uint64_t>(n) * sizeof(Src),
                                   static_cast<uint64_t>(n) * sizeof(Dst)),
                src, dst, n, sat);
}

#define MPT_CONVERT_INSTANTIATE(D, S) \
  template cudaError_t convert_with_integers<D, S>(const S*, D*, int64_t, Fp8Saturation, cudaStream_t);
#define MPT_CONVERT_FROM_INTEGERS(D)                                                                          \
  MPT_CONVERT_INSTANTIATE(D, int32_t) MPT_CONVERT_INSTANTIATE(D, int64_t) MPT_CONVERT_INSTANTIATE(D, uint8_t) \
  MPT_CONVERT_INSTANTIATE(D, uint16_t) MPT_CONVERT_INSTANTIATE(D, int8_t)
#define MPT_CONVERT_FROM_FLOATS(D)                                                                     \
  MPT_CONVERT_INSTANTIATE(D, float) MPT_CONVERT_INSTANTIATE(D, f16) MPT_CONVERT_INSTANTIATE(D, bf16) \
  MPT_CONVERT_INSTANTIATE(D, f8e4m3) MPT_CONVERT_INSTANTIATE(D, f8e5m2)
#define MPT_CONVERT_TO_INTEGER(D) MPT_CONVERT_FROM_INTEGERS(D) MPT_CONVERT_FROM_FLOATS(D)
MPT_CONVERT_TO_INTEGER(int32_t)
MPT_CONVERT_TO_INTEGER(int64_t)
MPT_CONVERT_TO_INTEGER(uint8_t)
MPT_CONVERT_TO_INTEGER(uint16_t)
MPT_CONVERT_TO_INTEGER(int8_t)
MPT_CONVERT_FROM_INTEGERS(float)
MPT_CONVERT_FROM_INTEGERS(f16)
MPT_CONVERT_FROM_INTEGERS(bf16)
MPT_CONVERT_FROM_INTEGERS(f8e4m3)
MPT_CONVERT_FROM_INTEGERS(f8e5m2)
#undef MPT_CONVERT_TO_INTEGER
#undef MPT_CONVERT_FROM_FLOATS
#undef MPT_CONVERT_FROM_INTEGERS
#undef MPT_CONVERT_INSTANTIATE

}  // namespace mpt::kernels::cuda
