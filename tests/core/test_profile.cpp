// tests/core/test_profile.cpp: profile::Range through the observer: a GPT training step's ranges, nesting and names.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "mpt/train/grad_scaler.h"
#include "mpt/amp/policy.h"
#include "mpt/core/profile.h"
#include "mpt/dist/communicator.h"
#include "mpt/train/data_parallel.h"
#include "mpt/nn/gpt.h"
#include "mpt/nn/layers.h"
#include "mpt/ops/reduction.h"
#include "mpt/optim/adamw.h"

namespace mpt {
namespace {

// Whether a range is an autograd node's ("LinearBackward", "AccumulateGrad", "Checkpoint"): the engine opens one per
// node it runs.
bool is_node_range(std::string_view name) {
  return name.ends_with("Backward") || name == "AccumulateGrad" || name == "Checkpoint";
}

// Records every range event and renders the ranges as a tree: "a(b,c),d". Checks that each pop closes the innermost
// open range. The autograd nodes' ranges are left out unless `with_nodes`.
class Recorder {
 public:
  explicit Recorder(bool with_nodes = false) {
    profile::set_range_observer([this, with_nodes](std::string_view name, bool push) {
      if (with_nodes || !is_node_range(name)) events_.emplace_back(name, push);
    });
  }
  ~Recorder() {
    profile::set_range_observer(nullptr);
    profile::set_nvtx(false);
  }
  Recorder(const Recorder&) = delete;
  Recorder& operator=(const Recorder&) = delete;

  const std::vector<std::pair<std::string, bool>>& events() const { return events_; }
  void clear() { events_.clear(); }

  // The tree, or a description of the first unbalanced event.
  std::string tree() const {
    std::string out;
    std::vector<std::string> open;
    bool first_child = true;
    for (const auto& [name, push] : events_) {
      if (push) {
        if (!first_child) out += ',';
        out += name;
        open.push_back(name);
        first_child = true;
        out += '(';
      } else {
        if (open.empty()) return "pop of '" + name + "' with no open range";
        if (open.back() != name) return "pop of '" + name + "' while '" + open.back() + "' is innermost";
        open.pop_back();
        if (out.back() == '(') {
          out.pop_back();  // a leaf: "name" rather than "name()"
        } else {
          out += ')';
        }
        first_child = false;
      }
    }
    if (!open.empty()) return "'" + open.back() + "' never closed";
    // GPT::forward adds wte(ids) and wpe(pos) in one call: the compiler picks which argument it evaluates first.
    if (const size_t at = out.find("wpe,wte"); at != std::string::npos) out.replace(at, 7, "wte,wpe");
    return out;
  }

 private:
  std::vector<std::pair<std::string, bool>> events_;
};

nn::GPT tiny_gpt(int64_t layers) {
  nn::GPTConfig c;
  c.vocab_size = 11;
  c.block_size = 8;
  c.n_layer = layers;
  c.n_head = 2;
  c.n_embd = 8;
  return nn::GPT(c);
}

std::pair<Tensor, Tensor> batch() {
  std::vector<int64_t> ids = {1, 2, 3, 4, 5, 6, 7, 8}, targets = {2, 3, 4, 5, 6, 7, 8, 9};
  return {Tensor::from_vector(ids, {2, 4}), Tensor::from_vector(targets, {2, 4})};
}

// First in the suite, before any test turns ranges on or off. The ctest Profile.from_environment runs it with
// MPT_NVTX=1; without the variable there is nothing to check.
TEST(Profile, EnvironmentTurnsRangesOn) {
  const char* v = std::getenv("MPT_NVTX");
  if (v == nullptr) GTEST_SKIP() << "MPT_NVTX is not set (ctest Profile.from_environment sets it)";
  EXPECT_EQ(profile::nvtx_enabled(), *v != '\0' && std::string_view(v) != "0") << "MPT_NVTX=" << v;
}

// The MLP runs as one fused op (ops::mlp: the GELU in its GEMMs' epilogues), so its Linears have no ranges.
const std::string kBlock0 = "h.0(h.0.ln_1,h.0.attn(h.0.attn.c_attn,h.0.attn.c_proj),h.0.ln_2,h.0.mlp)";
const std::string kBlock1 = "h.1(h.1.ln_1,h.1.attn(h.1.attn.c_attn,h.1.attn.c_proj),h.1.ln_2,h.1.mlp)";

TEST(Profile, TrainingStepRangesNestByModuleAndPhase) {
  nn::GPT model = tiny_gpt(2);
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-3});
  const auto [x, y] = batch();
  Recorder rec;
  profile::set_nvtx(true);
  {
    const profile::Range step("step");
    model.loss(x, y).backward();
    opt.step();
  }
  EXPECT_EQ(rec.tree(), "step(forward(wte,wpe," + kBlock0 + "," + kBlock1 + ",ln_f,lm_head),loss,backward,optimizer)");
}

// Inside backward each autograd node has its range, named like PyTorch's (Nsight Systems shows which op's gradient a
// kernel belongs to): the sum's node, the Linear's (its input flattened to 2-D, then the GEMMs), then its weight's and
// bias's gradient accumulation.
TEST(Profile, BackwardNodesHaveRanges) {
  nn::Linear linear(3, 2);
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  Recorder rec(/*with_nodes=*/true);
  profile::set_nvtx(true);
  ops::sum(linear.forward(x)).backward();
  EXPECT_EQ(rec.tree(), "Linear,backward(SumBackward,ReshapeBackward,LinearBackward,AccumulateGrad,AccumulateGrad)");
}

// Under BF16 Autocast each LayerNorm writes BF16 for the one GEMM that reads it (ops::layer_norm's y_dtype) and the
// residual norms take the sublayers' BF16 outputs into the FP32 stream themselves (Block::forward_pending), bit for bit
// the casts they replace (tests/ops/test_layernorm.cpp, tests/nn/test_gpt_checkpoint.cpp): a GPT's backward has no
// cast node (CopyBackward) left (4 per block and ln_f's before). Nor a copy: the attention writes its output in
// [B, T, C] (ops::causal_attention_qkv), where each block copied [B, H, T, D] into it before, with or without
// Autocast.
TEST(Profile, UnderBf16AutocastNoActivationIsCastOrCopied) {
  for (const int64_t layers : {1, 3}) {
    nn::GPT model = tiny_gpt(layers);
    const auto [x, y] = batch();
    auto count = [](const std::string& tree, const std::string& node) {
      int64_t n = 0;
      for (size_t at = tree.find(node); at != std::string::npos; at = tree.find(node, at + 1)) ++n;
      return n;
    };
    auto casts = [&](const std::string& tree) { return count(tree, "CopyBackward"); };
    {
      Recorder rec(/*with_nodes=*/true);
      profile::set_nvtx(true);
      {
        const amp::Autocast autocast(amp::Policy::bf16());
        model.loss(x, y).backward();
      }
      EXPECT_EQ(casts(rec.tree()), 0) << rec.tree();
      EXPECT_EQ(count(rec.tree(), "CausalAttentionQkvBackward"), layers) << rec.tree();
    }
    Recorder rec(/*with_nodes=*/true);
    profile::set_nvtx(true);
    model.loss(x, y).backward();
    EXPECT_EQ(casts(rec.tree()), 0) << rec.tree();
    EXPECT_EQ(count(rec.tree(), "CausalAttentionQkvBackward"), layers) << rec.tree();
  }
}

TEST(Profile, RecomputedBlocksRunInsideBackward) {
  nn::GPT model = tiny_gpt(1);
  model.set_activation_checkpointing(true);
  const auto [x, y] = batch();
  Recorder rec;
  profile::set_nvtx(true);
  model.loss(x, y).backward();
  // The recomputed block, then its backward (checkpoint's node runs the engine on the recomputed graph).
  EXPECT_EQ(rec.tree(), "forward(wte,wpe," + kBlock0 + ",ln_f,lm_head),loss,backward(" + kBlock0 + ",backward)");
}

TEST(Profile, ScalerAndDataParallelRangesAreOptimizerAndCommunication) {
  nn::GPT model = tiny_gpt(1);
  train::DataParallel dp(model, dist::single_process(), {.bucket_bytes = 1 << 20});  // one bucket
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-3});
  train::GradScaler scaler;
  const auto [x, y] = batch();
  Recorder rec;
  profile::set_nvtx(true);
  scaler.scale(model.loss(x, y)).backward();
  dp.finish();
  scaler.unscale_(opt);
  scaler.step(opt);
  scaler.update();
  const std::string tree = rec.tree();
  const std::string tail =
      ",loss,backward(communication/bucket 0),communication/finish,optimizer/unscale,optimizer,optimizer/scale_update";
  ASSERT_GE(tree.size(), tail.size()) << tree;
  EXPECT_EQ(tree.substr(tree.size() - tail.size()), tail) << tree;
  EXPECT_TRUE(tree.starts_with("forward(wte,wpe,h.0(")) << tree;
}

TEST(Profile, OffTheObserverSeesNothing) {
  nn::GPT model = tiny_gpt(1);
  optim::AdamW opt(optim::weight_decay_groups(model.named_parameters(), 0.1), {.lr = 1e-3});
  const auto [x, y] = batch();
  Recorder rec;
  profile::set_nvtx(false);
  EXPECT_FALSE(profile::nvtx_enabled());
  {
    const profile::Range step("step");
    const profile::Range formatted("bucket {}", 3);
    model.loss(x, y).backward();
    opt.step();
  }
  EXPECT_TRUE(rec.events().empty()) << rec.tree();
}

TEST(Profile, RangeOpenedWhileOnClosesAfterTurningOff) {
  Recorder rec;
  profile::set_nvtx(true);
  {
    const profile::Range outer("outer");
    const profile::Range formatted("bucket {} of {}", 2, 5);
    profile::set_nvtx(false);
    const profile::Range unseen("unseen");
  }
  EXPECT_EQ(rec.tree(), "outer(bucket 2 of 5)");
}

TEST(Profile, NamesStandaloneModulesByType) {
  Recorder rec;
  profile::set_nvtx(true);
  nn::Linear linear(4, 3);
  linear.forward(Tensor::zeros({2, 4}));
  EXPECT_EQ(rec.tree(), "Linear");
}

TEST(Profile, NvtxOnlyInRealCudaBuilds) {
#if defined(MPT_WITH_CUDA) && !defined(MPT_CUDA_EMULATION)
  EXPECT_TRUE(profile::nvtx_available());
#else
  EXPECT_FALSE(profile::nvtx_available());
#endif
}

}  // namespace
}  // namespace mpt
