// mpt/autograd/checkpoint.h: activation checkpointing: run a segment keeping no activations, recompute it in backward.
#pragma once

#include <functional>
#include <vector>

#include "mpt/core/generator.h"
#include "mpt/core/tensor.h"

namespace mpt::autograd {

struct CheckpointOptions {
  // Save the generators' (seed, offset) before the forward and replay from it in the recomputation, so dropout
  // draws the same masks; the generators are put back afterwards (recomputing never advances a stream).
  bool preserve_rng_state = true;
  // The generators fn draws from; empty means {&default_generator()}. Ignored without preserve_rng_state.
  std::vector<Generator*> generators{};
};

// Runs outputs = fn(inputs) with grad mode off (no graph, no saved activations inside fn) and, when grad mode is
// on, records one "Checkpoint" node that keeps only the inputs (and the generators' states). Its backward re-runs
// fn with grad mode on, on detached copies of the inputs (requiring grad where the originals did), then runs a
// nested autograd::backward from the recomputed outputs: parameters fn captures get their gradients accumulated
// (and their post-accumulate hooks fired) inside that nested pass; the inputs' gradients flow on to the outer graph.
//
// The node is recorded whenever grad mode is on, even if no input requires grad (fn may use parameters that do):
// every floating output is then marked as requiring grad. A segment that needs no gradient at all is recomputed
// in backward for nothing; run it under NoGradGuard instead. Non-floating outputs are returned detached.
//
// On the CPU the gradients are bit-identical to running fn without checkpointing (the same ops in the same
// order), with one exception: a parameter used in several segments (or also outside them) is accumulated into
// .grad once per segment's nested pass instead of having its contributions summed first, so the bits differ when
// .grad already holds a gradient (micro-batch accumulation), and its post-accumulate hooks fire once per pass (the
// first call does not see the final gradient). fn must be deterministic given its inputs, the generators and the
// tensors it captures, which must not be modified in place between forward and backward (nothing checks it); the
// generators must outlive the node.
std::vector<Tensor> checkpoint(const std::function<std::vector<Tensor>(const std::vector<Tensor>&)>& fn,
                               const std::vector<Tensor>& inputs, const CheckpointOptions& options = {});

// One input, one output.
Tensor checkpoint(const std::function<Tensor(const Tensor&)>& fn, const Tensor& input,
                  const CheckpointOptions& options = {});

}  // namespace mpt::autograd
