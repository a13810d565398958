// src/autograd/tensor_autograd.cpp: Tensor's autograd members (requires_grad, grad, grad_fn, backward, detach, hooks).
#include "mpt/autograd/engine.h"
#include "mpt/autograd/node.h"
#include "mpt/core/tensor.h"

namespace mpt {

autograd::AutogradMeta& Tensor::ensure_autograd_meta() const {
  if (!autograd_) autograd_ = std::make_shared<autograd::AutogradMeta>();
  return *autograd_;
}

bool Tensor::requires_grad() const { return autograd_ && (autograd_->requires_grad || autograd_->grad_fn); }

Tensor& Tensor::requires_grad_(bool on) {
  check_defined("requires_grad_");
  MPT_CHECK(is_leaf(), "[requires_grad_] {} is the output of {}: only leaves can be flagged (detach() first)",
            meta_str(), autograd_->grad_fn->name());
  MPT_CHECK(!on || is_floating(dtype_), "[requires_grad_] only floating tensors can require grad, got {}",
            meta_str());
  ensure_autograd_meta().requires_grad = on;
  return *this;
}

bool Tensor::is_leaf() const { return !autograd_ || !autograd_->grad_fn; }

Tensor Tensor::grad() const { return autograd_ ? autograd_->grad : Tensor{}; }

void Tensor::set_grad(const Tensor& grad) const {
  check_defined("set_grad");
  MPT_CHECK(!grad.defined() || grad.shape() == shape_, "[set_grad] gradient {} does not match {}", grad.meta_str(),
            meta_str());
  ensure_autograd_meta().grad = grad;
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const { return autograd_ ? autograd_->grad_fn : nullptr; }

void Tensor::backward() const { backward(Tensor{}); }

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  if (!defined()) return {};
  return Tensor(storage_, shape_, strides_, offset_, dtype_);
}

void Tensor::register_post_accumulate_grad_hook(std::function<void(const Tensor&)> hook) const {
  check_defined("register_post_accumulate_grad_hook");
  MPT_CHECK(is_leaf() && requires_grad(),
            "[register_post_accumulate_grad_hook] {} must be a leaf that requires grad", meta_str());
  ensure_autograd_meta().post_accumulate_hooks.push_back(std::move(hook));
}

void Tensor::set_grad_fn(std::shared_ptr<autograd::Node> fn, int output_nr) {
  check_defined("set_grad_fn");
  autograd::AutogradMeta& meta = ensure_autograd_meta();
  meta.grad_fn = std::move(fn);
  meta.output_nr = output_nr;
  meta.requires_grad = false;  // derived from grad_fn
}

}  // namespace mpt
