// mpt/ops/linear.h: y = x W^T + b as one GEMM with the bias in its epilogue, and its backward (a Linear layer's op).
#pragma once

#include <optional>
#include <vector>

#include "mpt/core/tensor.h"

namespace mpt::ops {

struct LinearOptions {
  // The copy of `weight` the GEMMs read, in x's dtype (e.g. amp::compute_copy(weight, BF16) of an FP32 master);
  // undefined: `weight` itself. With out_padded it may already have out_padded rows, the extra ones zero
  // (amp::compute_copy(weight, BF16, out_padded), cached: then nothing is padded per call). It is not differentiated:
  // the weight gradient goes to `weight`, in weight's dtype, so a BF16 GEMM writes an FP32 master's gradient in FP32
  // directly (no BF16 rounding, no cast, no second pass).
  Tensor compute_weight{};
  // The bias as the GEMM's epilogue reads it (cuBLASLt adds a bias of the output's dtype: a BF16 copy of an FP32
  // master under BF16 Autocast, amp::compute_copy, made once per optimizer step instead of cast per call);
  // undefined: `bias`, converted by the GEMM where it needs another dtype. Not differentiated: the bias gradient goes
  // to `bias`. Its values are what the GEMM adds: on the CPU, whose GEMMs add an FP32 bias in FP32, leave it unset.
  Tensor compute_bias{};
  // 0, or the output width padded to `out_padded` >= M columns (no bias): the GEMMs read the weight with zero rows
  // appended, so y's columns [M, out_padded) are 0, every GEMM dimension is the padded one (GPT-2's vocabulary of
  // 50257 as 50304: cuBLASLt's fast kernels want multiples of 8) and nothing is copied to or from an unpadded
  // buffer; the weight gradient is the first M rows of the padded one (a view). dy's padding columns are ignored
  // only if they are 0 (ops::softmax_cross_entropy with `classes` writes them so).
  int64_t out_padded = 0;
};

// w [M, K] as `dtype` with zero rows appended to `rows` > M: [rows, K], one conversion of w into the prefix and a
// zero fill of the M..rows tail only (no bias, not recorded by autograd).
Tensor padded_rows(const Tensor& w, int64_t rows, DType dtype);

// x: [N, K]; weight: [M, K]; bias: [M] or undefined (any float dtype but FP8). Returns y [N, M] in x's dtype (f32,
// f16, bf16 or f64), y = x W^T + b with products accumulated in FP32 and the bias added in FP32 before the one
// rounding (on the CPU inside the oneDNN GEMM; on CUDA in cuBLASLt's BIAS epilogue, the bias read in y's dtype; in
// f64 added afterwards). Backward: dx = dy W (in x's dtype), dW = dy^T x (weight's dtype) and db = the column sums of
// dy (from dW's GEMM when both are wanted: cuBLASLt's BGRADA on CUDA; in FP32 otherwise; bias's dtype), each computed
// only when that input requires grad (frozen weights cost no weight-gradient GEMM).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {}, const LinearOptions& opt = {});

struct PackedLinearOptions {
  // The weights' rows packed [sum M_i, K] in x's dtype (amp::packed_compute_copy of FP32 masters under Autocast,
  // made once per optimizer step); undefined: the weights packed here, a copy per call. Not differentiated.
  Tensor compute_weight{};
  // dx's dtype: x's (default), or f32 for an f16/bf16 x (a norm's cast of the f32 residual stream, whose backward
  // reads an f32 gradient): the input-gradient GEMM then writes it unrounded.
  std::optional<DType> grad_x_dtype{};
};

// Several bias-free projections of one input as one GEMM. x: [N, K]; weights: 1 to 8 tensors [M_i, K], all of x's
// dtype, or all f32 masters of an f16/bf16 x. Returns y [N, sum M_i] = x [W_0; W_1; ...]^T: the columns of y are each
// weight's output in turn, the products ops::linear(x, W_i) makes, accumulated in FP32 and rounded once. Backward:
// dx = dy W_packed in one GEMM (instead of one per weight and a sum of their results), and dW_i = dy[:, cols_i]^T x,
// a GEMM per weight reading its columns of dy in place, in the weight's dtype, added into the gradient the engine
// offers (a later micro-batch, as ops::linear); each computed only when wanted.
Tensor packed_linear(const Tensor& x, const std::vector<Tensor>& weights, const PackedLinearOptions& opt = {});

}  // namespace mpt::ops
