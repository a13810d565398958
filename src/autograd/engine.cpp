// src/autograd/engine.cpp: backward: dependency counts, a ready queue ordered by recording order, gradient buffers.
#include "mpt/autograd/engine.h"

#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "autograd/fresh_offers.h"
#include "autograd/leaf_adds.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"
#include "mpt/core/profile.h"
#include "mpt/ops/elementwise.h"

namespace mpt::autograd {

namespace {

// Sums gradients arriving at the same node input (several consumers of one tensor). They share a dtype unless a leaf
// keeps its gradient in a dtype that not all of its producers write (set_grad_dtype: an f16 gradient of an FP32 weight,
// which a GEMM writes in f16 and a norm in FP32): then the sum is taken in the wider one, and AccumulateGrad rounds it
// once to the leaf's.
void accumulate_into(Tensor& slot, const Tensor& g) {
  if (!g.defined()) return;
  if (!slot.defined()) {
    slot = g;
  } else if (slot.dtype() == g.dtype()) {
    slot = ops::add(slot, g);
  } else {
    const DType wide = slot.dtype() == DType::F64 || g.dtype() == DType::F64 ? DType::F64 : DType::F32;
    slot = ops::add(slot.to(wide), g.to(wide));
  }
}

// Adds g into the leaf's gradient `into` in place, in the leaf's gradient dtype.
void add_into_leaf(const Tensor& into, const Tensor& g) {
  ops::add_(into, g.dtype() == into.dtype() ? g : g.to(into.dtype()));
}

// A waiting gradient a node may write in place (Node::apply_partial): contiguous, and no other handle shares its
// storage (a saved tensor, a view, the same gradient delivered to two inputs). It may be a part of that storage (a
// padded GEMM's rows: the LM head's weight gradient).
bool writable(const Tensor& g) {
  return g.defined() && g.is_contiguous() && g.storage() != nullptr && g.storage().use_count() == 1;
}

// Whether `t` is one of the node's fresh offers (the same tensor handed out).
bool is_fresh(const Tensor& t, const std::vector<Tensor>& fresh) {
  for (const Tensor& f : fresh)
    if (f.storage() == t.storage() && f.offset() == t.offset()) return true;
  return false;
}

thread_local bool t_retaining = false;

// Sets t_retaining for one backward and restores the outer value (a checkpointed block's backward runs inside one).
class RetainScope {
 public:
  explicit RetainScope(bool retain) : outer_(t_retaining) { t_retaining = retain; }
  ~RetainScope() { t_retaining = outer_; }
  RetainScope(const RetainScope&) = delete;
  RetainScope& operator=(const RetainScope&) = delete;

 private:
  bool outer_;
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  const profile::Range range("backward");
  MPT_CHECK(grads.empty() || grads.size() == roots.size(), "[backward] {} roots but {} gradients", roots.size(),
            grads.size());
  // Root edges and their seed gradients.
  std::vector<std::pair<Edge, Tensor>> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& root = roots[i];
    MPT_CHECK(root.defined(), "[backward] root {} is undefined", i);
    MPT_CHECK(root.requires_grad(),
              "[backward] root {} ({}) does not require grad and has no grad_fn: nothing to differentiate", i,
              root.meta_str());
    Tensor g = grads.empty() ? Tensor{} : grads[i];
    if (!g.defined()) {
      MPT_CHECK(root.numel() == 1,
                "[backward] a gradient can be implied only for a root with one element; root {} is {}", i,
                root.meta_str());
      g = Tensor::ones(root.shape(), root.dtype(), root.device());
    }
    MPT_CHECK(g.shape() == root.shape(), "[backward] gradient {} does not match root {} ({})", g.meta_str(), i,
              root.meta_str());
    seeds.emplace_back(gradient_edge(root), g);
  }

  // Every node reachable from the roots and how many edges lead into it (iterative DFS).
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack;
  std::unordered_map<Node*, bool> seen;
  for (const auto& [edge, g] : seeds)
    if (edge.fn && !seen[edge.fn.get()]) seen[edge.fn.get()] = true, stack.push_back(edge.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges()) {
      if (!e.fn) continue;
      ++dependencies[e.fn.get()];
      if (!seen[e.fn.get()]) seen[e.fn.get()] = true, stack.push_back(e.fn.get());
    }
  }

  // Gradient buffers per node (one slot per output); keep the nodes alive while they wait.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> alive;
  auto buffer_of = [&](const std::shared_ptr<Node>& n) -> std::vector<Tensor>& {
    auto [it, fresh] = buffers.try_emplace(n.get());
    if (fresh) it->second.resize(static_cast<size_t>(n->num_outputs())), alive[n.get()] = n;
    return it->second;
  };
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (const auto& [edge, g] : seeds) {
    if (!edge.fn) continue;
    accumulate_into(buffer_of(edge.fn)[static_cast<size_t>(edge.input_nr)], g);
  }
  for (const auto& [node, bufs] : buffers)
    if (dependencies[node] == 0) ready.push(node);

  NoGradGuard no_grad;  // backward functions do not record (no double backward)
  const RetainScope retain(retain_graph || t_retaining);
  detail::LeafAdds leaf_adds;  // small adds into leaves' gradients, made together at the end (autograd/leaf_adds.h)
  // Leaves whose gradient a producer added straight into the leaf's .grad (Node::apply_partial with the leaf's own
  // gradient: a later micro-batch, beta = 1): their slot holds that .grad, later arrivals are added into it in place,
  // and their AccumulateGrad only runs its hooks.
  std::unordered_set<Node*> in_leaf;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    if (!g.defined()) return;
    Tensor& slot = buffer_of(e.fn)[static_cast<size_t>(e.input_nr)];
    if (in_leaf.count(e.fn.get()) == 0) return accumulate_into(slot, g);
    if (g.storage() != slot.storage()) add_into_leaf(slot, g);  // else it is the leaf's gradient itself: already in
  };
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::vector<Tensor> inputs = std::move(buffers[node]);
    buffers.erase(node);
    bool any = false;
    for (const Tensor& g : inputs) any = any || g.defined();
    // A node no gradient reached passes "none" on (its inputs' counts still drop, so their nodes can run).
    const std::vector<Edge>& edges = node->next_edges();
    // What this node may add into (Node::apply_partial): for a leaf, its own .grad when the leaf already has one
    // (and nothing else waits for it yet, or what waits is already in it); otherwise a waiting gradient the engine
    // alone holds, moved out of its slot.
    std::vector<Tensor> partial(edges.size());
    std::vector<bool> from_leaf(edges.size(), false);
    // The leaves' destinations it may ask for (autograd::offer: made on demand, fresh offers written with beta = 0).
    detail::Offers offers;
    if (any && node->takes_partial()) {
      offers.partial = &partial;
      offers.lazy.assign(edges.size(), nullptr);
      for (size_t i = 0; i < edges.size(); ++i) {
        if (!edges[i].fn) continue;
        Node* target = edges[i].fn.get();
        auto it = buffers.find(target);
        Tensor* waiting = it == buffers.end() ? nullptr : &it->second[static_cast<size_t>(edges[i].input_nr)];
        const auto* leaf = dynamic_cast<const AccumulateGrad*>(target);
        if (leaf != nullptr && (in_leaf.count(target) > 0 || waiting == nullptr || !waiting->defined())) {
          const Tensor& grad = leaf->leaf_grad();
          if (grad.defined() && grad.is_contiguous()) {
            partial[i] = grad, from_leaf[i] = true;
          } else if (!grad.defined() && (waiting == nullptr || !waiting->defined())) {
            // Once per node: two inputs of one leaf (x * x) must not both overwrite it.
            bool twice = false;
            for (size_t j = 0; j < i; ++j) twice = twice || (edges[j].fn.get() == target && offers.lazy[j] != nullptr);
            if (!twice) offers.lazy[i] = leaf;
          }
        } else if (waiting != nullptr && writable(*waiting)) {
          partial[i] = std::move(*waiting), *waiting = Tensor{};
        }
      }
    }
    std::vector<Tensor> out;
    {
      const profile::Range node_range(node->name());  // "LinearBackward": per node, for Nsight and bench_train --profile
      const bool already_in_leaf = in_leaf.count(node) > 0;  // an AccumulateGrad whose sum is in its leaf
      const detail::OffersScope scope(offers.partial != nullptr ? &offers : nullptr);
      out = any && !already_in_leaf ? node->run(std::move(inputs), partial) : std::vector<Tensor>(edges.size());
    }
    for (size_t i = 0; i < edges.size(); ++i)  // the destinations it asked for come from their leaves
      if (is_fresh(partial[i], offers.fresh)) from_leaf[i] = true;
    auto* acc = dynamic_cast<AccumulateGrad*>(node);
    // A leaf's node runs once all paths into it have delivered: its gradient is final for this pass, so the hooks
    // fire now (the data-parallel layer starts communicating a bucket while backward continues).
    if (acc != nullptr && any && !leaf_adds.holds_hooks(acc)) acc->run_hooks();  // else after the batched adds
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& e = edges[i];
      if (!e.fn) continue;
      // A gradient the node added into comes back as out[i] (the sum, on the same storage); a destination it wrote,
      // as that destination (a slice of a flat buffer other leaves' destinations share: the same elements).
      const bool taken = partial[i].defined() && out[i].defined() && out[i].storage() == partial[i].storage() &&
                         (!is_fresh(partial[i], offers.fresh) || out[i].data_ptr() == partial[i].data_ptr());
      if (from_leaf[i] && taken) {  // the leaf's .grad holds it: the slot becomes that .grad, with what waited
        Tensor& slot = buffer_of(e.fn)[static_cast<size_t>(e.input_nr)];
        auto* leaf = static_cast<AccumulateGrad*>(e.fn.get());
        if (!leaf->leaf_grad().defined()) leaf->adopt(partial[i]);  // a destination written: the leaf's .grad now
        if (in_leaf.insert(e.fn.get()).second) {
          if (slot.defined()) add_into_leaf(out[i], slot);  // an earlier input of this node delivered it just now
          slot = out[i];
        }
      } else {
        if (!from_leaf[i] && partial[i].defined() && !taken) deliver(e, partial[i]);  // back where it waited
        deliver(e, out[i]);
      }
      if (--dependencies[e.fn.get()] == 0) ready.push(e.fn.get());
    }
    // AccumulateGrad saves nothing and is shared by every graph that uses its leaf: never released.
    if (!retain_graph && acc == nullptr) node->release();
    alive.erase(node);  // frees the node now if no tensor holds it any more
  }
  leaf_adds.flush();
}

bool retaining_graph() noexcept { return t_retaining; }

}  // namespace mpt::autograd
