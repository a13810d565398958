// mpt/autograd/node.h: the autograd graph: per-tensor metadata, nodes (one per recorded op), edges, leaf accumulation.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::autograd {

class Node;

// Where one input's gradient goes: input `input_nr` of node `fn` (for a leaf, its AccumulateGrad node). A null fn
// means the input needs no gradient.
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
};

// Called with a leaf's gradient once it is final for this backward pass (after accumulation).
using PostAccumulateHook = std::function<void(const Tensor& leaf)>;
// Where a leaf's gradient may be made when it has none (set_grad_destination): a contiguous tensor of the leaf's
// shape and gradient dtype on its device, whatever its contents (the gradient overwrites them); undefined: nowhere
// this time. Called when a backward is about to write the leaf's gradient there (autograd::offer): it returns the
// same place every time until that gradient is released.
using GradDestination = std::function<Tensor()>;

// The autograd state of a tensor handle, shared by its copies (not by views: see Tensor::detach).
struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;                      // leaves: accumulated by backward (+=); undefined until the first one
  std::shared_ptr<Node> grad_fn;    // non-leaves: the node that made this tensor
  int output_nr = 0;                // which output of grad_fn this tensor is
  std::weak_ptr<Node> accumulator;  // leaves: their AccumulateGrad node, while a graph holds it
  std::vector<PostAccumulateHook> post_accumulate_hooks;
  std::optional<DType> grad_dtype;  // leaves: the dtype backward keeps .grad in (set_grad_dtype); unset: the leaf's
  GradDestination grad_destination;  // leaves: where .grad is made (set_grad_destination); empty: a new tensor
};

// A leaf's gradient dtype (PyTorch's Tensor.grad_dtype): backward delivers and sums the leaf's gradient in `dtype`,
// and the GEMMs that make a weight's gradient write it (and add later micro-batches into it) in that dtype. For FP32
// masters, BF16 halves the gradients' memory (llm.c's regime: 237 MiB of 475 at GPT-2 124M) at the cost of rounding
// each micro-batch's sum to BF16 (docs/numerics.md, "BF16 gradients"). F32, BF16 or F16 on a floating leaf; an
// existing gradient is converted. std::nullopt: back to the leaf's own dtype.
void set_grad_dtype(const Tensor& leaf, std::optional<DType> dtype);
// The dtype a tensor's gradient is kept in: the one set_grad_dtype gave the leaf, else the tensor's own.
DType grad_dtype(const Tensor& t);
// Where a leaf's gradient may be made when it has none, chosen by the leaf's owner: a slice of one flat buffer (a
// DataParallel bucket: reduced as it is, no copy into it). A backward that makes the leaf's whole gradient and
// nothing waits for it (a weight-gradient GEMM, beta = 0; a bias epilogue; a norm's parameter reduction) writes it
// there (autograd::offer's fresh offer), and the leaf's .grad is that tensor; later gradients add into it as into
// any .grad. A gradient made anywhere else stays the leaf's own, as without a destination (a padded head's dW, a sum
// of several): the owner copies it where it wants it (DataParallel when its bucket leaves), since a copy made here
// would make the destination early and, for a padded GEMM's gradient, cost the later micro-batches its in-place adds.
// An empty function: none. Refused for a tensor that is not a leaf requiring grad.
void set_grad_destination(const Tensor& leaf, GradDestination destination);
// What a backward (Node::apply_partial, on this thread) may write input `input`'s gradient, of dtype `writes`, into,
// asked for where it is about to write it: partial[input] as the engine offered it (a gradient to add into), or, for
// a leaf without a gradient and nothing waiting for it whose owner named a destination (set_grad_destination) and
// whose gradient dtype is `writes`, that destination, made now and stored in partial[input] (a fresh offer). Asked for only where written, a destination (a
// DataParallel bucket) is not made before a gradient goes there: a backward that writes elsewhere (a padded GEMM's
// new dW) does not ask.
const Tensor& offer(std::vector<Tensor>& partial, size_t input, DType writes);
// Whether `offered` (an entry of the running node's `partial`, from offer()) is a fresh destination, whose contents
// are to be overwritten (beta = 0), rather than a gradient to add into (beta = 1).
bool is_fresh_offer(const Tensor& offered);

// One recorded op. apply() maps the gradients of its outputs (one per output; undefined means zero) to the
// gradients of its inputs (one per entry of next_edges, in order; undefined means zero or not needed).
class Node : public std::enable_shared_from_this<Node> {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  const std::string& name() const { return name_; }
  uint64_t sequence_nr() const { return sequence_nr_; }  // creation order: later nodes run first in backward
  int num_outputs() const { return num_outputs_; }
  const std::vector<Edge>& next_edges() const { return next_edges_; }
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  void set_num_outputs(int n) { num_outputs_ = n; }

  // Runs the backward of this node; throws if its saved tensors were released by an earlier backward.
  std::vector<Tensor> run(std::vector<Tensor>&& grad_outputs);
  // run() for a node that adds into gradients already waiting (takes_partial()): `partial` as apply_partial's.
  std::vector<Tensor> run(std::vector<Tensor>&& grad_outputs, std::vector<Tensor>& partial);
  // Whether this node's backward can add its gradient for an input into one that already waits for that input
  // (apply_partial): the engine then offers it the waiting gradients it may write.
  virtual bool takes_partial() const { return false; }
  // Frees what the node saved for backward (the engine calls it right after run() unless retain_graph).
  void release();
  bool released() const { return released_; }

 protected:
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  // apply() with partial[i] (one entry per next edge), what input i's gradient may be added into, else undefined:
  //  - for a leaf that already has a gradient (a later micro-batch of accumulation), the leaf's own .grad, when no
  //    other gradient of this pass waits for the leaf yet or what waits is already in that .grad: the sum then
  //    stays there (a weight-gradient GEMM with beta = 1, as llm.c accumulates, instead of a new gradient and
  //    AccumulateGrad's add), and the leaf's AccumulateGrad only runs its hooks;
  //  - else the gradient already waiting for input i, when nothing else holds its storage and it is contiguous
  //    (llm.c's encoder backward adds into the LM head's gradient of a tied table the same way);
  //  - for a leaf without a gradient and nothing waiting, its destination (set_grad_destination), made when the
  //    backward asks for it (autograd::offer), a fresh offer (is_fresh_offer): a backward that takes it overwrites
  //    it (beta = 0), and the leaf's .grad becomes it. Backwards read their offers through offer().
  // A backward that adds its gradient for input i into partial[i] in place returns that tensor (its storage) as input
  // i's gradient; the engine recognises it. A waiting gradient it does not take goes back to where it waited,
  // untouched, and is summed with what apply_partial returned as before.
  virtual std::vector<Tensor> apply_partial(std::vector<Tensor>&& grad_outputs, std::vector<Tensor>& partial) {
    (void)partial;
    return apply(std::move(grad_outputs));
  }
  virtual void release_saved() {}

 private:
  std::string name_;
  uint64_t sequence_nr_;
  int num_outputs_ = 1;
  bool released_ = false;
  std::vector<Edge> next_edges_;
};

// The sink of a leaf tensor: adds the incoming gradient into leaf.grad (a new tensor the first time), then runs the
// leaf's post-accumulate hooks.
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<AutogradMeta> leaf, Tensor leaf_handle);
  void run_hooks();
  const Tensor& leaf_grad() const { return leaf_->grad; }  // undefined until the leaf's first gradient
  // The leaf's destination (set_grad_destination) checked against the leaf, when it has one and no gradient yet.
  Tensor destination() const;
  // The dtype its leaf's gradient is kept in (set_grad_dtype, else the leaf's).
  DType gradient_dtype() const { return leaf_->grad_dtype.value_or(handle_.dtype()); }
  // Makes `g`, a fresh offer (its destination) a backward wrote, the leaf's gradient.
  void adopt(const Tensor& g) { leaf_->grad = g; }

 protected:
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;

 private:
  std::shared_ptr<AutogradMeta> leaf_;
  Tensor handle_;  // the leaf (sharing its autograd state), handed to hooks
};

// A node whose backward is a function (saved state lives in the closure and is dropped on release).
using BackwardFn = std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs)>;
// A backward function that may add into the gradients already waiting for its inputs (Node::apply_partial).
using PartialBackwardFn =
    std::function<std::vector<Tensor>(const std::vector<Tensor>& grad_outputs, std::vector<Tensor>& partial)>;
class FunctionNode final : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn) : Node(std::move(name)), fn_(std::move(fn)) {}
  FunctionNode(std::string name, PartialBackwardFn fn) : Node(std::move(name)), partial_fn_(std::move(fn)) {}
  bool takes_partial() const override { return partial_fn_ != nullptr; }

 protected:
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    if (partial_fn_ != nullptr) {
      std::vector<Tensor> none(next_edges().size());
      return partial_fn_(grad_outputs, none);
    }
    return fn_(grad_outputs);
  }
  std::vector<Tensor> apply_partial(std::vector<Tensor>&& grad_outputs, std::vector<Tensor>& partial) override {
    return partial_fn_ != nullptr ? partial_fn_(grad_outputs, partial) : fn_(grad_outputs);
  }
  void release_saved() override {
    fn_ = nullptr;
    partial_fn_ = nullptr;
  }

 private:
  BackwardFn fn_;
  PartialBackwardFn partial_fn_;
};

// True when grad mode is on and any defined input requires grad: an op should record a node.
bool any_requires_grad(const std::vector<const Tensor*>& inputs);

// The edge an input's gradient flows along: its grad_fn, its (created on demand) AccumulateGrad if it is a leaf that
// requires grad, else a null edge.
Edge gradient_edge(const Tensor& input);

// Records `node` as the producer of `outputs` (output i is output_nr i) with one edge per input, when
// any_requires_grad(inputs); otherwise does nothing. Returns whether it recorded. A backward that needs an output
// must save output.detach(): a saved handle sharing the output's autograd state would make a reference cycle.
bool record(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs);

// record() without the checks: always links node, inputs and outputs (callers decided already; see GradRecorder).
void attach(const std::shared_ptr<Node>& node, const std::vector<const Tensor*>& inputs,
            const std::vector<Tensor*>& outputs);

// Shorthand for a FunctionNode: record(name, inputs, outputs, backward).
bool record(std::string name, const std::vector<const Tensor*>& inputs, const std::vector<Tensor*>& outputs,
            BackwardFn backward);

}  // namespace mpt::autograd
