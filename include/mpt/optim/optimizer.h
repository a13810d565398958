// mpt/optim/optimizer.h: the Optimizer base (parameter groups, lazy per-parameter state, state dicts) and the
// weight-decay grouping helper.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "mpt/core/tensor.h"
#include "mpt/core/state_dict.h"
#include "mpt/ops/optim.h"

namespace mpt::optim {

// A list of parameters sharing hyperparameters (torch's param_groups entries). Unset hyperparameters take the
// optimizer's defaults at construction; afterwards every field is set and lr, weight_decay and the options may be
// changed between steps (schedulers set lr), the parameter list may not.
struct ParamGroup {
  std::vector<Tensor> params;      // leaf handles: copies share the gradient with the model's tensors
  std::vector<std::string> names;  // empty, or one unique name per parameter (the state_dict keys)
  std::optional<double> lr;
  std::optional<double> weight_decay;
  // Optimizer-specific hyperparameters by name (SGD: momentum, dampening, nesterov as 0/1; AdamW: beta1, beta2,
  // eps). A name the optimizer does not know is an error.
  std::map<std::string, double> options;
};

// Two groups, in this order: the trainable parameters with weight_decay == true (decay `weight_decay`), and the
// other trainable ones (decay 0). Frozen parameters (requires_grad false) are left out; names are kept.
std::vector<ParamGroup> weight_decay_groups(const std::vector<NamedParameter>& params, double weight_decay);

// A parameter's state: its step count (steps taken: a 0-d i64 on the parameter's device, advanced by the step
// kernels themselves so that a step skipped on the device does not count) and named tensors ("exp_avg",
// "momentum_buffer", ...).
struct ParamState {
  Tensor step;
  std::map<std::string, Tensor> tensors;
  int64_t steps() const { return step.item<int64_t>(); }  // on CUDA: waits for the device
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that requires grad and has a gradient; the others are skipped and their
  // state (step count included) is left alone. State is created at a parameter's first step.
  // scaling (from a GradScaler): grad_scale_inv multiplies every gradient; when found_inf is defined and holds a
  // non-zero value the kernels skip the step on the device (parameters, moments and step counts keep their bits;
  // state is still created at a parameter's first attempted step, with count 0, as torch's fused optimizers do).
  // Nothing is read back to the host.
  void step(const ops::GradScaling& scaling = {});
  // Clears every parameter's gradient: to undefined (the next backward allocates), or to zeros in place.
  void zero_grad(bool set_to_none = true);
  // Creates now the state that each parameter requiring grad would get at its first step (count 0; the ones that
  // have it keep it). A training loop calls it before its first forward so that this long-lived memory is allocated
  // before the step's short-lived activations: made at the first step instead, it is carved from the blocks those
  // activations freed, and the next step's activations need new memory (train::Trainer does; GPT-2 124M's emulated
  // reserve peak is 140 MiB lower, docs/benchmarks.md). A parameter that then never gets a gradient keeps its
  // zero state, which state_dict() includes.
  void materialize_state();

  std::vector<ParamGroup>& param_groups() { return groups_; }
  const std::vector<ParamGroup>& param_groups() const { return groups_; }
  // Appends a group (validated and completed with the defaults like those given at construction).
  void add_param_group(ParamGroup group);
  // The state of parameter `index` of group `group`; nullptr before its first step.
  const ParamState* state(size_t group, size_t index) const;
  const std::string& name() const { return name_; }

  // Every tensor of state: "{key}.step" (0-d i64) and "{key}.{tensor}" per parameter with state, where key is the
  // parameter's name or "group{g}.param{i}"; "group{g}.{hyperparameter}" (0-d f64) per group. State tensors are
  // shared with the optimizer (like torch; clone to snapshot), the others are fresh.
  StateDict state_dict() const;
  // Restores a state_dict of an optimizer of the same kind over the same parameters: the optimizer then continues
  // bit-identically. A missing or unexpected key, a wrong shape or dtype, or an invalid hyperparameter throws
  // naming the key and what was expected, before anything is modified. Tensors are copied to the params' devices.
  void load_state_dict(const StateDict& dict);

 protected:
  // defaults: "lr", "weight_decay" and every option with its default value.
  Optimizer(std::string name, std::map<std::string, double> defaults);

  // Adds the constructor's groups (at least one); derived constructors call it once their options are set.
  void init_groups(std::vector<ParamGroup> groups);

  // Throws unless the group's hyperparameters (and the parameters' fit with them) are valid, with torch's messages.
  virtual void check_hyperparameters(const ParamGroup& group, size_t g) const = 0;

  struct StateSpec {
    std::string name;
    Shape shape;
    DType dtype;
    bool required;  // false: may be absent (created later, like SGD's momentum buffer)
  };
  // The tensors a parameter's state holds (after its first step under `group`'s hyperparameters).
  virtual std::vector<StateSpec> state_spec(const Tensor& param, const ParamGroup& group) const = 0;
  // Creates the state tensors of a parameter at its first step.
  virtual std::map<std::string, Tensor> init_state(const Tensor& param, const ParamGroup& group) const = 0;

  // One parameter that takes part in a step: its handle, its gradient and its state (step: steps taken before).
  struct Ready {
    Tensor param;
    Tensor grad;
    ParamState* state;
    Tensor copy;                // the parameter's cached FP16/BF16 compute copy, if any (amp::refreshable_compute_copy)
    bool copy_written = false;  // set by step_group when its kernels rewrote `copy` (else the step drops it)
    ops::AdamWSlot::Fp8Codes fp8{};  // its cached FP8 copy's codes to rewrite, if any (amp::refreshable_fp8_copy)
    bool fp8_written = false;        // set by step_group when its kernels rewrote them (else the step drops the copy)
  };
  // Updates the ready parameters of one group (the kernels advance their step counts).
  virtual void step_group(const ParamGroup& group, std::span<Ready> ready, const ops::GradScaling& scaling) = 0;

 private:
  std::string key_of(size_t g, size_t i) const;
  void check_group_shape(size_t g) const;
  ParamState& ensure_state(size_t g, size_t i);  // created with count 0 if the parameter has none yet

  std::string name_;
  std::map<std::string, double> defaults_;
  std::vector<ParamGroup> groups_;
  std::vector<std::vector<std::optional<ParamState>>> states_;  // [group][param]
};

}  // namespace mpt::optim
