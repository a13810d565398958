// src/ops/concat.cpp: cat and stack (forward beside backward) and the split / chunk views.
#include "mpt/ops/concat.h"

#include <numeric>

#include "ops/dispatch.h"

namespace mpt::ops {

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  MPT_CHECK(!tensors.empty(), "[cat] expected at least one tensor");
  const Tensor& first = tensors[0];
  MPT_CHECK(first.defined(), "[cat] tensor 0 is undefined");
  MPT_CHECK(first.dim() >= 1, "[cat] cannot concatenate 0-d tensors ({})", first.meta_str());
  const int64_t d = wrap_dim(dim, first.dim(), "cat");
  std::vector<const Tensor*> inputs;
  Shape shape = first.shape();
  shape[static_cast<size_t>(d)] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    MPT_CHECK(t.defined(), "[cat] tensor {} is undefined", i);
    MPT_CHECK(t.dtype() == first.dtype() && t.device() == first.device() && t.dim() == first.dim(),
              "[cat] tensor {} is {}, tensor 0 is {}: expected one dtype, device and rank", i, t.meta_str(),
              first.meta_str());
    for (int64_t k = 0; k < t.dim(); ++k) {
      MPT_CHECK(k == d || t.size(k) == first.size(k),
                "[cat] along dimension {}: tensor {} has shape {}, tensor 0 has {} (sizes must match except along {})",
                d, i, shape_str(t.shape()), shape_str(first.shape()), d);
    }
    shape[static_cast<size_t>(d)] += t.size(d);
    inputs.push_back(&t);
  }
  const detail::GradRecorder grad(inputs);
  Tensor y = Tensor::empty(shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    y.slice(d, at, at + t.size(d)).copy_(t);
    sizes.push_back(t.size(d));
    at += t.size(d);
  }
  grad.record("CatBackward", {&y}, [d, sizes](const std::vector<Tensor>& g) {
    std::vector<Tensor> out;
    int64_t begin = 0;
    for (int64_t s : sizes) {
      out.push_back(g[0].defined() ? g[0].slice(d, begin, begin + s).contiguous() : Tensor{});
      begin += s;
    }
    return out;
  });
  return y;
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  MPT_CHECK(!tensors.empty() && tensors[0].defined(), "[stack] expected at least one defined tensor");
  const int64_t d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    MPT_CHECK(tensors[i].defined() && tensors[i].shape() == tensors[0].shape(),
              "[stack] tensor {} is {}, tensor 0 is {}: stacked tensors must have one shape", i,
              tensors[i].defined() ? tensors[i].meta_str() : "undefined", tensors[0].meta_str());
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  MPT_CHECK(x.defined() && x.dim() >= 1, "[split] expected a tensor of at least one dimension");
  const int64_t d = wrap_dim(dim, x.dim(), "split");
  for (int64_t s : sizes) MPT_CHECK(s >= 0, "[split] sizes must be >= 0, got {}", shape_str(sizes));
  MPT_CHECK(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}) == x.size(d),
            "[split] sizes {} must add up to dimension {} of {} ({})", shape_str(sizes), d, x.meta_str(), x.size(d));
  std::vector<Tensor> out;
  int64_t at = 0;
  for (int64_t s : sizes) {
    out.push_back(x.slice(d, at, at + s));
    at += s;
  }
  return out;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  MPT_CHECK(x.defined() && x.dim() >= 1, "[split] expected a tensor of at least one dimension");
  MPT_CHECK(size >= 1, "[split] the piece size must be >= 1, got {} for {}", size, x.meta_str());
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "split"));
  std::vector<int64_t> sizes;
  for (int64_t at = 0; at < n; at += size) sizes.push_back(std::min(size, n - at));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  MPT_CHECK(x.defined() && x.dim() >= 1, "[chunk] expected a tensor of at least one dimension");
  MPT_CHECK(chunks >= 1, "[chunk] the number of chunks must be >= 1, got {} for {}", chunks, x.meta_str());
  const int64_t n = x.size(wrap_dim(dim, x.dim(), "chunk"));
  return split(x, std::max<int64_t>(1, (n + chunks - 1) / chunks), dim);
}

}  // namespace mpt::ops
