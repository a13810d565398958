// src/dist/data_parallel.cpp: DataParallel: parameter broadcast, gradient buckets all-reduced from backward's hooks.
#include "mpt/dist/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "mpt/autograd/grad_mode.h"
#include "mpt/core/error.h"

namespace mpt::dist {

struct DataParallel::Bucket {
  std::vector<size_t> params;  // indices into params_
  std::vector<int64_t> offsets;
  Tensor flat;                 // F32, the concatenated gradients
  size_t ready = 0;
  std::vector<bool> is_ready;
  std::unique_ptr<Work> work;
};

DataParallel::DataParallel(nn::Module& module, std::shared_ptr<Communicator> comm, const DataParallelOptions& options)
    : comm_(std::move(comm)), alive_(std::make_shared<bool>(true)) {
  MPT_CHECK(comm_ != nullptr, "[DataParallel] no communicator");
  MPT_CHECK(options.bucket_bytes > 0, "[DataParallel] bucket_bytes {} must be positive", options.bucket_bytes);
  autograd::NoGradGuard no_grad;
  // Rank 0's parameters and buffers everywhere (blocking, in registration order).
  for (auto& [name, t] : module.state_dict()) {
    MPT_CHECK(t.device().is_cpu() && t.is_contiguous(), "[DataParallel] {} {}: CPU, contiguous tensors only", name,
              t.meta_str());
    if (t.dtype() == DType::F32 || t.dtype() == DType::F16 || t.dtype() == DType::BF16) {
      Tensor view = t;
      comm_->broadcast(view, 0)->wait();
    }
  }
  std::vector<nn::NamedParameter> named = module.named_parameters();
  std::reverse(named.begin(), named.end());  // backward finishes the last layers first
  for (const nn::NamedParameter& p : named) {
    if (!p.tensor.requires_grad()) continue;
    MPT_CHECK(p.tensor.dtype() == DType::F32, "[DataParallel] parameter {} is {}: F32 masters only", p.name,
              p.tensor.dtype());
    params_.push_back(p.tensor);
  }
  int64_t bytes = options.bucket_bytes;
  for (size_t i = 0; i < params_.size(); ++i) {
    const int64_t n = params_[i].numel() * 4;
    if (buckets_.empty() || bytes + n > options.bucket_bytes) {
      buckets_.push_back(std::make_unique<Bucket>());
      bytes = 0;
    }
    Bucket& b = *buckets_.back();
    b.offsets.push_back(b.params.empty() ? 0 : b.offsets.back() + params_[b.params.back()].numel());
    b.params.push_back(i);
    bucket_of_.push_back(buckets_.size() - 1);
    bytes += n;
  }
  for (auto& b : buckets_) {
    b->flat = Tensor::zeros({b->offsets.back() + params_[b->params.back()].numel()});
    b->is_ready.assign(b->params.size(), false);
  }
  for (size_t i = 0; i < params_.size(); ++i) {
    std::weak_ptr<bool> alive = alive_;
    params_[i].register_post_accumulate_grad_hook([this, i, alive](const Tensor&) {
      if (alive.lock()) on_grad_ready(i);
    });
  }
}

DataParallel::~DataParallel() {
  *alive_ = false;
  for (auto& b : buckets_)
    if (b->work) b->work->wait();
}

int64_t DataParallel::num_buckets() const { return static_cast<int64_t>(buckets_.size()); }

void DataParallel::on_grad_ready(size_t param) {
  if (!sync_) return;
  Bucket& b = *buckets_[bucket_of_[param]];
  const size_t slot = static_cast<size_t>(std::find(b.params.begin(), b.params.end(), param) - b.params.begin());
  if (b.is_ready[slot] || b.work) return;  // a second backward before finish(): the bucket already left
  b.is_ready[slot] = true;
  if (++b.ready == b.params.size()) {
    launch(b);
    ++started_in_backward_;
  }
}

void DataParallel::launch(Bucket& b) {
  float* flat = b.flat.data<float>();
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    const Tensor g = p.grad();
    const auto n = static_cast<size_t>(p.numel());
    if (g.defined()) {
      const Tensor c = g.to(DType::F32).contiguous();
      std::memcpy(flat + b.offsets[k], c.data_ptr(), n * sizeof(float));
    } else {
      std::memset(flat + b.offsets[k], 0, n * sizeof(float));
    }
  }
  b.work = comm_->all_reduce(b.flat, ReduceOp::Avg);
}

void DataParallel::finish() {
  autograd::NoGradGuard no_grad;
  for (auto& b : buckets_)  // buckets a parameter without a gradient left incomplete, in bucket order
    if (!b->work) launch(*b);
  for (auto& b : buckets_) {
    b->work->wait();
    const float* flat = b->flat.data<float>();
    for (size_t k = 0; k < b->params.size(); ++k) {
      const Tensor& p = params_[b->params[k]];
      Tensor g = p.grad();
      if (!g.defined()) continue;  // no rank needs a gradient that was never made here (zeros were sent)
      Tensor avg = Tensor::empty(p.shape());
      std::memcpy(avg.data_ptr(), flat + b->offsets[k], static_cast<size_t>(p.numel()) * sizeof(float));
      g.copy_(avg);
    }
    b->work.reset();
    b->ready = 0;
    std::fill(b->is_ready.begin(), b->is_ready.end(), false);
  }
}

}  // namespace mpt::dist
