// kernels/cpu/strided.cpp: n-d strided copy with dimension coalescing and OpenMP over outer rows.
#include "kernels/cpu/strided.h"

#include <algorithm>
#include <cstring>
#include <vector>

namespace mpt::kernels::cpu {
namespace {

struct Dims {
  std::vector<int64_t> shape, dst, src;
};

// Drops size-1 dims and merges dim i into i+1 when both arrays step through them as one run.
Dims coalesce(const int64_t* dst_strides, const int64_t* src_strides, const int64_t* shape, int ndim) {
  Dims d;
  for (int i = 0; i < ndim; ++i) {
    if (shape[i] == 1) continue;
    if (!d.shape.empty() && d.dst.back() == dst_strides[i] * shape[i] && d.src.back() == src_strides[i] * shape[i]) {
      d.shape.back() *= shape[i];
      d.dst.back() = dst_strides[i];
      d.src.back() = src_strides[i];
      continue;
    }
    d.shape.push_back(shape[i]);
    d.dst.push_back(dst_strides[i]);
    d.src.push_back(src_strides[i]);
  }
  if (d.shape.empty()) {
    d.shape = {1};
    d.dst = {1};
    d.src = {1};
  }
  return d;
}

template <size_t Size>
void copy_row(char* dst, int64_t dst_stride, const char* src, int64_t src_stride, int64_t n) {
  if (dst_stride == 1 && src_stride == 1) {
    std::memcpy(dst, src, static_cast<size_t>(n) * Size);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_stride * Size, src + i * src_stride * Size, Size);
}

template <size_t Size>
void copy_all(char* dst, const char* src, const Dims& d) {
  const int nd = static_cast<int>(d.shape.size());
  const int64_t inner = d.shape[nd - 1];
  int64_t rows = 1;
  for (int i = 0; i < nd - 1; ++i) rows *= d.shape[i];
#pragma omp parallel for schedule(static) if (rows * inner > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, doff = 0, soff = 0;
    for (int i = nd - 2; i >= 0; --i) {
      const int64_t idx = rem % d.shape[i];
      rem /= d.shape[i];
      doff += idx * d.dst[i];
      soff += idx * d.src[i];
    }
    copy_row<Size>(dst + doff * static_cast<int64_t>(Size), d.dst[nd - 1],
                   src + soff * static_cast<int64_t>(Size), d.src[nd - 1], inner);
  }
}

// A transposition: the destination's innermost dim is contiguous and the source's is not, while the source is
// contiguous along the next dim out (x.t().contiguous() and the like). Copied in 32 x 32 tiles so reads and writes
// both stay within a few cache lines, instead of one element per source row at a time.
bool is_transpose(const Dims& d) {
  const size_t nd = d.shape.size();
  return nd >= 2 && d.dst[nd - 1] == 1 && d.src[nd - 1] != 1 && d.src[nd - 2] == 1 && d.shape[nd - 1] >= 16 &&
         d.shape[nd - 2] >= 16;
}

template <size_t Size>
void copy_transpose(char* dst, const char* src, const Dims& d) {
  constexpr int64_t kTile = 32;
  const int nd = static_cast<int>(d.shape.size());
  const int64_t rows = d.shape[nd - 2], cols = d.shape[nd - 1];
  const int64_t dr = d.dst[nd - 2], sc = d.src[nd - 1];
  int64_t outer = 1;
  for (int i = 0; i < nd - 2; ++i) outer *= d.shape[i];
  const int64_t row_tiles = (rows + kTile - 1) / kTile, col_tiles = (cols + kTile - 1) / kTile;
  const int64_t items = outer * row_tiles * col_tiles;
#pragma omp parallel for schedule(static) if (outer * rows * cols > (1 << 16))
  for (int64_t item = 0; item < items; ++item) {
    int64_t rem = item / (row_tiles * col_tiles), doff = 0, soff = 0;
    for (int i = nd - 3; i >= 0; --i) {
      const int64_t idx = rem % d.shape[i];
      rem /= d.shape[i];
      doff += idx * d.dst[i];
      soff += idx * d.src[i];
    }
    const int64_t tile = item % (row_tiles * col_tiles);
    const int64_t i0 = tile / col_tiles * kTile, j0 = tile % col_tiles * kTile;
    const int64_t i1 = std::min(rows, i0 + kTile), j1 = std::min(cols, j0 + kTile);
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t j = j0; j < j1; ++j)
        std::memcpy(dst + (doff + i * dr + j) * static_cast<int64_t>(Size),
                    src + (soff + i + j * sc) * static_cast<int64_t>(Size), Size);
  }
}

template <size_t Size>
void copy_any(char* dst, const char* src, const Dims& d) {
  if (is_transpose(d)) return copy_transpose<Size>(dst, src, d);
  copy_all<Size>(dst, src, d);
}

}  // namespace

void strided_copy(void* dst, const int64_t* dst_strides, const void* src, const int64_t* src_strides,
                  const int64_t* shape, int ndim, size_t element_size) {
  for (int i = 0; i < ndim; ++i)
    if (shape[i] == 0) return;
  const Dims d = coalesce(dst_strides, src_strides, shape, ndim);
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  switch (element_size) {
    case 1: return copy_any<1>(out, in, d);
    case 2: return copy_any<2>(out, in, d);
    case 4: return copy_any<4>(out, in, d);
    case 8: return copy_any<8>(out, in, d);
    case 16: return copy_any<16>(out, in, d);
    default: break;
  }
  // Other element sizes: treat each element as bytes with an extra innermost dimension.
  Dims bytes = d;
  for (auto& s : bytes.dst) s *= static_cast<int64_t>(element_size);
  for (auto& s : bytes.src) s *= static_cast<int64_t>(element_size);
  bytes.shape.push_back(static_cast<int64_t>(element_size));
  bytes.dst.push_back(1);
  bytes.src.push_back(1);
  copy_all<1>(out, in, bytes);
}

}  // namespace mpt::kernels::cpu
