// src/autograd/checkpoint.cpp: activation checkpointing: the forward without a graph, the Checkpoint node's recompute.
#include "mpt/autograd/checkpoint.h"

#include <algorithm>
#include <memory>
#include <utility>

#include "mpt/autograd/engine.h"
#include "mpt/autograd/grad_mode.h"
#include "mpt/autograd/node.h"

namespace mpt::autograd {

namespace {

using SegmentFn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

struct RngState {
  Generator* gen;
  uint64_t seed;
  uint64_t offset;
};

// The current state of each distinct generator (default_generator() when none are named).
std::vector<RngState> capture_rng(const CheckpointOptions& options) {
  std::vector<Generator*> gens = options.generators;
  if (gens.empty()) gens.push_back(&default_generator());
  std::vector<RngState> states;
  for (Generator* g : gens) {
    MPT_CHECK(g != nullptr, "[checkpoint] options.generators holds a null generator");
    const bool seen = std::any_of(states.begin(), states.end(), [g](const RngState& s) { return s.gen == g; });
    if (!seen) states.push_back({g, g->seed(), g->offset()});
  }
  return states;
}

// Puts the generators at their saved states for the recomputation, and back where they were when the scope ends
// (also when fn throws): recomputing must not advance any stream.
class RngReplay {
 public:
  explicit RngReplay(const std::vector<RngState>& saved) {
    for (const RngState& s : saved) {
      previous_.push_back({s.gen, s.gen->seed(), s.gen->offset()});
      s.gen->set_state(s.seed, s.offset);
    }
  }
  ~RngReplay() {
    for (const RngState& s : previous_) s.gen->set_state(s.seed, s.offset);
  }
  RngReplay(const RngReplay&) = delete;
  RngReplay& operator=(const RngReplay&) = delete;

 private:
  std::vector<RngState> previous_;
};

std::vector<Tensor> run_segment(const SegmentFn& fn, const std::vector<Tensor>& inputs) {
  std::vector<Tensor> outputs = fn(inputs);
  MPT_CHECK(!outputs.empty(), "[checkpoint] fn returned no tensors");
  for (size_t i = 0; i < outputs.size(); ++i)
    MPT_CHECK(outputs[i].defined(), "[checkpoint] output {} of fn is undefined", i);
  return outputs;
}

// Saves the segment's inputs (detached: no cycle, and the graph behind them stays the outer graph's business), which
// of them required grad, fn and the generators' states. Its backward recomputes fn with grad mode on and runs a
// nested backward through the recomputed graph.
class CheckpointNode final : public Node {
 public:
  CheckpointNode(SegmentFn fn, const std::vector<Tensor>& inputs, std::vector<RngState> rng)
      : Node("Checkpoint"), fn_(std::move(fn)), rng_(std::move(rng)) {
    for (const Tensor& x : inputs) {
      inputs_.push_back(x.detach());
      input_requires_grad_.push_back(x.requires_grad());
    }
  }

 protected:
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    std::vector<Tensor> inputs;
    inputs.reserve(inputs_.size());
    for (size_t i = 0; i < inputs_.size(); ++i) {
      Tensor x = inputs_[i].detach();  // a fresh leaf of its own, so its gradient is ours to read
      if (input_requires_grad_[i]) x.requires_grad_();
      inputs.push_back(std::move(x));
    }
    std::vector<Tensor> outputs;
    {
      RngReplay replay(rng_);
      EnableGradGuard grad_mode;  // the engine runs nodes with grad mode off
      outputs = run_segment(fn_, inputs);
    }
    MPT_CHECK(outputs.size() == grad_outputs.size(),
              "[checkpoint] the recomputation returned {} tensors but the forward {}: fn must be deterministic",
              outputs.size(), grad_outputs.size());
    std::vector<Tensor> roots, grads;
    for (size_t j = 0; j < outputs.size(); ++j) {
      if (!grad_outputs[j].defined() || !outputs[j].requires_grad()) continue;
      MPT_CHECK(outputs[j].shape() == grad_outputs[j].shape(),
                "[checkpoint] recomputed output {} is {} but its gradient is {}: fn must be deterministic", j,
                outputs[j].meta_str(), grad_outputs[j].meta_str());
      roots.push_back(std::move(outputs[j]));
      grads.push_back(std::move(grad_outputs[j]));
    }
    outputs.clear();
    grad_outputs.clear();
    // Parameters fn captured accumulate (and fire their hooks) here; the recomputed graph is freed as it runs.
    if (!roots.empty()) backward(roots, grads);
    std::vector<Tensor> dinputs;
    dinputs.reserve(inputs.size());
    for (const Tensor& x : inputs) dinputs.push_back(x.grad());  // undefined where no gradient reached it
    return dinputs;
  }

  void release_saved() override {
    fn_ = nullptr;  // its captures may hold tensors too
    inputs_ = {};
    rng_ = {};
  }

 private:
  SegmentFn fn_;
  std::vector<Tensor> inputs_;
  std::vector<bool> input_requires_grad_;
  std::vector<RngState> rng_;
};

}  // namespace

std::vector<Tensor> checkpoint(const SegmentFn& fn, const std::vector<Tensor>& inputs,
                               const CheckpointOptions& options) {
  MPT_CHECK(static_cast<bool>(fn), "[checkpoint] fn is empty");
  for (size_t i = 0; i < inputs.size(); ++i)
    MPT_CHECK(inputs[i].defined(), "[checkpoint] input {} is undefined", i);
  // Recorded whenever grad mode is on, not only when an input requires grad: the first segment of a network
  // usually gets inputs that do not, and its parameters still need gradients.
  const bool record = is_grad_enabled();
  std::vector<RngState> rng = record && options.preserve_rng_state ? capture_rng(options) : std::vector<RngState>{};
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = run_segment(fn, inputs);
  }
  if (!record) return outputs;
  const bool any_floating =
      std::any_of(outputs.begin(), outputs.end(), [](const Tensor& t) { return is_floating(t.dtype()); });
  if (!any_floating) return outputs;

  auto node = std::make_shared<CheckpointNode>(fn, inputs, std::move(rng));
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& x : inputs) edges.push_back(gradient_edge(x));
  node->set_next_edges(std::move(edges));
  node->set_num_outputs(static_cast<int>(outputs.size()));
  for (size_t i = 0; i < outputs.size(); ++i) {
    outputs[i] = outputs[i].detach();  // fn may have returned an input's handle: never relink the input itself
    if (is_floating(outputs[i].dtype())) outputs[i].set_grad_fn(node, static_cast<int>(i));
  }
  return outputs;
}

Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options) {
  MPT_CHECK(static_cast<bool>(fn), "[checkpoint] fn is empty");
  return checkpoint([fn](const std::vector<Tensor>& xs) { return std::vector<Tensor>{fn(xs.front())}; },
                    std::vector<Tensor>{input}, options)
      .front();
}

}  // namespace mpt::autograd
