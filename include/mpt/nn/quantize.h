// mpt/nn/quantize.h: post-training quantization of a model's Linear weights (round to nearest on a QAT scheme's grid).
#pragma once

#include <string>
#include <vector>

#include "mpt/amp/qat.h"
#include "mpt/nn/module.h"

namespace mpt::nn {

// Every Linear of `model` the policy gives a weight scheme gets its weight replaced, in place, by
// ops::fake_quantize(weight, scheme) (the same bits a QAT forward computes from it; with a learned scale, its grid),
// under no_grad; other weights stay. Returns the paths of the weights it quantized. GPT's tied LM head is not a Linear module and keeps its
// weight (the policies' "lm_head" exclusion covers it for QAT and export).
std::vector<std::string> quantize_weights(Module& model, const amp::QatPolicy& policy);

// Quantized inference: every Linear the policy gives a weight scheme holds its weight as codes and scales
// (Linear::set_quantized) and its forward runs the quantized GEMM (ops::quantized_linear) with the scheme's input
// quantization; the FP32 weight stays (the checkpoint, the exporters). Returns the paths of the weights it packed.
std::vector<std::string> quantize_for_inference(Module& model, const amp::QatPolicy& policy);

// LSQ: every Linear the policy gives an integer weight scheme learns its weight's scale (Linear::learn_weight_scale,
// the parameter "<path>.weight_log_scale"); call it before building the optimizer (and before loading a checkpoint that
// holds the scales). quantize_weights and quantize_for_inference then use the learned scales (FP16-rounded where the
// scheme says f16_scale, as the exporters do). Returns the scales' paths.
std::vector<std::string> learn_quantization_scales(Module& model, const amp::QatPolicy& policy);

}  // namespace mpt::nn
