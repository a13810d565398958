// tests/support/cuda_emu/cublaslt_compute.cpp: the cuBLASLt double's arithmetic: float64 GEMM with FP8 scales (tensorwide, outer, VEC128, BLK128x128), epilogues, amax, one rounding to D's type (the int8 row is in cublaslt_compute_int8.cpp).
#include <cmath>
#include <limits>
#include <vector>

#include "cublaslt_internal.h"
#include "kernels/math/numerics.h"

namespace mpt::cuda_emu {
namespace {

double load(const void* base, cudaDataType_t t, int64_t i) {
  switch (t) {
    case CUDA_R_32F: return static_cast<const float*>(base)[i];
    case CUDA_R_16F: return f16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_16BF: return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case CUDA_R_8F_E4M3: return e4m3_bits_to_float(static_cast<const uint8_t*>(base)[i]);
    case CUDA_R_8F_E5M2: return e5m2_bits_to_float(static_cast<const uint8_t*>(base)[i]);
    default: throw std::logic_error("cublaslt double: load of an unsupported type");
  }
}

// Rounds v once to t (round to nearest even; FP8 saturating unless the switch says otherwise).
void store(void* base, cudaDataType_t t, int64_t i, double v, bool saturate) {
  const Fp8Saturation sat = saturate ? Fp8Saturation::Saturate : Fp8Saturation::NoSaturate;
  switch (t) {
    case CUDA_R_32F: static_cast<float*>(base)[i] = static_cast<float>(v); return;
    case CUDA_R_16F: static_cast<uint16_t*>(base)[i] = double_to_f16_bits(v); return;
    case CUDA_R_16BF: static_cast<uint16_t*>(base)[i] = double_to_bf16_bits(v); return;
    case CUDA_R_8F_E4M3: static_cast<uint8_t*>(base)[i] = double_to_e4m3_bits(v, sat); return;
    case CUDA_R_8F_E5M2: static_cast<uint8_t*>(base)[i] = double_to_e5m2_bits(v, sat); return;
    default: throw std::logic_error("cublaslt double: store of an unsupported type");
  }
}

double read_float(const void* p, double dflt) { return p != nullptr ? static_cast<const float*>(p)[0] : dflt; }

double read_scalar(const void* p, int32_t scale_type) {
  if (scale_type == CUDA_R_16F) return f16_bits_to_float(*static_cast<const uint16_t*>(p));
  if (scale_type == CUDA_R_32I) return *static_cast<const int32_t*>(p);
  return *static_cast<const float*>(p);
}

// tanh-approximation GELU and its derivative (R5).
constexpr double kGeluC = 0.7978845608028654;  // sqrt(2 / pi)
double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(kGeluC * (x + 0.044715 * x * x * x))); }
double gelu_grad(double x) {
  const double t = std::tanh(kGeluC * (x + 0.044715 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * kGeluC * (1.0 + 3.0 * 0.044715 * x * x);
}

void track_amax(double& amax, double v) {
  if (std::isnan(v) || std::isnan(amax)) amax = std::numeric_limits<double>::quiet_NaN();
  else amax = std::max(amax, std::abs(v));
}

// One operand's dequantization factor for (outer index r, K block blk).
double block_scale(int32_t mode, const float* s, int64_t r, int64_t blk, int64_t outer, int64_t k) {
  const int64_t l4 = ((k + 127) / 128 + 3) / 4 * 4;
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return s[r + blk * outer];
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return s[blk + (r / 128) * l4];
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return s[r];
    default: return 1.0;
  }
}

}  // namespace

int64_t element_offset(const LayoutState& l, int64_t r, int64_t c, int64_t b) {
  return b * l.batch_stride + (l.order == CUBLASLT_ORDER_COL ? r + c * l.ld : r * l.ld + c);
}

uint64_t layout_bytes(const LayoutState& l, int64_t batch) {
  if (l.rows == 0 || l.cols == 0) return 0;
  const auto r = static_cast<int64_t>(l.rows), c = static_cast<int64_t>(l.cols);
  const int64_t last = element_offset(l, r - 1, c - 1, batch - 1);
  return static_cast<uint64_t>(last + 1) * static_cast<uint64_t>(dtype_size(l.type));
}

uint64_t layout_traffic_bytes(const LayoutState& l, int64_t batch) {
  const uint64_t elements = static_cast<uint64_t>(l.rows) * static_cast<uint64_t>(l.cols) *
                            static_cast<uint64_t>(std::max<int64_t>(batch, 1)) *
                            static_cast<uint64_t>(dtype_size(l.type));
  return std::min(layout_bytes(l, batch), elements);
}

uint64_t scale_bytes(int32_t mode, int64_t outer, int64_t k) {
  const int64_t blocks = (k + 127) / 128, l4 = (blocks + 3) / 4 * 4;
  switch (mode) {
    case CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F: return 4;
    case CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F: return 4 * static_cast<uint64_t>(outer);
    case CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F: return 4 * static_cast<uint64_t>(outer * blocks);
    case CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F: return 4 * static_cast<uint64_t>(l4 * ((outer + 127) / 128));
    default: return 0;
  }
}

uint64_t bias_bytes(const Problem& p) {
  const int64_t len = p.desc.epilogue == CUBLASLT_EPILOGUE_BGRADB ? p.n : p.m;
  return static_cast<uint64_t>((p.batch - 1) * p.desc.bias_batch_stride + len) * dtype_size(p.bias_type);
}

uint64_t aux_bytes(const Problem& p) {
  const int64_t last = (p.batch - 1) * p.desc.aux_batch_stride + (p.n - 1) * p.desc.aux_ld + p.m;
  return static_cast<uint64_t>(last) * dtype_size(p.aux_type);
}

void compute_matmul(const Problem& p, const MatmulArgs& args) {
  if (p.int8) return compute_matmul_int8(p, args);  // integers: exact in int64, not float64
  const CublasLtSwitches sw = cublaslt_switches();
  const DescState& d = p.desc;
  const uint32_t e = d.epilogue;
  const double alpha = args.alpha_dev ? read_scalar(args.alpha_dev, d.scale_type) : args.alpha;
  const double beta = args.beta_dev ? read_scalar(args.beta_dev, d.scale_type) : args.beta;
  if (beta != 0.0 && args.c == nullptr) throw MisuseError("cublasLtMatmul: beta != 0 but C is null");
  const bool block = d.scale_mode_a != CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F;
  const double s_a = block ? 1.0 : read_float(d.scale_a, 1.0), s_b = block ? 1.0 : read_float(d.scale_b, 1.0);
  const double s_c = read_float(d.scale_c, 1.0), s_d = read_float(d.scale_d, 1.0);
  const double s_aux = read_float(d.aux_scale, 1.0);
  const bool add_bias = e == CUBLASLT_EPILOGUE_BIAS || e == CUBLASLT_EPILOGUE_RELU_BIAS ||
                        e == CUBLASLT_EPILOGUE_GELU_BIAS || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool aux_out = e == CUBLASLT_EPILOGUE_GELU_AUX || e == CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  const bool dgelu = e == CUBLASLT_EPILOGUE_DGELU || e == CUBLASLT_EPILOGUE_DGELU_BGRAD;
  const bool relu = e == CUBLASLT_EPILOGUE_RELU || e == CUBLASLT_EPILOGUE_RELU_BIAS;
  const bool gelu_act = e == CUBLASLT_EPILOGUE_GELU || e == CUBLASLT_EPILOGUE_GELU_BIAS || aux_out;
  const int64_t m = p.m, n = p.n, k = p.k;
  const int64_t blocks = block && d.scale_mode_a != CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F ? (k + 127) / 128 : 1;
  const int64_t block_k = blocks > 1 ? 128 : k;
  const auto* sa = static_cast<const float*>(d.scale_a);
  const auto* sb = static_cast<const float*>(d.scale_b);
  double amax_d = 0.0, amax_aux = 0.0;
  std::vector<double> opa(static_cast<size_t>(m * k)), opb(static_cast<size_t>(k * n)), bgrad;

  for (int64_t b = 0; b < p.batch; ++b) {
    for (int64_t i = 0; i < m; ++i)  // op(A)[i, l], row-major m x k
      for (int64_t l = 0; l < k; ++l)
        opa[i * k + l] = load(args.a, p.a.type, element_offset(p.a, p.ta ? l : i, p.ta ? i : l, b));
    for (int64_t l = 0; l < k; ++l)  // op(B)[l, j], row-major k x n
      for (int64_t j = 0; j < n; ++j)
        opb[l * n + j] = load(args.b, p.b.type, element_offset(p.b, p.tb ? j : l, p.tb ? l : j, b));
    bgrad.assign(static_cast<size_t>(e == CUBLASLT_EPILOGUE_BGRADB ? n : m), 0.0);

    for (int64_t j = 0; j < n; ++j)
      for (int64_t i = 0; i < m; ++i) {
        double acc = 0.0;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          double part = 0.0;
          for (int64_t l = blk * block_k; l < std::min(k, (blk + 1) * block_k); ++l) part += opa[i * k + l] * opb[l * n + j];
          acc += block ? block_scale(d.scale_mode_a, sa, i, blk, m, k) * block_scale(d.scale_mode_b, sb, j, blk, n, k) * part
                       : part;
        }
        const double product = alpha * s_a * s_b * acc;
        double x = product;
        if (beta != 0.0) x += beta * s_c * load(args.c, p.c.type, element_offset(p.c, i, j, b));
        if (add_bias) x += load(d.bias, p.bias_type, b * d.bias_batch_stride + i);
        const int64_t aux_i = b * d.aux_batch_stride + i + j * d.aux_ld;
        double out = x;
        if (relu) out = std::max(x, 0.0);
        if (gelu_act) out = gelu(x);
        double grad_in = x;
        if (dgelu) {
          grad_in = sw.dgelu_includes_beta_c ? x : product;
          out = grad_in * gelu_grad(load(d.aux, p.aux_type, aux_i));
        }
        if (aux_out) {
          store(d.aux, p.aux_type, aux_i, s_aux * x, sw.fp8_output_saturates);
          track_amax(amax_aux, x);
        }
        if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD) bgrad[i] += sw.dgelu_bgrad_after_dgelu ? out : grad_in;
        track_amax(amax_d, out);
        store(args.d, p.d.type, element_offset(p.d, i, j, b), s_d * out, sw.fp8_output_saturates);
      }

    const double g = sw.bgrad_scaled_by_alpha ? alpha : 1.0;
    if (e == CUBLASLT_EPILOGUE_BGRADA)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t l = 0; l < k; ++l) bgrad[i] += g * s_a * opa[i * k + l];
    if (e == CUBLASLT_EPILOGUE_BGRADB)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l) bgrad[j] += g * s_b * opb[l * n + j];
    if (e == CUBLASLT_EPILOGUE_DGELU_BGRAD || e == CUBLASLT_EPILOGUE_BGRADA || e == CUBLASLT_EPILOGUE_BGRADB)
      for (size_t i = 0; i < bgrad.size(); ++i)
        store(d.bias, p.bias_type, b * d.bias_batch_stride + static_cast<int64_t>(i), bgrad[i], sw.fp8_output_saturates);
  }
  if (d.amax_d != nullptr) *static_cast<float*>(d.amax_d) = static_cast<float>(amax_d);
  if (d.aux_amax != nullptr) *static_cast<float*>(d.aux_amax) = static_cast<float>(amax_aux);
}

}  // namespace mpt::cuda_emu
