// mpt/ops/quantized_linear.h: y = x W^T + b with W held as INT8 / INT4 / FP8 codes and scales (quantized inference).
#pragma once

#include <optional>

#include "mpt/ops/fake_quant.h"

namespace mpt::ops {

// Inference only (nothing is recorded for autograd). x [N, K] f32 (bf16 / f16 on CUDA), w: quantize_groups of a
// Linear weight [M, K] (codes i8 on x's device), bias [M] f32 or undefined, input: the activation quantization the
// layer was trained with (QAT's input spec), if any. The result equals linear(fake_quantize(x, input),
// dequantize_groups(w)) + b up to float summation order:
//   W8A8 on the CPU (input INT8 per token, weight INT8 per channel): x's codes and W's codes in oneDNN's INT8 GEMM
//     with exact INT32 sums, then y = float(acc) * s_x * s_w + b;
//   other schemes on the CPU with N <= 4 rows (a decoding step): the codes read directly (1 byte per weight)
//     in a weight-only GEMM, the group scales applied per group (kernels/cpu/quantized_gemm.h);
//   W8A8 and FP8 (input E4M3 per token, weight E4M3 per channel) on CUDA: x's codes times W's codes on cuBLASLt's
//     tensor cores (INT8 x INT8 -> exact INT32 on the IMMA kernels: out_features and K multiples of 4; E4M3 x E4M3
//     -> FP32 on sm_89+: K a multiple of 16), then one kernel applies the row and column scales and the bias;
//   other schemes (or shapes and GPUs cuBLASLt refuses) on CUDA with N <= 16 rows: a GEMV that reads the codes and
//     forms code * scale in registers (kernels/cuda/quantized_gemm.h; K and the group size multiples of 4);
//   otherwise (more rows): the weight dequantized by a plain kernel, then the float GEMM.
// Result f32 on the CPU, x's dtype on CUDA. Throws, naming the shapes, for mismatched shapes, devices or dtypes.
Tensor quantized_linear(const Tensor& x, const GroupQuantized& w, const Tensor& bias,
                        const std::optional<QuantSpec>& input = std::nullopt);

}  // namespace mpt::ops
