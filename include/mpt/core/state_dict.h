// mpt/core/state_dict.h: named tensors as modules, optimizers and checkpoints exchange them.
#pragma once

#include <map>
#include <string>

#include "mpt/core/tensor.h"

namespace mpt {

// A parameter as the optimizer sees it: its dotted name ("h.0.attn.c_attn.weight"), the tensor (a leaf that
// requires grad unless frozen; copies of the handle share its gradient) and whether weight decay applies to it
// by default (the weights of Linear layers; not biases, LayerNorm parameters or embeddings).
struct NamedParameter {
  std::string name;
  Tensor tensor;
  bool weight_decay = true;
};

using StateDict = std::map<std::string, Tensor>;

}  // namespace mpt
