// mpt/nn/module.h: Module, the base of every layer: named parameters and buffers, children, train/eval, state dicts.
#pragma once

#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "mpt/core/state_dict.h"
#include "mpt/core/tensor.h"

namespace mpt::nn {

// NamedParameter and StateDict live in core (the optimizer and checkpoints use them without nn).
using mpt::NamedParameter;
using mpt::StateDict;

class Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  const std::string& type_name() const { return type_name_; }
  // The dotted path from the root module ("h.0.attn"; "" for a root), kept current as modules are registered:
  // what a precision policy's per-module overrides match.
  const std::string& path() const { return path_; }

  // Parameters of this module and (recurse) its children, depth first in registration order, each once (a
  // parameter shared by two modules is reported under its first name). Frozen parameters are included:
  // filter on requires_grad() to get the trainable ones.
  std::vector<NamedParameter> named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;  // the tensors of named_parameters()
  std::vector<std::pair<std::string, Tensor>> named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, Module*>> named_children() const;
  std::vector<std::pair<std::string, Module*>> named_modules();  // this module ("") and every descendant
  std::vector<std::pair<std::string, const Module*>> named_modules() const;
  int64_t num_parameters(bool trainable_only = false) const;

  // Training mode (dropout active) for this module and every descendant.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool is_training() const { return training_; }

  // Freezes (false) or unfreezes (true) every parameter of this module and its children: frozen parameters are
  // no longer leaves that require grad, so no op records a node for them, backward computes no gradient for them
  // and an optimizer built afterwards gives them no state.
  Module& requires_grad_(bool on = true);
  // Clears the gradients of every parameter: to none (undefined; the next backward allocates), or to zero.
  void zero_grad(bool set_to_none = true);

  // Parameters and buffers by dotted name, detached (sharing storage with the module).
  StateDict state_dict() const;
  // Copies each tensor of `dict` into the parameter or buffer of that name (converting dtype; shapes must match).
  // strict: a name the module lacks or a module entry the dict lacks is an error naming them; nothing is copied
  // unless every check passes.
  void load_state_dict(const StateDict& dict, bool strict = true);

  // Converts every parameter and buffer (parameters stay leaves with their requires_grad flag; gradients are
  // dropped). Handles taken before the call keep the old tensors.
  Module& to(DType dtype);
  Module& to(Device device);

 protected:
  // Registers a parameter (made a leaf that requires grad) and returns a handle to its slot, which stays valid
  // for the module's lifetime and follows to() conversions.
  Tensor& register_parameter(std::string name, Tensor value, bool weight_decay = true);
  Tensor& register_buffer(std::string name, Tensor value);
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> child) {
    add_child(std::move(name), child);
    return child;
  }

 private:
  struct Slot {
    std::string name;
    Tensor tensor;
    bool weight_decay = true;
  };
  void add_child(std::string name, std::shared_ptr<Module> child);
  void set_path(std::string path);  // this module's and, recursively, its children's
  void check_new_name(const std::string& name) const;
  template <class F>
  void visit_slots(const std::string& prefix, bool recurse, bool params, F&& f) const;

  std::string type_name_;
  std::string path_;
  bool training_ = true;
  std::deque<Slot> params_;  // deque: references to slots stay valid as more are registered
  std::deque<Slot> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

}  // namespace mpt::nn
