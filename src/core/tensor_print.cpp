// src/core/tensor_print.cpp: PyTorch-style text for tensors, summarised when large.
#include <cmath>
#include <ostream>

#include "mpt/core/tensor.h"

namespace mpt {
namespace {

constexpr int64_t kSummarizeAbove = 1000;
constexpr int64_t kEdgeItems = 3;

struct Formatter {
  bool floating;
  bool scientific;
  std::string operator()(double v) const {
    if (!floating) return fmt::format("{}", static_cast<int64_t>(v));
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return scientific ? fmt::format("{:.4e}", v) : fmt::format("{:.4f}", v);
  }
};

void print_dim(std::string& out, const std::vector<double>& values, const Shape& shape, const Strides& strides,
               int64_t d, int64_t base, bool summarize, const Formatter& f) {
  if (d == static_cast<int64_t>(shape.size())) {
    out += f(values[static_cast<size_t>(base)]);
    return;
  }
  out += '[';
  const int64_t n = shape[d];
  for (int64_t i = 0; i < n; ++i) {
    if (summarize && n > 2 * kEdgeItems && i == kEdgeItems) {
      out += "...";
      i = n - kEdgeItems - 1;
      out += d + 1 == static_cast<int64_t>(shape.size()) ? ", " : ",\n" + std::string(static_cast<size_t>(d) + 8, ' ');
      continue;
    }
    print_dim(out, values, shape, strides, d + 1, base + i * strides[d], summarize, f);
    if (i + 1 < n) out += d + 1 == static_cast<int64_t>(shape.size()) ? ", " : ",\n" + std::string(static_cast<size_t>(d) + 8, ' ');
  }
  out += ']';
}

}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  const std::vector<double> values = to_vector<double>();
  double max_abs = 0, min_abs = INFINITY;
  for (double v : values) {
    if (!std::isfinite(v)) continue;
    max_abs = std::max(max_abs, std::abs(v));
    if (v != 0) min_abs = std::min(min_abs, std::abs(v));
  }
  const Formatter f{is_floating(dtype_), max_abs >= 1e5 || (min_abs < 1e-4 && min_abs > 0)};
  std::string out = "tensor(";
  print_dim(out, values, shape_, contiguous_strides(shape_), 0, 0, numel() > kSummarizeAbove, f);
  out += fmt::format(", shape={}, dtype={}, device={})", shape_str(shape_), dtype_, device());
  return out;
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace mpt
