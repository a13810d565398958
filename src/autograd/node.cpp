// src/autograd/node.cpp: nodes, leaf accumulation and recording ops into the graph.
#include "mpt/autograd/node.h"

#include <atomic>
#include <utility>

#include "autograd/fresh_offers.h"
#include "autograd/leaf_adds.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/ops/elementwise.h"

namespace mpt::autograd {

namespace {
std::atomic<uint64_t> g_next_sequence_nr{0};
thread_local detail::Offers* t_offers = nullptr;
}  // namespace

detail::OffersScope::OffersScope(Offers* offers) : outer_(t_offers) { t_offers = offers; }

detail::OffersScope::~OffersScope() { t_offers = outer_; }

bool is_fresh_offer(const Tensor& offered) {
  if (t_offers == nullptr || !offered.defined()) return false;
  for (const Tensor& t : t_offers->fresh)
    if (t.storage() == offered.storage() && t.offset() == offered.offset() && t.shape() == offered.shape() &&
        t.dtype() == offered.dtype())
      return true;
  return false;
}

const Tensor& offer(std::vector<Tensor>& partial, size_t input, DType writes) {
  MPT_CHECK(input < partial.size(), "[backward] offer for input {} of a node with {} inputs", input, partial.size());
  detail::Offers* o = t_offers;
  if (o != nullptr && o->partial == &partial && !partial[input].defined() && input < o->lazy.size() &&
      o->lazy[input] != nullptr && o->lazy[input]->gradient_dtype() == writes) {
    const AccumulateGrad* leaf = std::exchange(o->lazy[input], nullptr);
    Tensor d = leaf->destination();
    if (d.defined()) {
      o->fresh.push_back(d);
      partial[input] = std::move(d);
    }
  }
  return partial[input];
}

Node::Node(std::string name) : name_(std::move(name)), sequence_nr_(g_next_sequence_nr.fetch_add(1)) {}

std::vector<Tensor> Node::run(std::vector<Tensor>&& grad_outputs) {
  std::vector<Tensor> none(next_edges_.size());
  return run(std::move(grad_outputs), none);
}

std::vector<Tensor> Node::run(std::vector<Tensor>&& grad_outputs, std::vector<Tensor>& partial) {
  MPT_CHECK(!released_,
            "[backward] trying to backward through {} a second time: its saved tensors were freed by the first "
            "backward (pass retain_graph = true to the first one if you need two)",
            name_);
  MPT_CHECK(partial.size() == next_edges_.size(), "[backward] {} was offered {} waiting gradients for {} inputs",
            name_, partial.size(), next_edges_.size());
  std::vector<Tensor> grads = takes_partial() ? apply_partial(std::move(grad_outputs), partial)
                                              : apply(std::move(grad_outputs));
  MPT_CHECK(grads.size() == next_edges_.size(), "[backward] {} returned {} gradients for {} inputs", name_,
            grads.size(), next_edges_.size());
  return grads;
}

void Node::release() {
  release_saved();
  released_ = true;
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<AutogradMeta> leaf, Tensor leaf_handle)
    : Node("AccumulateGrad"), leaf_(std::move(leaf)), handle_(std::move(leaf_handle)) {}

void set_grad_dtype(const Tensor& leaf, std::optional<DType> dtype) {
  MPT_CHECK(leaf.defined() && leaf.is_leaf() && leaf.autograd_meta() != nullptr && leaf.requires_grad(),
            "[set_grad_dtype] expected a leaf tensor that requires grad, got {}",
            !leaf.defined()   ? std::string("an undefined tensor")
            : leaf.is_leaf()  ? leaf.meta_str() + " (requires_grad_() it first)"
                              : leaf.meta_str() + " (the output of an op)");
  const bool wide = leaf.dtype() != DType::F64 && leaf.dtype() != DType::F8E4M3 && leaf.dtype() != DType::F8E5M2;
  MPT_CHECK(!dtype || *dtype == leaf.dtype() ||
                (wide && (*dtype == DType::F32 || *dtype == DType::BF16 || *dtype == DType::F16)),
            "[set_grad_dtype] a gradient dtype must be the leaf's own or, for an f32/bf16/f16 leaf, f32, bf16 or f16: "
            "got {} for {}", dtype ? std::string(dtype_name(*dtype)) : std::string("none"), leaf.meta_str());
  AutogradMeta& meta = *leaf.autograd_meta();
  meta.grad_dtype = dtype;
  const DType want = dtype.value_or(leaf.dtype());
  if (meta.grad.defined() && meta.grad.dtype() != want) {
    NoGradGuard no_grad;
    meta.grad = meta.grad.to(want);
  }
}

void set_grad_destination(const Tensor& leaf, GradDestination destination) {
  MPT_CHECK(leaf.defined() && leaf.is_leaf() && leaf.autograd_meta() != nullptr && leaf.requires_grad(),
            "[set_grad_destination] expected a leaf tensor that requires grad, got {}",
            !leaf.defined()  ? std::string("an undefined tensor")
            : leaf.is_leaf() ? leaf.meta_str() + " (requires_grad_() it first)"
                             : leaf.meta_str() + " (the output of an op)");
  leaf.autograd_meta()->grad_destination = std::move(destination);
}

Tensor AccumulateGrad::destination() const {
  if (!leaf_->grad_destination || leaf_->grad.defined()) return {};
  Tensor d = leaf_->grad_destination();
  if (!d.defined()) return {};
  const DType want = leaf_->grad_dtype.value_or(handle_.dtype());
  MPT_CHECK(d.shape() == handle_.shape() && d.dtype() == want && d.device() == handle_.device() && d.is_contiguous(),
            "[backward] the gradient destination of the leaf {} must be a contiguous {} tensor of its shape on {}, "
            "got {}", handle_.meta_str(), want, handle_.device(), d.meta_str());
  return d;
}

DType grad_dtype(const Tensor& t) {
  const std::shared_ptr<AutogradMeta>& meta = t.autograd_meta();
  return meta != nullptr && meta->grad_dtype ? *meta->grad_dtype : t.dtype();
}

std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  const Tensor& g = grad_outputs.at(0);
  if (!g.defined()) return {};
  MPT_CHECK(g.shape() == handle_.shape(), "[backward] gradient {} does not match its leaf {}", g.meta_str(),
            handle_.meta_str());
  const DType want = leaf_->grad_dtype.value_or(handle_.dtype());
  if (!leaf_->grad.defined()) {
    // The incoming gradient becomes the leaf's as it is when nothing else holds its storage and it starts that
    // storage, filling all of it or all but an eighth (PyTorch's stealing: a GPT step copied all of its gradients
    // here; the spare eighth takes a padded GEMM's rows, GPT-2's LM head gradient: 50257 of 50304); otherwise a
    // copy, since it may be a buffer the graph still shares (a view, a gradient passed through to another input, a
    // saved tensor) or one mostly unused.
    const bool sole = g.dtype() == want && g.is_contiguous() && g.offset() == 0 && g.storage() != nullptr &&
                      g.storage().use_count() == 1 && g.storage()->nbytes() >= g.nbytes() &&
                      g.storage()->nbytes() - g.nbytes() <= g.nbytes() / 8;
    leaf_->grad = sole ? g : g.dtype() == want ? g.clone() : g.to(want);
  } else {
    const Tensor add = g.dtype() == leaf_->grad.dtype() ? g : g.to(leaf_->grad.dtype());
    // Nothing reads a leaf without hooks before the pass ends (nor one whose hooks may wait for it: HooksMayWait):
    // a small add waits to be made with the others.
    const bool hooks = !leaf_->post_accumulate_hooks.empty();
    if (!detail::LeafAdds::defer(leaf_->grad, add,
                                 hooks ? std::static_pointer_cast<AccumulateGrad>(shared_from_this()) : nullptr)) {
      ops::add_(leaf_->grad, add);
    }
  }
  return {};
}

void AccumulateGrad::run_hooks() {
  for (const PostAccumulateHook& hook : leaf_->post_accumulate_hooks) hook(handle_);
}

bool any_requires_grad(const std::vector<const Tensor*>& inputs) {
  if (!is_grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t != nullptr && t->defined() && t->requires_grad()) return true;
  return false;
}

Edge gradient_edge(const Tensor& input) {
  if (!input.defined()) return {};
  const std::shared_ptr<AutogradMeta>& meta = input.autograd_meta();
  if (meta == nullptr) return {};
  if (meta->grad_fn) return {meta->grad_fn, meta->output_nr};
  if (!meta->requires_grad) return {};
  std::shared_ptr<Node> acc = meta->accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(meta, input);
    meta->accumulator = acc;
  }
  return {acc, 0};
}

bool record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs) {
  if (!any_requires_grad(inputs)) return false;
  attach(node, inputs, outputs);
  return true;
}

void attach(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor* t : inputs) edges.push_back(t != nullptr ? gradient_edge(*t) : Edge{});
  node->set_next_edges(std::move(edges));
  node->set_num_outputs(static_cast<int>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) outputs[i]->set_grad_fn(node, static_cast<int>(i));
}

bool record(std::string name, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
            BackwardFn backward) {
  if (!any_requires_grad(inputs)) return false;
  return record(std::make_shared<FunctionNode>(std::move(name), std::move(backward)), inputs, outputs);
}

}  // namespace mpt::autograd
